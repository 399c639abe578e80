import json
for i in range(1, 5):
    d = json.load(open(f"docs/results/dense_from_2026-11-28/e2e_{i}.json"))
    for r in d["records"]:
        steps = r["iterations"] * r["step_ms"] / 1e3
        print(i, r["weight_format"], r["method"], "tok/s %.1f rounds %s" % (r["tokens_per_s"], [round(x, 1) for x in r["tokens_per_s_rounds"]]),
              "workload %.2f s steps %.2f outside %.2f tau %.2f mism %d near %s" % (r["seconds"], steps, r["seconds"] - steps, r["tau"], len(r["mismatches"]), r["near_ties_only"]))
