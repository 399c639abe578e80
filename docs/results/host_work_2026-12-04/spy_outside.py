"""From py-spy's raw stacks (decode_loop.py): the samples inside `SpeculativeRunner.iterate` but outside its
target and draft forwards, by the frame under `iterate` and by the innermost sglang_cast line.
Usage: spy_outside.py RAW [ROWS]"""
import collections
import sys

rows = int(sys.argv[2]) if len(sys.argv) > 2 else 30
under, leaf = collections.Counter(), collections.Counter()
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
    under[frames[top + 1] if top + 1 < len(frames) else frames[top]] += count
    ours = [f for f in frames if "sglang_cast/" in f]
    leaf[ours[-1] if ours else frames[-1]] += count
print(f"samples in iterate {in_iterate}, outside its forwards {outside} ({outside / in_iterate:.1%})")
print("--- by the frame under iterate")
for frame, count in under.most_common(12):
    print(f"{count / outside:6.1%}  {frame}")
print("--- by the innermost sglang_cast line")
for frame, count in leaf.most_common(rows):
    print(f"{count / outside:6.1%}  {frame}")
