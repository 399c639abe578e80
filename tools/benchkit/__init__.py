"""The pieces of ``tools/bench.py``, one job per module:

* ``inputs`` – flag parsing, device / dtype validation, the profile;
* ``methods`` – the benchmarked methods and eagle2-best's grid choice;
* ``rounds`` – timed decoding in interleaved rounds (warm-up excluded, median and spread);
* ``anchor`` – the llama.cpp anchor;
* ``lossless`` – greedy losslessness checks and the measured near-tie judge;
* ``table`` – the method table: records, Markdown;
* ``figures`` – the paper's Fig. 3 and Fig. 4 sweep;
* ``plots`` – every PNG;
* ``records`` – what every JSON says about the machine, device and models;
* ``cli`` – the command line that ties them together.
"""
