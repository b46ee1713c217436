"""``open_memory``: the one front door over the real stores, in lexical and hybrid mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory.errors import EmbeddingUnavailableError
from game_memory.memory import VectorMemoryStore
from game_memory.model import GameMemory, GameMemoryKind, GameMemoryQuery, GameMoment
from game_memory.models import DEFAULT_MODEL_UNAVAILABLE
from game_memory.opening import default_index_dir, open_memory


def memory(
    text: str, tick: int, owner: str = "npc-mira", memory_id: str | None = None
) -> GameMemory:
    return GameMemory(
        memory_id=memory_id or f"m-{owner}-{tick}",
        session_id="save-1",
        owner_id=owner,
        scope="personal",
        kind=GameMemoryKind.EVENT,
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=tick),
        searchable_text=text,
    )


def query(text: str | None = None, at: int | None = None, **extra: object) -> GameMemoryQuery:
    moment = None if at is None else GameMoment(timeline_id="main", tick=at)
    return GameMemoryQuery(session_id="save-1", limit=8, text=text, at_or_before=moment, **extra)  # type: ignore[arg-type]


def test_the_default_index_folder_is_a_sibling_of_the_save(tmp_path: Path) -> None:
    assert default_index_dir(tmp_path / "saves" / "slot1") == tmp_path / "saves" / "slot1.index"
    assert default_index_dir("relative").name == "relative.index"
    assert default_index_dir("relative").is_absolute()


async def test_lexical_mode_remembers_recalls_and_reports(tmp_path: Path) -> None:
    async with await open_memory(tmp_path / "save", model="lexical") as opened:
        assert (opened.mode, opened.active_identity, opened.notice) == ("lexical", None, None)
        assert await opened.append(memory("Bought a rusty sword", 100)) is True
        assert await opened.append(memory("Bought a rusty sword", 100)) is False
        await opened.append(memory("The forge burned down with the sword", 300))
        await opened.append(memory("Sword lessons", 200, owner="npc-tom"))

        result = await opened.recall(query("sword", at=250, owner_id="npc-mira"))
        assert [hit.memory.searchable_text for hit in result.hits] == ["Bought a rusty sword"]
        (hit,) = result.hits
        assert (hit.lexical_rank, hit.vector_rank, hit.vector_score) == (1, None, None)
        assert hit.age_ticks == 150
        assert hit.fused_score > 0
        assert result.fallback is False
        assert result.snapshot.memories == (hit.memory,)

        everything = await opened.recall(query("sword"))
        assert [h.lexical_rank for h in everything.hits] == [1, 2, 3]
        assert all(h.age_ticks is None for h in everything.hits)

        status = await opened.get_status("save-1")
        assert (status.mode, status.state, status.active_identity) == ("lexical", "lexical", None)
        assert (status.total_entries, status.ready_entries, status.pending_entries) == (3, 3, 0)
        assert status.requires_rebuild is False
        assert (await opened.get_status("other-save")).total_entries == 0

        with pytest.raises(EmbeddingUnavailableError, match="no embedding model is loaded"):
            await opened.rebuild("save-1")
        with pytest.raises(EmbeddingUnavailableError):
            await opened.recall(query("sword"), require_semantic=True)

        report = await opened.migrate()
        assert (report.migrated_entries, report.partitioned_entries, report.vector_entries) == (
            0,
            3,
            0,
        )
    await opened.aclose()  # idempotent


async def test_a_missing_default_model_falls_back_to_lexical_with_a_notice(tmp_path: Path) -> None:
    opened = await open_memory(tmp_path / "save", model="default", home=tmp_path / "no-models")
    try:
        assert opened.mode == "lexical"
        assert opened.notice is not None
        assert opened.notice.code == DEFAULT_MODEL_UNAVAILABLE
        assert opened.notice.severity == "warning"
        assert "game-memory models prepare" in opened.notice.message
        assert opened.notice.details == {"kind": "missing_model_file"}
    finally:
        await opened.aclose()


async def test_a_model_folder_that_cannot_load_is_an_error_and_opens_nothing(
    tmp_path: Path,
) -> None:
    with pytest.raises(EmbeddingUnavailableError, match="does not exist"):
        await open_memory(tmp_path / "save", model=str(tmp_path / "no-such-model"))
    assert not (tmp_path / "save").exists()


async def test_the_opened_memory_serves_the_bridge_protocol(tmp_path: Path) -> None:
    from game_memory.bridge.service import BridgeService

    async with await open_memory(tmp_path / "save", model="lexical") as opened:
        service: BridgeService = opened
        assert service.mode == "lexical"
        assert isinstance(opened, VectorMemoryStore)


async def test_hashing_mode_is_hybrid_with_the_index_beside_the_save(tmp_path: Path) -> None:
    seen: list[object] = []
    async with await open_memory(
        tmp_path / "save", model="hashing", diagnostics=seen.append
    ) as opened:
        assert opened.mode == "hybrid"
        assert str(opened.active_identity) == "hashing/feature-hashing-words@v1:256"
        assert opened.notice is None
        await opened.append(memory("The blacksmith sold a rusty sword", 100))
        await opened.append(memory("A dragon burned the forge", 300))
        await opened.append(memory("Tom taught sword fighting", 50, owner="npc-tom"))

        result = await opened.recall(query("rusty sword", at=250, owner_id="npc-mira"))
        assert [hit.memory.searchable_text for hit in result.hits] == [
            "The blacksmith sold a rusty sword"
        ]
        (hit,) = result.hits
        assert hit.vector_rank == 1 and hit.vector_score is not None
        assert hit.age_ticks == 150
        assert result.fallback is False

        status = await opened.get_status("save-1")
        assert (status.mode, status.state, status.total_entries, status.ready_entries) == (
            "hybrid",
            "ready",
            3,
            3,
        )
        assert status.active_identity == opened.active_identity

        calls: list[tuple[int, int]] = []
        rebuilt = await opened.rebuild(
            "save-1", force=True, progress=lambda d, t: calls.append((d, t))
        )
        assert calls[0] == (0, 3) and calls[-1] == (3, 3)
        assert rebuilt.state == "ready" and rebuilt.requires_rebuild is False

        report = await opened.migrate()
        assert (report.migrated_entries, report.vector_entries) == (0, 0)
    assert (tmp_path / "save.index").is_dir()


async def test_an_explicit_index_folder_inside_the_save_is_refused(tmp_path: Path) -> None:
    from game_memory.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="inside the save"):
        await open_memory(tmp_path / "save", index=tmp_path / "save" / "index", model="hashing")


async def test_require_semantic_tells_a_stale_index_from_a_missing_model(tmp_path: Path) -> None:
    from game_memory.embedding.hashing import HashingEmbeddingProvider
    from game_memory.errors import DerivedIndexError
    from game_memory.index.file_index import FileVectorMemoryIndex
    from game_memory.store.file_store import FileGameMemoryStore

    async with await open_memory(tmp_path / "save", model="hashing") as opened:
        await opened.append(memory("The blacksmith sold a rusty sword", 100))

    # The same save and index under another model version: its vectors are stale.
    authoritative = FileGameMemoryStore(tmp_path / "save")
    provider = HashingEmbeddingProvider(version="v2")
    async with VectorMemoryStore(
        authoritative, FileVectorMemoryIndex(tmp_path / "save.index"), provider
    ) as changed:
        assert (await changed.get_status("save-1")).state == "rebuild_required"
        lexical = await changed.recall(query("sword"))
        assert lexical.fallback is True
        assert [hit.vector_rank for hit in lexical.hits] == [None]
        with pytest.raises(DerivedIndexError, match="rebuild"):
            await changed.recall(query("sword"), require_semantic=True)
        await changed.rebuild("save-1")
        semantic = await changed.recall(query("sword"), require_semantic=True)
        assert semantic.fallback is False and semantic.hits[0].vector_rank == 1
