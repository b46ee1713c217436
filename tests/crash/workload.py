"""The fixed workload of the power-loss explorer, and the promises checked after a crash.

:func:`prepare` writes a legacy save (flat documents and a C# ``.memory-v2`` folder).
:func:`run_workload` then, recorded: migrates it (lazily, on first use), appends memories
to one owner across several log segments (``maximum_file_bytes`` is the minimum, 1,024,
so a segment holds two records) and, three at once (a group commit), to other owners,
rebuilds the session's vectors with the hashing model, appends through the front door
(memory and vector), then the lifecycle
calls through the front door: two retractions of one memory (the second earlier, so the
first becomes redundant), a consolidation of two of ``mira``'s memories into a summary, an
erase of listed memories (one in a log segment, one migrated into a pack, with its legacy
backup), an erase of a whole owner (appended, flat legacy and C# memories), a compaction
(which drops the redundant retraction); and ``check(fix=True)``. Each call that returned is
marked: ``ack`` (a memory), ``forgot`` (a retraction), ``erasing`` before an erase and
``erased`` after it.

:func:`run_recovery` is what the next program does after a power loss: open the save and
append one memory (recovery, and the lazy migration, run first).

:func:`check_state` opens a crash state and checks every promise: the store opens; every
legacy memory and every acknowledged append is there, unchanged, unless an acknowledged erase
removed it (then it is absent, and so is its text from every file of the save); an erase in
flight at the crash is wholly done or not at all; an acknowledged retraction (or
consolidation) hides its memory from its moment on; nothing else appears;
``count()`` agrees with ``enumerate`` (the newest intent may be pending until a writer
recovers); ``check(fix=True)`` leaves a store that ``check`` calls consistent; and the
derived index, whatever state it is in, is repaired by ``rebuild(force=True)`` alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from game_memory import (
    FileGameMemoryStore,
    GameMemory,
    GameMemoryError,
    GameMemoryQuery,
    GameMoment,
    VectorMemoryStore,
    open_memory,
)
from game_memory.durable.names import identity_hash
from game_memory.model import VectorMemoryState
from game_memory.store.documents import encode_legacy_document

from .recorder import Op, Recorder

__all__ = [
    "FILE_BYTES",
    "PROMISE_MARKS",
    "SESSIONS",
    "Promises",
    "check_state",
    "expected",
    "legacy_memories",
    "prepare",
    "promises_at",
    "run_recovery",
    "run_workload",
]

SESSIONS = ("village", "keep")
FILE_BYTES = 1_024
_OWNERS = ("mira", "jory", "tomas")


#: The summary the workload consolidates ``mira``'s ``seg-2`` and ``seg-4`` of ``village``
#: into, at tick 200.
SUMMARY = "sum-0"
SUMMARY_SOURCES = ("seg-2", "seg-4")
SUMMARY_TICK = 200
#: The marks that change what a crash state must hold.
PROMISE_MARKS = frozenset({"ack", "forgot", "erasing", "erased", "consolidated"})


def _memory(memory_id: str, number: int) -> GameMemory:
    if memory_id == SUMMARY:
        return GameMemory(
            memory_id=memory_id,
            session_id=SESSIONS[0],
            owner_id="mira",
            scope="personal",
            kind="reflection",
            payload_json="{}",
            moment=GameMoment(timeline_id="world", tick=SUMMARY_TICK),
            searchable_text=f"memory {memory_id} about what mira makes of the well",
            consolidates=SUMMARY_SOURCES,
        )
    return GameMemory(
        memory_id=memory_id,
        session_id=SESSIONS[number % 2],
        owner_id=_OWNERS[number % 3] if not memory_id.startswith("seg-") else "mira",
        scope="personal",
        kind="event",
        payload_json=json.dumps({"n": number}),
        moment=GameMoment(timeline_id="world", tick=number),
        searchable_text=f"memory {memory_id} about the well and the stolen bread " + "x" * 60,
    )


def expected(memory_id: str) -> GameMemory:
    """The one memory each id of the workload stands for."""
    return _memory(memory_id, int(memory_id.rsplit("-", 1)[1]))


def legacy_memories() -> list[GameMemory]:
    """The memories of the legacy save (flat ``legacy-*``, C# partitioned ``csharp-*``)."""
    flat = [expected(f"legacy-{n}") for n in range(10)]
    return flat + [expected(f"csharp-{n}") for n in range(4)]


def legacy_documents() -> list[tuple[bool, str]]:
    """Each legacy document as ``(flat, path)``: relative to the save folder when flat,
    else relative to the C# ``.memory-v2`` folder."""
    documents: list[tuple[bool, str]] = []
    for memory in legacy_memories():
        if memory.memory_id.startswith("legacy-"):
            key = f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}"
            documents.append((True, f"{identity_hash(key)}.memory.json"))
        else:
            folder = f"s-{identity_hash(memory.session_id)}/o-{identity_hash(memory.owner_id)}"
            documents.append((False, f"{folder}/{identity_hash(memory.memory_id)}.memory.json"))
    return documents


def prepare(base: Path) -> None:
    """Write the legacy save ``base/save``: flat documents and a C# partitioned folder."""
    save = base / "save"
    save.mkdir(parents=True)
    for memory, (flat, path) in zip(legacy_memories(), legacy_documents(), strict=True):
        target = save / path if flat else save / ".memory-v2" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(encode_legacy_document(memory))
    layout = {"FormatVersion": 2, "EntryCount": 4}
    (save / ".memory-v2" / "layout.json").write_text(json.dumps(layout))


async def run_workload(base: Path, recorder: Recorder) -> None:
    """The recorded workload (see the module docstring)."""
    save = base / "save"
    async with FileGameMemoryStore(save, maximum_file_bytes=FILE_BYTES) as store:
        recorder.mark("phase", "migrate")
        await store.migrate_legacy_layout()
        recorder.mark("phase", "append")
        for number in range(6):
            memory = expected(f"seg-{number}")
            await store.append(memory)
            recorder.mark("ack", memory.memory_id)

        async def concurrently(memory: GameMemory) -> None:
            await store.append(memory)
            recorder.mark("ack", memory.memory_id)

        # Three at once share group commits (store/group_commit.py).
        await asyncio.gather(*(concurrently(expected(f"other-{n}")) for n in range(3)))
    recorder.mark("phase", "rebuild")
    memory_store = await open_memory(save, index=base / "index", model="hashing")
    async with memory_store:
        await memory_store.rebuild(SESSIONS[0])
        recorder.mark("phase", "front door")
        for number in range(2):
            memory = expected(f"front-{number}")
            await memory_store.append(memory)
            recorder.mark("ack", memory.memory_id)
        recorder.mark("phase", "lifecycle")
        await _lifecycle(memory_store, recorder)
        recorder.mark("phase", "check")
        await memory_store.check(fix=True)


async def _lifecycle(memory: VectorMemoryStore, recorder: Recorder) -> None:
    """Forget, consolidate, erase and compact through the front door, each call marked."""
    for tick in (100, 50):  # the second retraction is earlier: the first becomes redundant
        await memory.forget(
            SESSIONS[1], "mira", "seg-1", GameMoment(timeline_id="world", tick=tick)
        )
        recorder.mark("forgot", f"{SESSIONS[1]}|mira|seg-1|{tick}")
    summary = expected(SUMMARY).model_copy(update={"consolidates": ()})
    await memory.consolidate(SESSIONS[0], "mira", list(SUMMARY_SOURCES), summary)
    recorder.mark("ack", SUMMARY)
    recorder.mark("consolidated", f"{SESSIONS[0]}|mira|{','.join(SUMMARY_SOURCES)}|{SUMMARY_TICK}")
    listed = ["seg-0", "legacy-0"]  # a log segment's record, and a pack's with its backup
    recorder.mark("erasing", ",".join(listed))
    await memory.erase(SESSIONS[0], "mira", listed)
    recorder.mark("erased", ",".join(listed))
    owner = sorted(
        m.memory_id
        for m in (*legacy_memories(), *(expected(i) for i in attempted()))
        if (m.session_id, m.owner_id) == (SESSIONS[0], "tomas")
    )
    recorder.mark("erasing", ",".join(owner))
    await memory.erase(SESSIONS[0], "tomas")
    recorder.mark("erased", ",".join(owner))
    recorder.mark("phase", "compact")
    await memory.compact()


async def run_recovery(base: Path, recorder: Recorder) -> None:
    """What the next program does after the crash: open the save, append one memory."""
    async with FileGameMemoryStore(base / "save") as store:
        memory = expected("after-0")
        await store.append(memory)
        recorder.mark("ack", memory.memory_id)


def attempted() -> set[str]:
    """Every memory id that may legitimately be found in any state."""
    ids = {memory.memory_id for memory in legacy_memories()}
    ids.update(f"seg-{n}" for n in range(6))
    ids.update(f"other-{n}" for n in range(3))
    ids.update(f"front-{n}" for n in range(2))
    ids.update(("after-0", SUMMARY))
    return ids


@dataclass(frozen=True)
class Promises:
    """What a crash state must hold.

    Attributes:
        required: Ids that must be there (legacy ones included), unless erased.
        index: Whether the crash came after the index was first written.
        erased: Ids an acknowledged erase removed: absent, text and all.
        erasing: Ids of an erase in flight at the crash: all there, or none.
        hidden: ``(session, owner, id, tick)`` of acknowledged retractions (forgets and
            consolidations): the memory is not recalled as of ``tick`` or later.
    """

    required: frozenset[str]
    index: bool
    erased: frozenset[str] = frozenset()
    erasing: frozenset[str] = frozenset()
    hidden: frozenset[tuple[str, str, str, int]] = frozenset()

    @property
    def key(self) -> str:
        """A short identity of the promises (for deduplicating equal states)."""
        text = "|".join(
            [
                ",".join(sorted(self.required)),
                str(self.index),
                ",".join(sorted(self.erased)),
                ",".join(sorted(self.erasing)),
                ",".join(sorted(map(str, self.hidden))),
            ]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def promises_at(ops: list[Op], point: int, base: Promises) -> Promises:
    """``base`` and what the marks of ``ops[:point]`` promised on top of it."""
    required, erased, hidden = set(base.required), set(base.erased), set(base.hidden)
    erasing = set(base.erasing)
    index = base.index
    for op in ops[:point]:
        if op.kind != "mark":
            continue
        argument = op.data.decode()
        if op.name == "ack":
            required.add(argument)
        elif op.name == "phase" and argument == "rebuild":
            index = True
        elif op.name == "forgot":
            session, owner, memory_id, tick = argument.split("|")
            hidden.add((session, owner, memory_id, int(tick)))
        elif op.name == "consolidated":
            session, owner, sources, tick = argument.split("|")
            hidden.update((session, owner, source, int(tick)) for source in sources.split(","))
        elif op.name == "erasing":
            erasing = set(argument.split(","))
        elif op.name == "erased":
            erased.update(argument.split(","))
            erasing = set()
    return Promises(
        frozenset(required), index, frozenset(erased), frozenset(erasing), frozenset(hidden)
    )


async def _everything(store: FileGameMemoryStore) -> dict[str, GameMemory]:
    found: dict[str, GameMemory] = {}
    for session in SESSIONS:
        for memory in await store.enumerate(session):
            if memory.memory_id in found:
                raise AssertionError(f"{memory.memory_id} enumerated twice")
            found[memory.memory_id] = memory
    return found


async def check_state(folder: Path, promises: Promises) -> list[str]:
    """Open the crash state in ``folder`` and return every broken promise (empty: sound)."""
    problems: list[str] = []
    allowed = attempted()
    save = folder / "save"
    try:
        # The default file bound: the front door's appends grow segments past FILE_BYTES.
        async with FileGameMemoryStore(save) as store:
            found = await _everything(store)
            for memory_id in sorted(promises.required - promises.erased - promises.erasing):
                if memory_id not in found:
                    problems.append(f"acknowledged memory {memory_id} is lost")
                elif found[memory_id] != expected(memory_id):
                    problems.append(f"acknowledged memory {memory_id} changed")
            problems.extend(
                f"erased memory {m} came back" for m in sorted(promises.erased & set(found))
            )
            half = promises.erasing & set(found)
            if half and half != promises.erasing:
                problems.append(f"an interrupted erase is half done: {sorted(half)} remain")
            problems.extend(f"unknown memory {m}" for m in sorted(set(found) - allowed))
            problems.extend(await _check_hidden(store, promises, found))
            count = await store.count()
            if not len(found) <= count <= len(found) + 1:
                problems.append(f"count() is {count} but enumerate finds {len(found)}")
            report = await store.check(fix=True)
            if not report.ok:
                problems.append(f"check(fix=True) left problems: {list(report.problems)}")
            after = await _everything(store)
            if set(after) != set(found):
                problems.append("check(fix=True) changed what enumerate finds")
            if await store.count() != len(after):
                problems.append(f"count() is {await store.count()} after repair, not {len(after)}")
            if not (await store.check()).ok:
                problems.append("check() is not consistent after check(fix=True)")
            gone = promises.erased | (promises.erasing - set(found))
    except (GameMemoryError, AssertionError) as exc:
        problems.append(f"the store does not open or read: {type(exc).__name__}: {exc}")
        return problems
    problems.extend(_check_bytes_gone(save, gone))
    problems.extend(_check_backup(save, gone))
    if promises.index and (folder / "index").exists():
        problems.extend(await _check_index(folder))
    return problems


async def _check_hidden(
    store: FileGameMemoryStore, promises: Promises, found: dict[str, GameMemory]
) -> list[str]:
    """An acknowledged retraction hides its memory from its moment on (not before)."""
    problems: list[str] = []
    for session, owner, memory_id, tick in sorted(promises.hidden):
        if memory_id not in found:
            continue
        for at, visible in ((tick, False), (10_000, False)):
            query = GameMemoryQuery(
                session_id=session,
                owner_id=owner,
                limit=1_000,
                at_or_before=GameMoment(timeline_id="world", tick=at),
            )
            ids = {hit.memory.memory_id for hit in (await store.snapshot(query)).lexical}
            if (memory_id in ids) != visible:
                problems.append(f"{memory_id} forgotten at {tick} is recalled as of {at}")
    return problems


def _check_bytes_gone(save: Path, gone: frozenset[str] | set[str]) -> list[str]:
    """No file of the save holds the text of an erased memory."""
    markers = {memory_id: f"memory {memory_id} about".encode() for memory_id in gone}
    left: list[str] = []
    for path in sorted(save.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        left.extend(
            f"{path.relative_to(save)} still holds erased memory {memory_id}"
            for memory_id, marker in markers.items()
            if marker in data
        )
    return left


def _check_backup(save: Path, gone: frozenset[str] | set[str]) -> list[str]:
    """Every legacy document is in the save folder still, or in the backup folder; unless
    its memory was erased: then it is in neither."""
    backup = save / ".game-memory" / "legacy"
    copies = sorted(backup.glob("memory-v2*")) if backup.is_dir() else []
    lost: list[str] = []
    for memory, (flat, path) in zip(legacy_memories(), legacy_documents(), strict=True):
        if flat:
            places = [save / path, backup / "v1" / path]
        else:
            places = [save / ".memory-v2" / path, *(copy / path for copy in copies)]
        kept = any(place.is_file() for place in places)
        if memory.memory_id in gone and kept:
            lost.append(f"the legacy document of erased memory {memory.memory_id} is still there")
        elif memory.memory_id not in gone and not kept:
            lost.append(f"legacy document {path} is neither in the save nor in its backup")
    return lost


async def _check_index(folder: Path) -> list[str]:
    """The index after the crash: status answers; ``rebuild(force=True)`` repairs it alone."""
    try:
        memory = await open_memory(folder / "save", index=folder / "index", model="hashing")
        async with memory:
            await memory.get_status(SESSIONS[0])
            status = await memory.rebuild(SESSIONS[0], force=True)
            if status.state is not VectorMemoryState.READY:
                return [f"rebuild(force=True) left the index {status.state.value}"]
            query = GameMemoryQuery(session_id=SESSIONS[0], text="stolen bread", limit=3)
            if (await memory.recall(query)).fallback:
                return ["recall still falls back after rebuild(force=True)"]
    except GameMemoryError as exc:
        return [f"the index is not repaired by rebuild(force=True): {type(exc).__name__}: {exc}"]
    return []
