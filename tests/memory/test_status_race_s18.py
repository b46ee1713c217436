"""A status taken while the game remembers counts no orphans (audit s18, multiprocess F1).

``get_status`` reads the save, then the index. A memory saved and indexed in between (by
another task of the same front door, or by another process) has an index entry but no
place in that read of the save; it was counted as an orphan, so the session read
``degraded`` with ``requires_rebuild`` though nothing was wrong, and a rebuild's final
status (the same count) made ``game-memory rebuild`` exit 1. The status now checks each
orphan against a read of the save made after the index read.

The tests taking ``make_vector_store`` run on PostgreSQL too
(``tests/postgres/test_status_race_s18.py``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import (
    GameMemoryQuery,
    VectorMemoryState,
    VectorMemoryStatus,
    VectorMemoryStore,
    open_memory,
)
from support.vectors import MemoryFactory, VectorStoreFactory


def append_after_session_read(
    store: VectorMemoryStore,
    monkeypatch: pytest.MonkeyPatch,
    when: int,
    append: Callable[[], Awaitable[object]],
) -> list[int]:
    """Make the ``when``-th read of the whole session (1-based) complete an append (saved
    and indexed) right after it read the save: the interleaving of a status and a game
    that remembers meanwhile. Returns the list of session reads made (for asserts)."""
    original = store.authoritative.snapshot
    reads: list[int] = []

    async def read_then_append(query: GameMemoryQuery, **bounds: Any) -> Any:
        views = await original(query, **bounds)
        if query.limit == 0 and query.owner_id is None:  # a read of the whole session
            reads.append(1)
            if len(reads) == when:
                await append()
        return views

    monkeypatch.setattr(store.authoritative, "snapshot", read_then_append)
    return reads


@pytest.mark.parametrize("owner_id", ["owner", "newcomer"])
async def test_a_memory_saved_between_the_save_read_and_the_index_read_is_no_orphan(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    owner_id: str,
) -> None:
    """Deterministic: the append completes exactly between the two reads of a status (an
    NPC that already has memories, and one whose partition the save read did not have)."""
    store = make_vector_store()
    await store.append(make_memory("m1", text="the miller sold flour"))

    async def remember() -> None:
        await store.append(make_memory("late", owner_id=owner_id, text="a kitten", tick=2))

    reads = append_after_session_read(store, monkeypatch, 1, remember)
    status = await store.get_status("session")
    monkeypatch.undo()
    assert (status.state, status.orphan_entries, status.requires_rebuild) == (
        VectorMemoryState.READY,
        0,
        False,
    )
    assert len(reads) == 2  # the orphan found made the status read the save again
    assert (status.ready_entries, status.total_entries) == (1, 1)  # as the first read saw
    after = await store.get_status("session")
    assert (after.state, after.ready_entries, after.orphan_entries) == (
        VectorMemoryState.READY,
        2,
        0,
    )


async def test_a_true_orphan_is_still_counted_beside_a_memory_saved_meanwhile(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The second read excuses only what it holds: a vector whose memory is not in the
    save (this save never had it) stays an orphan."""
    first = make_vector_store()
    await first.append(make_memory("gone", text="the cat"))
    await first.append(make_memory("kept", text="a dog"))
    other = make_vector_store(save=tmp_path / "other-save")
    await other.authoritative.append(make_memory("kept", text="a dog"))

    async def remember() -> None:
        await other.append(make_memory("late", text="a kitten", tick=2))

    append_after_session_read(other, monkeypatch, 1, remember)
    status = await other.get_status("session")
    monkeypatch.undo()
    assert (status.state, status.orphan_entries, status.ready_entries) == (
        VectorMemoryState.DEGRADED,
        1,
        1,
    )


async def test_a_rebuild_ends_ready_when_a_memory_is_saved_during_its_final_status(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rebuild's final status is a status: an append between its two reads made it
    report an orphan, and ``game-memory rebuild`` then exited 1 ("the session still needs a
    rebuild after this one (0 stale, 0 pending, 1 orphan)")."""
    store = make_vector_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", text=f"memory {number}", tick=number))

    async def remember() -> None:
        await store.append(make_memory("late", text="a kitten", tick=9))

    # Session reads of a rebuild: its listing, the sweep's two, then the final status's.
    append_after_session_read(store, monkeypatch, 4, remember)
    status = await store.rebuild("session")
    monkeypatch.undo()
    assert (status.state, status.orphan_entries, status.requires_rebuild) == (
        VectorMemoryState.READY,
        0,
        False,
    )
    assert (await store.get_status("session")).ready_entries == 4


async def test_statuses_taken_while_tasks_append_count_no_orphans(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    """The sidecar's and the Godot node's situation: one front door, remembers running as
    tasks while the game asks for the status. Pending counts are true (in flight); an
    orphan would be false."""
    store = make_vector_store()
    stop = asyncio.Event()

    async def writer(lane: int) -> None:
        number = lane
        while not stop.is_set():
            memory = make_memory(f"m-{number}", owner_id=f"npc-{number % 3}", tick=number)
            await store.append(memory)
            number += 4

    writers = [asyncio.create_task(writer(lane)) for lane in range(4)]
    try:
        statuses = [await store.get_status("session") for _ in range(40)]
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert [s.orphan_entries for s in statuses if s.orphan_entries] == []
    final = await store.get_status("session")
    assert (final.state, final.orphan_entries, final.pending_entries) == (
        VectorMemoryState.READY,
        0,
        0,
    )


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from game_memory import GameMemory, GameMoment, open_memory

    async def main(save: str, stop: str) -> None:
        memory = await open_memory(save, model="hashing")
        try:
            number = 0
            while not Path(stop).exists():
                await memory.append(GameMemory(
                    memory_id=f"p-{number}", session_id="session", owner_id=f"npc-{number % 3}",
                    scope="world", kind="event", payload_json="{}",
                    moment=GameMoment(timeline_id="world", tick=number),
                    searchable_text=f"the miller sold flour sack {number}"))
                number += 1
                if number == 1:
                    print("appending", flush=True)
        finally:
            await memory.aclose()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def statuses_beside_another_process(
    save: str, stop: Path, count: int = 150
) -> tuple[list[VectorMemoryStatus], VectorMemoryStatus]:
    """Take ``count`` statuses of ``save`` (a folder or a database URL) while another
    process appends to it (until ``stop`` exists), then the status once it has stopped.

    A stress test, not an exact interleaving (the tests above inject that): on the old
    code each of five runs met spurious orphans within its first 150 statuses.
    """
    memory = await open_memory(save, model="hashing")
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, save, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    statuses: list[VectorMemoryStatus] = []
    try:
        assert writer.stdout is not None
        started = await asyncio.to_thread(writer.stdout.readline)
        assert started == "appending\n", writer.communicate(timeout=60)
        while len(statuses) < count and writer.poll() is None:
            statuses.append(await memory.get_status("session"))
        stop.touch()
        _, errors = await asyncio.to_thread(writer.communicate, timeout=60)
        assert writer.returncode == 0, errors
        assert len(statuses) == count
        return statuses, await memory.get_status("session")
    finally:
        stop.touch()
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        await memory.aclose()


async def test_statuses_taken_while_another_process_appends_count_no_orphans(
    tmp_path: Path,
) -> None:
    """A game process appends to the save while this one (a tool: ``game-memory status``)
    asks for the status again and again."""
    statuses, final = await statuses_beside_another_process(
        str(tmp_path / "save"), tmp_path / "stop"
    )
    assert [s.orphan_entries for s in statuses if s.orphan_entries] == []
    assert (final.state, final.orphan_entries, final.pending_entries) == (
        VectorMemoryState.READY,
        0,
        0,
    )
