"""Requests about real, human-written passages: news stories, speeches and product reviews.

Why: the head's accuracy on mt_bench's answers stays ~0.16 below its accuracy on unseen
answers of its own training kind (`gap.py`), and templated requests (`tasks`) reached
mt_bench's shapes but not its words. These passages bring words people wrote: BBC
(XSum) and CNN/DailyMail news articles, US presidential speeches and Amazon reviews of
musical instruments, as published inside the PyPI source archive of ``llama-recipes``
0.0.5.post2 (the only registry we can reach that carries such text). The archive is
pinned by its SHA-256, downloaded once into ``<cache_root>/passages/`` and read from
there; only the requests built from it reach the target, and nothing of it is shipped.

Every tenth passage (by a hash of its text) is held out: `passage_prompts` never builds
a training request from it, so requests about those passages judge a head on real text
it never saw. Requests still pass `BenchmarkFilter` like every other source's.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import html
import io
import json
import random
import re
import tarfile
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_cast.models import cache_root


@dataclass(frozen=True)
class Archive:
    """A pinned source archive and the members holding passages (paths below its top folder)."""

    url: str
    sha256: str
    news: tuple[str, ...]  # jsonl: few-shot summarisation prompts, "###\nArticle: <text>\n\nSummarize ..."
    speeches: str  # csv with a "Transcript" column
    reviews: str  # csv with a "reviewText" column


LLAMA_RECIPES = Archive(
    # the file's own address on PyPI's file host, as the simple index gives it (the short
    # /packages/source/ redirect answers 404 where only the registries are reachable)
    url="https://files.pythonhosted.org/packages/07/96/8b97deb7cdeb0673c43e89d34abeeebd8e9004f6599e64c178cf617815d9/"
        "llama_recipes-0.0.5.post2.tar.gz",
    sha256="1801849f11304b278be6488736ec2b2bb0b004c7930f51d803a8b97aa48c7a5a",
    news=("end-to-end-use-cases/long_context/H2O/data/summarization/xsum.jsonl",
          "end-to-end-use-cases/long_context/H2O/data/summarization/cnn_dailymail.jsonl"),
    speeches="3p-integrations/groq/groq-api-cookbook/rag-langchain-presidential-speeches/presidential_speeches.csv",
    reviews="end-to-end-use-cases/customerservice_chatbots/ai_agent_chatbot/musical_instruments_reviews.csv",
)
MIN_WORDS, MAX_WORDS = 40, 120  # a passage plus its request fits the 256-token prompt limit
HELD_OUT_EVERY = 10  # one passage in this many is never used for a training request


@dataclass(frozen=True)
class Passage:
    kind: str  # "news", "speech" or "review": picks the requests that suit it
    text: str

    @property
    def held_out(self) -> bool:
        return int(hashlib.sha1(self.text.encode()).hexdigest(), 16) % HELD_OUT_EVERY == 0


# ------------------------------------------------------------------ the archive
def archive_path(archive: Archive = LLAMA_RECIPES, cache: Path | None = None) -> Path:
    """The verified archive in the cache, downloaded on first use."""
    folder = (cache or cache_root()) / "passages"
    path = folder / archive.url.rsplit("/", 1)[-1]
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"[passages] downloading {archive.url}", flush=True)
        partial = path.with_suffix(".partial")
        with urllib.request.urlopen(archive.url, timeout=120) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
        partial.rename(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != archive.sha256:
        raise ValueError(f"{path}: SHA-256 {digest} is not the pinned {archive.sha256}; delete the file to fetch "
                         "it again")
    return path


@functools.cache  # read once a process: every round of an online run draws from it
def load_passages(archive: Archive = LLAMA_RECIPES, cache: Path | None = None) -> tuple[Passage, ...]:
    """Every passage of ``archive``, deduplicated, in the archive's order."""
    with tarfile.open(archive_path(archive, cache)) as tar:
        top = tar.getnames()[0].split("/")[0]

        def read(member: str) -> str:
            handle = tar.extractfile(f"{top}/{member}")
            if handle is None:
                raise ValueError(f"{archive.url}: {member} is not a file")
            return handle.read().decode("utf-8", errors="replace")

        found = [Passage("news", t) for member in archive.news for t in news_articles(read(member))]
        found += [Passage("speech", t) for t in speech_excerpts(read(archive.speeches))]
        found += [Passage("review", t) for t in reviews(read(archive.reviews))]
    return tuple(dict.fromkeys(found))


def news_articles(jsonl: str) -> Iterator[str]:
    """The articles inside few-shot summarisation prompts, cut to ``MAX_WORDS``."""
    for line in jsonl.splitlines():
        for chunk in json.loads(line)["article"].split("###\nArticle: ")[1:]:
            text = excerpt(chunk.split("\n\nSummarize")[0])
            if text:
                yield text


def speech_excerpts(csv_text: str) -> Iterator[str]:
    """Consecutive paragraphs of each speech's transcript, grouped into passages."""
    csv.field_size_limit(1 << 26)
    for row in csv.DictReader(io.StringIO(csv_text)):
        words: list[str] = []
        for paragraph in re.split(r"\n\s*\n|\r\n", row["Transcript"]):
            words += paragraph.split()
            if len(words) >= MIN_WORDS:
                text = excerpt(" ".join(words))
                if text:
                    yield text
                words = []


def reviews(csv_text: str) -> Iterator[str]:
    for row in csv.DictReader(io.StringIO(csv_text)):
        text = excerpt(row["reviewText"])
        if text:
            yield text


def excerpt(text: str) -> str:
    """``text`` with HTML entities and the archive's mis-decoded pound signs undone, its
    whitespace normalised, cut after the last whole sentence within ``MAX_WORDS`` words;
    empty when under ``MIN_WORDS`` remain."""
    words = html.unescape(text).replace("\u00c2\u00a3", "\u00a3").split()
    if len(words) > MAX_WORDS:
        cut = " ".join(words[:MAX_WORDS])
        end = max(cut.rfind(mark) for mark in (". ", "? ", "! ", '." '))
        words = (cut[: end + 1] if end > 0 else cut).split()
    return " ".join(words) if len(words) >= MIN_WORDS else ""


# ------------------------------------------------------------------ requests
ANY_KIND = (
    "Summarize this in two sentences.",
    "Summarize the text in one sentence for a busy reader.",
    "List the three most important points as bullet points.",
    "Explain this to a 10-year-old.",
    "Write three questions a careful reader might ask after reading this, and answer them from the text.",
    "What is the tone of this text? Support your answer with quotes.",
    "Rewrite this in simpler English, keeping every fact.",
    "Give this text a short, catchy title.",
)
BY_KIND = {
    "news": (
        "Write a headline for this news story.",
        "Extract every person, organization and place named in this article as JSON with the keys "
        "\"people\", \"organizations\" and \"places\".",
        "Who is quoted in this article, and what does each of them say?",
        "List the numbers in this report and what each one measures, as a markdown table.",
        "Write a tweet of under 280 characters that shares this story.",
        "What is the main claim of this article, and what evidence does it give?",
        "What happened next? Write a plausible follow-up paragraph in the same style.",
        "Rewrite the article as a short radio news bulletin.",
    ),
    "speech": (
        "What is the speaker's main argument in this passage?",
        "Rewrite this passage of a presidential speech in plain modern English.",
        "Which rhetorical devices does the speaker use here? Give an example of each.",
        "Write a short reply to this passage from the point of view of a critic.",
        "What values or principles does the speaker appeal to?",
        "Describe the historical situation this passage was probably written in, and why.",
        "Turn this passage into three short discussion questions for a history class.",
    ),
    "review": (
        "Is this review positive, negative or mixed? Explain briefly.",
        "Extract the product's pros and cons from this review as a markdown table.",
        "Write a polite reply from the seller to this customer review.",
        "Convert this review into JSON with the keys \"sentiment\", \"rating_out_of_5\", \"pros\" and \"cons\".",
        "What would you tell the manufacturer to improve, based on this review?",
        "Rewrite this review to be more concise and better organized.",
    ),
}
LAYOUTS = (
    "{request}\n\n{passage}",
    "{passage}\n\n{request}",
    "Read the following text:\n\"{passage}\"\n\n{request}",
    "{request}\n\nText: {passage}",
)


def passage_prompts(passages: Sequence[Passage], count: int, seed: int, held_out: bool = False) -> list[str]:
    """``count`` requests about passages drawn with ``seed``: training passages, or with
    ``held_out`` only the held-out ones.  News, speeches and reviews are drawn 2 : 1 : 1
    whatever their numbers (the reviews outnumber the rest)."""
    rng = random.Random(seed)
    pool: dict[str, list[Passage]] = {}
    for passage in passages:
        if passage.held_out == held_out:
            pool.setdefault(passage.kind, []).append(passage)
    kinds = [kind for kind in ("news", "news", "speech", "review") if kind in pool]
    if count and not kinds:
        raise ValueError("passage_prompts: no passages to draw from")
    prompts = []
    for _ in range(count):
        kind = rng.choice(kinds)
        request = rng.choice(ANY_KIND + BY_KIND[kind])
        prompts.append(rng.choice(LAYOUTS).format(request=request, passage=rng.choice(pool[kind]).text))
    return prompts
