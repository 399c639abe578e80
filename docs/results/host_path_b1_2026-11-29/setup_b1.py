"""What every script of this record starts from: the embedded pair in the profile's
recorded weight format, a dataset's first prompts in its chat template, and B = 1
engines on them, warmed on two prompts (first use of each shape) before anything is timed."""
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from autotune.models import load_model_pair  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import SamplingParams, make_policy  # noqa: E402
from sglang_cast.engine.format_choice import choose_weight_format  # noqa: E402
from tools.benchkit.inputs import load_settings  # noqa: E402


@dataclass
class Setup:
    pair: object
    settings: object
    weight_format: str
    texts: list
    params: SamplingParams
    context: int

    def engine(self, policy: str):
        """A B = 1 engine with ``policy`` on the profile's settings, warmed on two prompts."""
        engine = self.pair.engine(make_policy(policy, self.settings), 1, self.context)
        engine.generate(self.texts[:2], self.params)
        return engine


def setup(profile: str, dataset: str, prompts: int, threads: int = 2, tokens: int = 32) -> Setup:
    torch.set_num_threads(threads)
    loaded = load_settings(profile, 'cpu').profile
    weight_format = choose_weight_format('auto', device='cpu', profile=loaded).weight_format
    pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=weight_format)
    texts = [pair.format_prompt(t) for t in load_prompts(dataset).texts[:prompts]]
    context = max(len(pair.tokenizer.encode(t)) for t in texts) + tokens + 8
    return Setup(pair, loaded.settings, weight_format, texts, SamplingParams(max_new_tokens=tokens), context)
