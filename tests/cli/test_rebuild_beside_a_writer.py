"""``game-memory rebuild`` while another process saves to the same save (a running game).

A memory saved after the rebuild listed the session is pending when it ends: the process
that saved it indexes it. The rebuild exited 1 with nothing on stderr for that (the help
promises one line saying what happened), 9 or 10 times in 10 beside a remembering sidecar.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment, VectorMemoryStore
from game_memory.cli import main


def later_memory() -> GameMemory:
    return GameMemory(
        memory_id="m2",
        session_id="slot",
        owner_id="mira",
        scope="village",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=2),
        searchable_text="the thief came back",
    )


def save_elsewhere(save: Path) -> None:
    """Save a memory as another process would: its own store, its own loop and thread."""

    async def append() -> None:
        async with FileGameMemoryStore(save) as other:
            await other.append(later_memory())

    worker = threading.Thread(target=lambda: asyncio.run(append()))
    worker.start()
    worker.join()


@pytest.fixture
def writer_during_rebuild(save: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer saves a memory once the rebuild has listed the session."""
    original = VectorMemoryStore.rebuild

    async def rebuild(
        self: VectorMemoryStore,
        session_id: str,
        *,
        force: bool = False,
        progress: Callable[[int, int], Any] | None = None,
    ) -> Any:
        saved: list[bool] = []

        def hook(done: int, total: int) -> None:
            if not saved:
                saved.append(True)
                save_elsewhere(save)
            if progress is not None:
                progress(done, total)

        return await original(self, session_id, force=force, progress=hook)

    monkeypatch.setattr(VectorMemoryStore, "rebuild", rebuild)


@pytest.mark.usefixtures("writer_during_rebuild")
def test_a_rebuild_beside_a_writer_exits_0_and_says_what_is_pending(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["rebuild", "--save-dir", str(save), "--session", "slot", "--model", "hashing"])
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert "1 memories saved while the rebuild ran" in err
    assert "pending" in out  # the status line still shows it
