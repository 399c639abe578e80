"""The value of a lookup proposal's tokens by the length of the suffix it matched: for the
longest-suffix matcher (2..8 tokens, latest occurrence), over the same answer sets as
lookup_variants.py, at every answer position where it proposes (not only where a replayed
decode steps): the first token's precision, and how often token i + 1 is right once
tokens 1..i were (the continuation rate), per class of matched length.

Usage: python lookup_values.py OUT.json"""
import json
import sys
from pathlib import Path

from lookup_variants import latest_occurrences, load_sets

CLASSES = ((2, 2), (3, 3), (4, 7), (8, 8))  # matched suffix lengths, 8 = 8 or more
DEPTH = 8


def main(out: str) -> None:
    results = {}
    for name, seqs in load_sets().items():
        counts = {c: [0, 0, 0, 0] for c in CLASSES}  # proposals, first right, continuations tried, right
        for ids, start in zip(seqs["ids"], seqs["starts"]):
            tables = {n: latest_occurrences(ids, n) for n in range(2, 9)}
            for c in range(start, len(ids)):
                for n in range(8, 1, -1):
                    j = tables[n][c] if c >= n else -1
                    if j >= 0:
                        break
                else:
                    continue
                draft, truth = ids[j + 1:min(j + 1 + DEPTH, c)], ids[c:]
                cls = next(k for k in CLASSES if k[0] <= n <= k[1])
                row = counts[cls]
                row[0] += 1
                right = 0
                while right < len(draft) and right < len(truth) and draft[right] == truth[right]:
                    right += 1
                row[1] += right > 0
                # token i (0-based, i >= 1) is tried once tokens 0..i-1 were right
                row[2] += max(0, min(right, len(draft) - 1, len(truth) - 1))
                row[3] += max(0, right - 1)
        results[name] = {f"{lo}-{hi}": {"proposals": p, "first": round(f / p, 3) if p else None,
                                         "next": round(r / t, 3) if t else None}
                         for (lo, hi), (p, f, t, r) in counts.items()}
        print(name, json.dumps(results[name]), flush=True)
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
