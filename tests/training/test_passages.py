"""Requests about real passages (sglang_cast/training/passages.py), read from a small
archive laid out like the pinned one: what is read from each file, the pinned hash,
the held-out split, and the online trainer's flag for them."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import tarfile

import pytest

from sglang_cast.training import online, passages

SENTENCE = "The council met on Tuesday to discuss the new bridge over the river. "


def _words(n: int, tag: str) -> str:
    """About ``n`` words of whole sentences, made unique by ``tag``."""
    return f"{tag} opens the story. " + SENTENCE * (n // 13)


def _csv(column: str, texts: list[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["id", column])
    writer.writeheader()
    writer.writerows({"id": i, column: text} for i, text in enumerate(texts))
    return out.getvalue()


def _archive(tmp_path, news: list[str], speeches: list[str], reviews: list[str]) -> passages.Archive:
    files = {
        "news.jsonl": "\n".join(json.dumps({"article": f"###\nArticle: {text}\n\nSummarize the above article."})
                                for text in news),
        "speeches.csv": _csv("Transcript", speeches),
        "reviews.csv": _csv("reviewText", reviews),
    }
    path = tmp_path / "source" / "pkg-1.0.tar.gz"
    path.parent.mkdir()
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"pkg-1.0/data/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return passages.Archive(url=path.as_uri(), sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                            news=("data/news.jsonl",), speeches="data/speeches.csv", reviews="data/reviews.csv")


def test_each_file_gives_its_passages_cleaned_and_cut_to_whole_sentences(tmp_path):
    archive = _archive(
        tmp_path,
        news=[_words(300, "Storm") + "It cost \u00c2\u00a35m.", _words(20, "Too short")],
        speeches=["\n\n".join([_words(30, "Fellow citizens"), _words(30, "We shall")])],
        reviews=[_words(60, "This guitar &#34;rocks&#34;")])
    found = passages.load_passages(archive, tmp_path / "cache")
    assert (tmp_path / "cache" / "passages" / "pkg-1.0.tar.gz").is_file()  # fetched into the cache
    assert [p.kind for p in found] == ["news", "speech", "review"]
    news, speech, review = (p.text for p in found)
    assert passages.MIN_WORDS <= len(news.split()) <= passages.MAX_WORDS and news.endswith(".")
    assert speech.startswith("Fellow citizens") and "We shall" in speech  # short paragraphs joined
    assert 'This guitar "rocks"' in review  # HTML entities undone
    cleaned = passages.excerpt("Prices rose to \u00c2\u00a35 today. " * 8)
    assert "\u00a35" in cleaned and "\u00c2" not in cleaned  # the archive's mis-decoded pound sign


def test_an_archive_that_is_not_the_pinned_one_is_refused(tmp_path):
    archive = _archive(tmp_path, news=[_words(60, "Storm")], speeches=[], reviews=[])
    with pytest.raises(ValueError, match="is not the pinned"):
        passages.load_passages(dataclasses.replace(archive, sha256="0" * 64), tmp_path / "cache")


def test_held_out_passages_never_reach_a_training_request():
    pool = [passages.Passage(kind, _words(60, f"{kind} {i}")) for kind in ("news", "speech", "review")
            for i in range(60)]
    held = [p for p in pool if p.held_out]
    assert 0 < len(held) < len(pool) // 4
    training = passages.passage_prompts(pool, 300, seed=1)
    evaluation = passages.passage_prompts(pool, 100, seed=1, held_out=True)
    assert not any(p.text in prompt for p in held for prompt in training)
    assert all(any(p.text in prompt for p in held) for prompt in evaluation)
    assert passages.passage_prompts(pool, 300, seed=1) == training  # the seed decides the draw
    with pytest.raises(ValueError, match="no passages"):
        passages.passage_prompts([], 1, seed=1)


def test_the_online_flag_sets_the_count_and_passages_stay_off_by_default(tmp_path):
    given = online.config_from(online.parse_args(["--out", str(tmp_path), "--device", "cpu",
                                                  "--passage-prompts", "40"]))
    assert given.passage_prompts == 40
    scaled = online.config_from(online.parse_args(["--out", str(tmp_path), "--device", "cpu", "--scale", "0.5"]))
    assert scaled.passage_prompts == 0 and scaled.task_prompts == 64
    only = online.config_from(online.parse_args(
        ["--out", str(tmp_path), "--device", "cpu", "--self-instruct", "0", "--doc-prompts", "0",
         "--template-prompts", "0", "--task-prompts", "0", "--passage-prompts", "5"]))
    assert only.passage_prompts == 5  # passages alone are a valid mix


def test_an_online_round_asks_about_passages_when_told_to(monkeypatch):
    from support.training import tiny

    pool = tuple(passages.Passage("news", _words(60, f"Story {i}")) for i in range(30))
    monkeypatch.setattr(online, "load_passages", lambda: pool)
    cfg = online.OnlineConfig(self_instruct=0, doc_prompts=0, template_prompts=0, task_prompts=0, passage_prompts=4,
                              max_prompt_tokens=4000)
    target = tiny()
    benchmark = online.BenchmarkFilter.from_prompts(["an unrelated benchmark prompt"])
    prompts, generated = online.round_prompts(target, None, cfg, 0, benchmark)
    expected = passages.passage_prompts(pool, 4, seed=cfg.prompt_seed)
    assert generated == 0
    assert sorted(prompts) == sorted(online.chat_ids(target.tokenizer, p) for p in expected)
