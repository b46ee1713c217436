"""Power loss: every crash state of the store's recorded file operations keeps every promise.

The explorer (``explorer.py``) records a fixed workload, builds its crash states under the
strict POSIX model (``states.py``), single and double (a second power loss during the next
program's recovery), and checks each (``workload.check_state``). CI runs a few thousand
states; ``benchmarks/power_loss.py`` runs them all. The guard test proves the recorder sees
every change the workload makes, and the targeted tests below pin the three findings of
the first exploration (issue 17, item 11: A, B is in ``tests/store/test_damage.py``, C) and
the durability of a new save folder.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryError
from game_memory.store import engine as engine_module

from .explorer import explore, record
from .recorder import Op, Recorder, Tree
from .states import crash_states, materialize, replay, tree_state
from .workload import expected, legacy_documents, legacy_memories, prepare

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_no_crash_state_of_the_workload_breaks_a_promise(tmp_path: Path) -> None:
    result = explore(tmp_path, single=1_500, double=500, first_crashes=25)
    assert result.single_states == 1_500 and result.double_states >= 300
    found = result.as_json()
    assert not result.violations, json.dumps(
        {"examples": found["examples"], "recordings": found["recordings"]}, indent=1
    )


def run_guard(base: Path, *extra: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "crash.guard", str(base), *extra],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.slow
def test_the_recorder_sees_every_file_change_the_store_and_index_make(tmp_path: Path) -> None:
    result = run_guard(tmp_path / "run")
    assert result["unseen"] == []
    assert result["audited"] == result["recorded"] and int(str(result["audited"])) > 100


@pytest.mark.slow
def test_the_guard_notices_a_write_behind_the_recorders_back(tmp_path: Path) -> None:
    result = run_guard(tmp_path / "run", "--stray")
    assert result["unseen"] == [["builtin open", str(tmp_path / "run" / "save" / "stray.bin")]]


# -- the persistence model ----------------------------------------------------------------


def test_only_synced_data_and_synced_names_are_sure_to_survive() -> None:
    tree = Tree(root=0, folders={0: {}})
    ops = [
        Op("create", inode=1, parent=0, name="a"),
        Op("write", inode=1, offset=0, data=b"hello"),
        Op("fsync", inode=1),
        Op("fsync", inode=0),
        Op("write", inode=1, offset=5, data=b" world"),
        Op("create", inode=2, parent=0, name="b"),
    ]
    states = {state.digest: state for state in crash_states(tree, ops, seed=1)}
    trees = [state.tree for state in states.values() if state.point == len(ops)]
    assert {"a": b"hello"} in trees  # nothing unsynced persisted
    assert {"a": b"hello world", "b": b""} in trees  # everything did
    assert {"a": b"hello" + bytes(6), "b": b""} in trees  # the append persisted as zeros
    assert all(tree.get("a", b"")[:5] == b"hello" for tree in trees)
    assert all("a" in tree for tree in trees)  # its name was synced with its folder


def test_a_rename_is_atomic_and_durable_once_either_folder_is_synced() -> None:
    tree = Tree(root=0, folders={0: {"x": 1, "y": 2}, 1: {"f": 3}, 2: {}}, files={3: b"data"})
    ops = [
        Op("rename", inode=3, parent=1, name="f", target=2, target_name="g"),
        Op("fsync", inode=2),
    ]
    unsynced = [s.tree for s in crash_states(tree, ops, seed=1) if s.point == 1]
    assert {"x": None, "y": None, "x/f": b"data"} in unsynced
    assert {"x": None, "y": None, "y/g": b"data"} in unsynced
    assert all(("x/f" in t) != ("y/g" in t) for t in unsynced)  # never both, never neither
    assert replay(tree, ops, kept=set()) == tree_state(tree)
    synced = [s.tree for s in crash_states(tree, ops, seed=1) if s.point == 2]
    assert synced == [{"x": None, "y": None, "y/g": b"data"}]


# -- targeted findings ----------------------------------------------------------------------


def crash_trees(base: Path, recorder: Recorder) -> list[tuple[int, dict[str, bytes | None]]]:
    acks = {p for p, op in enumerate(recorder.ops) if op.kind == "mark" and op.name == "ack"}
    return [
        (sum(1 for p in acks if p < s.point), s.tree)
        for s in crash_states(recorder.initial, recorder.ops, seed=3)
    ]


async def readable(folder: Path, sessions: tuple[str, ...]) -> tuple[list[GameMemory], int]:
    async with FileGameMemoryStore(folder) as store:
        found = [m for session in sessions for m in await store.enumerate(session)]
        report = await store.check(fix=True)
        assert report.ok, report.problems
        return found, await store.count()


def test_a_rolled_back_migration_never_leaves_its_packs_without_their_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding A: the packs' removal must be durable before the journal's."""
    base = tmp_path / "run"
    prepare(base)

    def dies(self: object) -> None:
        raise RuntimeError("the migration died just before its commit")

    with monkeypatch.context() as patch:
        patch.setattr(engine_module.StoreEngine, "commit_journal", dies)

        async def first() -> None:
            async with FileGameMemoryStore(base / "save") as store:
                with pytest.raises(RuntimeError):
                    await store.migrate_legacy_layout()

        asyncio.run(first())
    assert (base / "save" / ".game-memory" / "migration.json").exists()

    async def next_writer(folder: Path, recorder: Recorder) -> None:
        async with FileGameMemoryStore(folder / "save") as store:
            await store.migrate_legacy_layout()  # rolls the batch back, then migrates again

    recorder = record(base, next_writer)
    everything = sorted(memory.memory_id for memory in legacy_memories())
    sessions = ("village", "keep")
    for number, (_acks, tree) in enumerate(crash_trees(base, recorder)):
        folder = tmp_path / f"state-{number}"
        folder.mkdir()
        materialize(tree, str(folder))
        found, count = asyncio.run(readable(folder / "save", sessions))
        assert sorted(m.memory_id for m in found) == everything
        assert count == len(everything)


def test_a_document_moved_into_the_backup_is_always_in_the_save_or_the_backup(
    tmp_path: Path,
) -> None:
    """Finding C: the backup folders must be durable before documents move into them."""
    base = tmp_path / "run"
    prepare(base)

    async def migrate(folder: Path, recorder: Recorder) -> None:
        async with FileGameMemoryStore(folder / "save") as store:
            await store.migrate_legacy_layout()

    recorder = record(base, migrate)
    for _acks, tree in crash_trees(base, recorder):
        for flat, path in legacy_documents():
            places = (
                [f"save/{path}", f"save/.game-memory/legacy/v1/{path}"]
                if flat
                else [f"save/.memory-v2/{path}", f"save/.game-memory/legacy/memory-v2/{path}"]
            )
            assert any(isinstance(tree.get(place), bytes) for place in places), path


def test_a_new_save_folder_survives_a_power_loss_after_its_first_append(tmp_path: Path) -> None:
    base = tmp_path / "run"
    base.mkdir()
    memory = expected("seg-0")

    async def first_append(folder: Path, recorder: Recorder) -> None:
        async with FileGameMemoryStore(folder / "games" / "slot-1") as store:
            await store.append(memory)
            recorder.mark("ack", memory.memory_id)

    recorder = record(base, first_append)
    acknowledged = [tree for acks, tree in crash_trees(base, recorder) if acks]
    assert acknowledged
    for number, tree in enumerate(acknowledged):
        folder = tmp_path / f"state-{number}"
        folder.mkdir()
        materialize(tree, str(folder))
        try:
            found, _count = asyncio.run(readable(folder / "games" / "slot-1", ("village",)))
        except GameMemoryError as exc:
            pytest.fail(f"the acknowledged save does not open: {exc}")
        assert found == [memory]


def test_a_salvage_cut_by_a_power_loss_keeps_every_intact_memory_and_finishes_when_rerun(
    tmp_path: Path,
) -> None:
    base = tmp_path / "run"
    kept = [expected(f"seg-{n}") for n in range(6)] + [expected("other-1")]

    async def seed() -> None:
        async with FileGameMemoryStore(base / "save") as store:
            for item in [*kept[:3], expected("seg-9"), *kept[3:]]:
                await store.append(item)

    asyncio.run(seed())
    (log,) = [
        path
        for path in (base / "save").glob(".game-memory/s-*/o-*.log")
        if b'"seg-9"' in path.read_bytes()
    ]
    data = bytearray(log.read_bytes())
    data[data.index(b'"seg-9"') + 40] ^= 0x20  # seg-9's payload: its checksum fails
    log.write_bytes(bytes(data))

    async def salvage(folder: Path, recorder: Recorder) -> None:
        async with FileGameMemoryStore(folder / "save") as store:
            assert (await store.check(accept_loss=True)).ok

    recorder = record(base, salvage)
    states = crash_trees(base, recorder)
    assert len(states) > 20
    for number, (_acks, tree) in enumerate(states):
        folder = tmp_path / f"state-{number}"
        folder.mkdir()
        materialize(tree, str(folder))

        async def rerun(save: Path) -> list[GameMemory]:
            async with FileGameMemoryStore(save) as store:
                report = await store.check(accept_loss=True)
                assert report.ok, report.problems
                assert (await store.check()).ok
                found = [m for s in ("village", "keep") for m in await store.enumerate(s)]
                assert await store.count() == len(found)
                return found

        found = asyncio.run(rerun(folder / "save"))
        assert sorted(m.memory_id for m in found) == sorted(m.memory_id for m in kept)


def test_a_record_appended_after_a_torn_marker_append_gets_its_intent_back(
    tmp_path: Path,
) -> None:
    """The state the explorer found (a double crash): the first power loss kept the
    marker's first append as zeros; the next program appended, its partition named after
    those zeros, and a second power loss lost its unsynced intent. The record is durable
    and acknowledged: the next open must write its intent again, so ``count()`` agrees
    with ``enumerate`` (before the fix the marker's record was ignored behind the zeros
    and ``count()`` stayed one short)."""
    save, crashed = tmp_path / "save", tmp_path / "crashed"

    async def run() -> tuple[int, int]:
        async with FileGameMemoryStore(save) as store:
            await store.append(expected("seg-0"))
        # What the first power loss left: the marker's unsynced append, as zeros.
        (save / ".game-memory" / "unsynced.log").write_bytes(b"\0" * 96)
        kept = (save / ".game-memory" / "ledger.log").read_bytes()
        async with FileGameMemoryStore(save) as store:
            await store.append(expected("seg-1"))
            # The second power loss, right after the acknowledgement (before the close
            # checkpoints): the durable files as they are, seg-1's unsynced intent lost.
            shutil.copytree(save, crashed)
        (crashed / ".game-memory" / "ledger.log").write_bytes(kept)
        async with FileGameMemoryStore(crashed) as store:
            found = len(await store.enumerate("village")) + len(await store.enumerate("keep"))
            return await store.count(), found

    count, found = asyncio.run(run())
    assert (count, found) == (2, 2)
