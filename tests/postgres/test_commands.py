"""``open_memory``, the CLI and ``serve`` on a ``postgresql://`` URL; ``migrate --to-database``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bridge.test_serve import client, remember, start, websocket_args
from game_memory import (
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameMemory,
    GameMemoryQuery,
    open_memory,
)
from game_memory.cli import main
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from game_memory.store.documents import encode_legacy_document
from store.helpers import legacy_name


def _memory(number: int, owner: str = "npc-1", text: str | None = None) -> GameMemory:
    return GameMemory(
        memory_id=f"m{number}",
        session_id="save-1",
        owner_id=owner,
        scope="village",
        kind="event",
        payload_json="{}",
        moment={"timeline_id": "main", "tick": number},
        searchable_text=text or f"memory number {number} about the forge",
    )


async def test_open_memory_opens_the_postgres_pair_for_a_url(database: str, tmp_path: Path) -> None:
    memory = await open_memory(database, model="hashing")
    try:
        assert isinstance(memory.authoritative, PostgresGameMemoryStore)
        assert isinstance(memory.index, PostgresVectorIndex)
        assert await memory.append(_memory(1, text="the cat sleeps by the forge"))
        hits = await memory.recall(GameMemoryQuery(session_id="save-1", limit=3, text="cat"))
        assert [hit.channels for hit in hits.hits] == ["both"]
    finally:
        await memory.aclose()
    mixed = await open_memory(database, index=tmp_path / "index", model="hashing")
    try:
        assert isinstance(mixed.index, FileVectorMemoryIndex)
        assert len(await mixed.enumerate("save-1")) == 1
    finally:
        await mixed.aclose()


def test_every_command_takes_database_in_place_of_save_dir(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def fill() -> None:
        store = PostgresGameMemoryStore(database)
        try:
            for number in range(3):
                await store.append(_memory(number))
        finally:
            await store.aclose()

    asyncio.run(fill())
    common = ["--database", database, "--model", "hashing"]
    assert main(["status", *common, "--session", "save-1"]) == 0
    status = capsys.readouterr().out
    assert "│ pending_entries  │ 3" in status and "│ requires_rebuild │ True" in status
    assert main(["rebuild", *common, "--session", "save-1"]) == 0
    assert "3 ready" in capsys.readouterr().out
    assert main(["search", *common, "--session", "save-1", "--text", "forge", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found["memories"]) == 3 and not found["fallback"]
    assert main(["check", "--database", database]) == 0
    assert "3 memories" in capsys.readouterr().out
    assert main(["migrate", *common]) == 0
    with pytest.raises(SystemExit):
        main(["status", "--database", database, "--save-dir", "x", "--session", "s"])
    assert main(["check", "--database", "postgresql://u:pw@127.0.0.1:1/none"]) == 1
    assert "could not reach" in capsys.readouterr().err


def _legacy_save(folder: Path, memories: list[GameMemory]) -> None:
    folder.mkdir(parents=True)
    for memory in memories:
        (folder / legacy_name(memory)).write_bytes(encode_legacy_document(memory))


def test_migrate_to_database_copies_a_save_idempotently_and_resumes(
    database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save = tmp_path / "save"

    async def fill(numbers: range) -> None:
        store = FileGameMemoryStore(save)
        try:
            for number in numbers:
                await store.append(_memory(number, owner=f"npc-{number % 3}"))
        finally:
            await store.aclose()

    async def stored() -> list[GameMemory]:
        store = PostgresGameMemoryStore(database)
        try:
            return await store.enumerate("save-1")
        finally:
            await store.aclose()

    asyncio.run(fill(range(1_200)))
    arguments = ["migrate", "--to-database", database, "--save-dir", str(save)]
    assert main(arguments) == 0
    assert "1200 added, 0 already there" in capsys.readouterr().out
    assert main(arguments) == 0
    assert "0 added, 1200 already there" in capsys.readouterr().out
    asyncio.run(fill(range(1_200, 1_300)))  # the folder grew: a rerun copies only the new
    assert main(arguments) == 0
    assert "100 added, 1200 already there" in capsys.readouterr().out
    copied = asyncio.run(stored())
    assert len(copied) == 1_300

    async def expected() -> list[GameMemory]:
        store = FileGameMemoryStore(save)
        try:
            return await store.enumerate("save-1")
        finally:
            await store.aclose()

    assert copied == asyncio.run(expected())


def test_migrate_to_database_refuses_an_id_held_with_other_content(
    database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _legacy_save(tmp_path / "legacy", [_memory(1), _memory(2)])

    async def conflicting() -> None:
        store = PostgresGameMemoryStore(database)
        try:
            await store.append(_memory(2, text="something else"))
        finally:
            await store.aclose()

    asyncio.run(conflicting())
    arguments = ["migrate", "--to-database", database, "--save-dir", str(tmp_path / "legacy")]
    assert main(arguments) == 1
    assert "'m2'" in capsys.readouterr().err


async def test_serve_takes_database_in_place_of_save_dir(database: str, tmp_path: Path) -> None:
    arguments = ("--database", database, *websocket_args(), "--model", "hashing")
    server = await start(tmp_path, *arguments)
    async with client(server) as rpc:
        created = await rpc.result("memory.remember", remember("Bought a sword at the forge", 100))
        assert created["created"] is True
        recalled = await rpc.result(
            "memory.recall", {"session_id": "save-1", "text": "sword", "owner_id": "npc-mira"}
        )
        assert [m["text"] for m in recalled["memories"]] == ["Bought a sword at the forge"]
    await server.close_stdin()
    assert await server.wait(30) == 0, server.stderr()
    store = PostgresGameMemoryStore(database)
    try:
        assert [m.searchable_text for m in await store.enumerate("save-1")] == [
            "Bought a sword at the forge"
        ]
    finally:
        await store.aclose()


def test_search_on_a_database_hints_at_the_rebuild_with_database(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def fill() -> None:
        store = PostgresGameMemoryStore(database)
        try:
            await store.append(_memory(1))
        finally:
            await store.aclose()

    asyncio.run(fill())
    common = ["--database", database, "--model", "hashing", "--session", "save-1"]
    assert main(["search", *common, "--text", "forge"]) == 0
    err = capsys.readouterr().err
    assert "game-memory rebuild --database" in err and "--save-dir" not in err
