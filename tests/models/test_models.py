"""Tests for sglang_cast.models: exactness against transformers, tree attention, KV cache
compaction, EAGLE checkpoints and the embedded SmolLM2 conversion (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sglang_cast.models import (KVCache, LlamaModel, ModelConfig, causal_tree_mask, eagle3_feature_layers, load_draft,
                                load_target, save_draft)
from sglang_cast.models import loader
from support.models import DEVICE, TINY, commit_all, draft_cache, draft_inputs, draft_run, make_pair, random_draft

ATOL = 1e-4


def step(model, cache, slots, tokens, positions=None, tree_mask=None, capture=()):
    """One forward of ``tokens`` [B, n] (default: a chain after the committed prefix)."""
    tokens = tokens.to(DEVICE)
    b, n = tokens.shape
    if positions is None:
        positions = cache.lens[slots.cpu()].to(DEVICE)[:, None] + torch.arange(n, device=DEVICE)
    positions = positions.to(DEVICE)
    if tree_mask is None:
        tree_mask = causal_tree_mask(b, n, DEVICE)
    with torch.no_grad():
        out = model(tokens, positions, cache, slots, tree_mask.to(DEVICE), capture)
        return model.logits(out.hidden), out.captured


def plain_logits(model: LlamaModel, tokens: list[int]) -> torch.Tensor:
    """Logits of the last token of ``tokens`` fed as one causal sequence in a fresh cache."""
    cache = KVCache.for_model(model.config, 1, 64, DEVICE, torch.float32)
    ids = torch.tensor([tokens])
    logits, _ = step(model, cache, torch.tensor([0], device=DEVICE), ids)
    return logits[0, -1]


# Slots [2, 0] take the general cache path (index_put writes, gathered reads); the
# consecutive [1, 2] with equal lengths take the fast one (`AttentionBatch.windows`,
# slice writes, unmasked SDPA when decoding).
@pytest.mark.parametrize("slot_ids", [[2, 0], [1, 2]])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_matches_transformers_prefill_and_decode(arch: str, slot_ids: list[int]) -> None:
    hf, ours = make_pair(arch)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, TINY["vocab_size"], (2, 10), generator=gen)
    with torch.no_grad():
        ref = hf(ids.to(DEVICE), output_hidden_states=True)
    cache = KVCache.for_model(ours.config, 3, 32, DEVICE, torch.float32)
    slots = torch.tensor(slot_ids, device=DEVICE)

    layers = (0, 2, 3)
    logits, captured = step(ours, cache, slots, ids[:, :6], capture=layers)
    commit_all(cache, slots, 6)
    torch.testing.assert_close(logits, ref.logits[:, :6], atol=ATOL, rtol=0)
    for layer, feature in zip(layers, captured):
        torch.testing.assert_close(feature, ref.hidden_states[layer][:, :6], atol=ATOL, rtol=0)

    for t in range(6, 10):
        logits, _ = step(ours, cache, slots, ids[:, t : t + 1])
        commit_all(cache, slots, 1)
        torch.testing.assert_close(logits[:, 0], ref.logits[:, t], atol=ATOL, rtol=0)
    assert cache.lens.tolist() == [10 if slot in slot_ids else 0 for slot in range(3)]


def test_rope_and_rmsnorm_match_transformers_formulas() -> None:
    """`apply_rope` (sign-folded sin, roll) and the fp32 `RMSNorm` fast path reproduce
    the Hugging Face formulas, including an all-zero row (eps only)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, rotate_half

    from sglang_cast.models.llama import RMSNorm, apply_rope, rope_cos_sin

    config = ModelConfig.from_hf(LlamaConfig(**TINY, rope_theta=500.0).to_dict())
    gen = torch.Generator().manual_seed(6)
    positions = torch.tensor([[0, 3, 7], [5, 5, 200]])
    cos, sin = rope_cos_sin(positions, config, torch.float32)
    dim = config.head_dim
    inv_freq = 1.0 / (500.0 ** (torch.arange(0, dim, 2).float() / dim))
    angles = positions.float()[..., None] * inv_freq
    emb = torch.cat((angles, angles), dim=-1)[:, None]
    x = torch.randn(2, 4, 3, dim, generator=gen)
    expected = x * emb.cos() + rotate_half(x) * emb.sin()
    torch.testing.assert_close(apply_rope(x, cos, sin), expected, atol=1e-5, rtol=0)

    hidden = torch.randn(3, config.hidden_size, generator=gen) * 3
    hidden[1] = 0
    ours, ref = RMSNorm(config.hidden_size, 1e-6), LlamaRMSNorm(config.hidden_size, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(config.hidden_size, generator=gen))
        ref.weight.copy_(ours.weight)
        torch.testing.assert_close(ours(hidden), ref(hidden), atol=1e-5, rtol=1e-5)


def test_commit_in_place_advances_lengths_only() -> None:
    """Plain decoding commits entries that are already in place: only ``lens`` moves."""
    cache = KVCache(2, 2, 1, 8, 4, DEVICE, torch.float32)
    cache.k.normal_()
    cache.v.normal_()
    k, v = cache.k.clone(), cache.v.clone()
    slots = torch.tensor([1, 0], device=DEVICE)
    keep, counts = torch.tensor([[0, 1], [0, 0]]), torch.tensor([2, 1])
    cache.commit(slots, keep.to(DEVICE), counts.to(DEVICE))
    assert cache.lens.tolist() == [1, 2]
    assert torch.equal(cache.k, k) and torch.equal(cache.v, v)
    keep, counts = torch.tensor([[1], [0]]), torch.tensor([1, 0])
    cache.commit(slots, keep.to(DEVICE), counts.to(DEVICE))
    assert cache.lens.tolist() == [1, 3]
    assert torch.equal(cache.k[:, 1, :, 2], k[:, 1, :, 3])  # moved one index down


def test_advance_commits_entries_in_place_within_capacity() -> None:
    """The draft's catch-up writes where its entries stay: ``advance`` grows ``lens`` and
    moves nothing; past the capacity it refuses, naming it, and changes nothing."""
    cache = KVCache(2, 3, 1, 8, 4, DEVICE, torch.float32)
    cache.k.normal_()
    k = cache.k.clone()
    cache.lens[:] = torch.tensor([2, 5, 0])
    cache.advance([1, 0], [3, 1])
    assert cache.lens.tolist() == [3, 8, 0] and torch.equal(cache.k, k)
    with pytest.raises(ValueError, match="capacity 8"):
        cache.advance([2, 0], [1, 6])
    with pytest.raises(ValueError, match="counts must be >= 0"):
        cache.advance([2], [-1])
    assert cache.lens.tolist() == [3, 8, 0]


@pytest.mark.parametrize("keep", [[[0, 2, 5, 6], [0, 1, 4, 0]],  # accepted paths: offsets increase
                                  [[3, 1, 4, 0], [0, 2, 5, 6]]])  # one row out of order: a source is overwritten first
def test_commit_moves_each_kept_entry_from_its_old_place(keep: list[list[int]]) -> None:
    """Entry j of a row ends up where kept offset j was before the commit, whatever the order."""
    cache = KVCache(2, 3, 2, 16, 4, DEVICE, torch.float32)
    cache.k.normal_()
    cache.v.normal_()
    cache.lens[:] = torch.tensor([5, 0, 3])
    k, v = cache.k.clone(), cache.v.clone()
    slots, counts = [2, 0], [4, 3]
    cache.commit_lists(slots, keep, counts)
    assert cache.lens.tolist() == [8, 0, 7]
    for slot, start, kept in ((2, 3, keep[0][:4]), (0, 5, keep[1][:3])):
        source = [start + offset for offset in kept]
        assert torch.equal(cache.k[:, slot, :, start:start + len(kept)], k[:, slot, :, source])
        assert torch.equal(cache.v[:, slot, :, start:start + len(kept)], v[:, slot, :, source])
    assert torch.equal(cache.k[:, 1], k[:, 1]) and torch.equal(cache.k[:, :, :, :3], k[:, :, :, :3])


def random_tree(n: int, gen: torch.Generator) -> tuple[list[int], torch.Tensor]:
    """Parents (root has -1) and the [n, n] ancestor-or-self mask of a random tree."""
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]
    mask = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        mask[i] |= mask[parents[i]]
    return parents, mask


def path_to(parents: list[int], node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def _tree_setup(ours: LlamaModel, seed: int = 3, split: int | None = None):
    """Two slots with ragged committed prompts and one random 12-node tree each.

    With ``split`` the tree is fed in two uncommitted forwards (nodes before/after
    ``split``), the second appending to the first one's scratch entries.
    """
    gen = torch.Generator().manual_seed(seed)
    vocab, n = TINY["vocab_size"], 12
    prompts = [torch.randint(0, vocab, (size,), generator=gen).tolist() for size in (5, 9)]
    cache = KVCache.for_model(ours.config, 2, 48, DEVICE, torch.float32)
    slots = torch.tensor([1, 0], device=DEVICE)
    for row, prompt in enumerate(prompts):
        slot = slots[row : row + 1]
        step(ours, cache, slot, torch.tensor([prompt]))
        commit_all(cache, slot, len(prompt))
    trees = [random_tree(n, gen) for _ in prompts]
    tokens = torch.randint(0, vocab, (2, n), generator=gen)
    depth = torch.stack([mask.sum(-1) - 1 for _, mask in trees])
    positions = torch.tensor([[len(p)] for p in prompts]) + depth
    tree_mask = torch.stack([mask for _, mask in trees])
    if split is None:
        logits, _ = step(ours, cache, slots, tokens, positions, tree_mask)
    else:
        parts = []
        for rows, cols in ((slice(0, split), slice(0, split)), (slice(split, n), slice(0, n))):
            mask = tree_mask[:, rows, cols]  # the second forward sees all 12 scratch entries
            parts.append(step(ours, cache, slots, tokens[:, rows], positions[:, rows], mask)[0])
        logits = torch.cat(parts, dim=1)
    return prompts, trees, tokens, cache, slots, logits


@pytest.mark.parametrize("split", [None, 5])
def test_tree_attention_equals_per_path_decoding(split: int | None) -> None:
    _, ours = make_pair("llama", seed=2)
    prompts, trees, tokens, _, _, logits = _tree_setup(ours, split=split)
    for row, (parents, _) in enumerate(trees):
        for node in range(len(parents)):
            path = tokens[row, path_to(parents, node)].tolist()
            expected = plain_logits(ours, prompts[row] + path)
            torch.testing.assert_close(logits[row, node], expected, atol=ATOL, rtol=0)


def test_commit_compacts_accepted_path() -> None:
    _, ours = make_pair("qwen2", seed=4)
    prompts, trees, tokens, cache, slots, _ = _tree_setup(ours, seed=5, split=7)
    # Accept the longest path in row 0 and a path to the last node in row 1.
    depths = [mask.sum(-1) for _, mask in trees]
    leaves = [int(torch.argmax(depths[0])), len(trees[1][0]) - 1]
    paths = [path_to(parents, leaf) for (parents, _), leaf in zip(trees, leaves)]
    width = max(map(len, paths))
    keep = torch.tensor([p + [-1] * (width - len(p)) for p in paths], device=DEVICE)
    cache.commit(slots, keep, torch.tensor([len(p) for p in paths], device=DEVICE))
    accepted = [prompts[r] + tokens[r, paths[r]].tolist() for r in range(2)]
    assert cache.lens[slots.cpu()].tolist() == [len(a) for a in accepted]

    nxt = torch.tensor([[7], [11]])
    logits, _ = step(ours, cache, slots, nxt)
    for row in range(2):
        expected = plain_logits(ours, accepted[row] + nxt[row].tolist())
        torch.testing.assert_close(logits[row, 0], expected, atol=ATOL, rtol=0)


def test_kv_cache_overflow_and_reset() -> None:
    _, ours = make_pair("llama")
    cache = KVCache.for_model(ours.config, 2, 8, DEVICE, torch.float32)
    slots = torch.tensor([1], device=DEVICE)
    step(ours, cache, slots, torch.zeros(1, 6, dtype=torch.long))
    commit_all(cache, slots, 6)
    with pytest.raises(ValueError, match=r"slot 1 needs 9 positions but capacity is 8"):
        step(ours, cache, slots, torch.zeros(1, 3, dtype=torch.long))
    cache.reset(1)
    assert cache.lens.tolist() == [0, 0]
    with pytest.raises(ValueError, match="counts"):
        keep = torch.zeros(1, 2, dtype=torch.long, device=DEVICE)
        cache.commit(slots, keep, torch.tensor([3], device=DEVICE))


def test_config_validation() -> None:
    base = LlamaConfig(**TINY).to_dict()
    with pytest.raises(ValueError, match=r"architectures.*MistralForCausalLM.*LlamaForCausalLM"):
        ModelConfig.from_hf({**base, "architectures": ["MistralForCausalLM"]})
    with pytest.raises(ValueError, match="model_type"):
        ModelConfig.from_hf({**base, "model_type": "gpt2"})
    with pytest.raises(ValueError, match="hidden_size"):
        ModelConfig.from_hf({**base, "hidden_size": 66, "head_dim": None})
    with pytest.raises(ValueError, match="num_key_value_heads"):
        ModelConfig.from_hf({**base, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="rope_scaling"):
        ModelConfig.from_hf({**base, "rope_parameters": {"rope_type": "llama3", "rope_theta": 1.0}})
    config = ModelConfig.from_hf(base)
    assert ModelConfig.from_hf(config.to_hf()) == config
    assert eagle3_feature_layers(30) == (2, 15, 27)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_draft_roundtrip_public_layout(kind: str, tmp_path: Path) -> None:
    _, target = make_pair("llama")
    draft = random_draft(kind, target)
    save_draft(draft, tmp_path)
    keys = set(json.loads((tmp_path / "config.json").read_text()))
    assert {"hidden_size", "vocab_size", "bias"} <= keys
    loaded = load_draft(tmp_path, target, DEVICE, torch.float32)
    assert type(loaded) is type(draft)
    state = loaded.state_dict()
    hidden = target.config.hidden_size
    assert loaded.output_vocab_size == (TINY["vocab_size"] if kind == "eagle" else 40)
    if kind == "eagle":
        ids = torch.arange(5, device=DEVICE)
        assert torch.equal(loaded.draft_to_target(ids), ids)
        assert state["fc.weight"].shape == (hidden, 2 * hidden) and "fc.bias" in state
        assert "layers.0.post_attention_layernorm.weight" in state
        assert "layers.0.input_layernorm.weight" not in state
    else:
        assert state["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * hidden
        assert state["fc.weight"].shape == (hidden, 3 * hidden) and "fc.bias" not in state
        expected = {"midlayer.hidden_norm.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"}
        assert expected <= state.keys()
        config = json.loads((tmp_path / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        hot = torch.nonzero(loaded.t2d).flatten()
        assert torch.equal(loaded.draft_to_target(torch.arange(40, device=DEVICE)), hot)
    assert not any(key.startswith("target") or key == "embed_tokens.weight" for key in state)
    inputs = draft_inputs(draft, target)
    for got, want in zip(draft_run(loaded, *inputs), draft_run(draft, *inputs)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_draft_chunked_equals_incremental(kind: str) -> None:
    """The draft heads use the same cache/mask machinery: a chunk equals token-by-token."""
    _, target = make_pair("qwen2")
    draft = random_draft(kind, target)
    ids, features, positions = draft_inputs(draft, target)
    full = draft_run(draft, ids, features, positions)
    cache = draft_cache(draft)
    for t in range(ids.shape[1]):
        chunk = slice(t, t + 1)
        out = draft_run(draft, ids[:, chunk], features[:, chunk], positions[:, chunk], cache)
        commit_all(cache, torch.arange(2, device=DEVICE), 1)
        torch.testing.assert_close(out.logits[:, 0], full.logits[:, t], atol=ATOL, rtol=0)
        torch.testing.assert_close(out.hidden[:, 0], full.hidden[:, t], atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_a_draft_asked_for_one_position_per_row_runs_its_lm_head_on_those_rows_only(kind: str) -> None:
    """``last`` (a catch-up reads only each sequence's newest position): the logits are
    the full forward's at those positions, and the LM head multiplies B rows, not B·n
    (over a prompt's catch-up it was most of the draft's cost on a CPU)."""
    _, target = make_pair("qwen2")
    draft = random_draft(kind, target)
    ids, features, positions = draft_inputs(draft, target, n=5)
    full = draft_run(draft, ids, features, positions)
    rows: list[int] = []  # rows into the EAGLE-3 head's own LM head (EAGLE's is the target's)
    hook = (draft.lm_head.register_forward_hook(lambda _m, args, _out: rows.append(args[0].shape[:-1].numel()))
            if kind == "eagle3" else None)
    last = torch.tensor([4, 2], device=DEVICE)
    with torch.no_grad():
        picked = draft(ids, features, positions, draft_cache(draft), torch.arange(2, device=DEVICE),
                       causal_tree_mask(2, 5, DEVICE), last)
    torch.testing.assert_close(picked.logits[:, 0], full.logits[[0, 1], last], atol=ATOL, rtol=0)
    torch.testing.assert_close(picked.hidden, full.hidden, atol=ATOL, rtol=0)
    assert picked.logits.shape[:2] == (2, 1)
    if hook is not None:
        hook.remove()
        assert rows == [2]


def test_draft_loader_accepts_bin_and_embeddings(tmp_path: Path) -> None:
    _, target = make_pair("llama")
    for kind in ("eagle", "eagle3"):
        draft = random_draft(kind, target)
        save_draft(draft, tmp_path / kind)
        state = dict(draft.state_dict())
        scale = 2 if kind == "eagle3" else 1  # EAGLE-3 may ship its own, different table
        state["embed_tokens.weight"] = target.embed_tokens.weight.detach() * scale
        (tmp_path / kind / "model.safetensors").unlink()
        torch.save(state, tmp_path / kind / "pytorch_model.bin")
        loaded = load_draft(tmp_path / kind, target, DEVICE, torch.float32)
        inputs = draft_inputs(draft, target)
        if kind == "eagle":  # the checkpoint copy is dropped in favour of the shared table
            assert "embed_tokens.weight" not in loaded.state_dict()
            got, want = draft_run(loaded, *inputs), draft_run(draft, *inputs)
            assert torch.equal(got.logits, want.logits)
        else:  # EAGLE-3 keeps its own embedding
            assert torch.equal(loaded.embed_tokens.weight, state["embed_tokens.weight"])


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
@pytest.mark.parametrize("field", ["hidden_size", "vocab_size"])
def test_draft_mismatch_errors(kind: str, field: str, tmp_path: Path) -> None:
    _, target = make_pair("llama")
    save_draft(random_draft(kind, target), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg[field] += 32
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    wrong, right = cfg[field], getattr(target.config, field)
    with pytest.raises(ValueError, match=rf"{field} {wrong} does not match target {field} {right}"):
        load_draft(tmp_path, target, DEVICE, torch.float32)


def test_draft_missing_files_and_unknown_layout(tmp_path: Path) -> None:
    _, target = make_pair("llama")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_draft(tmp_path, target, DEVICE, torch.float32)
    (tmp_path / "config.json").write_text(json.dumps(target.config.to_hf()))
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_draft(tmp_path, target, DEVICE, torch.float32)
    torch.save({"something.weight": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="unknown draft layout"):
        load_draft(tmp_path, target, DEVICE, torch.float32)


def test_load_target_from_sharded_hf_directory(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    hf, ours = make_pair("qwen2", seed=9)
    hf.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        load_target(tmp_path, DEVICE, torch.float32)
    words = models.WordLevel({f"w{i}": i for i in range(TINY["vocab_size"])}, unk_token="w0")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(words), eos_token="w2")
    tokenizer.save_pretrained(tmp_path)
    model, config, tokenizer = load_target(tmp_path, DEVICE, torch.float32)
    assert config == ours.config and tokenizer.eos_token_id == 2
    for key, value in ours.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    with pytest.raises(FileNotFoundError, match="missing"):
        load_target(tmp_path / "missing", DEVICE, torch.float32)


def test_gguf_cache_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_CAST_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not really gguf")

    def interrupted(src: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(loader, "convert_gguf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loader.converted_dir(gguf)
    assert list((tmp_path / "cache" / "models").iterdir()) == []

    calls = []
    monkeypatch.setattr(loader, "convert_gguf", lambda src, out: calls.append(out))
    first = loader.converted_dir(gguf)
    assert loader.converted_dir(gguf) == first and len(calls) == 1
    assert first.parent == tmp_path / "cache" / "models"


def test_conversion_pins_special_tokens_to_the_gguf_metadata() -> None:
    """A transformers version that picks another EOS (one gave id 1, <|im_start|>) is overruled."""
    from gguf import GGUFReader
    from transformers import AutoTokenizer

    from sglang_cast.models.gguf_convert import pin_special_tokens

    gguf = loader.embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.eos_token = tokenizer.bos_token = tokenizer.pad_token = "<|endoftext|>"
    pin_special_tokens(tokenizer, GGUFReader(gguf))
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.unk_token_id == 0


# --------------------------------------------------------------------------- slow


@pytest.fixture(scope="module")
def smollm(tmp_path_factory: pytest.TempPathFactory):
    """Our SmolLM2 (converted into a fresh cache) and transformers' own GGUF-loaded model."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGLANG_CAST_CACHE", str(tmp_path_factory.mktemp("cache")))
        model, config, tokenizer = load_target(None, DEVICE, torch.float32)
        # transformers' GGUF path (from_pretrained(gguf_file=...)) needs `accelerate`;
        # its loader function is the same code without that dependency.
        gguf = str(loader.embedded_gguf_path())
        hf = LlamaForCausalLM(LlamaConfig(**load_gguf_checkpoint(gguf)["config"]))
        tensors = load_gguf_checkpoint(gguf, return_tensors=True, model_to_load=hf)["tensors"]
        hf.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False)
        yield model, config, tokenizer, hf.to(DEVICE).eval(), patch


def _prompt(tokenizer) -> torch.Tensor:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    return torch.tensor([encoded["input_ids"]])


@pytest.mark.slow
def test_smollm_matches_transformers_gguf(smollm) -> None:
    model, config, tokenizer, hf, _ = smollm
    shape = (config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads)
    assert shape == (30, 576, 9, 3)
    assert config.tie_word_embeddings and config.rope_theta == 100000.0
    ids = _prompt(tokenizer)
    cache = KVCache.for_model(config, 1, 128, DEVICE, torch.float32)
    logits, _ = step(model, cache, torch.tensor([0], device=DEVICE), ids)
    with torch.no_grad():
        ref = hf(ids.to(DEVICE)).logits
    torch.testing.assert_close(logits, ref, atol=1e-3, rtol=0)


@pytest.mark.slow
def test_smollm_greedy_matches_generate(smollm) -> None:
    model, config, tokenizer, hf, _ = smollm
    ids = _prompt(tokenizer)
    with torch.no_grad():
        eos = list(config.eos_token_ids)
        ref = hf.generate(ids.to(DEVICE), max_new_tokens=16, do_sample=False, eos_token_id=eos)
    expected = ref[0, ids.shape[1] :].tolist()

    cache = KVCache.for_model(config, 1, 128, DEVICE, torch.float32)
    slot = torch.tensor([0], device=DEVICE)
    tokens, out = ids, []
    for _ in range(16):
        logits, _ = step(model, cache, slot, tokens)
        commit_all(cache, slot, tokens.shape[1])
        out.append(int(logits[0, -1].argmax()))
        if out[-1] in config.eos_token_ids:
            break
        tokens = torch.tensor([[out[-1]]])
    assert out == expected
    assert len(tokenizer.decode(out).strip()) > 0


@pytest.mark.slow
def test_smollm_second_load_uses_cache(smollm) -> None:
    *_, patch = smollm

    def no_conversion(*args: object) -> None:
        raise AssertionError("cache should have been reused")

    patch.setattr(loader, "convert_gguf", no_conversion)
    cached = loader.cache_root() / "models" / loader.EMBEDDED_NAME
    assert (cached / "config.json").is_file() and (cached / "tokenizer_config.json").is_file()
    assert "chat_template" in json.loads((cached / "tokenizer_config.json").read_text())
    model, config, tokenizer = load_target(None, DEVICE, torch.float32)
    assert config.vocab_size == 49152
    assert tokenizer.eos_token_id in config.eos_token_ids, (tokenizer.eos_token_id, config.eos_token_ids)


def test_a_chain_mask_is_lower_triangular_and_short_chains_share_one_tensor() -> None:
    from sglang_cast.models.attention import SHARED_CHAIN_MASK_MAX, causal_tree_mask
    for n in (1, 5, SHARED_CHAIN_MASK_MAX, SHARED_CHAIN_MASK_MAX + 1):
        mask = causal_tree_mask(3, n, "cpu")
        assert mask.shape == (3, n, n) and mask.dtype == torch.bool
        assert torch.equal(mask[2], torch.ones(n, n, dtype=torch.bool).tril())
    short = causal_tree_mask(1, 5, "cpu")
    assert short.data_ptr() == causal_tree_mask(4, 5, torch.device("cpu")).data_ptr()  # built once
    long = SHARED_CHAIN_MASK_MAX + 1
    assert causal_tree_mask(1, long, "cpu").data_ptr() != causal_tree_mask(1, long, "cpu").data_ptr()
