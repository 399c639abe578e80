"""CAST inside real SGLang (0.5.23): the ``CAST`` and ``GOODPUT`` speculative
algorithms, registered through SGLang's ``sglang.srt.plugins`` entry point.

Modules that import SGLang: ``register`` (the entry point), ``spec`` (how SGLang
sees the algorithms), ``worker`` (the EAGLE v2 worker driven by our policies).
Pure modules, importable without SGLang: ``drafting`` and ``verify_layout`` (the
tree in SGLang's static layout), ``decider`` (the worker's policy side),
``plugin_config``, ``reload`` and ``launch`` (``--backend sglang``).  The runbook is ``docs/gpu.md``.
"""
