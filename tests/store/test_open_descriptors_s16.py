"""The descriptors a store holds stay bounded however many large partitions it recalls
(``store/descriptors.py``), and running out of them is said so, never taken for damage.

Each NPC with a read file used to keep two descriptors open once recalled (its read file's
map and its log segment): under the usual limit of 1,024 open files, the 507th large NPC
failed, and every request after it, for as long as the process ran.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, PersistenceError
from game_memory.store import descriptors, read_path
from game_memory.store.lazy import RecordFile
from game_memory.store.records import encode_record

from .helpers import MemoryFactory, StoreFactory, log_path

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="counts this process's descriptors in /proc"
)

#: Memories per NPC: past the (lowered) size at which a partition gets a read file.
PER_NPC = 12
SESSION = "session"


@pytest.fixture(autouse=True)
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read files from 8 memories (the default is 128), and at most 3 record files open."""
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(descriptors, "MAXIMUM_OPEN_RECORD_FILES", 3)


def open_files(save: Path) -> dict[str, int]:
    """This process's open descriptors of files under ``save``, counted by suffix."""
    found: dict[str, int] = {}
    prefix = os.fspath(save) + os.sep
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the listing's own descriptor, closed since
        if target.startswith(prefix):
            suffix = target.rsplit(".", 1)[-1]
            found[suffix] = found.get(suffix, 0) + 1
    return found


def npc_memories(make_memory: MemoryFactory, owner: str, count: int = PER_NPC) -> list[Any]:
    return [
        make_memory(
            f"{owner}-m{number}",
            owner_id=owner,
            tick=number + 1,
            text=f"{owner} saw the dragon near river {number}",
        )
        for number in range(count)
    ]


async def saved_npcs(
    make_store: StoreFactory, make_memory: MemoryFactory, count: int
) -> tuple[Path, dict[str, list[GameMemory]]]:
    """A save of ``count`` NPCs of :data:`PER_NPC` memories, closed (so each has its read
    file), and the memories of each."""
    store = make_store()
    expected = {f"npc{n}": npc_memories(make_memory, f"npc{n}") for n in range(count)}
    await store.append_many([memory for memories in expected.values() for memory in memories])
    await store.aclose()
    return store.directory, expected


def query(owner: str, limit: int = 3) -> GameMemoryQuery:
    return GameMemoryQuery(session_id=SESSION, owner_id=owner, text="dragon", limit=limit)


async def recall(store: FileGameMemoryStore, owner: str) -> list[str]:
    """Recall ``owner`` through the store's snapshot, decoding its hits (lazily read)."""
    snapshot = await store.snapshot(query(owner))
    return [memory.memory_id for memory in snapshot.search_snapshot().memories[:3]]


async def test_recalling_many_large_npcs_keeps_open_descriptors_bounded(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save, expected = await saved_npcs(make_store, make_memory, 12)
    store = make_store(save)
    for owner in expected:
        assert await recall(store, owner)
        held = open_files(save)
        assert held.get("read", 0) == 0, held  # a mapped read file needs no descriptor
        assert held.get("log", 0) <= descriptors.MAXIMUM_OPEN_RECORD_FILES, held
    assert len(descriptors.RECORD_FILES) <= descriptors.MAXIMUM_OPEN_RECORD_FILES


async def test_a_partition_whose_file_was_closed_still_reads_and_appends_right(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save, expected = await saved_npcs(make_store, make_memory, 6)
    store = make_store(save)
    await recall(store, "npc0")
    for owner in ("npc1", "npc2", "npc3", "npc4"):  # push npc0's log out of the bound
        await recall(store, owner)
    assert os.fspath(log_path(save, SESSION, "npc0")) not in _open_paths(save)
    assert await store.enumerate(SESSION, "npc0") == sorted(
        expected["npc0"], key=lambda memory: memory.memory_id
    )
    assert await recall(store, "npc0")

    late = make_memory("npc0-late", owner_id="npc0", tick=99, text="npc0 saw the dragon fly")
    assert await store.append(late)
    for owner in ("npc1", "npc2", "npc3", "npc4"):
        await recall(store, owner)
    assert await store.enumerate(SESSION, "npc0") == sorted(
        [*expected["npc0"], late], key=lambda memory: memory.memory_id
    )


async def test_a_partition_whose_file_was_closed_sees_another_process_append(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save, expected = await saved_npcs(make_store, make_memory, 6)
    store = make_store(save)
    await recall(store, "npc0")
    for owner in ("npc1", "npc2", "npc3", "npc4"):
        await recall(store, owner)
    assert os.fspath(log_path(save, SESSION, "npc0")) not in _open_paths(save)
    script = textwrap.dedent(
        f"""
        import asyncio
        from game_memory import FileGameMemoryStore, GameMemory, GameMoment

        async def main():
            async with FileGameMemoryStore({os.fspath(save)!r}) as store:
                await store.append(GameMemory(
                    memory_id="npc0-other", session_id={SESSION!r}, owner_id="npc0",
                    scope="personal", kind="fact", payload_json="{{}}",
                    moment=GameMoment(timeline_id="world", tick=50),
                    searchable_text="npc0 heard of the dragon from afar"))

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    memories = await store.enumerate(SESSION, "npc0")
    assert [memory.memory_id for memory in memories] == sorted(
        [memory.memory_id for memory in expected["npc0"]] + ["npc0-other"]
    )
    assert memories[:-1] == sorted(expected["npc0"], key=lambda memory: memory.memory_id)
    assert memories[-1].searchable_text == "npc0 heard of the dragon from afar"


def _open_paths(save: Path) -> list[str]:
    paths = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(os.fspath(save)):
            paths.append(target)
    return paths


def _record_file(tmp_path: Path, payloads: list[bytes]) -> tuple[Path, list[tuple[int, int]]]:
    """A file of framed records, and each record's (offset, length)."""
    path = tmp_path / "o-x.log"
    frames = [encode_record(payload) for payload in payloads]
    path.write_bytes(b"".join(frames))
    places, offset = [], 0
    for frame in frames:
        places.append((offset, len(frame)))
        offset += len(frame)
    return path, places


def _opened(path: Path) -> RecordFile:
    return RecordFile(os.fspath(path), os.open(path, os.O_RDONLY))


def test_a_record_file_past_the_bound_closes_and_reads_again_when_asked(
    tmp_path: Path,
) -> None:
    path, places = _record_file(tmp_path, [b"first", b"second"])
    file = _opened(path)
    others = [_opened(path) for _ in range(descriptors.MAXIMUM_OPEN_RECORD_FILES)]
    assert not file.holds_descriptor and all(other.holds_descriptor for other in others)
    assert file.record(*places[1]) == b"second"  # opened again: now the most recent
    assert file.holds_descriptor and not others[0].holds_descriptor
    with path.open("ab") as grown:  # a log only grows: still the same file
        grown.write(encode_record(b"third"))
    file.release()
    assert file.record(*places[0]) == b"first"


def test_a_record_file_replaced_while_closed_is_refused_not_read(tmp_path: Path) -> None:
    path, places = _record_file(tmp_path, [b"first", b"second"])
    file = _opened(path)
    file.release()
    copy = tmp_path / "copy"
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)  # same bytes, another file: what a rewrite leaves
    with pytest.raises(PersistenceError, match=r"was replaced or removed .* not damaged"):
        file.record(*places[0])
    path.unlink()
    with pytest.raises(PersistenceError, match="was replaced or removed"):
        file.record(*places[0])


def _refusing(monkeypatch: pytest.MonkeyPatch, refused: Callable[[str], bool]) -> None:
    """Make ``os.open`` answer EMFILE for the paths ``refused`` names."""
    real = os.open

    def fake(path: Any, *args: Any, **kwargs: Any) -> int:
        if refused(os.fspath(path)):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


def _says_out_of_descriptors(error: PersistenceError) -> None:
    message = str(error)
    assert "too many open files" in message and "ulimit -n" in message, message
    assert "not damaged" in message and "--accept-loss" not in message, message
    assert descriptors.out_of_descriptors(error)


def test_a_record_file_that_cannot_be_opened_again_says_too_many_open_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, places = _record_file(tmp_path, [b"first"])
    file = _opened(path)
    file.release()
    _refusing(monkeypatch, lambda name: name == os.fspath(path))
    with pytest.raises(PersistenceError) as raised:
        file.record(*places[0])
    _says_out_of_descriptors(raised.value)
    assert os.fspath(path) in str(raised.value)


async def test_a_load_without_descriptors_says_so_and_recovers_once_they_are_back(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    save, expected = await saved_npcs(make_store, make_memory, 2)
    store = make_store(save)
    assert await recall(store, "npc0")  # the store is open and works
    segment = os.fspath(log_path(save, SESSION, "npc1"))
    with monkeypatch.context() as patched:
        _refusing(patched, lambda name: name.endswith(".read") or name == segment)
        with pytest.raises(PersistenceError) as raised:
            await store.snapshot(query("npc1"))
    _says_out_of_descriptors(raised.value)
    # Nothing was cached or marked by the failure: with descriptors back, it reads.
    assert await recall(store, "npc1")
    assert await store.enumerate(SESSION, "npc1") == sorted(
        expected["npc1"], key=lambda memory: memory.memory_id
    )


def test_under_a_low_limit_of_open_files_many_large_npcs_are_recalled(tmp_path: Path) -> None:
    """End to end, in a process whose limit of open files is 96: 60 NPCs with read files
    (two descriptors each before the bound) are recalled, then the store still writes."""
    script = textwrap.dedent(
        f"""
        import asyncio, resource
        from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, GameMoment
        from game_memory.store import read_path
        read_path.LAZY_MINIMUM = 8
        try:
            from game_memory.store import descriptors
            descriptors.MAXIMUM_OPEN_RECORD_FILES = 32
        except ImportError:
            pass

        def memory(owner, number):
            return GameMemory(
                memory_id=f"{{owner}}-{{number}}", session_id="s", owner_id=owner,
                scope="personal", kind="fact", payload_json="{{}}",
                moment=GameMoment(timeline_id="world", tick=number + 1),
                searchable_text=f"{{owner}} saw the dragon near river {{number}}")

        async def main():
            save = {os.fspath(tmp_path / "save")!r}
            owners = [f"npc{{n}}" for n in range(60)]
            async with FileGameMemoryStore(save) as store:
                await store.append_many([memory(o, n) for o in owners for n in range(12)])
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (96, hard))
            async with FileGameMemoryStore(save) as store:
                for owner in owners:
                    query = GameMemoryQuery(
                        session_id="s", owner_id=owner, text="dragon", limit=3)
                    snapshot = await store.snapshot(query)
                    hits = snapshot.search_snapshot().memories[:3]
                    assert hits and all(hit.owner_id == owner for hit in hits)
                await store.append(memory("npc0", 99))
                assert len(await store.enumerate("s", "npc0")) == 13
            print("recalled", len(owners))

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "recalled 60"
