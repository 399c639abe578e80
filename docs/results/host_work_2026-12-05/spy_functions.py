"""From py-spy's raw stacks (host_work_2026-12-04/decode_loop.py): the samples inside
`SpeculativeRunner.iterate` but outside its target and draft forwards, by every function
they pass through (inclusive: a sample counts once for each distinct function on its
stack, from `iterate` inwards), as shares of those samples and as ms per iteration
(ITERATIONS: how many the run made; the share times the outside time per iteration).
Usage: spy_functions.py RAW OUTSIDE_MS [ROWS]"""
import collections
import sys

outside_ms = float(sys.argv[2])
rows = int(sys.argv[3]) if len(sys.argv) > 3 else 40
inclusive = collections.Counter()
in_iterate = outside = 0
for line in open(sys.argv[1], errors="replace").read().splitlines():
    stack, _, count = line.rpartition(" ")
    frames, count = stack.split(";"), int(count)
    top = next((i for i, f in enumerate(frames) if f.startswith("SpeculativeRunner.iterate (")), None)
    if top is None:
        continue
    in_iterate += count
    if any("target_forward" in f or "draft_forward" in f for f in frames):
        continue
    outside += count
    names = {f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0] + ")" for f in frames[top:] if " (" in f}
    for name in names:
        inclusive[name] += count
print(f"samples in iterate {in_iterate}, outside its forwards {outside} ({outside / in_iterate:.1%}); "
      f"ms at {outside_ms} ms outside per iteration")
for name, count in inclusive.most_common(rows):
    print(f"{count / outside:6.1%} {count / outside * outside_ms:6.3f}  {name}")
