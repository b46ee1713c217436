"""Game data is printed as stored: BBCode, Rich-like tags and emoji codes are not markup.

Godot games write ``[b]...[/b]`` into memory text; a ``[/x]`` that Rich reads as a closing
tag crashed ``search`` and ``status`` (exit 70), and ``[bold]x[/bold]`` was dropped from
the output. Ids, sessions, paths and the install hint (``game-memory[postgres]``) too.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from game_memory import GameMemory, GameMoment, open_memory
from game_memory.cli import main

SESSION = "slot[/b]"
TEXTS = {
    "[/guard]": "the guard said [/halt] at the gate",
    "mira": "the sign read [bold]CLOSED[/bold] :smile: at the inn",
}


@pytest.fixture
def save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COLUMNS", "250")  # one table row per memory: the text is not wrapped
    folder = tmp_path / "save"

    async def seed() -> None:
        async with await open_memory(folder, model="lexical") as memory:
            for tick, (owner, text) in enumerate(TEXTS.items()):
                await memory.append(
                    GameMemory(
                        memory_id=f"m[/b]{tick}",
                        session_id=SESSION,
                        owner_id=owner,
                        scope="village",
                        kind="event",
                        payload_json="{}",
                        moment=GameMoment(timeline_id="main", tick=tick),
                        searchable_text=text,
                    )
                )

    asyncio.run(seed())
    return folder


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return code, out, err


def test_search_and_status_print_bracketed_data_exactly(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--save-dir", str(save), "--model", "lexical", "--session", SESSION]
    code, out, _err = run(["search", *where, "--text", "guard sign"], capsys)
    assert code == 0
    for owner, text in TEXTS.items():
        (row,) = [line for line in out.splitlines() if text in line]
        assert owner in row
    code, out, _err = run(["status", *where], capsys)
    assert code == 0 and f"session {SESSION}" in out
    forget = ["forget", *where[:2], "--session", SESSION, "--owner", "mira"]
    code, out, _err = run(
        [*forget, "--memory", "m[/b]1", "--timeline", "main", "--tick", "5"], capsys
    )
    assert code == 0 and "'m[/b]1' of 'mira' in session 'slot[/b]'" in out


def test_an_error_line_names_a_bracketed_path_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("saves[/slot]", "saves[bold]slot[/bold]", "saves:smile:"):
        path = tmp_path / name
        for argv in (
            ["search", "--save-dir", str(path), "--model", "lexical", "--session", "s"],
            ["check", "--save-dir", str(path)],
            ["erase", "--save-dir", str(path), "--session", "s"],
        ):
            code, _out, err = run(argv, capsys)
            assert code == 1 and f"there is no save at {path}:" in err, err


def test_the_demo_names_a_bracketed_data_folder_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    data = tmp_path / "demo[bold]y[/x]"
    code, out, _err = run(["demo", "--model", "lexical", "--data", str(data)], capsys)
    assert code == 0 and f"save: {data}" in out and f"save:    {data / 'save'}" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],
        ["search", "--session", "s", "--model", "lexical"],
        ["erase", "--session", "s"],
        ["compact"],
    ],
)
def test_database_without_the_postgres_extra_is_one_line_naming_the_extra(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "game_memory.postgres", None)  # import fails: no extra
    database = ["--database", "postgresql://u:p@127.0.0.1:1/db"]
    code, _out, err = run([argv[0], *database, *argv[1:]], capsys)
    assert code == 1 and "pip install 'game-memory[postgres]'" in err, err
    assert err.count("\n") == 1
