"""τ per mt_bench category for every head in a `tau` stage's rows (compare_heads.py decode output).

Usage (repository root):
  .venv/bin/python docs/results/run25_2026-12-02/by_category.py docs/results/run25_2026-12-02/mt_bench.json
τ is compare_heads.py's pooled τ over a category's prompts.
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from compare_heads import load, pooled_tau  # noqa: E402

data = load(Path(sys.argv[1]))
categories = [json.loads(line)["category"] for line in open("datasets/mt_bench.jsonl")]
rows_by_category = defaultdict(list)  # category -> that category's rows, in prompt order
for index, row in data["prompts"].items():
    rows_by_category[categories[int(index)]].append(row)
heads = list(data["heads"])
print("| category (prompts) | " + " | ".join(heads) + " |")
print("| --- |" + " --- |" * len(heads))
for category, rows in rows_by_category.items():
    print(f"| {category} ({len(rows)}) | " + " | ".join(f"{pooled_tau(rows, head):.2f}" for head in heads) + " |")
