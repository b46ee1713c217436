"""``--maximum-entries N``: every command that opens a save opens it with the given bound.

The file store holds 100,000 memories unless opened with a larger ``maximum_entries``; the
commands (and so the sidecar the Godot addon launches) had no way to pass one, so a save past
100,000 could neither grow through the sidecar nor be migrated or read from the command line.
Each test here gives a small bound and watches the store keep it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.cli import main
from game_memory.cli.parser import build_parser
from game_memory.cli.serve import ServeSettings
from store.helpers import write_legacy

#: The memories of the seeded save: one owner, more than the small bound below.
HELD = 6
SESSION = ["--session", "slot"]


def _memory(number: int) -> GameMemory:
    return GameMemory(
        memory_id=f"m{number}",
        session_id="slot",
        owner_id="mira",
        scope="personal",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=number),
        searchable_text=f"the well, day {number}",
    )


@pytest.fixture
def save(tmp_path: Path) -> Path:
    folder = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(folder) as store:
            await store.append_many([_memory(number) for number in range(HELD)])

    asyncio.run(seed())
    return folder


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


#: Every command that opens a save, as run on the seeded save (``{save}``).
COMMANDS: dict[str, list[str]] = {
    "status": ["status", "--save-dir", "{save}", "--model", "lexical", *SESSION],
    "search": ["search", "--save-dir", "{save}", "--model", "lexical", *SESSION, "--text", "well"],
    "rebuild": ["rebuild", "--save-dir", "{save}", "--model", "hashing", *SESSION],
    "check": ["check", "--save-dir", "{save}"],
    "forget": [
        *("forget", "--save-dir", "{save}", *SESSION, "--owner", "mira"),
        *("--memory", "m0", "--timeline", "main", "--tick", "10"),
    ],
    "erase": ["erase", "--save-dir", "{save}", *SESSION, "--owner", "mira", "--dry-run"],
    "compact": ["compact", "--save-dir", "{save}"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_opens_the_save_with_the_given_bound(
    command: str, save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bound far below the save (its ledger is more than twice the bound) makes the store
    refuse the save, so the command fails; the save's own bound opens it. Before the option
    existed both were usage errors (exit 2). (``migrate`` has its own test below.)"""
    argv = [part.format(save=save) for part in COMMANDS[command]]
    code, out, err = _run([*argv, "--maximum-entries", "1"], capsys)
    assert code == 1, err
    assert "usage:" not in err and "Traceback" not in err
    assert "ledger.log is" in out + err  # the store refused the save's ledger
    code, _out, err = _run([*argv, "--maximum-entries", str(HELD)], capsys)
    assert code == 0, err


def test_reading_a_save_larger_than_the_bound_says_how_to_open_it(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [part.format(save=save) for part in COMMANDS["search"]]
    code, _out, err = _run([*argv, "--maximum-entries", "4"], capsys)
    assert code == 1 and "holds more than 4 memories" in err, err  # the session's snapshot
    code, _out, err = _run([*argv, "--maximum-entries", "1"], capsys)
    assert code == 1 and "open it with that bound" in err, err  # the ledger
    assert "--maximum-entries N on game-memory serve and every other command" in err
    assert _run([*argv, "--maximum-entries", "5000"], capsys)[0] == 0


def test_migrate_takes_the_bound_a_large_legacy_save_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save = tmp_path / "legacy"
    for number in range(3):
        write_legacy(save, _memory(number))
    argv = ["migrate", "--save-dir", str(save), "--model", "lexical"]
    code, _out, err = _run([*argv, "--maximum-entries", "2"], capsys)
    assert code == 1
    assert "the legacy save holds 3 documents, more than maximum_entries (2)" in err
    # The advice is the command to run, no longer a Python call the CLI cannot make.
    assert "game-memory migrate --save-dir SAVE --maximum-entries N" in err
    assert len(list(save.glob("*.memory.json"))) == 3  # nothing was migrated
    code, out, err = _run([*argv, "--maximum-entries", "3"], capsys)
    assert code == 0, err
    assert "migrated 3 legacy memories (3 in the save)" in out


def test_a_write_past_the_bound_is_refused_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``forget`` writes a retraction, bounded by ``maximum_entries`` as memories are."""
    folder = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(folder) as store:
            await store.append_many([_memory(0), _memory(1)])

    asyncio.run(seed())
    forget = [*("forget", "--save-dir", str(folder), *SESSION, "--owner", "mira")]
    at = ["--timeline", "main", "--tick", "10", "--maximum-entries", "2"]
    assert _run([*forget, "--memory", "m0", *at], capsys)[0] == 0
    code, _out, err = _run([*forget, "--memory", "m1", *at[:-1], "1"], capsys)
    assert code == 1
    assert "the store holds 1 retractions, its maximum_entries" in err
    assert "--maximum-entries N on game-memory serve" in err
    assert _run([*forget, "--memory", "m1", *at], capsys)[0] == 0


@pytest.mark.parametrize("value", ["0", "-3", "1000001", "many", "2.5", ""])
@pytest.mark.parametrize("command", ["serve", "migrate", "search", "check", "erase", "compact"])
def test_a_bad_bound_is_a_usage_error(
    command: str, value: str, save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = {
        "serve": ["serve", "--stdio", "--save-dir", str(save)],
        "migrate": ["migrate", "--save-dir", str(save)],
        "search": ["search", "--save-dir", str(save), *SESSION],
        "check": ["check", "--save-dir", str(save)],
        "erase": ["erase", "--save-dir", str(save), *SESSION],
        "compact": ["compact", "--save-dir", str(save)],
    }[command]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--maximum-entries", value])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith(f"usage: game-memory {command} ")
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"game-memory {command}: error: argument --maximum-entries: ")
    assert "must be a whole number from 1 to 1,000,000" in last


def test_serve_settings_carry_the_bound() -> None:
    parser = build_parser()
    given = parser.parse_args(["serve", "--stdio", "--save-dir", "s", "--maximum-entries", "7"])
    assert ServeSettings.from_args(given).maximum_entries == 7
    plain = parser.parse_args(["serve", "--stdio", "--save-dir", "s"])
    assert ServeSettings.from_args(plain).maximum_entries is None


def test_the_sidecar_refuses_a_remember_past_the_bound(tmp_path: Path) -> None:
    """``serve --stdio --maximum-entries 2`` (what the addon launches with its setting):
    the third memory is refused with the capacity error, which names the option."""
    command = [
        *(sys.executable, "-m", "game_memory.cli", "serve", "--stdio"),
        *("--save-dir", str(tmp_path / "save"), "--model", "lexical", "--maximum-entries", "2"),
    ]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    requests, replies = process.stdin, process.stdout
    assert requests is not None and replies is not None
    try:
        assert json.loads(replies.readline())["event"] == "ready"

        def ask(number: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            message = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
            requests.write(json.dumps(message) + "\n")
            requests.flush()
            while True:  # notifications (diagnostics) may come first
                reply: dict[str, Any] = json.loads(replies.readline())
                if reply.get("id") == number:
                    return reply

        def remember(tick: int) -> dict[str, Any]:
            return {
                "session_id": "slot",
                "owner_id": "mira",
                "text": f"the well, day {tick}",
                "moment": {"timeline_id": "main", "tick": tick},
            }

        assert "result" in ask(1, "initialize", {"protocol_version": 1})
        assert ask(2, "memory.remember", remember(1))["result"]["created"] is True
        assert ask(3, "memory.remember", remember(2))["result"]["created"] is True
        error = ask(4, "memory.remember", remember(3))["error"]
        assert error["code"] == -32003, error
        assert error["data"]["bound"] == "maximum_entries"
        assert "--maximum-entries N on game-memory serve" in error["message"]
        assert "maximum_entries setting of the Godot GameMemory node" in error["message"]
        _, errors = process.communicate(timeout=60)  # end of input: the sidecar exits
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, errors[-4000:]


def test_migrate_to_a_database_bounds_the_database(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    from postgres.server import server_url, temporary_schema

    with server_url() as server, temporary_schema(server) as url:
        argv = ["migrate", "--save-dir", str(save), "--to-database", url]
        code, _out, err = _run([*argv, "--maximum-entries", str(HELD - 1)], capsys)
        assert code == 1
        assert "its maximum_entries" in err and "--maximum-entries N" in err, err
        code, out, err = _run([*argv, "--maximum-entries", str(HELD)], capsys)
        assert code == 0, err
        assert f"copied {HELD} memories" in out
