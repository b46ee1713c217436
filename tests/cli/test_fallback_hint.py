"""Issue 17, item 10: a search that fell back to lexical recall says what to run, and it works.

``search`` answered ``(lexical fallback)`` with no hint to run ``rebuild``. Now it prints
the exact ``game-memory rebuild`` command; running that command makes the next search
semantic.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.cli import main


def _memory(index: int) -> GameMemory:
    return GameMemory(
        memory_id=f"m{index}",
        session_id="slot",
        owner_id="mira",
        scope="village",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=index),
        searchable_text=f"the thief took coin number {index}",
    )


def test_a_lexical_fallback_prints_the_rebuild_that_ends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(save) as store:
            for index in range(5):
                await store.append(_memory(index))

    asyncio.run(seed())
    search = ["search", "--save-dir", str(save), "--model", "hashing", "--session", "slot"]
    search += ["--text", "coin", "--json"]
    assert main(search) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["fallback"] is True
    (hint,) = [line for line in err.splitlines() if "game-memory rebuild" in line]
    command = shlex.split(hint[hint.index("game-memory rebuild") :])
    assert command[:2] == ["game-memory", "rebuild"] and str(save) in command
    assert main(command[1:]) == 0
    capsys.readouterr()
    assert main(search) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["fallback"] is False and "game-memory rebuild" not in err


def test_an_index_folder_that_cannot_be_written_is_named_before_the_rebuild(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rebuild could not write either: "repair with: rebuild --force" alone sent the user
    # round a loop. (Simulated: root may write anywhere but a read-only mount.)
    save = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(save) as store:
            for index in range(5):
                await store.append(_memory(index))

    asyncio.run(seed())
    index = tmp_path / "save.index"
    index.mkdir()
    real_access = os.access

    def access(path: Any, mode: int, **keywords: Any) -> bool:
        if Path(path) == index and mode & os.W_OK:
            return False
        return real_access(path, mode, **keywords)

    monkeypatch.setattr(os, "access", access)
    search = ["search", "--save-dir", str(save), "--model", "hashing", "--session", "slot"]
    assert main([*search, "--text", "coin", "--json"]) == 0
    _out, err = capsys.readouterr()
    assert f"the index folder {index} is not writable" in err
    assert "make it writable, then run: game-memory rebuild" in err
