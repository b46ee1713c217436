"""Conversational development sets from ``chatterbot-corpus`` (a wheel on PyPI, BSD licence).

The wheel ships dialogues as YAML, one folder per language
(``chatterbot_corpus/data/<language>/<topic>.yml``, each ``conversations: [[turn, reply,
...], ...]``). Every consecutive pair of turns is a *prompt → reply*. Nothing is vendored:
the wheel is fetched with ``pip download --no-deps`` and read with ``zipfile``; the SHA-256
of the wheel and of every file read is reported with the results.

* ``chat_en``: English. Queries are the distinct prompts that are questions (end with
  ``?``); a query's relevant memories are every distinct reply that follows it anywhere in
  the corpus. Memories are all distinct replies of the language (those that follow
  statements too, as distractors), asked of one NPC. Short questions whose answers share
  few words with them.
* ``chat_cjk``: Japanese and Chinese, one NPC per language (``ja``, ``zh``); every distinct
  prompt is a query (Chinese often asks without a question mark: ``吗``, ``呢``), asked of
  its language's NPC. A query's category is its language, so figures split by language.

A dialogue that is not a list of turns (one in ``english/trivia.yml``) is skipped; more
than ``MAXIMUM_MALFORMED`` per language refuse the set. Prompts with more than
``MAXIMUM_REPLIES`` distinct replies ("Tell me a joke", thirty jokes) are dropped as
queries (their replies stay memories), and so are replies identical to their prompt (a
greeting answered by itself).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from retrieval_sets import (
    Dataset,
    DatasetError,
    MemoryRow,
    QueryRow,
    fetch_wheel,
    list_members,
    read_member,
)

__all__ = ["CHAT_REQUIREMENT", "load_chat_cjk", "load_chat_en"]

CHAT_REQUIREMENT = "chatterbot-corpus==1.3.3"
MAXIMUM_REPLIES = 3
MAXIMUM_MALFORMED = 3  # dialogues per language that are not a list of turns (skipped)
_ROOT = "chatterbot_corpus/data/"
_LANGUAGES_CJK = (("japanese", "ja"), ("chinese", "zh"))


def load_chat_en(cache: Path) -> Dataset:
    """English questions (memories: every distinct English reply)."""
    files: dict[str, str] = {}
    wheel = fetch_wheel(CHAT_REQUIREMENT, cache)
    pairs = _pairs(wheel, "english", files)
    memories, queries = _build(pairs, "en", lambda prompt: prompt.endswith("?"))
    if len(queries) < 300 or len(memories) < 500:
        raise DatasetError(
            f"chatterbot English has an unexpected shape ({len(queries)} questions, "
            f"{len(memories)} replies)"
        )
    return Dataset(
        "chat_en", f"{CHAT_REQUIREMENT} {_ROOT}english/*.yml", memories, queries, None, files
    )


def load_chat_cjk(cache: Path) -> Dataset:
    """Japanese and Chinese turns, one NPC per language."""
    files: dict[str, str] = {}
    wheel = fetch_wheel(CHAT_REQUIREMENT, cache)
    memories: list[MemoryRow] = []
    queries: list[QueryRow] = []
    for language, owner in _LANGUAGES_CJK:
        rows, asked = _build(_pairs(wheel, language, files), owner, lambda prompt: True)
        if len(asked) < 200 or len(rows) < 300:
            raise DatasetError(
                f"chatterbot {language} has an unexpected shape ({len(asked)} prompts, "
                f"{len(rows)} replies)"
            )
        memories += rows
        queries += asked
    source = f"{CHAT_REQUIREMENT} {_ROOT}{{japanese,chinese}}/*.yml"
    return Dataset("chat_cjk", source, tuple(memories), tuple(queries), None, files)


def _pairs(wheel: Path, language: str, files: dict[str, str]) -> list[tuple[str, str]]:
    """Every ``(prompt, reply)`` of one language, in file then dialogue order."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError as exc:  # a dev install has it (gdtoolkit needs it)
        raise DatasetError("reading chatterbot-corpus needs PyYAML: pip install pyyaml") from exc

    folder = f"{_ROOT}{language}/"
    members = list_members(wheel, folder, ".yml")
    pairs: list[tuple[str, str]] = []
    malformed = 0
    for member in members:
        try:
            data = yaml.safe_load(read_member(wheel, member, files).decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{member} is not valid YAML: {exc}") from exc
        dialogues = data.get("conversations") if isinstance(data, dict) else None
        if not isinstance(dialogues, list):
            raise DatasetError(f"{member} has no 'conversations' list")
        for dialogue in dialogues:
            if not isinstance(dialogue, list):
                # english/trivia.yml has one dialogue written as a single string upstream.
                malformed += 1
                if malformed > MAXIMUM_MALFORMED:
                    raise DatasetError(
                        f"{folder}: more than {MAXIMUM_MALFORMED} malformed dialogues"
                    )
                continue
            turns = [_clean(turn) for turn in dialogue]
            pairs += [(a, b) for a, b in itertools.pairwise(turns) if a and b]
    return pairs


def _clean(turn: object) -> str:
    # YAML reads a bare "1963" as a number; a turn is its text, whitespace collapsed.
    return " ".join(str(turn).split()) if turn is not None else ""


def _build(
    pairs: Iterable[tuple[str, str]], owner: str, is_query: Callable[[str], bool]
) -> tuple[tuple[MemoryRow, ...], tuple[QueryRow, ...]]:
    replies: dict[str, str] = {}
    asked: dict[str, set[str]] = {}
    for prompt, reply in pairs:
        memory_id = replies.setdefault(reply, f"{owner}-r{len(replies) + 1:04d}")
        if reply != prompt and is_query(prompt):
            asked.setdefault(prompt, set()).add(memory_id)
    memories = tuple(MemoryRow(memory_id, owner, text) for text, memory_id in replies.items())
    kept = sorted(p for p, r in asked.items() if len(r) <= MAXIMUM_REPLIES)
    queries = tuple(
        QueryRow(f"{owner}-q{index + 1:04d}", prompt, frozenset(asked[prompt]), owner, owner)
        for index, prompt in enumerate(kept)
    )
    _check(memories, queries, owner)
    return memories, queries


_BLANK = re.compile(r"^\W*$")


def _check(memories: tuple[MemoryRow, ...], queries: tuple[QueryRow, ...], owner: str) -> None:
    known = {m.memory_id for m in memories}
    if len(known) != len(memories) or len({q.query_id for q in queries}) != len(queries):
        raise DatasetError(f"chat set {owner}: duplicate ids")
    for query in queries:
        if not query.relevant <= known or _BLANK.match(query.text):
            raise DatasetError(
                f"chat set {owner}: {query.query_id} is blank or has unknown answers"
            )
