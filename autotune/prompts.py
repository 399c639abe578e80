"""Prompt sets for ``collect`` and the live confirmation.

The default set is ``autotune/prompts.txt``, written for tuning and disjoint from
the benchmark prompts in ``datasets/``: thresholds tuned on the prompts
they are later benchmarked on would overstate the speedup.  ``--dataset`` accepts a
JSONL file (the first of ``turns``, or ``prompt`` / ``instruction`` / ``text``) or
a text file with one prompt per line, where the two characters ``\\n`` stand for a line
break (a pasted function keeps its layout, and its token count, on one line).

A prompt's id (stored with every trace of a batch it ran in) is the JSONL record's
``question_id`` / ``id``, or for a text file a hash of the prompt's text: a line number
would hand an old trace's id to a different prompt once a line is added above it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import AutotuneError

DEFAULT_PROMPTS = Path(__file__).resolve().parent / "prompts.txt"
JSON_FIELDS = ("prompt", "instruction", "text")


@dataclass(frozen=True)
class PromptSet:
    name: str  # stored as the traces' dataset
    ids: tuple[str, ...]
    texts: tuple[str, ...]

    def head(self, count: int) -> PromptSet:
        return PromptSet(self.name, self.ids[:count], self.texts[:count])


def _jsonl_prompt(record: object, where: str) -> str:
    if isinstance(record, dict):
        turns = record.get("turns")
        if isinstance(turns, list) and turns and isinstance(turns[0], str):
            return turns[0]
        for name in JSON_FIELDS:
            if isinstance(record.get(name), str):
                return record[name]
    raise AutotuneError(f"--dataset {where}: expected an object with 'turns' (list of strings) or one of "
                        f"{list(JSON_FIELDS)}")


def text_id(text: str) -> str:
    """A short id that follows the prompt's text, not its place in the file."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]


def text_prompt(line: str) -> str:
    """A text file's line as the prompt it holds: ``\\n`` is a line break."""
    return line.strip().replace("\\n", "\n")


def load_prompts(path: str | Path | None = None) -> PromptSet:
    path = Path(path).expanduser() if path is not None else DEFAULT_PROMPTS
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise AutotuneError(f"--dataset: cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    ids, texts = [], []
    if path.suffix == ".jsonl":
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise AutotuneError(f"--dataset {path}:{number}: not JSON ({err.msg})") from None
            texts.append(_jsonl_prompt(record, f"{path}:{number}"))
            key = record.get("question_id", record.get("id", number - 1)) if isinstance(record, dict) else number - 1
            ids.append(f"{path.stem}:{key}")
    else:
        for line in lines:
            if line.strip() and not line.lstrip().startswith("#"):
                texts.append(text_prompt(line))
                ids.append(f"{path.stem}:{text_id(line.strip())}")
    if not texts:
        raise AutotuneError(f"--dataset: no prompts in {path}")
    name = "autotune-prompts" if path == DEFAULT_PROMPTS else str(path.resolve())
    return PromptSet(name, tuple(ids), tuple(texts))
