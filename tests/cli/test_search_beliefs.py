"""``game-memory search`` shows the belief a memory is a version of, and only the one believed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.cli import main


def _version(memory_id: str, text: str, tick: int) -> GameMemory:
    return GameMemory(
        memory_id=memory_id,
        session_id="slot",
        owner_id="mira",
        scope="village",
        kind="fact",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=tick),
        searchable_text=text,
        belief_key="bridge.eastmarch",
    )


@pytest.fixture
def save(tmp_path: Path) -> Path:
    folder = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(folder) as store:
            await store.append(_version("open", "The bridge to Eastmarch is open.", 100))
            await store.append(_version("gone", "The bridge to Eastmarch collapsed.", 500))

    asyncio.run(seed())
    return folder


def _search(save: Path, tick: int, *extra: str) -> list[str]:
    arguments = ["search", "--save-dir", str(save), "--model", "lexical", "--session", "slot"]
    arguments += ["--text", "bridge Eastmarch", "--timeline", "main", "--tick", str(tick)]
    assert main([*arguments, *extra]) == 0
    return arguments


def test_search_as_of_a_moment_lists_the_version_believed_then(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _search(save, 300, "--json")
    before = json.loads(capsys.readouterr().out)["memories"]
    _search(save, 900, "--json")
    after = json.loads(capsys.readouterr().out)["memories"]
    assert [row["memory"]["memory_id"] for row in before] == ["open"]
    assert [row["memory"]["memory_id"] for row in after] == ["gone"]
    assert after[0]["memory"]["belief_key"] == "bridge.eastmarch"


def test_the_table_has_a_belief_column_when_a_memory_has_a_key(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _search(save, 900)
    table = capsys.readouterr().out
    assert "belief" in table and "bridge.eastmarch" in table and "collapsed" in table
    assert "is open" not in table
