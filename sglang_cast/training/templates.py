"""The words and templates the prompts stage fills in, as data: prompt_templates.yaml,
loaded once at import (the file's comments say what each list is for)."""

from __future__ import annotations

from pathlib import Path

import yaml

_LISTS = yaml.safe_load(Path(__file__).with_name("prompt_templates.yaml").read_text())

TASK_TYPES: tuple[str, ...] = tuple(_LISTS["task_types"])  # self-instruct: what kind of request
TOPICS: tuple[str, ...] = tuple(_LISTS["topics"])  # every source (in BROAD_TOPICS)
CHAT_TEMPLATES: tuple[str, ...] = tuple(_LISTS["chat_templates"])  # {topic}, {other}, {role}
ROLES: tuple[str, ...] = tuple(_LISTS["roles"])
MORE_TOPICS: tuple[str, ...] = tuple(_LISTS["more_topics"])  # the chat templates' further topics
SCIENCE_TOPICS: tuple[str, ...] = tuple(_LISTS["science_topics"])  # every source, and the STEM tasks
SOCIETY_TOPICS: tuple[str, ...] = tuple(_LISTS["society_topics"])  # every source, and the humanities tasks
WORLD_TOPICS = SCIENCE_TOPICS + SOCIETY_TOPICS
BROAD_TOPICS = TOPICS + WORLD_TOPICS  # self-instruct's grid and the writing and roleplay tasks
MATH_TEMPLATES: tuple[str, ...] = tuple(_LISTS["math_templates"])
ITEMS: tuple[str, ...] = tuple(_LISTS["items"])  # what the first math template's shop sells
STDLIB_MODULES: tuple[str, ...] = tuple(_LISTS["stdlib_modules"])  # whose docstrings are mined
DOC_TEMPLATES: tuple[str, ...] = tuple(_LISTS["doc_templates"])  # {name}, {signature}, {summary}
