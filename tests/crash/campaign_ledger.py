"""What the SIGKILL campaign was promised, and the check of a save against it after a kill.

A :class:`Ledger` collects every acknowledged operation (an append, a forget, a
consolidation, an erase) and every operation that may have started (an erase in flight,
any forget or summary sent), so that :func:`verify` can tell a broken promise from an
unacknowledged write that happened to land. After each kill, :func:`verify`:

* opens the store (an unopenable store is a finding);
* finds every acknowledged memory there, unchanged, unless an acknowledged erase removed it;
* finds each erase in flight at the kill wholly done or not begun (half of it is a
  *half-erased state*), then runs it again through the front door, as a game would,
  which completes it (the index drops vectors a kill between save and index left);
* finds no acknowledged erased memory, and no byte of an erased memory's text in any file
  under the save and index folders, nor its vector's bytes in the index;
* finds every acknowledged forget still hiding its memory (as of its tick, and without
  ``at_or_before``), every present summary hiding its sources as of its moment (a
  consolidation is both or neither), and every memory no retraction was sent for visible;
* finds ``count()`` agreeing with ``enumerate`` (the newest intent may be pending until a
  writer recovers), and ``check(fix=True)`` leaving the store consistent.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from game_memory import (
    FileGameMemoryStore,
    GameMemory,
    GameMemoryError,
    GameMemoryQuery,
    GameMoment,
    open_memory,
)
from game_memory.embedding.embedder import Embedder
from game_memory.embedding.gate import EmbeddingGate
from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.embedding.projector import MemoryTextProjector

from .campaign_memories import SESSIONS, memory

__all__ = ["EraseCall", "Findings", "Ledger", "erased_vectors", "verify"]

_MARKER = re.compile(rb"memory (\S+) of the kill campaign")


@dataclass(frozen=True)
class EraseCall:
    """One erase as it was asked: a session, one owner, or listed ids of one owner."""

    session_id: str
    owner_id: str | None
    memory_ids: tuple[str, ...] | None
    targets: frozenset[str]  # what was there to erase when it was asked


@dataclass
class Findings:
    """What one check found."""

    lost: Counter[str] = field(default_factory=Counter)
    half_erased: int = 0
    erased_bytes_left: int = 0
    unopenable: int = 0
    inconsistent: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass
class Ledger:
    """Every promise the campaign holds the save to (see the module docstring)."""

    expected: dict[str, GameMemory] = field(default_factory=dict)
    hidden_by: dict[str, dict[str, int]] = field(default_factory=dict)  # id: {cause: tick}
    hide_attempts: dict[str, int] = field(default_factory=dict)
    summaries: dict[str, tuple[str, str, tuple[str, ...], int]] = field(default_factory=dict)
    known: dict[str, GameMemory] = field(default_factory=dict)
    erased: set[str] = field(default_factory=set)
    erasing: list[EraseCall] = field(default_factory=list)
    fresh_forgets: list[str] = field(default_factory=list)
    fresh_erased: set[str] = field(default_factory=set)
    acknowledged: Counter[str] = field(default_factory=Counter)

    def memory(self, memory_id: str) -> GameMemory:
        """The memory an id stands for: as it was sent, else the campaign's own."""
        return self.known.get(memory_id) or memory(memory_id)

    def appended(self, item: GameMemory) -> None:
        self.expected[item.memory_id] = item
        self.acknowledged["append"] += 1

    def forget_sent(self, memory_id: str, tick: int) -> None:
        self.hide_attempts[memory_id] = min(tick, self.hide_attempts.get(memory_id, tick))

    def forgot(self, item: GameMemory, tick: int) -> None:
        causes = self.hidden_by.setdefault(item.memory_id, {})
        causes[""] = min(tick, causes.get("", tick))
        self.fresh_forgets.append(item.memory_id)
        self.acknowledged["forget"] += 1

    def consolidation_sent(self, stored: GameMemory) -> None:
        self.known[stored.memory_id] = stored
        tick = stored.moment.tick
        self.summaries[stored.memory_id] = (
            stored.session_id,
            stored.owner_id,
            tuple(stored.consolidates),
            tick,
        )
        for source in stored.consolidates:
            self.forget_sent(source, tick)

    def consolidated(self, stored: GameMemory) -> None:
        self.expected[stored.memory_id] = stored
        for source in stored.consolidates:
            if source in self.expected:
                tick = stored.moment.tick
                self.hidden_by.setdefault(source, {})[stored.memory_id] = tick
                self.fresh_forgets.append(source)
        self.acknowledged["consolidate"] += 1

    def erase_sent(self, call: EraseCall) -> None:
        self.erasing.append(call)

    def erase_done(self, call: EraseCall, *, acknowledged: bool = True) -> None:
        if call in self.erasing:
            self.erasing.remove(call)
        self.erased |= call.targets
        self.fresh_erased |= call.targets
        for memory_id in call.targets:
            self.drop(memory_id)
        if acknowledged:
            self.acknowledged["erase"] += 1

    def drop(self, memory_id: str) -> None:
        """Forget every promise about one memory (an accepted loss, or erased)."""
        self.expected.pop(memory_id, None)
        self.hidden_by.pop(memory_id, None)
        consolidation = self.summaries.pop(memory_id, None)
        for source in consolidation[2] if consolidation is not None else ():
            causes = self.hidden_by.get(source, {})
            causes.pop(memory_id, None)  # an erased summary retracts nothing any more
            if not causes:
                self.hidden_by.pop(source, None)

    def forgotten_at(self, memory_id: str) -> int | None:
        """From which tick an acknowledged retraction hides the memory (``None``: none)."""
        causes = self.hidden_by.get(memory_id)
        return min(causes.values()) if causes else None


async def erased_vectors(items: list[GameMemory]) -> list[bytes]:
    """The float32 bytes the hashing model's index would hold for ``items``."""
    if not items:
        return []
    embedder = Embedder(HashingEmbeddingProvider(), EmbeddingGate(1, 60.0), MemoryTextProjector())
    matrix = await embedder.embed_documents(items, "erased memories")
    return [np.asarray(row, dtype="<f4").tobytes() for row in matrix]


async def verify(save: Path, index: Path, ledger: Ledger) -> Findings:
    """Check the save after a kill (see the module docstring); update the ledger."""
    findings = Findings()
    try:
        async with FileGameMemoryStore(save) as store:
            found = await _everything(store)
            _check_erases_in_flight(ledger, found, findings)  # before the memories
            _check_memories(ledger, found, findings)
            await _check_retractions(store, ledger, found, findings)
            count = await store.count()
            if not len(found) <= count <= len(found) + 1:
                findings.problems.append(f"count() is {count} but enumerate finds {len(found)}")
                findings.inconsistent += 1
            report = await store.check(fix=True)
            after = await _everything(store)
            if not report.ok or await store.count() != len(after) or set(after) != set(found):
                findings.inconsistent += 1
                findings.problems.append(f"check(fix=True) left {list(report.problems)[:2]}")
    except GameMemoryError as exc:
        findings.unopenable += 1
        findings.problems.append(f"the store does not open or read: {type(exc).__name__}: {exc}")
        return findings
    if ledger.erasing:
        await _finish_erases(save, index, ledger, findings)
    await _check_bytes(save, index, ledger, findings)
    ledger.fresh_forgets.clear()
    ledger.fresh_erased.clear()
    return findings


async def _everything(store: FileGameMemoryStore) -> dict[str, GameMemory]:
    return {m.memory_id: m for s in SESSIONS for m in await store.enumerate(s)}


def _check_erases_in_flight(
    ledger: Ledger, found: dict[str, GameMemory], findings: Findings
) -> None:
    """An erase the kill interrupted is all there or all gone (then run again: the save's
    part is done, the index's may not be, and a rerun is what finishes it)."""
    for call in list(ledger.erasing):
        remaining = call.targets & set(found)
        if remaining and remaining != call.targets:
            findings.half_erased += 1
            findings.problems.append(
                f"an interrupted erase is half done: {len(remaining)} of "
                f"{len(call.targets)} remain ({sorted(remaining)[:3]})"
            )
        elif not remaining:
            for memory_id in call.targets:
                ledger.drop(memory_id)  # done in the save: nothing of it is promised now


def _check_memories(ledger: Ledger, found: dict[str, GameMemory], findings: Findings) -> None:
    lost = [key for key, item in ledger.expected.items() if found.get(key) != item]
    for key in lost:
        operation = "consolidate" if key in ledger.summaries else "append"
        findings.lost[operation] += 1
        ledger.drop(key)
    if lost:
        findings.problems.append(f"lost acknowledged memories {sorted(lost)[:5]}")
    back = sorted(ledger.erased & set(found))
    if back:
        findings.lost["erase"] += len(back)
        findings.problems.append(f"erased memories came back: {back[:5]}")


async def _check_retractions(
    store: FileGameMemoryStore, ledger: Ledger, found: dict[str, GameMemory], findings: Findings
) -> None:
    """Acknowledged retractions hide; present summaries hide their sources; nothing else."""
    for session in SESSIONS:
        visible = await _visible(store, GameMemoryQuery(session_id=session, limit=0))
        for memory_id, item in found.items():
            if item.session_id != session:
                continue
            if memory_id in ledger.hidden_by and memory_id in visible:
                findings.lost["forget"] += 1
                findings.problems.append(f"forgotten {memory_id} is recalled again")
            elif memory_id not in ledger.hide_attempts and memory_id not in visible:
                findings.problems.append(f"{memory_id} is hidden though nothing retracted it")
    for memory_id in dict.fromkeys(ledger.fresh_forgets):
        tick = ledger.forgotten_at(memory_id)
        if memory_id not in found or tick is None:
            continue
        session, owner = found[memory_id].session_id, found[memory_id].owner_id
        if memory_id in await _visible(store, _as_of(session, owner, tick)):
            findings.lost["forget"] += 1
            findings.problems.append(f"{memory_id} forgotten at {tick} is recalled as of {tick}")
        own = found[memory_id].moment.tick
        earlier = own < ledger.hide_attempts[memory_id]
        if earlier and memory_id not in await _visible(store, _as_of(session, owner, own)):
            findings.problems.append(f"{memory_id} is hidden before it was forgotten")
    for summary_id, (session, owner, sources, tick) in ledger.summaries.items():
        if summary_id not in found:
            continue
        shown = await _visible(store, _as_of(session, owner, tick)) & set(sources)
        if shown:
            findings.lost["consolidate"] += 1
            findings.problems.append(f"summary {summary_id} is there but {sorted(shown)} are not")


def _as_of(session: str, owner: str, tick: int) -> GameMemoryQuery:
    moment = GameMoment(timeline_id="world", tick=tick)
    return GameMemoryQuery(session_id=session, owner_id=owner, limit=0, at_or_before=moment)


async def _visible(store: FileGameMemoryStore, query: GameMemoryQuery) -> set[str]:
    snapshot = await store.snapshot(query)
    visible: set[str] = set()
    for view in snapshot.views:
        mask = view.mask(query)
        visible.update(view.memories[int(row)].memory_id for row in np.flatnonzero(mask))
    return visible


async def _finish_erases(save: Path, index: Path, ledger: Ledger, findings: Findings) -> None:
    """Run each erase the kill interrupted again, through the front door, as a game would."""
    try:
        opened = open_memory(save, index=index, model="hashing", create=False)
        async with await opened as front:
            for call in list(ledger.erasing):
                await front.erase(
                    call.session_id,
                    call.owner_id,
                    None if call.memory_ids is None else list(call.memory_ids),
                )
                ledger.erase_done(call, acknowledged=False)
    except GameMemoryError as exc:
        findings.problems.append(f"an interrupted erase does not finish: {exc}")
        # Named once: a rerun rounds later would also erase what was appended since.
        ledger.erasing.clear()


async def _check_bytes(save: Path, index: Path, ledger: Ledger, findings: Findings) -> None:
    """No file under the save or index folder holds an erased text or erased vector.

    Every campaign memory has a vector of its own (``campaign_memories._text``), so an
    erased memory's vector bytes found anywhere in the index are its own, left behind.
    """
    vectors = await erased_vectors([ledger.memory(m) for m in sorted(ledger.fresh_erased)])
    for folder in (save, index):
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            left = {match.decode() for match in _MARKER.findall(data)} & ledger.erased
            left_vectors = sum(vector in data for vector in vectors) if folder == index else 0
            if left or left_vectors:
                findings.erased_bytes_left += len(left) + left_vectors
                findings.lost["erase"] += len(left) + left_vectors
                findings.problems.append(
                    f"{path.relative_to(folder.parent)} still holds erased "
                    f"{sorted(left)[:3]} ({left_vectors} vectors)"
                )
