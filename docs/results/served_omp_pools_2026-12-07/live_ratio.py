"""What each server's live calibration says after the same load: 8 mt_bench first turns
x 64 tokens, one at a time (B = 1), then per served bucket that ran, live over predicted ms
of its speculative and plain windows (/server_info, cast_live_calibration) and the gate's
switches.  Usage: live_ratio.py NAME=PORT [NAME=PORT ...]"""
import json
import sys
import urllib.request

from ab import ask, texts

for arm in sys.argv[1:]:
    name, port = arm.split("=")
    for text in texts:
        ask(int(port), text)
    info = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info"))
    for bucket in info["cast_live_calibration"]["buckets"]:
        if bucket["iterations"]:
            windows = {kind: (bucket[kind]["iterations"], bucket[kind]["live_over_predicted"])
                       for kind in ("speculative", "plain")}
            print(f"{name}: B <= {bucket['max_batch_size']}, {bucket['iterations']} iterations, "
                  + ", ".join(f"{kind} window {n} live / predicted {ratio and round(ratio, 3)}"
                              for kind, (n, ratio) in windows.items())
                  + f"; switched off {bucket['switches_off']}, on {bucket['switches_on']}", flush=True)
