"""The file store end to end through the front door, for the Windows-like platform test.

Usage: ``python windows_scenario.py FOLDER [--windows-like]``. With ``--windows-like`` it
imports :mod:`windows_like` before anything else, so the library runs on a CPython made to
look like Windows' (that module's docstring). It prints one JSON line of what it observed,
deterministic (fixed ids, texts and ticks; no wall clock, no paths): the ids of each recall
in order, with the ranks that placed them, append and erase counts, the status, the kinds
of files the save and the index hold, the library's diagnostics and log records; with
``--windows-like`` also ``violations`` and ``sharing_conflicts``. On an error it prints
those to stderr and exits 1 with the traceback.

The save gets 5,000 memories of one NPC in one ``append_many`` (from 4,096 rows the index
maps its row file and, at close, writes a file of int8 codes: the code paths most at risk)
with a few of a second NPC, then single appends, recalls as of game moments, a close, a
reopen and the same recalls (which must answer the same), one more append, a ``forget``,
an ``erase`` of each NPC (the large one read in this process), ``get_status`` and a close.
Vectors come from the deterministic ``"hashing"`` model (no download).
"""

import importlib
import sys

if __name__ == "__main__" and "--windows-like" in sys.argv[1:]:
    importlib.import_module("windows_like")  # first: before numpy and game_memory

import asyncio
import json
import logging
import os
import traceback
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from game_memory import (
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMoment,
    MemoryVectorDiagnostic,
    VectorMemoryStore,
    open_memory,
)

SESSION = "slot1"
BIG_NPC = "mira"
SMALL_NPC = "tess"
BIG_COUNT = 5_000
TIMELINE = "main"

_WHO = ("a hooded thief", "the miller", "a stranger", "the smith", "old Garran", "a child")
_DID = ("grabbed", "dropped", "mended", "hid", "sold", "found", "burned", "counted")
_WHAT = ("the coin purse", "a lantern", "the cart wheel", "a letter", "the bread", "an axe")
_WHERE = ("at the well", "by the inn", "in the smithy", "on the bridge", "near the ford")

QUERIES: tuple[tuple[str | None, str, int | None], ...] = (
    (BIG_NPC, "who grabbed the coin purse at the well", 2_500),
    (BIG_NPC, "a stranger burned a letter in the smithy", 5_001),
    (BIG_NPC, "old Garran sold an axe near the ford", 700),
    (BIG_NPC, "the rain flooded the bridge", None),
    (BIG_NPC, "a hooded thief grabbed the coin purse again", None),  # forgotten at 5,003
    (BIG_NPC, "a hooded thief grabbed the coin purse again", 5_002),  # still recalled then
    (SMALL_NPC, "the forge burned down", None),  # t2 erased
    (SMALL_NPC, "rumour about the stranger at the inn", 50),
    (None, "the miller counted the bread", 4_000),
)


def moment(tick: int) -> GameMoment:
    return GameMoment(timeline_id=TIMELINE, tick=tick)


def memory(memory_id: str, owner: str, tick: int, text: str, importance: float = 0.5) -> GameMemory:
    return GameMemory(
        memory_id=memory_id,
        session_id=SESSION,
        owner_id=owner,
        scope="village",
        kind=GameMemoryKind.EVENT,
        payload_json=json.dumps({"n": tick}),
        moment=moment(tick),
        importance=importance,
        searchable_text=text,
    )


def big_npc_memories() -> list[GameMemory]:
    """5,000 memories of one NPC, one a tick, with texts from a small fixed vocabulary."""
    return [
        memory(
            f"m{n:05d}",
            BIG_NPC,
            n + 1,
            f"{_WHO[n % 6]} {_DID[n // 6 % 8]} {_WHAT[n // 48 % 6]} {_WHERE[n // 288 % 5]} "
            f"on day {n // 100}",
            importance=(n % 10) / 10,
        )
        for n in range(BIG_COUNT)
    ]


def small_npc_memories() -> list[GameMemory]:
    return [
        memory("t1", SMALL_NPC, 10, "a rumour: the stranger at the inn is a spy"),
        memory("t2", SMALL_NPC, 20, "the smith's forge burned down at night"),
        memory("t3", SMALL_NPC, 30, "the miller's daughter crossed the ford"),
        memory("t4", SMALL_NPC, 40, "a stranger paid in foreign coin at the inn"),
    ]


async def recall_all(store: VectorMemoryStore) -> list[dict[str, Any]]:
    """Each query's hits in order: ids and the ranks that placed them."""
    found = []
    for owner, text, tick in QUERIES:
        query = GameMemoryQuery(
            session_id=SESSION,
            owner_id=owner,
            text=text,
            limit=8,
            at_or_before=None if tick is None else moment(tick),
        )
        result = await store.recall(query)
        found.append(
            {
                "query": text,
                "fallback": result.fallback,
                "hits": [[h.memory.memory_id, h.lexical_rank, h.vector_rank] for h in result.hits],
            }
        )
    return found


def files(folder: Path) -> dict[str, int]:
    """How many files of each kind (the name's last suffix) a folder holds, recursively."""
    kinds: Counter[str] = Counter()
    for _, _, names in os.walk(folder):
        kinds.update(Path(name).suffix or name for name in names)
    return dict(sorted(kinds.items()))


class Records(logging.Handler):
    """The library's log records of level INFO and up, as "LEVEL logger: message"."""

    def __init__(self, folder: Path) -> None:
        super().__init__(logging.INFO)
        self.folder = str(folder)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().replace(self.folder, "<FOLDER>")
        self.lines.append(f"{record.levelname} {record.name}: {message}")


async def scenario(folder: Path, observed: dict[str, Any]) -> None:
    save = folder / "save"
    diagnostics: list[MemoryVectorDiagnostic] = []

    async def opened() -> VectorMemoryStore:
        return await open_memory(save, model="hashing", diagnostics=diagnostics.append)

    store = await opened()
    try:
        observed["mode"] = store.mode
        batch = big_npc_memories() + small_npc_memories()
        created = await store.append_many(batch)
        observed["batch"] = {"memories": len(batch), "created": sum(created)}
        singles = [
            memory("m90001", BIG_NPC, 5_001, "the rain flooded the bridge over the ford"),
            memory("m90002", BIG_NPC, 5_002, "a hooded thief grabbed the coin purse again"),
            memory("t5", SMALL_NPC, 45, "the stranger came back to the inn"),
            memory("t1", SMALL_NPC, 10, "a rumour: the stranger at the inn is a spy"),
        ]
        observed["singles"] = [await store.append(one) for one in singles]
        observed["recalls"] = await recall_all(store)
        # Again: by now a large NPC's int8 copy (made after its 4th recall) may answer.
        observed["recalls_again"] = await recall_all(store)
    finally:
        await store.aclose()
    observed["index_files_after_close"] = files(Path(f"{save}.index"))

    store = await opened()
    try:
        observed["recalls_after_reopen"] = await recall_all(store)
        observed["append_after_reopen"] = await store.append(
            memory("m90003", BIG_NPC, 5_003, "a stranger burned a letter in the smithy at dawn")
        )
        observed["forget"] = await store.forget(SESSION, BIG_NPC, "m90002", moment(5_003))
        observed["erase"] = await store.erase(SESSION, SMALL_NPC, ["t2"])
        # An NPC this process has read (its read file and rows loaded): its files are
        # rewritten and its old ones removed, which Windows refuses for a file still open
        # or mapped.
        observed["erase_read_npc"] = await store.erase(SESSION, BIG_NPC, ["m00007"])
        observed["recalls_after_changes"] = await recall_all(store)
        status = await store.get_status(SESSION)
        observed["status"] = status.model_dump(mode="json", exclude={"active_identity"})
        observed["enumerated"] = len(await store.enumerate(SESSION))
    finally:
        await store.aclose()
    observed["save_files"] = files(save)
    observed["index_files"] = files(Path(f"{save}.index"))
    observed["diagnostics"] = [d.code for d in diagnostics]


def emulation() -> ModuleType | None:
    """The Windows-like emulation, when this run installed it."""
    return sys.modules.get("windows_like")


def main(arguments: list[str]) -> int:
    folders = [argument for argument in arguments if argument != "--windows-like"]
    if len(folders) != 1:
        print("usage: python windows_scenario.py FOLDER [--windows-like]", file=sys.stderr)
        return 2
    folder = Path(folders[0]).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    records = Records(folder)
    logging.getLogger("game_memory").addHandler(records)
    logging.getLogger("game_memory").setLevel(logging.INFO)
    observed: dict[str, Any] = {}
    try:
        asyncio.run(scenario(folder, observed))
    except BaseException:
        traceback.print_exc()
        emulated = emulation()
        if emulated is not None:
            print(json.dumps({"violations": emulated.violations()}), file=sys.stderr)
            print(json.dumps({"sharing": emulated.sharing_conflicts()}), file=sys.stderr)
        print(json.dumps({"log": records.lines}), file=sys.stderr)
        return 1
    observed["log"] = records.lines
    emulated = emulation()
    if emulated is not None:
        observed["violations"] = emulated.violations()
        observed["sharing_conflicts"] = emulated.sharing_conflicts()
    print(json.dumps(observed, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
