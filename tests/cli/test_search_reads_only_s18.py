"""``game-memory search`` only reads: it never embeds and writes vectors in the background.

A hybrid recall that finds memories without a vector starts their catch-up
(``catch_up.py``); the CLI's ``search`` opens without creating anything, so it turns the
catch-up off (``VectorMemoryStoreOptions.catch_up``). Before, a search changed index files
(ready entries 1 → 201 in an audit's probe), or, without an index folder, printed a warning
that the memories "could not be embedded".
"""

from __future__ import annotations

import asyncio
from pathlib import Path

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


def _seed(save: Path, numbers: range) -> None:
    async def seed() -> None:
        async with FileGameMemoryStore(save) as store:
            for index in numbers:
                await store.append(_memory(index))

    asyncio.run(seed())


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` but the store's derived read files: size and mtime."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file() and "read" not in path.relative_to(root).parts
    }


SEARCH = ["--model", "hashing", "--session", "slot", "--text", "coin", "--json"]


def test_a_search_over_memories_without_vectors_writes_no_vector(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save = tmp_path / "save"
    _seed(save, range(5))
    hashing = ["--save-dir", str(save), "--model", "hashing", "--session", "slot"]
    assert main(["rebuild", *hashing]) == 0
    _seed(save, range(5, 40))  # saved without vectors, as a lexical front door leaves them
    before = _files(tmp_path)
    capsys.readouterr()

    assert main(["search", "--save-dir", str(save), *SEARCH]) == 0

    _, err = capsys.readouterr()
    assert "could not be embedded" not in err
    assert _files(tmp_path) == before
    assert main(["status", *hashing]) == 0
    assert "35" in capsys.readouterr().out  # the 35 memories still have no vector


def test_a_search_without_an_index_folder_warns_of_no_failed_embedding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save = tmp_path / "save"
    _seed(save, range(5))
    before = _files(tmp_path)

    assert main(["search", "--save-dir", str(save), *SEARCH]) == 0

    _, err = capsys.readouterr()
    assert "could not be embedded" not in err and "catch" not in err.lower()
    assert _files(tmp_path) == before
