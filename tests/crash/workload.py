"""The fixed workload of the power-loss explorer, and the promises checked after a crash.

:func:`prepare` writes a legacy save (flat documents and a C# ``.memory-v2`` folder).
:func:`run_workload` then, recorded: migrates it (lazily, on first use), appends memories
to one owner across several log segments (``maximum_file_bytes`` is the minimum, 1,024,
so a segment holds two records) and to other owners, rebuilds the session's vectors with
the hashing model, appends through the front door (memory and vector), and runs
``check(fix=True)``. Each append that returned is marked ``ack``.

:func:`run_recovery` is what the next program does after a power loss: open the save and
append one memory (recovery, and the lazy migration, run first).

:func:`check_state` opens a crash state and checks every promise: the store opens; every
legacy memory and every acknowledged append is there, unchanged; nothing else appears;
``count()`` agrees with ``enumerate`` (the newest intent may be pending until a writer
recovers); ``check(fix=True)`` leaves a store that ``check`` calls consistent; and the
derived index, whatever state it is in, is repaired by ``rebuild(force=True)`` alone.
"""

from __future__ import annotations

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
    open_memory,
)
from game_memory.durable.names import identity_hash
from game_memory.model import VectorMemoryState
from game_memory.store.documents import encode_legacy_document

from .recorder import Recorder

__all__ = [
    "FILE_BYTES",
    "SESSIONS",
    "Promises",
    "check_state",
    "expected",
    "legacy_memories",
    "prepare",
    "run_recovery",
    "run_workload",
]

SESSIONS = ("village", "keep")
FILE_BYTES = 1_024
_OWNERS = ("mira", "jory", "tomas")


def _memory(memory_id: str, number: int) -> GameMemory:
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
        for number in range(3):
            memory = expected(f"other-{number}")
            await store.append(memory)
            recorder.mark("ack", memory.memory_id)
    recorder.mark("phase", "rebuild")
    memory_store = await open_memory(save, index=base / "index", model="hashing")
    async with memory_store:
        await memory_store.rebuild(SESSIONS[0])
        recorder.mark("phase", "front door")
        for number in range(2):
            memory = expected(f"front-{number}")
            await memory_store.append(memory)
            recorder.mark("ack", memory.memory_id)
        recorder.mark("phase", "check")
        await memory_store.check(fix=True)


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
    ids.add("after-0")
    return ids


@dataclass(frozen=True)
class Promises:
    """What a crash state must hold: these ids (legacy ones included), and whether the
    crash came after the index was first written."""

    required: frozenset[str]
    index: bool

    @property
    def key(self) -> str:
        """A short identity of the promises (for deduplicating equal states)."""
        text = ",".join(sorted(self.required)) + f"|{self.index}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


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
            for memory_id in sorted(promises.required):
                if memory_id not in found:
                    problems.append(f"acknowledged memory {memory_id} is lost")
                elif found[memory_id] != expected(memory_id):
                    problems.append(f"acknowledged memory {memory_id} changed")
            problems.extend(f"unknown memory {m}" for m in sorted(set(found) - allowed))
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
    except (GameMemoryError, AssertionError) as exc:
        problems.append(f"the store does not open or read: {type(exc).__name__}: {exc}")
        return problems
    problems.extend(_check_backup(save))
    if promises.index and (folder / "index").exists():
        problems.extend(await _check_index(folder))
    return problems


def _check_backup(save: Path) -> list[str]:
    """Every legacy document is in the save folder still, or in the backup folder."""
    backup = save / ".game-memory" / "legacy"
    copies = sorted(backup.glob("memory-v2*")) if backup.is_dir() else []
    lost: list[str] = []
    for flat, path in legacy_documents():
        if flat:
            places = [save / path, backup / "v1" / path]
        else:
            places = [save / ".memory-v2" / path, *(copy / path for copy in copies)]
        if not any(place.is_file() for place in places):
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
