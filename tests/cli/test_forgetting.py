"""``game-memory forget``, ``erase`` and ``compact``, run in-process on real folders."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from game_memory import (
    FileGameMemoryStore,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    open_memory,
)
from game_memory.cli import main
from game_memory.cli.options import recall_settings
from game_memory.cli.parser import build_parser


def _memory(number: int, owner: str = "mira") -> GameMemory:
    return GameMemory(
        memory_id=f"m{number}",
        session_id="slot",
        owner_id=owner,
        scope="village",
        kind="event",
        payload_json=json.dumps({"secret": f"CLI-MARKER-{number}"}),
        moment=GameMoment(timeline_id="main", tick=10 * number),
        searchable_text=f"memory {number}: the thief at the well",
    )


@pytest.fixture
def save(tmp_path: Path) -> Path:
    """A save of four memories of two NPCs, with a hashing-model index beside it."""
    folder = tmp_path / "save"

    async def seed() -> None:
        async with await open_memory(folder, model="hashing") as memory:
            for number in range(4):
                await memory.append(_memory(number, "mira" if number < 3 else "tomas"))

    asyncio.run(seed())
    return folder


def _recalled(save: Path, tick: int | None = None) -> list[str]:
    async def read() -> list[str]:
        async with FileGameMemoryStore(save) as store:
            moment = None if tick is None else GameMoment(timeline_id="main", tick=tick)
            query = GameMemoryQuery(session_id="slot", limit=10, at_or_before=moment)
            return sorted(h.memory.memory_id for h in (await store.snapshot(query)).lexical)

    return asyncio.run(read())


def _forget(save: Path, *extra: str) -> list[str]:
    return ["forget", "--save-dir", str(save), "--session", "slot", "--owner", "mira", *extra]


def test_forget_retracts_as_of_a_moment(save: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = _forget(save, "--memory", "m1", "--timeline", "main", "--tick", "25")
    assert main(arguments) == 0
    assert "forgot 'm1' of 'mira'" in capsys.readouterr().out
    assert _recalled(save, 30) == ["m0", "m2", "m3"]
    assert _recalled(save, 20) == ["m0", "m1", "m2"]
    assert main([*arguments, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"memory_id": "m1", "forgotten": False}


def test_forgetting_an_unknown_memory_is_one_line_and_exit_1(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_forget(save, "--memory", "m9", "--timeline", "main", "--tick", "1"))
    errors = capsys.readouterr().err
    assert code == 1 and "holds no memory 'm9'" in errors and "Traceback" not in errors
    # The advice is a command of this CLI (there is no 'enumerate' command), runnable as
    # written: it lists what the owner holds.
    assert "enumerate" not in errors
    (listing,) = re.findall(r"'(game-memory search [^']*)'", errors.replace("\n", ""))
    assert main(shlex.split(listing)[1:]) == 0
    listed = capsys.readouterr().out
    assert all(f"memory {number}: the thief" in listed for number in range(3))


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The error line of a bad argument: exit code 2 after the command's usage line."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(f"usage: game-memory {argv[0]} "), err
    assert "Traceback" not in err and "bug" not in err
    return err.strip().splitlines()[-1]


def test_forget_at_a_tick_out_of_range_is_the_usage_error_search_gives(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tick = ["--timeline", "main", "--tick", "9" * 23]
    forget = _usage_error(_forget(save, "--memory", "m1", *tick), capsys)
    where = ["--save-dir", str(save), "--model", "lexical", "--session", "slot"]
    search = _usage_error(["search", *where, *tick], capsys)
    reason = "error: argument --tick: Input should be less than or equal to 9223372036854775807"
    assert forget == f"game-memory forget: {reason}" and search == f"game-memory search: {reason}"
    assert _recalled(save, tick=100) == ["m0", "m1", "m2", "m3"]  # nothing forgotten


def test_erase_refuses_an_index_dir_that_does_not_exist_before_erasing(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = save.with_name("save.index")
    vectors = sorted(path.read_bytes() for path in index.rglob("*") if path.is_file())
    typo = save.with_name("save.idx")
    base = ["erase", "--save-dir", str(save), "--session", "slot", "--index-dir", str(typo)]
    for extra in ([], ["--owner", "mira"], ["--dry-run"]):
        assert main([*base, *extra]) == 1
        errors = capsys.readouterr().err
        assert f"--index-dir {typo} does not exist; nothing was erased" in errors
    assert _recalled(save) == ["m0", "m1", "m2", "m3"]
    assert sorted(path.read_bytes() for path in index.rglob("*") if path.is_file()) == vectors
    assert not typo.exists()
    # The default index folder may be absent: then the save alone is erased, as before.
    shutil.rmtree(index)
    assert main(["erase", "--save-dir", str(save), "--session", "slot"]) == 0
    out = capsys.readouterr().out
    assert "erased 4 memories for good" in out and "vectors" not in out
    assert _recalled(save) == []


def test_erase_drops_memories_and_their_vectors(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = save.with_name("save.index")
    assert index.is_dir()
    base = ["erase", "--save-dir", str(save), "--session", "slot"]
    assert main([*base, "--owner", "mira", "--memory", "m0", "--memory", "m2", "--dry-run"]) == 0
    assert "would erase 2 memories" in capsys.readouterr().out
    assert _recalled(save) == ["m0", "m1", "m2", "m3"]
    assert main([*base, "--owner", "mira", "--memory", "m0", "--memory", "m2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"erased": 2}
    assert _recalled(save) == ["m1", "m3"]
    for folder in (save, index):
        for path in folder.rglob("*"):
            if path.is_file():
                assert b"CLI-MARKER-0" not in path.read_bytes(), path

    async def status() -> tuple[int, int]:
        async with await open_memory(save, model="hashing") as memory:
            found = await memory.get_status("slot")
            return found.total_entries, found.orphan_entries

    assert asyncio.run(status()) == (2, 0)
    assert main([*base]) == 0
    assert "erased 2 memories and its vectors for good: session 'slot'" in capsys.readouterr().out
    assert _recalled(save) == []


def test_erase_refuses_memories_without_an_owner_and_a_missing_save(
    tmp_path: Path, save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["erase", "--save-dir", str(save), "--session", "slot", "--memory", "m1"]
    assert "--memory needs --owner" in _usage_error(argv, capsys)  # a bad argument: exit 2
    assert _recalled(save) == ["m0", "m1", "m2", "m3"]
    missing = tmp_path / "nothing here"
    assert main(["erase", "--save-dir", str(missing), "--session", "slot"]) == 1
    assert "there is no save" in capsys.readouterr().err
    assert not missing.exists()  # erase never creates a save


def test_compact_prints_the_size_before_and_after(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (save / ".game-memory" / "leftover.tmp").write_bytes(b"x" * 1000)
    assert main(["compact", "--save-dir", str(save), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files_removed"] == 1
    assert report["bytes_before"] - report["bytes_after"] == 1000
    assert main(["compact", "--save-dir", str(save)]) == 0
    assert "compacted:" in capsys.readouterr().out


def test_serve_takes_the_retention_policy() -> None:
    arguments = ["serve", "--stdio", "--save-dir", "s", "--maximum-memories-per-owner", "50"]
    settings = recall_settings(build_parser().parse_args(arguments))
    assert settings.options is not None
    assert settings.options.maximum_memories_per_owner == 50
    refused = [*arguments[:-1], "0"]
    with pytest.raises(ValueError, match="maximum-memories-per-owner"):
        recall_settings(build_parser().parse_args(refused))


def test_serve_can_keep_no_int8_copies() -> None:
    arguments = ["serve", "--stdio", "--save-dir", "s", "--maximum-memories-per-owner", "50"]
    settings = recall_settings(build_parser().parse_args([*arguments, "--no-int8-copies"]))
    assert settings.options is not None
    assert settings.options.int8_copies is False
    assert settings.options.maximum_memories_per_owner == 50  # kept beside it
    alone = recall_settings(build_parser().parse_args([*arguments[:4], "--no-int8-copies"]))
    assert alone.options is not None and alone.options.int8_copies is False
    default = recall_settings(build_parser().parse_args(arguments[:4]))
    assert default.options is None or default.options.int8_copies


def _ctrl_c_during(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make the front door's ``name`` receive a real SIGINT while it works (a player's
    Ctrl-C in the terminal), then carry on as the library does: a write is never cut."""
    import os
    import signal

    from game_memory.memory import VectorMemoryStore

    real = getattr(VectorMemoryStore, name)

    async def interrupted(self: VectorMemoryStore, *args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.05)  # the signal lands while the write runs
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(VectorMemoryStore, name, interrupted)


@pytest.mark.parametrize(
    ("command", "method", "report"),
    [
        (["erase", "--session", "slot", "--owner", "mira"], "erase", "erased 3 memories"),
        (["compact"], "compact", "compacted: "),
        (["migrate"], "migrate", "migrated 0 legacy memories"),
        (
            [
                *("forget", "--session", "slot", "--owner", "mira", "--memory", "m1"),
                *("--timeline", "main", "--tick", "5"),
            ],
            "forget",
            "forgot 'm1'",
        ),
    ],
)
def test_a_ctrl_c_during_a_write_reports_what_it_did_then_exits_130(
    save: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    command: list[str],
    method: str,
    report: str,
) -> None:
    """An erase of 99,000 memories ran 3 to 6 s after a Ctrl-C (a write is never stopped
    halfway), then printed only "interrupted": the user thought it cut short, and a rerun
    reported "erased 0". The Ctrl-C is noted at once, the report follows, then 130."""
    _ctrl_c_during(monkeypatch, method)
    code = main([*command[:1], "--save-dir", str(save), *command[1:]])
    out, err = capfd.readouterr()  # the note is written to fd 2
    assert code == 130
    assert report in out
    assert "goes on to the end" in err  # (after a notice of the model, if any)
    assert "ran to its end first: the report is complete" in err
    if method == "erase":
        assert _recalled(save) == ["m3"]
