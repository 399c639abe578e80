"""Pooled τ per head over the first 20 and all prompts of a per_prompt.py file, and each
head's difference from the first head prompt by prompt: pooled over prompts, a 95 %
bootstrap interval over prompts (2,000 resamples, seed 0), and how many prompts it wins
and loses; and how many prompts every head decoded to the same tokens (greedy decoding
is lossless, so all should).  Usage: .venv/bin/python summarise.py FILE.json [FILE.json ...]"""

import json
import random
import sys

from sglang_cast.cast import committed_tokens


def pooled(rows: list[dict], head: str) -> float:
    accepted = [a for row in rows for a in row[head]["accepted"]]
    return committed_tokens(accepted) / len(accepted)


def main() -> None:
    for path in sys.argv[1:]:
        data = json.load(open(path))
        heads = list(data["heads"])
        rows = [data["prompts"][k] for k in sorted(data["prompts"], key=int)]
        rows = [r for r in rows if all(h in r for h in heads)]
        print(f"## {data['benchmark']}: {len(rows)} prompts, heads {', '.join(heads)}")
        print("| head | τ first 20 | τ all | Δ vs " + heads[0] + " (all) | 95 % interval | prompts up / level / down |")
        print("| --- | --- | --- | --- | --- | --- |")
        rng = random.Random(0)
        samples = [[rng.randrange(len(rows)) for _ in rows] for _ in range(2000)]
        for head in heads:
            line = f"| {head} | {pooled(rows[:20], head):.3f} | {pooled(rows, head):.3f} |"
            if head == heads[0]:
                print(line + " | | |")
                continue
            diffs = sorted(pooled([rows[i] for i in s], head) - pooled([rows[i] for i in s], heads[0])
                           for s in samples)
            per = [r[head]["tau"] - r[heads[0]]["tau"] for r in rows]
            up, down = sum(d > 1e-9 for d in per), sum(d < -1e-9 for d in per)
            print(line + f" {pooled(rows, head) - pooled(rows, heads[0]):+.3f} | {diffs[50]:+.3f} … "
                  f"{diffs[1949]:+.3f} | {up} / {len(per) - up - down} / {down} |")
        same = sum(all(r[h]["tokens"] == r[heads[0]]["tokens"] for h in heads) for r in rows)
        print(f"\nidentical outputs under every head: {same} / {len(rows)}\n")


if __name__ == "__main__":
    main()
