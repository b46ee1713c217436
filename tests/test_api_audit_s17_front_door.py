"""Audit s17 of the front door and the stores: bad arguments get the library's error.

Public constructors and methods refuse a bad argument with ``InvalidArgumentError`` naming
it, never a raw ``TypeError``, ``AttributeError``, ``ValueError`` or pydantic error from
inside; ``open_memory`` given a provider *class* says to pass an instance, and its cleanup
never hides the first error. An erase (or an append) whose save part is done but whose
index part fails, even on the index's lock file, says so with ``DerivedIndexError``, not
the save's ``PersistenceError``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import (
    DerivedIndexError,
    DiagnosticSeverity,
    FileGameMemoryStore,
    GameMemory,
    GameMemoryKind,
    GameMoment,
    HashingEmbeddingProvider,
    InMemoryGameMemoryStore,
    InMemoryVectorIndex,
    InvalidArgumentError,
    MemoryTextProjector,
    MemoryVectorDiagnostic,
    PersistenceError,
    RuntimeMemoryLifecycle,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
    open_memory,
)

INDEX_LOCK = os.path.join(".game-memory-index", "lock")


def _memory(memory_id: str, *, owner_id: str = "o", tick: int = 10, **fields: Any) -> GameMemory:
    values: dict[str, Any] = {
        "memory_id": memory_id,
        "session_id": "s",
        "owner_id": owner_id,
        "scope": "v",
        "kind": GameMemoryKind.EVENT,
        "payload_json": "{}",
        "moment": GameMoment(timeline_id="main", tick=tick),
        "searchable_text": f"the smith remembers {memory_id}",
    }
    values.update(fields)
    return GameMemory(**values)


def _summary() -> GameMemory:
    return _memory("sum", tick=20, kind=GameMemoryKind.REFLECTION)


def _stores(tmp_path: Path) -> list[InMemoryGameMemoryStore | FileGameMemoryStore]:
    return [InMemoryGameMemoryStore(), FileGameMemoryStore(tmp_path / "save")]


# -- 1. consolidate ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "file"])
@pytest.mark.parametrize(
    ("memory_ids", "summary", "named"),
    [
        (["m1"], None, "summary"),
        (["m1"], "a summary", "summary"),
        ([["m1"]], _summary(), "memory id"),
        ([{"m1"}], _summary(), "memory id"),
    ],
)
async def test_consolidate_refuses_a_bad_summary_or_id_with_the_librarys_error(
    tmp_path: Path, backend: str, memory_ids: Any, summary: Any, named: str
) -> None:
    save = InMemoryGameMemoryStore() if backend == "memory" else FileGameMemoryStore(tmp_path)
    async with VectorMemoryStore(save) as memory:
        await memory.append(_memory("m1"))
        with pytest.raises(InvalidArgumentError, match=named):
            await memory.consolidate("s", "o", memory_ids, summary)
        assert [m.memory_id for m in await memory.enumerate("s")] == ["m1"]


async def test_the_in_memory_store_refuses_a_summary_that_is_no_memory(tmp_path: Path) -> None:
    async with InMemoryGameMemoryStore() as store:
        await store.append(_memory("m1"))
        with pytest.raises(InvalidArgumentError, match="summary"):
            await store.consolidate("s", "o", ["m1"], None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="memory id"):
            await store.consolidate("s", "o", [["m1"]], _summary())  # type: ignore[list-item]
        assert await store.count() == 1


# -- 2. a provider class given for an instance ------------------------------------------------


async def test_open_memory_refuses_a_provider_class_and_says_to_pass_an_instance(
    tmp_path: Path,
) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"pass an instance.*HashingEmbeddingProvider\(\)"
    ):
        await open_memory(tmp_path / "save", model=HashingEmbeddingProvider)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_the_front_door_refuses_a_provider_class() -> None:
    with pytest.raises(InvalidArgumentError, match=r"provider must .* pass an instance"):
        VectorMemoryStore(
            InMemoryGameMemoryStore(),
            InMemoryVectorIndex(),
            HashingEmbeddingProvider,  # type: ignore[arg-type]
        )


class _CloseFails(HashingEmbeddingProvider):
    """A provider whose close fails too: it must not hide why ``open_memory`` failed."""

    async def aclose(self) -> None:
        raise RuntimeError("the model would not close")


async def test_a_failing_cleanup_never_hides_the_first_error_of_open_memory(
    tmp_path: Path,
) -> None:
    save = tmp_path / "save"
    with pytest.raises(InvalidArgumentError, match="inside the save folder") as raised:
        await open_memory(save, index=save / "index", model=_CloseFails())
    assert any("the model would not close" in note for note in raised.value.__notes__)


# -- 3. open_memory's paths -------------------------------------------------------------------


@pytest.mark.parametrize("home", [5, b"/models", ["/models"], "/mod\0els"])
async def test_open_memory_refuses_a_home_that_is_no_folder_path(tmp_path: Path, home: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="home"):
        await open_memory(tmp_path / "save", model="lexical", home=home)
    assert list(tmp_path.iterdir()) == []


async def test_open_memory_refuses_a_save_path_with_a_nul_character(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"save .*NUL"):
        await open_memory(f"{tmp_path}/sa\0ve", model="lexical")
    assert list(tmp_path.iterdir()) == []


async def test_open_memory_refuses_an_index_path_with_a_nul_character(tmp_path: Path) -> None:
    # Accepted, it opened: every append then lost its vector quietly, and get_status
    # raised a raw ValueError.
    with pytest.raises(InvalidArgumentError, match=r"index .*NUL"):
        await open_memory(tmp_path / "save", index=f"{tmp_path}/ind\0ex", model="hashing")
    assert list(tmp_path.iterdir()) == []


async def test_open_memory_refuses_a_model_path_with_a_nul_character(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"model .*NUL"):
        await open_memory(tmp_path / "save", model=f"{tmp_path}/mod\0el")


# -- 4. the stores' own methods ---------------------------------------------------------------


@pytest.mark.parametrize("batch", [None, 5, "m1"])
async def test_the_stores_append_many_refuses_what_is_no_list(tmp_path: Path, batch: Any) -> None:
    for store in _stores(tmp_path):
        async with store:
            with pytest.raises(InvalidArgumentError, match="append_many takes a list"):
                await store.append_many(batch)
            assert await store.count() == 0


# -- 5. constructors --------------------------------------------------------------------------


#: (the argument the message names, a construction that must be refused); relative folders:
#: the test runs in its own temporary folder.
CONSTRUCTORS: list[tuple[str, Callable[[], object]]] = [
    ("authoritative", lambda: VectorMemoryStore(None)),  # type: ignore[arg-type]
    ("authoritative", lambda: VectorMemoryStore("save")),  # type: ignore[arg-type]
    ("authoritative", lambda: VectorMemoryStore(InMemoryGameMemoryStore)),  # type: ignore[arg-type]
    (
        "index",
        lambda: VectorMemoryStore(
            InMemoryGameMemoryStore(),
            "x",  # type: ignore[arg-type]
            HashingEmbeddingProvider(),
        ),
    ),
    (
        "projector",
        lambda: VectorMemoryStore(
            InMemoryGameMemoryStore(),
            InMemoryVectorIndex(),
            HashingEmbeddingProvider(),
            projector=5,  # type: ignore[arg-type]
        ),
    ),
    ("notice", lambda: VectorMemoryStore(InMemoryGameMemoryStore(), notice="x")),  # type: ignore[arg-type]
    ("directory", lambda: FileGameMemoryStore(None)),  # type: ignore[arg-type]
    ("directory", lambda: FileGameMemoryStore(5)),  # type: ignore[arg-type]
    ("directory", lambda: FileGameMemoryStore(b"/tmp/save")),  # type: ignore[arg-type]
    ("directory", lambda: FileGameMemoryStore("")),
    ("directory", lambda: FileGameMemoryStore("  ")),
    ("directory", lambda: FileGameMemoryStore("save\0")),
    ("lock_timeout", lambda: FileGameMemoryStore("save", lock_timeout="5")),  # type: ignore[arg-type]
    ("lock_timeout", lambda: FileGameMemoryStore("save", lock_timeout=True)),
    ("lock_timeout", lambda: FileGameMemoryStore("save", lock_timeout=float("nan"))),
    ("maximum_characters", lambda: MemoryTextProjector("x")),  # type: ignore[arg-type]
    ("maximum_characters", lambda: MemoryTextProjector(True)),
    ("synonyms", lambda: HashingEmbeddingProvider(synonyms=5)),  # type: ignore[arg-type]
    ("synonyms", lambda: HashingEmbeddingProvider(synonyms={"cat": 1})),  # type: ignore[dict-item]
    ("version", lambda: HashingEmbeddingProvider(version="")),
    ("version", lambda: HashingEmbeddingProvider(version=5)),  # type: ignore[arg-type]
    ("dimensions", lambda: HashingEmbeddingProvider(0)),
    ("dimensions", lambda: HashingEmbeddingProvider("256")),  # type: ignore[arg-type]
    ("VectorMemoryStore", lambda: RuntimeMemoryLifecycle(None)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("named", "construct"), CONSTRUCTORS)
def test_constructors_refuse_bad_arguments_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str, construct: Callable[[], object]
) -> None:
    monkeypatch.chdir(tmp_path)  # an accepted "" would take this folder as the save
    with pytest.raises(InvalidArgumentError, match=named):
        construct()
    assert list(tmp_path.iterdir()) == []


def test_the_notice_and_projector_of_their_kind_are_accepted() -> None:
    notice = MemoryVectorDiagnostic(code="c", severity=DiagnosticSeverity.INFORMATION, message="m")
    memory = VectorMemoryStore(
        InMemoryGameMemoryStore(),
        InMemoryVectorIndex(),
        HashingEmbeddingProvider(),
        projector=MemoryTextProjector(10),
        notice=notice,
    )
    assert memory.notice == notice and memory.mode == "hybrid"


@pytest.mark.parametrize("text", [None, 5, ["x"]])
async def test_the_hashing_provider_refuses_a_query_that_is_no_text(text: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="embed_query takes a text"):
        await HashingEmbeddingProvider().embed_query(text)


@pytest.mark.parametrize("texts", [None, 5, "a text", [1]])
async def test_the_hashing_provider_refuses_documents_that_are_no_texts(texts: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="embed_documents takes a list of texts"):
        await HashingEmbeddingProvider().embed_documents(texts)


@pytest.mark.parametrize("query", [None, 5, "text"])
def test_the_projector_refuses_what_is_no_query_or_memory(query: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="project_query takes a GameMemoryQuery"):
        MemoryTextProjector().project_query(query)
    with pytest.raises(InvalidArgumentError, match="project_document takes a GameMemory"):
        MemoryTextProjector().project_document(query)


# -- 6. the index's side failing after the save's write ---------------------------------------


def _failing_index_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening the index's lock file fails (EIO, as a read-only or failing disk would)."""
    real_open = os.open

    def failing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).endswith(INDEX_LOCK):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)


async def _reopened(
    tmp_path: Path, seen: list[MemoryVectorDiagnostic] | None = None, **options: Any
) -> VectorMemoryStore:
    """A save of three memories, reopened so that the next write opens the index's lock."""
    save, index = tmp_path / "save", tmp_path / "index"
    async with await open_memory(save, index=index, model="hashing") as memory:
        await memory.append_many([_memory(f"m{n}", tick=n + 1) for n in range(3)])
    memory = await open_memory(
        save,
        index=index,
        model="hashing",
        options=VectorMemoryStoreOptions(**options),
        diagnostics=None if seen is None else seen.append,
    )
    await memory.enumerate("s")
    return memory


async def test_an_erase_whose_index_lock_fails_says_the_saves_erase_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await _reopened(tmp_path)
    async with memory:
        _failing_index_lock(monkeypatch)
        with pytest.raises(DerivedIndexError) as raised:
            await memory.erase("s", "o", ["m1"])
        monkeypatch.undo()
        message = str(raised.value)
        assert "the save's erase is done" in message and "rebuild" in message
        assert isinstance(raised.value.__cause__, PersistenceError)
        assert [m.memory_id for m in await memory.enumerate("s")] == ["m0", "m2"]
        assert await memory.erase("s", "o", ["m1"]) == 0  # run again: the index follows
        status = await memory.get_status("s")
        assert status.orphan_entries == 0 and status.total_entries == 2


async def test_an_append_whose_index_lock_fails_reports_the_index_not_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[MemoryVectorDiagnostic] = []
    memory = await _reopened(tmp_path, seen, fail_when_embedding_unavailable=True)
    async with memory:
        _failing_index_lock(monkeypatch)
        with pytest.raises(DerivedIndexError, match="not the save") as raised:
            await memory.append(_memory("new", owner_id="newcomer"))
        monkeypatch.undo()
        assert isinstance(raised.value.__cause__, PersistenceError)
        assert [m.memory_id for m in await memory.enumerate("s", "newcomer")] == ["new"]
        failed = [d for d in seen if d.code == "memory_embedding_append_failed"]
        assert [d.details for d in failed] == [{"exception": "DerivedIndexError"}]
