"""The draft-head training data stages (sglang_cast/training): the benchmark filter,
the prompt sources and the draft vocabulary."""

from __future__ import annotations

import dataclasses
import doctest
import json
import random
import re

import pytest
import torch

from sglang_cast.training import benchmark_filter, docstrings, workspace
from sglang_cast.training import prompts as prompt_stage
from sglang_cast.training import functions as draft_functions
from sglang_cast.training import tasks as draft_tasks, templates as prompt_templates
from sglang_cast.training import vocab as draft_vocab
from sglang_cast.training.head import new_draft
from sglang_cast.training.prompts import build_prompts
from sglang_cast.training.vocab import with_vocab
from sglang_cast.training.workspace import write_jsonl
from support.training import VOCAB, ByteTokenizer, random_head, tiny, tiny_config


# ------------------------------------------------------------------ filter

BENCH = [
    "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
    "and must-see attractions.",
    "Give three tips for staying healthy.",
    "Write a function that returns the sum of the squares of all odd numbers in a list of integers.",
]


def test_benchmark_filter_drops_exact_and_near_duplicates_and_keeps_unrelated():
    bench = benchmark_filter.BenchmarkFilter.from_prompts(BENCH)
    assert bench.reason("give three TIPS for staying healthy!!") == "exact"
    near = ("Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural "
            "experiences and must see sights.")
    assert bench.reason(near) == "jaccard"
    embedded = ("Before anything else: write a function that returns the sum of the squares of all odd "
                "numbers, then explain how you tested it against a few edge cases and corner inputs in detail.")
    assert bench.reason(embedded) == "ngram"
    for unrelated in ("Explain what `textwrap.dedent` does in Python and give a short example.",
                      "Give three tips for learning to play chess.", "Write a poem about the sea."):
        assert bench.reason(unrelated) is None
    kept, report = benchmark_filter.filter_prompts(
        ["Write a poem about the sea.", "write a poem about the sea", BENCH[1], near, "Hello there, how are you today?"],
        bench, fits=lambda p: "Hello" not in p)
    assert kept == ["Write a poem about the sea."]
    assert report.to_dict() == {"kept": 1, "duplicates": 1, "too_long": 1,
                                "contaminated": {"exact": 1, "jaccard": 1, "ngram": 0}, "contaminated_total": 2}


def test_benchmark_prompts_include_every_turn(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"turns": ["one", "two"]}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"turns": ["three"]}) + "\n")
    assert benchmark_filter.load_benchmark_prompts(tmp_path) == ["one", "two", "three"]


def test_clean_request_and_doc_prompts():
    assert prompt_stage.clean_request('Request: "Write a haiku about autumn leaves, please."\n\nSure!', False) \
        == "Write a haiku about autumn leaves, please."
    assert prompt_stage.clean_request("Sure, here is a request for you to answer now.", False) is None
    assert prompt_stage.clean_request("Explain how ocean tides work. Then describe the moon and", True) \
        == "Explain how ocean tides work."
    items = docstrings.stdlib_doc_items(("textwrap",))
    assert any(item.name == "textwrap.dedent" for item in items)
    prompts = docstrings.doc_prompts(items, 5, seed=0)
    assert len(set(prompts)) == 5 and sum("`textwrap." in p for p in prompts) >= 3


def test_template_prompts_are_filled_seeded_and_spread():
    prompts = prompt_stage.template_prompts(200, seed=3)
    assert prompts == prompt_stage.template_prompts(200, seed=3) != prompt_stage.template_prompts(200, seed=4)
    assert len(prompts) == 200 and not any("{" in p or "}" in p for p in prompts)
    math = prompts[4::5]  # one in five is arithmetic or reasoning
    assert all(any(ch.isdigit() for ch in p) for p in math)
    chat = [p for i, p in enumerate(prompts) if i % 5 != 4]
    topics = prompt_templates.TOPICS + prompt_templates.MORE_TOPICS + prompt_templates.WORLD_TOPICS
    assert len({t for t in topics if any(t in p for p in chat)}) > 80



def test_world_topics_reach_every_source():
    world = prompt_templates.WORLD_TOPICS
    assert len(set(world)) == len(world) > 300
    assert not set(world) & set(prompt_templates.TOPICS + prompt_templates.MORE_TOPICS)
    asked = {p.split("The topic is ")[1].split(". Reply with")[0]
             for p in prompt_stage.self_instruct_requests(200, seed=5)}
    assert len(asked & set(world)) > 100
    chat = [p for i, p in enumerate(prompt_stage.template_prompts(400, seed=5)) if i % 5 != 4]
    assert len({t for t in world if any(t in p for p in chat)}) > 100
    tasks = draft_tasks.task_prompts(13 * 60, seed=5)
    kind_of = lambda i: draft_tasks.MIX[i % len(draft_tasks.MIX)]  # noqa: E731
    stem = [p for i, p in enumerate(tasks) if kind_of(i) is draft_tasks.stem]
    humanities = [p for i, p in enumerate(tasks) if kind_of(i) is draft_tasks.humanities]
    assert sum(any(t in p for t in prompt_templates.SCIENCE_TOPICS) for p in stem) >= 30
    assert sum(any(t in p for t in prompt_templates.SOCIETY_TOPICS) for p in humanities) >= 30

def test_task_prompts_are_filled_seeded_and_cover_every_kind():
    prompts = draft_tasks.task_prompts(130, seed=3)
    assert prompts == draft_tasks.task_prompts(130, seed=3) != draft_tasks.task_prompts(130, seed=4)
    assert len(prompts) == 130 and not any(re.search(r"\{[a-z]\w*\}", p) for p in prompts)  # none left unfilled
    t = draft_tasks
    assert set(t.KINDS) == {t.extraction, t.writing, t.reasoning, t.coding, t.stem, t.roleplay, t.humanities,
                            draft_functions.function_completion}  # every kind is in the mix
    cycle = len(draft_tasks.MIX)
    of_kind = {kind: [p for i, p in enumerate(prompts) if draft_tasks.MIX[i % cycle] is kind]
               for kind in draft_tasks.KINDS}
    assert all("\n\n" in p and p.split("\n\n")[0] in draft_tasks.EXTRACTION_TASKS
               for p in of_kind[draft_tasks.extraction])
    passages = {p.split("\n\n", 1)[1].split()[0] for p in of_kind[draft_tasks.extraction]}
    assert len(passages) >= 5  # the passages' kinds spread too (their first words differ)
    assert len({lang for lang in draft_tasks.LANGUAGES
                if any(f" {lang} " in p for p in of_kind[draft_tasks.coding])}) >= 4
    assert all("def " in p and ">>> " in p for p in of_kind[draft_functions.function_completion])
    assert len(set(prompts)) > 120  # fillers spread the requests; dedupe drops the rest


@pytest.mark.parametrize("spec", draft_functions.SPECS, ids=lambda spec: spec.name)
def test_function_requests_carry_doctests_their_reference_passes(spec):
    """Every doctest in a "complete this function" request is what the reference
    implementation returns, so the target is shown right examples; the docstring is
    parsed back out of the request as a user would read it."""
    prompt = draft_functions.function_prompt(spec, random.Random(5), examples=4)
    code = prompt.split("\n\n", 1)[1]
    namespace: dict = {}
    exec(code.rstrip() + "\n    return None\n", namespace)  # compiles: signature, typing import, docstring
    examples = doctest.DocTestParser().get_examples(namespace[spec.name].__doc__)
    assert len(examples) == 4
    for example in examples:
        got = eval(example.source, {spec.name: spec.reference})
        assert repr(got) == example.want.strip(), example.source


# One hand-checked case per function, so a wrong reference (and the wrong doctests it
# would print) fails here rather than teaching the head wrong answers.
KNOWN_ANSWERS = {
    "running_total": (([1, 2, 3],), [1, 3, 6]),
    "chunk": (([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]),
    "moving_average": (([1, 2, 4], 2), [1.5, 3.0]),
    "invert_mapping": (({"a": 1, "b": 2},), {1: "a", 2: "b"}),
    "run_length_encode": (("aabccc",), [("a", 2), ("b", 1), ("c", 3)]),
    "camel_to_snake": (("riverStoneKite",), "river_stone_kite"),
    "snake_to_camel": (("river_stone_kite",), "riverStoneKite"),
    "count_long_words": (("a river of stone", 3), 2),
    "interleave": (("abc", "12345"), "a1b2c345"),
    "transpose": (([[1, 2, 3], [4, 5, 6]],), [[1, 4], [2, 5], [3, 6]]),
    "dot_product": (([1, 2, 3], [4, -5, 6]), 12),
    "clamp_all": (([-3, 5, 12], 0, 10), [0, 5, 10]),
    "rotate_left": (([1, 2, 3, 4], 5), [2, 3, 4, 1]),
    "mask_secret": (("12345678", 3), "*****678"),
    "parse_pairs": (("a=1;b=xy",), {"a": "1", "b": "xy"}),
    "longest_streak": (([1, 2, 2, 2, 3, 3],), 3),
    "pairwise_differences": (([1, 4, 2],), [3, -2]),
    "merge_counts": (({"a": 1, "b": 2}, {"b": 3, "c": 1}), {"a": 1, "b": 5, "c": 1}),
    "initials": (("Grace Brewster Hopper",), "G.B.H."),
    "count_leap_years": ((1896, 1904), 2),  # 1900 is not a leap year
    "percent_change": ((200, 150), -25.0),
    "group_by_length": ((["sun", "moss", "kite", "orbit", "ash"],), {3: ["sun", "ash"], 4: ["moss", "kite"],
                                                                     5: ["orbit"]}),
    "is_hex_color": (("#1a2B3c",), True),
    "seconds_to_clock": ((3725,), "01:02:05"),
}


def test_every_function_reference_gives_its_hand_checked_answer():
    assert set(KNOWN_ANSWERS) == {spec.name for spec in draft_functions.SPECS}
    by_name = {spec.name: spec for spec in draft_functions.SPECS}
    for name, (args, expected) in KNOWN_ANSWERS.items():
        assert by_name[name].reference(*args) == expected, name
    assert by_name["is_hex_color"].reference("#1a2B3g") is False


def test_signatures_carry_no_memory_addresses():
    items = {item.name: item for item in docstrings.stdlib_doc_items(("difflib",))}
    assert "IS_CHARACTER_JUNK" in items["difflib.ndiff"].signature
    assert "0x" not in items["difflib.ndiff"].signature


def test_later_sources_follow_the_earlier_ones(tmp_path):
    """Adding templates, then task requests, keeps the earlier prompts first and in
    order, so answer shards generated before a source existed stay valid."""
    (tmp_path / "si").mkdir()
    write_jsonl(tmp_path / "si" / "requests.jsonl",
                [{"prompt": f"Tell me something new about topic number {i}."} for i in range(6)])
    base = tiny_config(tmp_path)
    kept = {}
    for templates, tasks in ((0, 0), (10, 0), (10, 12)):
        cfg = dataclasses.replace(base, data=dataclasses.replace(base.data, template_prompts=templates,
                                                                 task_prompts=tasks))
        out = tmp_path / f"prompts{templates}_{tasks}"
        out.mkdir()
        summary = build_prompts(tiny(), cfg, tmp_path / "si", out)
        kept[templates, tasks] = rows = workspace.read_jsonl(out / "prompts.jsonl")
        for source in ("templates", "tasks"):
            assert summary["kept_by_source"][source] == sum(r["source"] == source for r in rows)
    for earlier, later, source in (((0, 0), (10, 0), "templates"), ((10, 0), (10, 12), "tasks")):
        assert kept[later][: len(kept[earlier])] == kept[earlier]
        assert {r["source"] for r in kept[later][len(kept[earlier]):]} == {source}
        assert len(kept[later]) > len(kept[earlier])


# ------------------------------------------------------------------- vocab

def test_draft_vocab_roundtrip():
    counts = torch.tensor([5, 0, 9, 9, 1, 7, 0, 3])
    d2t, t2d = draft_vocab.select_draft_vocab(counts, 4)
    hot = torch.arange(4) + d2t
    assert hot.tolist() == [0, 2, 3, 5]  # the four most frequent, in target-id order
    assert (d2t >= 0).all() and (d2t[1:] >= d2t[:-1]).all()
    to_draft = draft_vocab.target_to_draft(t2d)
    assert torch.equal(to_draft[hot], torch.arange(4))  # draft -> target -> draft
    assert (to_draft[~t2d] == -1).all()
    draft = new_draft(tiny(), *draft_vocab.select_draft_vocab(torch.arange(VOCAB), 10))
    ids = torch.arange(10)
    assert torch.equal(draft_vocab.target_to_draft(draft.t2d)[draft.draft_to_target(ids)], ids)


def test_vocab_swap_trades_rare_draft_tokens_for_frequent_new_ones():
    #                      id: 0  1  2  3  4  5  6  7
    counts = torch.tensor([0, 9, 1, 6, 5, 2, 3, 0])
    t2d = torch.tensor([1, 0, 1, 0, 1, 1, 1, 1], dtype=torch.bool)  # 1 and 3 are outside
    d2t, new, rows = draft_vocab.swap_draft_vocab(counts, t2d, 3, keep=(0,))
    hot = torch.arange(6) + d2t
    assert hot.tolist() == [0, 1, 3, 4, 5, 6]  # 1 and 3 came in for 7 and 2; 0 is kept though unused
    assert torch.equal(new, draft_vocab.target_to_draft(new) >= 0) and int(new.sum()) == 6
    assert rows.tolist() == [0, -1, -1, 2, 3, 4]  # old draft ids of 0, 4, 5, 6
    tie = counts.clone()
    tie[3] = 1  # no longer more frequent than the next-rarest token inside (2)
    assert int((draft_vocab.swap_draft_vocab(tie, t2d, 3, keep=(0,))[2] < 0).sum()) == 1
    d2t, same, rows = draft_vocab.swap_draft_vocab(counts, t2d, 0)
    assert torch.equal(same, t2d) and rows.tolist() == list(range(6))
    d2t, grown, rows = draft_vocab.swap_draft_vocab(counts, t2d, 3, keep=(0,), grow=1)
    assert (torch.arange(7) + d2t).tolist() == [0, 1, 2, 3, 4, 5, 6]  # 1 added, then 3 swapped in for 7
    assert rows.tolist() == [0, -1, 1, -1, 2, 3, 4]
    unused = counts.clone()
    unused[3] = 0  # a token these answers never use does not come in, however large the growth
    d2t, grown, rows = draft_vocab.swap_draft_vocab(unused, t2d, 0, grow=5)
    assert (torch.arange(7) + d2t).tolist() == [0, 1, 2, 4, 5, 6, 7] and rows.tolist() == [0, -1, 1, 2, 3, 4, 5]

    target = tiny()
    old = random_head(target)
    counts = torch.randint(0, 50, (VOCAB,), generator=torch.Generator().manual_seed(5))
    d2t, t2d, rows = draft_vocab.swap_draft_vocab(counts, old.t2d, 6, keep=(ByteTokenizer.eos,))
    assert int((rows < 0).sum()) > 0
    state = with_vocab(old.state_dict(), d2t, t2d, rows)
    new = new_draft(target, d2t, t2d)
    new.load_state_dict(state, strict=True)
    kept = torch.nonzero(rows >= 0).squeeze(1)
    assert torch.equal(new.draft_to_target(kept), old.draft_to_target(rows[kept]))  # same token ...
    assert torch.equal(new.lm_head.weight[kept], old.lm_head.weight[rows[kept]])  # ... same trained row
    assert torch.allclose(new.lm_head.weight[rows < 0], old.lm_head.weight.mean(dim=0).expand(6, -1))
