"""τ per mt_bench category for every head in a `tau` stage's rows (compare_heads.py decode output).

Usage (repository root): python3 docs/results/run25_2026-12-02/by_category.py docs/results/run25_2026-12-02/mt_bench.json
τ pools a category's prompts: committed tokens over target forwards (verify steps), as compare_heads.py does.
"""
import json
import sys
from collections import Counter, defaultdict

rows = json.load(open(sys.argv[1]))
categories = [json.loads(line)["category"] for line in open("datasets/mt_bench.jsonl")]
heads = list(rows["heads"])
tokens = defaultdict(Counter)  # [category][head] -> committed tokens
steps = defaultdict(Counter)  # [category][head] -> target forwards
prompts = Counter()
for index, by_head in rows["prompts"].items():
    category = categories[int(index)]
    prompts[category] += 1
    for head in heads:
        tokens[category][head] += len(by_head[head]["tokens"])
        steps[category][head] += len(by_head[head]["accepted"])
print("| category (prompts) | " + " | ".join(heads) + " |")
print("| --- |" + " --- |" * len(heads))
for category in prompts:
    taus = [tokens[category][h] / steps[category][h] for h in heads]
    print(f"| {category} ({prompts[category]}) | " + " | ".join(f"{tau:.2f}" for tau in taus) + " |")
