"""Training data for the EAGLE-3 draft head: prompts, benchmark filter, target responses,
draft vocabulary and target features.

Everything here is built locally and honestly: prompts come from the target itself
(self-instruct), from request templates written for this project, and from the
docstrings of the Python standard library installed on this machine; answers are the target's own greedy responses; and every prompt that
equals or heavily overlaps a benchmark prompt is dropped before any answer is
generated, so the acceptance measured on those benchmarks is not inflated by
training on them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from sglang_cast.cast import SamplingParams
from sglang_cast.engine import Engine
from sglang_cast.models import KVCache, LlamaModel, causal_tree_mask

# --------------------------------------------------------------------------- text

_NON_WORD = re.compile(r"[^0-9a-z]+")


def normalise_words(text: str) -> tuple[str, ...]:
    """Lower-cased alphanumeric words: punctuation, quotes and spacing never hide a match."""
    return tuple(word for word in _NON_WORD.split(text.lower()) if word)


def word_ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class BenchmarkFilter:
    """Flags prompts that equal or heavily overlap a benchmark prompt.

    Three tests, any one of which contaminates: the same normalised text, word-trigram
    Jaccard similarity at or above ``jaccard``, or one shared word ``shared_ngram``-gram
    (a copied sentence inside a longer prompt).  An inverted trigram index keeps the
    Jaccard test to the few benchmark prompts sharing a trigram with the candidate.
    """

    jaccard: float = 0.5
    shared_ngram: int = 8
    _exact: set[tuple[str, ...]] = field(default_factory=set)
    _trigrams: list[set[tuple[str, ...]]] = field(default_factory=list)
    _by_trigram: dict[tuple[str, ...], list[int]] = field(default_factory=dict)
    _long_ngrams: set[tuple[str, ...]] = field(default_factory=set)

    @classmethod
    def from_prompts(cls, prompts: Iterable[str], **kwargs: Any) -> BenchmarkFilter:
        index = cls(**kwargs)
        for prompt in prompts:
            index.add(prompt)
        return index

    def add(self, prompt: str) -> None:
        words = normalise_words(prompt)
        self._exact.add(words)
        trigrams = word_ngrams(words, 3)
        for gram in trigrams:
            self._by_trigram.setdefault(gram, []).append(len(self._trigrams))
        self._trigrams.append(trigrams)
        self._long_ngrams |= word_ngrams(words, self.shared_ngram)

    def reason(self, prompt: str) -> str | None:
        """Why ``prompt`` is contaminated (``exact``, ``jaccard``, ``ngram``) or ``None``."""
        words = normalise_words(prompt)
        if words in self._exact:
            return "exact"
        trigrams = word_ngrams(words, 3)
        candidates = {i for gram in trigrams for i in self._by_trigram.get(gram, ())}
        for i in candidates:
            other = self._trigrams[i]
            if len(trigrams & other) / len(trigrams | other) >= self.jaccard:
                return "jaccard"
        if word_ngrams(words, self.shared_ngram) & self._long_ngrams:
            return "ngram"
        return None


def load_benchmark_prompts(dataset_dir: Path) -> list[str]:
    """Every turn of every record of ``dataset_dir/*.jsonl`` (all turns are off limits)."""
    files = sorted(dataset_dir.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no benchmark *.jsonl files in {dataset_dir}")
    return [turn for path in files for record in read_jsonl(path) for turn in record["turns"]]


def first_turns(path: Path, limit: int) -> list[str]:
    """The first user turn of the first ``limit`` records: the evaluation prompts."""
    return [record["turns"][0] for record in read_jsonl(path)[:limit]]


@dataclass(frozen=True)
class FilterReport:
    kept: int
    duplicates: int
    too_long: int
    contaminated: dict[str, int]  # reason -> dropped count

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "duplicates": self.duplicates, "too_long": self.too_long,
                "contaminated": self.contaminated, "contaminated_total": sum(self.contaminated.values())}


def filter_prompts(prompts: Iterable[str], benchmark: BenchmarkFilter,
                   fits: Callable[[str], bool] = lambda prompt: True) -> tuple[list[str], FilterReport]:
    """Drop exact duplicates (normalised), prompts ``fits`` rejects, and contaminated ones."""
    kept: list[str] = []
    seen: set[tuple[str, ...]] = set()
    duplicates = too_long = 0
    contaminated = {"exact": 0, "jaccard": 0, "ngram": 0}
    for prompt in prompts:
        words = normalise_words(prompt)
        if words in seen:
            duplicates += 1
            continue
        seen.add(words)
        reason = benchmark.reason(prompt)
        if reason is not None:
            contaminated[reason] += 1
        elif not fits(prompt):
            too_long += 1
        else:
            kept.append(prompt)
    return kept, FilterReport(len(kept), duplicates, too_long, contaminated)


# ------------------------------------------------------------------ self-instruct

TASK_TYPES = (
    "short creative writing request (a poem, story or song)",
    "request to write a professional email or letter",
    "Python programming question",
    "request to write a small Python function with a clear specification",
    "request to find and fix a bug in a short piece of code",
    "math word problem",
    "algebra or arithmetic question",
    "logic or reasoning puzzle",
    "request to extract specific facts from a short paragraph (include the paragraph)",
    "request to summarize a topic in a few sentences",
    "roleplay request where the assistant plays a character",
    "science question",
    "history question",
    "philosophy or ethics question",
    "request for practical advice",
    "request to compare two things",
    "request for a list of ideas",
    "request to explain a concept to a child",
    "request to classify or categorize some items",
    "request to rewrite a sentence in a different style",
)

TOPICS = (
    "the solar system", "climate change", "cooking pasta", "machine learning", "the Roman Empire",
    "personal finance", "photosynthesis", "job interviews", "the human heart", "electric cars",
    "chess", "the French Revolution", "recursion", "prime numbers", "volcanoes", "jazz music",
    "sleep", "time management", "databases", "the stock market", "honeybees", "ancient Egypt",
    "probability", "renewable energy", "learning a language", "basketball", "the water cycle",
    "world war II", "sorting algorithms", "web servers", "gardening", "vaccines", "supply and demand",
    "poetry", "the moon landing", "geometry", "friendship", "coffee", "earthquakes", "linked lists",
    "the immune system", "Shakespeare", "marketing a small business", "rainforests", "chemistry labs",
    "public speaking", "the internet", "cats and dogs", "a birthday party", "travel to Japan",
    "mountain hiking", "statistics", "graph theory", "video games", "democracy", "the printing press",
    "DNA", "nutrition", "remote work", "oceans", "robots", "painting", "a small bakery", "trains",
    "spreadsheets", "the Renaissance", "fractions", "string manipulation in Python", "regular expressions",
    "unit testing", "dinosaurs", "meditation", "climate policy", "medieval castles", "bicycles",
)


def self_instruct_requests(count: int, seed: int) -> list[str]:
    """Meta-prompts asking the target to invent one user request each.

    (task type, topic) pairs are drawn without replacement from the full grid so a
    small ``count`` still spreads over many task types and topics.
    """
    rng = random.Random(seed)
    grid = [(task, topic) for task in TASK_TYPES for topic in TOPICS]
    rng.shuffle(grid)
    pairs = [grid[i % len(grid)] for i in range(count)]
    return [
        f"Write one {task} that a user might send to an AI assistant. The topic is {topic}. "
        "Reply with the user's request only, without answering it."
        for task, topic in pairs
    ]


_LABEL = re.compile(r"^\s*(?:\**\s*)?(?:user(?:'s)? request|request|user|question|prompt|task)\s*\**\s*[:\-]\s*",
                    re.IGNORECASE)
_NOT_A_REQUEST = ("sure", "certainly", "here is", "here's", "i'm sorry", "i am sorry", "as an ai", "i cannot",
                  "i can't", "of course")


def clean_request(text: str, truncated: bool) -> str | None:
    """The user request inside a self-instruct generation, or ``None`` if there is none.

    Keeps the first paragraph, strips labels and quotes, and for a generation cut by the
    token limit keeps only whole sentences.  Rejects answers-instead-of-requests and
    fragments too short or too long to be a real prompt.
    """
    text = _LABEL.sub("", text.strip().split("\n\n")[0]).strip().strip('"“”').strip()
    if truncated:
        end = max(text.rfind(mark) for mark in ".?!")
        text = text[: end + 1] if end >= 0 else ""
    words = text.split()
    if not 5 <= len(words) <= 150 or text.lower().startswith(_NOT_A_REQUEST):
        return None
    return text


# ------------------------------------------------------------------ templates

# Requests written by us, in the shapes people send chat assistants (writing, roleplay,
# advice, explanation, comparison, arithmetic and reasoning), over a wide list of
# topics.  Self-instruct alone stays narrow: the 135M target often writes an
# assistant's reply instead of a request, and its answers then cover few subjects
# (a draft vocabulary built from self-instruct and documentation answers alone misses
# 9 % of the target's mt_bench answer tokens).  Every template is checked against the
# benchmarks by `BenchmarkFilter`.

CHAT_TEMPLATES = (
    "Write a blog post about {topic} for a general audience.",
    "Write a short poem about {topic}.",
    "Write a short story in which {topic} plays an important role.",
    "Explain {topic} to a ten-year-old.",
    "Give me five practical tips related to {topic}.",
    "What are the main advantages and disadvantages of {topic}?",
    "Pretend you are {role}. In character, tell me what you think about {topic}.",
    "Write a persuasive paragraph arguing that {topic} deserves more attention.",
    "Summarize the history of {topic} in a few paragraphs.",
    "Write an email to {role} asking for advice about {topic}.",
    "Compare {topic} and {other}. Which one matters more in everyday life, and why?",
    "Write a dialogue between {role} and a curious student about {topic}.",
    "What are common misconceptions about {topic}?",
    "Create a one-week lesson plan that introduces {topic} to high school students.",
    "Draft a short speech about {topic} for a community event.",
    "List ten interesting facts about {topic}.",
    "What questions should I ask an expert on {topic}, and why?",
    "Describe a typical working day of {role}.",
    "As {role}, give advice to someone who is new to {topic}.",
    "How has {topic} changed over the last hundred years?",
    "Write a news article about an imaginary discovery related to {topic}.",
    "Outline a plan to learn the basics of {topic} in one month.",
    "What ethical questions does {topic} raise?",
    "Write a product description for a new mobile app about {topic}.",
    "Explain how {topic} could affect a small town, with concrete examples.",
    "Write a diary entry of {role} on a day when {topic} changed everything.",
    "I am writing a school report on {topic}. Suggest a structure with section headings.",
    "Rewrite this sentence in a formal tone and then in a playful tone: \"{topic} is more interesting than it looks.\"",
    "Give a step-by-step explanation of how {topic} works.",
    "What would the world look like without {topic}?",
)

ROLES = (
    "a pirate captain", "a medieval knight", "a nurse", "a detective", "a kindergarten teacher",
    "a software engineer", "a farmer", "an astronaut", "a chef", "a museum guide", "a football coach",
    "a librarian", "a taxi driver", "a famous painter", "a park ranger", "a journalist", "a scientist",
    "a firefighter", "a travel agent", "a startup founder", "a retired sailor", "a village doctor",
    "a wizard", "a robot butler", "a tour guide in Rome", "a fitness trainer", "a mayor", "a beekeeper",
    "a marine biologist", "a stand-up comedian", "a bank manager", "a poet", "a lawyer", "an architect",
    "a shop owner", "a musician", "a historian", "a pilot", "a gardener", "a nineteenth-century explorer",
)

MORE_TOPICS = (
    "urban planning", "public libraries", "the Olympic Games", "volunteering", "social media", "fast fashion",
    "recycling", "space tourism", "the history of writing", "board games", "street food", "wind turbines",
    "smartphones", "the Silk Road", "coral reefs", "minimalism", "online privacy", "electric guitars",
    "the Great Wall of China", "bird migration", "wildfires", "the Industrial Revolution", "tea ceremonies",
    "first aid", "architecture", "photography", "3D printing", "crowdfunding", "the metric system",
    "antibiotics", "city parks", "podcasts", "the theory of evolution", "black holes", "glaciers",
    "family traditions", "budget travel", "homework", "artificial sweeteners", "the Cold War",
    "ancient Greece", "the Amazon river", "desert animals", "cybersecurity", "e-books", "vegetarian cooking",
    "team sports", "the human brain", "memory and learning", "public transport", "classical music",
    "folk tales", "the scientific method", "inflation", "minimum wage", "small talk", "negotiation",
    "leadership", "procrastination", "habits", "moving to a new city", "pets", "zoos", "organic farming",
    "the printing of money", "cryptocurrency", "the Moon", "Mars", "satellites", "weather forecasting",
    "hurricanes", "tides", "the Arctic", "penguins", "elephants", "wolves", "forests", "soil",
    "water pollution", "plastic waste", "solar panels", "nuclear power", "batteries", "self-driving cars",
    "airplanes", "ships", "bridges", "skyscrapers", "ancient Rome", "the Vikings", "the Aztecs",
    "the Ming dynasty", "the Ottoman Empire", "the American Revolution", "the Industrial Age", "the Beatles",
    "opera", "theater", "movies", "comic books", "museums", "fairy tales", "mythology", "chess openings",
    "marathon running", "swimming", "yoga", "mental health", "stress", "happiness", "kindness",
    "honesty", "curiosity", "creativity", "boredom", "loneliness", "grandparents", "childhood", "weddings",
    "holidays", "camping", "fishing", "knitting", "woodworking", "baking bread", "chocolate", "spices",
    "rice", "cheese", "street art", "fashion design", "interior design", "typography", "maps", "compasses",
    "clocks", "calendars", "the number zero", "infinity", "triangles", "percentages", "interest rates",
    "taxes", "insurance", "saving for retirement", "starting a podcast", "writing a novel", "job burnout",
    "customer service", "email etiquette", "open source software", "password managers", "cloud computing",
    "computer viruses", "the history of computers", "spreadsheet formulas", "data visualization",
    "online courses", "exams", "scholarships", "studying abroad", "bilingual children", "sign language",
    "dialects", "translation", "handwriting", "libraries of the future", "the postal service",
)

MATH_TEMPLATES = (
    "A shop sells {item} for ${a} each. Maria buys {n} of them and pays with a ${bill} bill. "
    "How much change does she get? Explain each step.",
    "A train travels {b} kilometres in {n} hours. At the same speed, how far does it travel in {m} hours? "
    "Show your reasoning.",
    "Solve for x: {a}x + {b} = {c}. Explain each step.",
    "What is {p}% of {c}? Then add {b} to the result and explain the calculation.",
    "A rectangle is {a} cm long and {b} cm wide. What are its area and its perimeter?",
    "If {n} workers paint a fence in {a} days, how many days would {m} workers need at the same rate?",
    "Tom is {b} years old and his sister is {a} years younger. How old will she be in {n} years?",
    "A recipe needs {n} eggs for {m} people. How many eggs are needed for {c} people? Round up and explain.",
    "I have {c} apples. I give away 1/{n} of them, rounded down, and then eat {a}. How many are left?",
    "The sequence starts {a}, {a2}, {a3}. What are the next three numbers, and what is the rule?",
    "Is {c} a prime number? Explain how to check.",
    "Write a Python function that returns the sum of the numbers from {a} to {c} that are divisible by {n}, "
    "and explain it.",
)

ITEMS = ("notebooks", "pencils", "apples", "mugs", "tickets", "books", "plants", "sandwiches", "candles", "socks")


def template_prompts(count: int, seed: int) -> list[str]:
    """``count`` requests from `CHAT_TEMPLATES` (four in five) and `MATH_TEMPLATES`,
    with topics, roles and numbers drawn with ``seed``."""
    rng = random.Random(seed)
    topics = TOPICS + MORE_TOPICS
    prompts = []
    for i in range(count):
        if i % 5 == 4:
            a, n = rng.randint(2, 30), rng.randint(2, 9)
            step = rng.randint(2, 9)
            template = rng.choice(MATH_TEMPLATES)
            prompts.append(template.format(
                a=a, b=rng.randint(10, 300), c=rng.randint(31, 400), n=n, m=rng.randint(2, 12),
                p=rng.choice((5, 10, 15, 20, 25, 40, 75)), bill=((a * n) // 10 + 1) * 10 + 10,
                item=rng.choice(ITEMS), a2=a + step, a3=a + 2 * step))
        else:
            topic, other = rng.sample(topics, 2)
            prompts.append(rng.choice(CHAT_TEMPLATES).format(topic=topic, other=other, role=rng.choice(ROLES)))
    return prompts


# ----------------------------------------------------------------- documentation

STDLIB_MODULES = (
    "builtins", "textwrap", "itertools", "collections", "functools", "os.path", "json", "re", "datetime",
    "math", "statistics", "random", "string", "heapq", "bisect", "csv", "pathlib", "shutil", "glob",
    "fnmatch", "difflib", "hashlib", "base64", "uuid", "time", "calendar", "decimal", "fractions",
    "operator", "copy", "pprint", "enum", "dataclasses", "typing", "argparse", "logging", "contextlib",
    "abc", "array", "queue", "threading", "subprocess", "urllib.parse", "html", "zipfile", "gzip",
    "sqlite3", "io", "struct", "secrets", "inspect", "ast", "shlex", "configparser", "tempfile", "weakref",
    "types", "cmath", "colorsys", "zlib", "binascii", "ipaddress", "unicodedata", "locale", "getpass",
    "platform", "sys", "os", "signal", "socket", "select", "mimetypes", "email.utils", "http.client",
    "xml.etree.ElementTree", "tarfile", "pickle", "shelve", "codecs", "numbers", "graphlib", "keyword",
    "tokenize", "dis", "timeit", "traceback", "warnings", "unittest", "doctest", "concurrent.futures",
    "asyncio", "multiprocessing", "sched", "filecmp", "stat", "netrc", "plistlib", "quopri", "wave",
)


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass(frozen=True)
class DocItem:
    """One documented public name of the standard library."""

    name: str  # qualified: "textwrap.dedent", "str.split"
    signature: str  # "(text)" or "" when unavailable
    summary: str  # first paragraph of the docstring, one line


def _summary(doc: str) -> str:
    paragraph = inspect.cleandoc(doc).split("\n\n")[0]
    return " ".join(paragraph.split())


def _signature(obj: Any) -> str:
    """The call signature, without the memory addresses some defaults print with
    (``<function IS_CHARACTER_JUNK at 0x7f…>``), so prompts are the same in every run."""
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return ""


def _public_members(module_name: str) -> Iterator[tuple[str, Any]]:
    """Public functions/classes defined by the module, plus methods of builtin types."""
    module = importlib.import_module(module_name)
    homes = {module_name.split(".")[0], module.__name__.lstrip("_").split(".")[0]}
    for name, obj in inspect.getmembers(module):
        if name.startswith("_") or not (inspect.isroutine(obj) or inspect.isclass(obj)):
            continue
        # Accept implementation modules too: os.path is posixpath, heapq's functions are _heapq's.
        owner = (getattr(obj, "__module__", None) or "").lstrip("_").split(".")[0]
        if module_name == "builtins" or owner in homes:
            yield f"{module_name}.{name}" if module_name != "builtins" else name, obj
    if module_name == "builtins":
        for cls in (str, list, dict, set, bytes, int, float, tuple):
            for name, obj in inspect.getmembers(cls):
                if not name.startswith("_") and inspect.isroutine(obj):
                    yield f"{cls.__name__}.{name}", obj


def stdlib_doc_items(modules: Sequence[str] = STDLIB_MODULES) -> list[DocItem]:
    """Documented public names of the installed standard library (docstrings >= 6 words)."""
    items: dict[str, DocItem] = {}
    with warnings.catch_warnings():  # deprecated aliases (typing.io) warn when inspected
        warnings.simplefilter("ignore", DeprecationWarning)
        for module_name in modules:
            try:
                members = list(_public_members(module_name))
            except ImportError:
                continue
            for name, obj in members:
                summary = _summary(inspect.getdoc(obj) or "")
                if len(summary.split()) >= 6 and name not in items:
                    items[name] = DocItem(name, _signature(obj), summary[:400])
    return sorted(items.values(), key=lambda item: item.name)


DOC_TEMPLATES = (
    "Explain what `{name}` does in Python and give a short example.",
    "Write a small Python program that uses `{name}` to solve a practical problem, and explain the code.",
    'The Python documentation of `{name}` says: "{summary}" Explain this in simple words for a beginner.',
    "What are the parameters of `{name}{signature}` and what does it return? Show an example call.",
    'Write a Python function that does the following without using `{name}`: "{summary}"',
    "What are common mistakes when using `{name}` in Python, and how can they be avoided?",
    "When should I use `{name}` in Python, and what are the alternatives?",
    'Summarize the following documentation in one sentence, then list its key points:\n\n"{summary}"',
)


def doc_prompts(items: Sequence[DocItem], count: int, seed: int) -> list[str]:
    """``count`` requests about documented names: each name once before any name twice."""
    rng = random.Random(seed)
    order = list(items)
    rng.shuffle(order)
    prompts = []
    for i in range(min(count, len(order) * len(DOC_TEMPLATES))):
        item = order[i % len(order)]
        template = rng.choice(DOC_TEMPLATES)
        prompts.append(template.format(name=item.name, signature=item.signature, summary=item.summary))
    return prompts


# ------------------------------------------------------------------ generation

def chat_ids(tokenizer: Any, prompt: str) -> list[int]:
    """Token ids of ``prompt`` as one user turn in the target's chat template, ready for
    the assistant's answer (the same encoding the evaluation and the server use)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass(frozen=True)
class Generation:
    prompt_ids: list[int]
    output_ids: list[int]  # ends with EOS when the target stopped by itself
    truncated: bool  # stopped by the token limit


def generate(engine: Engine, prompts: Sequence[list[int]], params: Sequence[SamplingParams],
             desc: str) -> list[Generation]:
    """Continuous-batched generation with a token-level progress bar, in prompt order."""
    requests = [engine.add_request(ids, p) for ids, p in zip(prompts, params)]
    with tqdm(total=sum(p.max_new_tokens for p in params), desc=desc, unit="tok", leave=False) as bar:
        done = 0
        while engine.has_work:
            engine.step()
            now = sum(len(r.output_ids) if not r.finished else r.params.max_new_tokens for r in requests)
            bar.update(now - done)
            done = now
    return [Generation(r.prompt_ids, list(r.output_ids), r.finish_reason == "length") for r in requests]


# ----------------------------------------------------------------- draft vocab

def select_draft_vocab(token_counts: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-3's ``(d2t, t2d)`` for the ``size`` most frequent target tokens.

    Draft ids are assigned in increasing target-id order, so ``d2t[i]`` (target id minus
    draft id) is non-negative and non-decreasing, as in the public checkpoints.  Ties
    and unseen tokens (small corpora) are broken by the smaller target id.
    """
    vocab = token_counts.numel()
    if not 0 < size <= vocab:
        raise ValueError(f"draft vocab size must be in [1, {vocab}], got {size}")
    # Stable sort on -count keeps smaller ids first among equal counts.
    order = torch.sort(-token_counts.long(), stable=True).indices[:size]
    hot = order.sort().values
    d2t = hot - torch.arange(size)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[hot] = True
    return d2t, t2d


def swap_draft_vocab(token_counts: torch.Tensor, t2d: torch.Tensor, max_swaps: int,
                     keep: Iterable[int] = ()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Refresh a trained head's draft vocab for new data, keeping its size.

    A continued head keeps the vocab its LM-head rows were trained for, but each new
    batch of answers brings frequent tokens it can never propose.  This swaps up to
    ``max_swaps`` pairs: the most frequent token outside the vocab comes in for the
    least frequent one inside, while the incoming token is strictly more frequent
    (ties go to the smaller target id; ``keep``, e.g. EOS, never leaves).  Draft ids
    stay in increasing target-id order, so the kept tokens' ids shift: ``rows[i]`` is
    the old draft id of new draft id ``i`` (the LM-head row to copy), -1 for a token
    that came in.
    """
    counts = token_counts.long()
    inside = torch.nonzero(t2d).squeeze(1)
    inside = inside[~torch.isin(inside, torch.tensor(list(keep), dtype=torch.long))]
    outside = torch.nonzero(~t2d).squeeze(1)
    incoming = outside[torch.sort(-counts[outside], stable=True).indices][:max_swaps]
    outgoing = inside[torch.sort(counts[inside], stable=True).indices][:max_swaps]
    pairs = min(incoming.numel(), outgoing.numel())
    # incoming counts fall and outgoing counts rise along the pairs, so the pairs worth
    # swapping are a prefix
    swaps = int((counts[incoming[:pairs]] > counts[outgoing[:pairs]]).sum())
    new_t2d = t2d.clone()
    new_t2d[outgoing[:swaps]] = False
    new_t2d[incoming[:swaps]] = True
    hot = torch.nonzero(new_t2d).squeeze(1)
    return hot - torch.arange(hot.numel()), new_t2d, target_to_draft(t2d)[hot]


def target_to_draft(t2d: torch.Tensor) -> torch.Tensor:
    """Draft id of every target id, -1 where the token is outside the draft vocab."""
    index = torch.cumsum(t2d.long(), 0) - 1
    return torch.where(t2d, index, torch.full_like(index, -1))


# -------------------------------------------------------------------- features

@dataclass
class _Running:
    index: int
    output_ids: list[int]
    features: list[torch.Tensor]  # [rows, width] chunks: the prompt's, then one per fed token
    top: list[tuple[torch.Tensor, torch.Tensor]]  # per output token: (log-probs [k], ids [k])


@dataclass(frozen=True)
class Answer:
    """A greedy answer and the target features of every token except the last.

    ``features[t]`` is the concatenated residual streams entering the capture layers at
    token ``t`` of ``prompt + output``; the last token is never fed back, and the draft
    never needs its feature (its pair would predict past the end).
    """

    index: int
    output_ids: list[int]
    truncated: bool
    features: np.ndarray  # [len(prompt) + len(output) - 1, width] float16
    top_logprobs: np.ndarray | None = None  # [len(output), k] float16: the target's k likeliest next
    top_ids: np.ndarray | None = None  # tokens when it chose output token j (row j), best first; int32


@torch.inference_mode()
def greedy_with_features(model: LlamaModel, prompts: Sequence[list[int]], max_new_tokens: int, max_batch: int,
                         layers: tuple[int, ...], eos_token_ids: Iterable[int], top_k: int = 0) -> Iterator[Answer]:
    """Continuous-batched greedy decoding that keeps the target features it computes.

    Generation already runs the target over every token of prompt + answer, so keeping
    the residual streams it passes through costs nothing, whereas a separate extraction
    pass would re-run the target over the whole corpus (a quarter of the CPU budget).
    With ``top_k`` it also keeps the target's ``top_k`` likeliest tokens and their
    log-probabilities at every answer token: the soft labels of distillation.
    Answers are yielded as they finish, not in prompt order.
    """
    eos = frozenset(eos_token_ids)
    capacity = max(len(p) for p in prompts) + max_new_tokens
    cache = KVCache.for_model(model.config, max_batch, capacity, "cpu", next(model.parameters()).dtype)
    queue = list(enumerate(prompts))[::-1]
    running: dict[int, _Running] = {}
    free = list(range(max_batch))[::-1]

    def step(slots: list[int], tokens: torch.Tensor, positions: torch.Tensor) -> Iterator[Answer]:
        slot_ids = torch.tensor(slots)
        n = tokens.shape[1]
        mask = causal_tree_mask(len(slots), n, "cpu")
        out = model(tokens, positions, cache, slot_ids, mask, layers)
        cache.commit(slot_ids, torch.arange(n).expand(len(slots), n), torch.full((len(slots),), n))
        features = torch.cat(out.captured, dim=-1)
        logits = model.logits(out.hidden[:, -1])
        next_ids = logits.argmax(-1).tolist()
        if top_k:
            top = torch.log_softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
        for row, slot in enumerate(slots):
            seq = running[slot]
            seq.features.append(features[row])
            seq.output_ids.append(next_ids[row])
            if top_k:
                seq.top.append((top.values[row], top.indices[row]))
            if next_ids[row] in eos or len(seq.output_ids) >= max_new_tokens:
                del running[slot]
                cache.reset(slot)
                free.append(slot)
                soft = {}
                if top_k:
                    soft = {"top_logprobs": torch.stack([v for v, _ in seq.top]).to(torch.float16).numpy(),
                            "top_ids": torch.stack([i for _, i in seq.top]).to(torch.int32).numpy()}
                yield Answer(seq.index, seq.output_ids, next_ids[row] not in eos,
                             torch.cat(seq.features).to(torch.float16).numpy(), **soft)

    while queue or running:
        while queue and free:
            index, ids = queue.pop()
            slot = free.pop()
            running[slot] = _Running(index, [], [], [])
            yield from step([slot], torch.tensor([ids]), torch.arange(len(ids)).view(1, -1))
        if running:
            slots = sorted(running)
            tokens = torch.tensor([[running[s].output_ids[-1]] for s in slots])
            yield from step(slots, tokens, cache.lens[torch.tensor(slots)].view(-1, 1).clone())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]
