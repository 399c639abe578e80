"""What anchor.py, first_request.py and pools.py start from: torch on 2 threads and the
embedded pair in the weight format profiles/cpu-avx512.yaml serves, with its settings."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402
from autotune.models import load_model_pair  # noqa: E402
from sglang_cast.engine.format_choice import choose_weight_format  # noqa: E402
from tools.benchkit.inputs import load_settings  # noqa: E402

torch.set_num_threads(2)


def load():
    """(the model pair, the profile's policy settings)."""
    loaded = load_settings(str(ROOT / "profiles/cpu-avx512.yaml"), "cpu").profile
    weight_format = choose_weight_format("auto", device="cpu", profile=loaded).weight_format
    return load_model_pair(None, None, "cpu", "float32", weight_format=weight_format), loaded.settings
