"""The embedded model's linear shapes on torch's int4 / int8 kernels against ours (VNNI), batch
rows 1-32, every (shape, kernel, rows) timed round-robin (`measure_costs`), medians in µs.
int4: the GGUF's own Q4_1 blocks of layer 0 (q/k/v and gate/up stacked, as the packed
formats run them); int8: the tied LM head (49,152 x 576), quantised as the int8 format does.

Usage (repository root): .venv/bin/python docs/results/vnni_kernels_2026-12-04/linears.py ROUNDS JSON"""
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from sglang_cast.engine.format_choice import measure_costs  # noqa: E402
from sglang_cast.hardware import cpu_name, isa_class  # noqa: E402
from sglang_cast.models import load_target  # noqa: E402
from sglang_cast.models.gguf_convert import read_q4_1_linears  # noqa: E402
from sglang_cast.models.loader import embedded_gguf_path  # noqa: E402
from sglang_cast.models.weights import Format, Int4Groups, pack_linear  # noqa: E402

ROWS = (1, 2, 4, 8, 13, 16, 32)
rounds, out = int(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(2)
target, _, _ = load_target(None, "cpu", torch.float32)
exact = read_q4_1_linears(embedded_gguf_path())
layer = {name.split(".", 1)[1]: groups for name, groups in exact.items() if name.startswith("0.")}
shapes = {  # name: (int4 groups | fp32 weight)
    "qkv 576->960": Int4Groups.stacked([layer["self_attn.q_proj"], layer["self_attn.k_proj"], layer["self_attn.v_proj"]]),
    "o 576->576": layer["self_attn.o_proj"],
    "gate_up 576->3072": Int4Groups.stacked([layer["mlp.gate_proj"], layer["mlp.up_proj"]]),
    "down 1536->576": layer["mlp.down_proj"],
    "lm_head 576->49152": target.embed_tokens.weight.detach(),
}
kernels = {}
for name, source in shapes.items():
    if isinstance(source, Int4Groups):
        weight = source.dequantize()
        kernels[f"{name} int4"] = pack_linear(Format.INT4, weight, None, source)
        kernels[f"{name} int4vnni"] = pack_linear(Format.INT4_VNNI, weight, None, source)
    else:
        kernels[f"{name} int8"] = pack_linear(Format.INT8, source, None)
        kernels[f"{name} int8vnni"] = pack_linear(Format.INT8_VNNI, source, None)
inputs = {(key, m): torch.randn(m, kernels[key].in_features).bfloat16() for key in kernels for m in ROWS}


def time_once(key: str, m: int) -> float:
    x, kernel = inputs[(key, m)], kernels[key]
    start = time.perf_counter()
    kernel._matmul(x)
    return (time.perf_counter() - start) * 1e3


with torch.inference_mode():
    ms = measure_costs(time_once, list(kernels), ROWS, rounds=rounds, warmup=3, budget_s=600)
record = {"cpu": cpu_name(), "isa_class": isa_class(), "torch": torch.__version__, "threads": 2, "rounds": rounds,
          "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "us": {key: {m: round(v * 1e3, 1) for m, v in by_m.items()} for key, by_m in ms.items()}}
out.write_text(json.dumps(record, indent=1) + "\n")
print("kernel".ljust(32), "".join(f"{m:>9}" for m in ROWS))
for name in shapes:
    torch_key, ours_key = [k for k in kernels if k.startswith(name)]
    print(torch_key.ljust(32), "".join(f"{record['us'][torch_key][m]:9.1f}" for m in ROWS))
    print(ours_key.ljust(32), "".join(f"{record['us'][ours_key][m]:9.1f}" for m in ROWS))
    print("  ours / torch".ljust(32), "".join(f"{record['us'][ours_key][m] / record['us'][torch_key][m]:9.2f}" for m in ROWS))
