"""The typed settings of one training run: data sizes, the head and its optimisation,
evaluation, and where everything is read and written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sglang_cast.cast import EAGLE2_SHAPE, TreeShape
from sglang_cast.models.cache import cache_root

PACKAGE = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = PACKAGE / "assets" / "smollm2-135m-eagle"
DEFAULT_BENCHMARKS = PACKAGE.parent / "datasets"  # the repository's datasets/
DEFAULT_WORK_DIR = cache_root() / "train_draft"
EVAL_DATASETS = ("mt_bench", "humaneval")


@dataclass(frozen=True)
class DataConfig:
    """How much data to build.  Defaults take about 1 h 40 min of generation on 2 idle
    cores (about 148 answer tokens/s at batch 64, prefill included).

    Self-instruct and template requests outnumber documentation requests because
    their chat-style prompts (writing, roleplay, advice, reasoning) are closer to
    mt_bench, the headline benchmark; the documentation requests bring the code-heavy
    answers humaneval needs.
    """

    self_instruct: int = 1500  # meta-prompts: one invented user request each
    doc_prompts: int = 1000  # requests built from stdlib docstrings
    template_prompts: int = 1500  # requests from our templates over many topics
    task_prompts: int = 0  # multi-part task requests (`tasks.py`)
    request_tokens: int = 64  # token limit of one invented request
    request_temperature: float = 0.9  # sampling keeps self-instruct requests diverse
    response_tokens: int = 256  # token limit of one target answer (greedy)
    max_prompt_tokens: int = 256  # longer prompts are dropped (counted as too_long)
    gen_batch: int = 64  # sequences decoded together (64 measured 1.4x faster than 32, as fast as 128)
    shard_prompts: int = 256  # prompts per resumable generation shard
    max_answers: int = 0  # answer only the first N kept prompts (they are shuffled); 0 = all
    soft_top_k: int = 0  # keep the target's k likeliest tokens per answer token (soft labels); 0 = off


@dataclass(frozen=True)
class TrainConfig:
    """The head and its optimisation (EAGLE-3 recipe scaled to a CPU budget)."""

    draft_vocab: int = 8192
    vocab_swap: int = 0  # with --init-head: refresh up to this many of its draft tokens for this run's data
    vocab_grow: int = 0  # with --init-head: add up to this many of this run's answer tokens to its vocab
    ttt_steps: int = 4  # unrolled draft steps per position (training-time test)
    step_decay: float = 0.8  # loss weight of step j is decay**j
    epochs: int = 2
    max_steps: int = 0  # 0: epochs decide; otherwise stop after this many optimiser steps
    batch_tokens: int = 2048  # padded tokens per optimiser step
    max_seq_len: int = 512  # prompt + response tokens kept per sequence
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine schedule floor
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    soft_labels: float = 0.0  # weight of the soft-label (distillation) loss; 1 - it weighs the argmax label
    lm_head_basis: float = 0.0  # > 0: train the LM head as W + B·P over the target's output rows (lm_head_basis.py)
    # The training forward's matmuls in bf16 by CPU autocast (AVX512-BF16 or AMX units; the backward follows
    # the forward's dtypes); weights, AdamW state and validation stay fp32.
    bf16_autocast: bool = False
    replay: tuple[str, ...] = ()  # earlier runs' responses stages, trained on beside this run's answers
    val_fraction: float = 0.02  # held-out sequences for the per-step accuracy log
    checkpoint_every: int = 200


@dataclass(frozen=True)
class EvalConfig:
    """Acceptance measurement: batch 1, greedy, first turn of each benchmark record."""

    prompts: int = 40  # per benchmark (mt_bench and humaneval have 80 each)
    max_new_tokens: int = 128
    tree: TreeShape = EAGLE2_SHAPE
    chain_depth: int = 6  # top-1 chain for α


@dataclass(frozen=True)
class PipelineConfig:
    work_dir: Path = DEFAULT_WORK_DIR
    output_dir: Path = DEFAULT_OUTPUT
    benchmark_dir: Path = DEFAULT_BENCHMARKS
    seed: int = 0
    threads: int = 2
    init_head: Path | None = None  # continue training this exported head (its vocab and weights)
    # How the target's linears are stored while it answers the training prompts (the
    # responses stage): a served format's own answers and features ("int4vnni/int8vnni");
    # every other stage runs the fp32 target.
    target_format: str = "fp32"
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    @classmethod
    def quick(cls) -> PipelineConfig:
        """End to end in well under 2 minutes: a smoke test, not a useful head."""
        return cls(
            work_dir=DEFAULT_WORK_DIR / "quick",
            output_dir=DEFAULT_WORK_DIR / "quick" / "head",
            data=DataConfig(self_instruct=8, doc_prompts=8, template_prompts=8, request_tokens=24, response_tokens=24,
                            gen_batch=8, shard_prompts=8),
            train=TrainConfig(draft_vocab=1024, ttt_steps=3, epochs=100, max_steps=6, batch_tokens=512,
                              max_seq_len=256, warmup_steps=2, checkpoint_every=3, val_fraction=0.1),
            eval=EvalConfig(prompts=1, max_new_tokens=8),
        )

