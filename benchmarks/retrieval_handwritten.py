"""Hand-written development sets in ``retrieval_data/``: CJK NPCs and belief updates.

* ``npc_cjk`` (``npc_cjk.json``, the format of ``npc_set.json``): a Japanese innkeeper and
  blacksmith, a Chinese shopkeeper and guard. Categories are checked on load with plain
  script rules, not with the library's tokenizer (which the set exists to measure):
  ``kana_particle``: question and answer share a katakana word of two or more characters
  that is directly followed by hiragana (a particle, as in 「ドラゴンは」) in at least one
  of them; ``kanji``: they share two adjacent ideographs; ``paraphrase``: they share
  neither.
* ``paraphrase_en`` (``paraphrase_en.json``, the same format): rumours held by three NPCs
  and a player's retelling of each in other words. ``reworded`` shares no content word
  with its rumour, ``overlap`` at least one (checked on load).
* ``belief_updates.json``: scenarios in which an NPC learns version 1 of a fact and later
  version 2 (:func:`load_beliefs`; checked on load: ticks in order, every question asked
  after the update or between the versions, and the ``old_closer`` flag true exactly when
  the old version shares more content words with every question than the new one).
* ``belief_sequels_dev.json``: 30 sequels (below) beside ``belief_updates.json``, for
  choosing the reranker's version test on both sides of it (written after the held-out
  set, by someone who had not read it).
* ``belief_updates_heldout.json``: a second set of belief scenarios in the same format,
  written blind after the reranker's supersession settings were chosen on the first (so its
  figures are out of sample), plus *sequels* (:func:`load_sequels`): two memories of one
  NPC on one topic where the later does **not** replace the earlier (both stay true) and
  every question is answered by the earlier one: what a ranker that takes any newer
  memory on the same topic for an update gets wrong.
* ``npc_time``: the belief scenarios as a retrieval set (:func:`load_npc_time`): each
  scenario is one NPC (owner) holding both versions and its background memories; every
  question is asked after the update (relevant: the new version) and between the two
  versions (relevant: the old one), at the scenario's ticks. No ``belief_key`` is set, so
  the ranking alone must put the right version first.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval_sets import (
    Dataset,
    DatasetError,
    MemoryRow,
    QueryRow,
    content_words,
    parse_npc_file,
)

__all__ = [
    "BELIEF_FILE",
    "CJK_FILE",
    "HELDOUT_BELIEF_FILE",
    "SEQUELS_DEV_FILE",
    "Scenario",
    "Sequel",
    "Version",
    "load_beliefs",
    "load_npc_cjk",
    "load_npc_time",
    "load_paraphrase",
    "load_sequels",
    "scenario_memories",
    "sequel_memories",
]

DATA = Path(__file__).parent / "retrieval_data"
CJK_FILE = DATA / "npc_cjk.json"
PARAPHRASE_FILE = DATA / "paraphrase_en.json"
BELIEF_FILE = DATA / "belief_updates.json"
HELDOUT_BELIEF_FILE = DATA / "belief_updates_heldout.json"
SEQUELS_DEV_FILE = DATA / "belief_sequels_dev.json"

_KATAKANA = re.compile(r"[\u30a1-\u30fa\u30fc]{2,}")
_HIRAGANA = re.compile(r"[\u3041-\u309f]")
_IDEOGRAPHS = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def _katakana_words(text: str) -> set[str]:
    return set(_KATAKANA.findall(text))


def _glued(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` directly followed by hiragana."""
    return any(_HIRAGANA.match(text, m.end()) for m in re.finditer(re.escape(word), text))


def _bigrams(text: str) -> set[str]:
    return {run[i : i + 2] for run in _IDEOGRAPHS.findall(text) for i in range(len(run) - 1)}


def _cjk_category(query: QueryRow, answer: str) -> str:
    shared_kana = _katakana_words(query.text) & _katakana_words(answer)
    if any(_glued(query.text, w) or _glued(answer, w) for w in shared_kana):
        return "kana_particle"
    if _bigrams(query.text) & _bigrams(answer):
        return "kanji"
    return "paraphrase" if not shared_kana else "katakana"


def load_npc_cjk(path: Path = CJK_FILE) -> Dataset:
    """The CJK NPC set, asked at its game moment.

    Raises:
        DatasetError: the file is malformed or a query's category does not hold.
    """
    memories, queries, asked_at = parse_npc_file(path)
    by_id = {m.memory_id: m for m in memories}
    for query in queries:
        found = {_cjk_category(query, by_id[r].text) for r in query.relevant}
        if found != {query.category}:
            raise DatasetError(
                f"{path}: {query.query_id} is labelled {query.category!r} but is {sorted(found)}"
            )
    files = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    return Dataset(
        "npc_cjk", f"benchmarks/retrieval_data/{path.name}", memories, queries, asked_at, files
    )


def load_paraphrase(path: Path = PARAPHRASE_FILE) -> Dataset:
    """The paraphrase set, asked at its game moment.

    Raises:
        DatasetError: the file is malformed or a query's category does not hold.
    """
    memories, queries, asked_at = parse_npc_file(path)
    by_id = {m.memory_id: m for m in memories}
    for query in queries:
        shared = set().union(
            *(content_words(query.text) & content_words(by_id[r].text) for r in query.relevant)
        )
        found = "overlap" if shared else "reworded"
        if found != query.category:
            raise DatasetError(
                f"{path}: {query.query_id} is labelled {query.category!r} but is {found!r} "
                f"(shared content words: {sorted(shared)})"
            )
    files = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    return Dataset(
        "paraphrase_en",
        f"benchmarks/retrieval_data/{path.name}",
        memories,
        queries,
        asked_at,
        files,
    )


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a belief: what the NPC learned, when, how important it was, and the
    kind of memory a game would store it as (``"fact"`` when the file does not say)."""

    text: str
    tick: int
    importance: float
    kind: str = "fact"


#: A background memory: text, importance, kind.
Background = tuple[str, float, str]


@dataclass(frozen=True, slots=True)
class Scenario:
    """An NPC learns ``old`` then ``new``; ``questions`` are asked at ``after`` and ``between``."""

    scenario_id: str
    npc: str
    belief_key: str
    old: Version
    new: Version
    questions: tuple[str, ...]
    after: tuple[int, ...]
    between: tuple[int, ...]
    background: tuple[Background, ...]
    background_name: str | None
    old_closer: bool


def load_beliefs(path: Path = BELIEF_FILE) -> tuple[tuple[Scenario, ...], dict[str, str]]:
    """The belief-update scenarios and the SHA-256 of their file.

    Raises:
        DatasetError: the file is malformed or a scenario breaks a rule (module docstring).
    """
    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
        per_day = int(data["ticks_per_day"])
        backgrounds = _backgrounds(data)
        scenarios = tuple(_scenario(s, per_day, backgrounds) for s in data["scenarios"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{path} is not a valid belief-update file: {exc!r}") from exc
    if len({s.scenario_id for s in scenarios}) != len(scenarios):
        raise DatasetError(f"{path}: duplicate scenario ids")
    for scenario in scenarios:
        _check_scenario(scenario, path)
    return scenarios, {path.name: hashlib.sha256(raw).hexdigest()}


def _version(v: dict[str, Any], per_day: int) -> Version:
    return Version(
        str(v["text"]),
        int(v["day"]) * per_day + int(v["minute"]),
        float(v["importance"]),
        str(v.get("kind", "fact")),
    )


def _backgrounds(data: dict[str, Any]) -> dict[str, tuple[Background, ...]]:
    return {
        name: tuple(
            (str(m["text"]), float(m["importance"]), str(m.get("kind", "fact"))) for m in rows
        )
        for name, rows in data["backgrounds"].items()
    }


def _background_rows(prefix: str, background: tuple[Background, ...], last: int) -> list[MemoryRow]:
    """``background`` as memories of the NPC ``prefix``, spread evenly from tick 0 to an
    hour after ``last``, so some are older than the first memory and some newer than the
    last."""
    span = last + 60
    return [
        MemoryRow(
            f"{prefix}.bg{index}",
            prefix,
            text,
            kind=kind,
            importance=importance,
            tick=span * index // max(len(background) - 1, 1),
        )
        for index, (text, importance, kind) in enumerate(background)
    ]


def _scenario(s: dict[str, Any], per_day: int, backgrounds: dict[str, Any]) -> Scenario:
    name = s["background"]
    return Scenario(
        str(s["id"]),
        str(s["npc"]),
        str(s["belief_key"]),
        _version(s["old"], per_day),
        _version(s["new"], per_day),
        tuple(str(q) for q in s["questions"]),
        tuple(int(t) for t in s["after"]),
        tuple(int(t) for t in s["between"]),
        () if name is None else backgrounds[name],
        name,
        bool(s["old_closer"]),
    )


def _check_scenario(s: Scenario, path: Path) -> None:
    where = f"{path}: scenario {s.scenario_id}"
    if not s.old.tick < s.new.tick:
        raise DatasetError(f"{where}: the new version is not later than the old one")
    if not s.after or any(t < s.new.tick for t in s.after):
        raise DatasetError(f"{where}: an 'after' question is asked before the update")
    if not s.between or any(not s.old.tick <= t < s.new.tick for t in s.between):
        raise DatasetError(f"{where}: a 'between' question is not asked between the versions")
    if len(s.questions) < 2 or not re.fullmatch(r"[a-z0-9_.-]{1,64}", s.belief_key):
        raise DatasetError(f"{where}: needs two questions and a bounded belief key")
    for question in s.questions:
        words = content_words(question)
        old = len(words & content_words(s.old.text))
        new = len(words & content_words(s.new.text))
        if (old > new) != s.old_closer:
            raise DatasetError(
                f"{where}: old_closer is {s.old_closer} but {question!r} shares {old} content "
                f"words with the old version and {new} with the new one"
            )


@dataclass(frozen=True, slots=True)
class Sequel:
    """An NPC learns ``earlier`` then ``later`` on one topic; both stay true, and every one
    of ``questions``, asked at ``asked``, is answered by ``earlier``."""

    sequel_id: str
    npc: str
    earlier: Version
    later: Version
    questions: tuple[str, ...]
    asked: tuple[int, ...]
    background: tuple[Background, ...]
    background_name: str | None


def load_sequels(path: Path) -> tuple[Sequel, ...]:
    """The file's sequels (none when it has no ``sequels`` list).

    Raises:
        DatasetError: a sequel is malformed, its ticks are out of order, a question is
            asked before the later memory, or its id is also a scenario's.
    """
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
        per_day = int(data["ticks_per_day"])
        backgrounds = _backgrounds(data)
        scenario_ids = {str(s["id"]) for s in data["scenarios"]}
        sequels = tuple(_sequel(s, per_day, backgrounds) for s in data.get("sequels", ()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{path} is not a valid belief-update file: {exc!r}") from exc
    ids = [s.sequel_id for s in sequels]
    if len(set(ids)) != len(ids) or scenario_ids & set(ids):
        raise DatasetError(f"{path}: duplicate sequel ids, or a sequel named as a scenario")
    for sequel in sequels:
        where = f"{path}: sequel {sequel.sequel_id}"
        if not sequel.earlier.tick < sequel.later.tick:
            raise DatasetError(f"{where}: the later memory is not later than the earlier one")
        if not sequel.asked or any(t < sequel.later.tick for t in sequel.asked):
            raise DatasetError(f"{where}: a question is asked before the later memory")
        if len(sequel.questions) < 2:
            raise DatasetError(f"{where}: needs two questions")
    return sequels


def _sequel(s: dict[str, Any], per_day: int, backgrounds: dict[str, Any]) -> Sequel:
    name = s["background"]
    return Sequel(
        str(s["id"]),
        str(s["npc"]),
        _version(s["earlier"], per_day),
        _version(s["later"], per_day),
        tuple(str(q) for q in s["questions"]),
        tuple(int(t) for t in s["asked"]),
        () if name is None else backgrounds[name],
        name,
    )


def _row(memory_id: str, owner: str, version: Version, key: str | None = None) -> MemoryRow:
    """``version`` as the memory ``memory_id`` of ``owner`` (with ``key``, if any)."""
    return MemoryRow(
        memory_id,
        owner,
        version.text,
        kind=version.kind,
        importance=version.importance,
        tick=version.tick,
        belief_key=key,
    )


def sequel_memories(s: Sequel) -> tuple[MemoryRow, ...]:
    """The sequel's two memories and its background (spread as :func:`scenario_memories`
    spreads a scenario's), owned by an NPC named after the sequel."""
    rows = [
        _row(f"{s.sequel_id}.earlier", s.sequel_id, s.earlier),
        _row(f"{s.sequel_id}.later", s.sequel_id, s.later),
    ]
    return tuple(rows + _background_rows(s.sequel_id, s.background, s.later.tick))


def scenario_memories(s: Scenario, *, belief_key: bool) -> tuple[MemoryRow, ...]:
    """The scenario's memories: both versions and its background, spread over its ticks.

    Background memories are spread evenly from tick 0 to an hour after the update, so some
    are older than the old version and some newer than the new one.
    """
    key = s.belief_key if belief_key else None
    rows = [
        _row(f"{s.scenario_id}.old", s.scenario_id, s.old, key),
        _row(f"{s.scenario_id}.new", s.scenario_id, s.new, key),
    ]
    return tuple(rows + _background_rows(s.scenario_id, s.background, s.new.tick))


def load_npc_time(path: Path = BELIEF_FILE) -> Dataset:
    """The belief scenarios as a retrieval set with a game moment per question."""
    scenarios, files = load_beliefs(path)
    memories: list[MemoryRow] = []
    queries: list[QueryRow] = []
    for s in scenarios:
        memories += scenario_memories(s, belief_key=False)
        for n, text in enumerate(s.questions):
            for when, ticks, answer in (("after", s.after, "new"), ("between", s.between, "old")):
                for tick in sorted(set(ticks)):
                    queries.append(
                        QueryRow(
                            f"{s.scenario_id}.q{n}.{when}.{tick}",
                            text,
                            frozenset({f"{s.scenario_id}.{answer}"}),
                            s.scenario_id,
                            when,
                            tick,
                        )
                    )
    source = f"benchmarks/retrieval_data/{path.name} (as a retrieval set)"
    return Dataset("npc_time", source, tuple(memories), tuple(queries), None, files)
