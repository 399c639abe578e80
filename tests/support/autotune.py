"""The autotuner tests' shared pieces: the tiny profiling grid, search space and setup
with a database measured once per session (`fill`), the planted chain workload of the
replay tuner (`chain_trace`: the best tree is a top-1 chain of ``ACCEPTED`` nodes), a
recorded trace, Llama-3.1-8B-shaped model directories, and a profile carrying a
weight format and ISA provenance."""

from __future__ import annotations

import functools
import json
import sqlite3
import tempfile
from pathlib import Path

import torch

from autotune.collect import CollectConfig, collect, full_shape
from autotune.grid import ProfileGrid
from autotune.models import ModelPair
from autotune.profiler import run_profile
from autotune.prompts import PromptSet, load_prompts
from autotune.space import Grid, SearchSpace
from autotune.store import Setup, Store
from sglang_cast.cast import (CostModel, CostTable, DraftTree, PolicySettings, RecordingExpander, TreeShape, grow_tree,
                              make_policy)
from sglang_cast.profile import Profile
from support import ROOT
from support.synthetic import PathModel
from support.tiny import CharTokenizer, MirrorDraft, tiny_target

# ------------------------------------------------- profile -> collect -> tune
GRID = ProfileGrid(batch_sizes=(1, 2), ctx_bucket=32, ctx_buckets=1, max_n=8, draft_max_n=4, n_mode=(1, 2, 4),
                   warmup=0, repeats=1)
SPACE = SearchSpace(max_depth=3, top_k=3, max_tokens=10, fifo_max=4)
SETUP = Setup.current("test-device", "tiny-target", "mirror-draft", "float32")


def tiny_pair() -> ModelPair:
    target = tiny_target()
    return ModelPair(target, MirrorDraft(target), CharTokenizer(), target_id="tiny-target", draft_id="mirror-draft", dtype="float32",
                     chat_template=False)


def tiny_prompts() -> PromptSet:
    """The default tuning prompts that fit the tiny models' 128-token context: their
    tokenizer spends a token per character, and two in three of the default set's
    requests run 180-1300 characters."""
    every = load_prompts()
    keep = [i for i, text in enumerate(every.texts) if len(text) < 100]
    return PromptSet(every.name, tuple(every.ids[i] for i in keep), tuple(every.texts[i] for i in keep))


@functools.cache
def _template(prompts: int, batch_sizes: tuple[int, ...]) -> Path:
    """A database with the tiny grid measured and traces recorded, built once per
    test session; tests get copies (measuring is the slow part)."""
    path = Path(tempfile.mkdtemp(prefix="autotune-template-")) / "template.db"
    store, pair = Store(path), tiny_pair()
    run_profile(pair, store, SETUP, GRID, progress=False)
    config = CollectConfig(full_shape(SPACE.top_k, SPACE.max_depth), batch_sizes, max_new_tokens=12,
                           context_length=128)
    collect(pair, store, "test-device", tiny_prompts().head(prompts), config, progress=False)
    store.close()
    return path


def fill(store: Store, prompts: int = 3, batch_sizes: tuple[int, ...] = (1, 2)) -> Store:
    """Give ``store`` what `tune` needs: the tiny grid measured and traces recorded."""
    store.close()
    with sqlite3.connect(_template(prompts, batch_sizes)) as source, sqlite3.connect(store.path) as target:
        source.backup(target)
    return store


# ---------------------------------------------- the replay tuner's planted chain
ACCEPTED = 3  # the target accepts the top-1 chain to this depth
CHAIN_VOCAB = 8
RECORDED = TreeShape(top_k=3, max_depth=5, num_verify_tokens=16)


class ChainDraft:
    """Children of every node: token 0 with p = 0.9, then tokens 1, 2, ... with the rest."""

    def expand(self, tree: DraftTree, frontier: range, top_k: int):
        batch, n = tree.batch_size, len(frontier)
        rest = torch.tensor([0.06, 0.03, 0.01][: top_k - 1], dtype=torch.float64)
        probs = torch.cat([torch.tensor([0.9], dtype=torch.float64), rest]).expand(batch, n, top_k)
        tokens = torch.arange(top_k).expand(batch, n, top_k)
        return probs.numpy().copy(), tokens.numpy().copy()


def chain_costs() -> CostModel:
    n = torch.arange(1, 33, dtype=torch.float64)
    target = CostTable(1024, 1, (1, 4), torch.stack([10 + 1.0 * n, 20 + 4.0 * n]).view(2, 1, -1))
    draft = CostTable(1024, 1, (1, 4), torch.stack([2 + 0.5 * n, 4 + 2.0 * n]).view(2, 1, -1))
    return CostModel(target=target, draft=draft)


def chain_trace(batch: int = 1, accepted: int = ACCEPTED):
    plan = make_policy("eagle2", PolicySettings.single(chain_costs(), shape=RECORDED)).begin(batch, 50)
    recorder = RecordingExpander(ChainDraft(), plan.top_k)
    tree = grow_tree(plan, recorder, torch.full((batch,), 5))
    # Target: token 0 after every node above depth ACCEPTED, a token nobody drafted below.
    argmax = torch.where(torch.from_numpy(tree.depths) < accepted, 0, CHAIN_VOCAB - 1)
    return recorder.finish(tree, torch.full((batch,), 50), argmax)


CHAIN_GRID = Grid(c_values=(0.1, 1.0, 10.0), depths=(1, 3, 5), top_ks=(1, 3), budgets=(4, 16), fifo_lens=(2,))


# -------------------------------------------------------------- a recorded trace
def make_trace(seed: int = 0, batch: int = 2):
    model = PathModel(vocab=10, seed=seed)
    settings = PolicySettings.single(CostModel.linear(1.0, 4.0), shape=TreeShape(3, 3, 10))
    plan = make_policy("eagle2", settings).begin(batch, 20)
    recorder = RecordingExpander(model, plan.top_k)
    tree = grow_tree(plan, recorder, torch.arange(batch))
    nodes = torch.arange(tree.size).expand(batch, -1)
    return recorder.finish(tree, torch.full((batch,), 20), model.argmax_for(tree, nodes))


# ------------------------------------------ SGLang-shaped model directories
LLAMA_8B = ROOT / "profiles" / "models" / "llama-3.1-8b" / "config.json"


def llama_dirs(tmp_path, heads: int = 32, kv_heads: int = 8) -> tuple[str, str]:
    """A Llama-3.1-8B-shaped target directory (``heads``/``kv_heads`` overridable) and
    an EAGLE-3 head directory of its layer shape: config.json files, no weights."""
    config = {**json.loads(LLAMA_8B.read_text()), "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    head = {**config, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": 32000}
    for name, content in (("target", config), ("head", head)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "config.json").write_text(json.dumps(content))
    return str(tmp_path / "target"), str(tmp_path / "head")


# ------------------------------------------------ a weight format's profile
FORMAT_SETTINGS = PolicySettings.single(CostModel.linear(1.0, 4.0), shape=TreeShape(4, 4, 16))


def profile(source="measured", weight_format="int8", isa="amx") -> Profile:
    model = {"target": "t", "draft": "d"} | ({"weight_format": weight_format} if weight_format else {})
    provenance = {"machine": {"device_type": "cpu", "isa_class": isa}} if isa else {}
    return Profile(label="cpu", device="test cpu", source=source, settings=FORMAT_SETTINGS, model=model,
                   provenance=provenance)
