"""Prompt-lookup matchers replayed over the target's own greedy answers (no model runs):
tokens per target forward (τ) of greedy decoding whose only draft is the lookup's chain,
and the lookup's precision by the length of the suffix it matched.

A step at position c (the answer's tokens before c are known) proposes the tokens that
followed an earlier occurrence of the context's last n tokens; it commits its accepted
prefix plus the target's own next token.  Matchers:
- ``n=2``: the latest occurrence of the last 2 tokens (ContextLookup today);
- ``n=k``: the same with k tokens;
- ``longest a..b``: the longest suffix of b down to a tokens that occurred before, its latest
  occurrence.
Answer sets (`passages_ab.py` of 2026-11-29, the first turns' greedy bf16 answers): the mix
(586 answers; training data of that A/B, no benchmark), run 17's 48 held-out mix answers,
50 answers about held-out passages; mt_bench and humaneval are reported, not chosen on.

Usage: python lookup_variants.py OUT.json"""
import json
import sys
from pathlib import Path

CACHE = Path.home() / ".cache/sglang_cast"


def latest_occurrences(ids: list[int], n: int) -> list[int]:
    """``found[c]``: the end index j of the latest occurrence of ``ids[c-n:c]`` that ends
    before c - 1 (so ``ids[j + 1]`` is known at c), -1 when none."""
    found, last = [-1] * (len(ids) + 1), {}
    for c in range(n, len(ids) + 1):
        key = tuple(ids[c - n:c])
        found[c] = last.get(key, -1)
        last[key] = c - 1
    return found


def accepted(draft, truth) -> int:
    k = 0
    while k < len(draft) and k < len(truth) and draft[k] == truth[k]:
        k += 1
    return k


def matcher(spec):
    """``(lo, hi)``: try suffix lengths hi..lo, keep the first that occurred."""
    lo, hi = spec

    def propose(ids, tables, c, depth):
        for n in range(hi, lo - 1, -1):
            j = tables[n][c] if c >= n else -1
            if j >= 0:
                return n, ids[j + 1:min(j + 1 + depth, c)]
        return 0, []
    return propose


VARIANTS = {"n=2": (2, 2), "n=3": (3, 3), "n=1": (1, 1), "longest 2..4": (2, 4), "longest 1..4": (1, 4),
            "longest 2..8": (2, 8), "longest 1..8": (1, 8)}


def load_sets():
    data = CACHE / "passages_ab"
    sets = {name: json.loads((data / f"{name}.json").read_text())
            for name in ("mix", "passages_held_out", "mt_bench", "humaneval")}
    run17 = json.loads((CACHE / "online_cpu/run17/state.json").read_text())
    sets["mix_held_out"] = {"ids": run17["val_ids"], "starts": run17["val_starts"]}
    return sets


def main(out: str) -> None:
    results = {}
    for name, seqs in load_sets().items():
        per = {}
        for label, spec in VARIANTS.items():
            propose = matcher(spec)
            for depth in (4, 8):
                tokens = steps = 0
                hits = {}  # matched n -> [proposals, first token right]
                for ids, start in zip(seqs["ids"], seqs["starts"]):
                    tables = {n: latest_occurrences(ids, n) for n in range(spec[0], spec[1] + 1)}
                    c = start
                    tokens += len(ids) - start
                    while c < len(ids):
                        n, draft = propose(ids, tables, c, depth)
                        k = accepted(draft, ids[c:])
                        if draft and depth == 8:
                            h = hits.setdefault(n, [0, 0])
                            h[0] += 1
                            h[1] += k > 0
                        c += k + 1
                        steps += 1
                per[f"{label}, depth {depth}"] = round(tokens / steps, 4)
                if depth == 8:
                    per[f"{label}: first-token precision by matched n"] = {
                        n: [h[0], round(h[1] / h[0], 3)] for n, h in sorted(hits.items())}
        results[name] = per
        print(name, json.dumps(per), flush=True)
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
