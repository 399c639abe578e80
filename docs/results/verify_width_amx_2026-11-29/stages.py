"""Per-method stage clocks and charges from a bench JSON (ms per iteration)."""
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    print(path)
    for r in d['records']:
        ratio = r['step_ms'] / r['charged_step_ms'] if r.get('charged_step_ms') else float('nan')
        print(f"  B={r['batch_size']} {r['method']:14s} {r['speedup_vs_vanilla']:.2f}x tau {r['tau']:.2f} "
              f"verified {r['mean_verified_tokens']:.2f} depth {r['mean_depth']:.2f} | draft {r['draft_ms']:.1f} "
              f"verify {r['verify_ms']:.1f} host {r['host_ms']:.2f} step {r['step_ms']:.1f} "
              f"charged {r['charged_step_ms']:.1f} ({100 * ratio:.0f}%)")
