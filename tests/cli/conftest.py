"""What the command-line tests share: a save of one memory (a test module that needs
another save defines its own ``save``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment


@pytest.fixture
def save(tmp_path: Path) -> Path:
    folder = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(folder) as store:
            await store.append(
                GameMemory(
                    memory_id="m1",
                    session_id="slot",
                    owner_id="mira",
                    scope="village",
                    kind="event",
                    payload_json="{}",
                    moment=GameMoment(timeline_id="main", tick=1),
                    searchable_text="the thief at the well",
                )
            )

    asyncio.run(seed())
    return folder
