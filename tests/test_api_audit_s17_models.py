"""Audit s17 of the public records and options: what they accept, and what they promise.

A bool is no bound (``maximum_memories_per_owner=True`` erased all but one memory of each
owner); a search snapshot stays a hashable, picklable value though its memories are lazy;
``derive_memory_id`` refuses with ``InvalidArgumentError`` what would spell another id; a
strict integer field names itself; a status reads back its own dump; the README's Python
example type-checks under ``mypy --strict`` and runs.
"""

from __future__ import annotations

import copy
import pickle
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, cast, get_args, get_origin

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from game_memory import (
    FusionOptions,
    GameAwareMemoryRerankerOptions,
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMoment,
    InMemoryGameMemoryStore,
    InvalidArgumentError,
    MemoryEmbeddingIdentity,
    RecallResult,
    VectorMemoryStatus,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
    derive_memory_id,
    open_memory,
)
from game_memory.store.lazy import LazyMemories, Reordered, concatenated

REPOSITORY = Path(__file__).resolve().parents[1]
OPTIONS: tuple[type[BaseModel], ...] = (
    VectorMemoryStoreOptions,
    FusionOptions,
    GameAwareMemoryRerankerOptions,
)


def _memory(index: int, owner_id: str = "o") -> GameMemory:
    return GameMemory(
        memory_id=f"m{index}",
        session_id="s",
        owner_id=owner_id,
        scope="v",
        kind=GameMemoryKind.EVENT,
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=index),
        searchable_text="the coin purse at the well",
    )


def _bare(annotation: Any) -> Any:
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


def _fields(kind: type) -> list[tuple[type[BaseModel], str]]:
    """Every (options class, field) whose value is a ``kind`` (or ``kind | None``)."""
    return [
        (model, name)
        for model in OPTIONS
        for name, field in model.model_fields.items()
        if field.annotation is kind
        or {_bare(arg) for arg in get_args(field.annotation)} == {kind, type(None)}
    ]


INT_FIELDS = _fields(int)
FLOAT_FIELDS = _fields(float)


def _message(error: ValidationError) -> str:
    return str(error.errors()[0]["msg"])


# 1. A bool (or a fraction) is no bound of an options model.


def test_the_field_lists_cover_the_bounds_the_audit_named() -> None:
    names = {name for _, name in INT_FIELDS + FLOAT_FIELDS}
    assert {"maximum_memories_per_owner", "rebuild_batch_size", "embedding_timeout"} <= names
    assert {"rrf_k", "lexical_weight", "maximum_greedy_selections", "relevance_weight"} <= names


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(("model", "name"), INT_FIELDS + FLOAT_FIELDS)
def test_an_options_number_refuses_a_bool_naming_the_field(
    model: type[BaseModel], name: str, value: bool
) -> None:
    with pytest.raises(ValidationError) as raised:
        model(**{name: value})
    assert raised.value.errors()[0]["loc"] == (name,)
    assert f"{name} must be " in _message(raised.value)
    assert "boolean" in _message(raised.value)


@pytest.mark.parametrize(("model", "name"), INT_FIELDS)
def test_an_options_count_refuses_a_fraction_and_takes_a_whole_float(
    model: type[BaseModel], name: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        model(**{name: 2.5})
    assert f"{name} must be a whole number" in _message(raised.value)
    whole = model(**{name: 2.0}) if name != "supersession_candidates" else model(**{name: 3.0})
    assert type(getattr(whole, name)) is int


def test_options_still_take_their_numbers_and_read_back_their_dumps() -> None:
    options = VectorMemoryStoreOptions(
        maximum_memories_per_owner=3, embedding_timeout=5, fusion=FusionOptions(rrf_k=0)
    )
    assert options.embedding_timeout == 5.0 and options.maximum_memories_per_owner == 3
    for model in OPTIONS:
        default = model()
        assert model.model_validate_json(default.model_dump_json()) == default


async def test_a_bool_retention_bound_never_reaches_the_store() -> None:
    """The data loss of the audit: ``True`` was taken as the bound 1."""
    with pytest.raises(ValidationError, match="maximum_memories_per_owner"):
        VectorMemoryStoreOptions(maximum_memories_per_owner=True)
    store = VectorMemoryStore(
        InMemoryGameMemoryStore(), options=VectorMemoryStoreOptions(maximum_memories_per_owner=5)
    )
    async with store:
        for index in range(5):
            await store.append(_memory(index))
        assert len(await store.enumerate("s", "o")) == 5


# 2. A search snapshot is a value: hashable, picklable, equal to its tuple; still lazy.


def _tuple_snapshot(snapshot: GameMemorySearchSnapshot) -> GameMemorySearchSnapshot:
    return GameMemorySearchSnapshot(
        memories=snapshot.memories,
        authoritative_memories=tuple(snapshot.authoritative_memories),
        stages=snapshot.stages,
    )


def _check_value(snapshot: GameMemorySearchSnapshot) -> None:
    plain = _tuple_snapshot(snapshot)
    assert type(plain.authoritative_memories) is tuple
    assert snapshot == plain and hash(snapshot) == hash(plain)
    for copied in (pickle.loads(pickle.dumps(snapshot)), copy.copy(snapshot)):
        assert copied == snapshot and hash(copied) == hash(snapshot)
    unpickled = pickle.loads(pickle.dumps(snapshot))
    assert type(unpickled.authoritative_memories) is tuple


async def test_a_snapshot_of_the_in_memory_store_hashes_and_pickles() -> None:
    async with VectorMemoryStore(InMemoryGameMemoryStore()) as store:
        for index in range(3):
            await store.append(_memory(index))
        query = GameMemoryQuery(session_id="s", owner_id="o", limit=2, text="coin")
        snapshot = await store.search_snapshot(query)
        _check_value(snapshot)
        result = await store.recall(query)
    _check_value(result.snapshot)
    again = pickle.loads(pickle.dumps(result))
    assert isinstance(again, RecallResult) and again == result and hash(again) == hash(result)


async def test_a_snapshot_of_the_file_store_hashes_and_pickles(tmp_path: Path) -> None:
    async with await open_memory(tmp_path / "save", model="lexical") as memory:
        for index in range(3):
            await memory.append(_memory(index))
        query = GameMemoryQuery(session_id="s", owner_id="o", limit=2, text="coin")
        _check_value(await memory.search_snapshot(query))
        _check_value((await memory.recall(query)).snapshot)


def test_the_snapshot_declares_a_sequence_and_a_validated_one_holds_a_tuple() -> None:
    field = GameMemorySearchSnapshot.model_fields["authoritative_memories"]
    assert field.annotation == Sequence[GameMemory]
    built = GameMemorySearchSnapshot(
        memories=(), authoritative_memories=[_memory(1), _memory(2)], stages=()
    )
    assert built.authoritative_memories == (_memory(1), _memory(2))
    assert type(built.authoritative_memories) is tuple
    hash(built)
    back = GameMemorySearchSnapshot.model_validate_json(built.model_dump_json())
    assert back == built


def test_a_reordered_sequence_sorts_only_when_read_and_hashes_as_its_tuple() -> None:
    memories = (_memory(1), _memory(2), _memory(3))
    calls: list[int] = []

    def order() -> Sequence[int]:
        calls.append(1)
        return [2, 0, 1]

    reordered = Reordered(memories, order)
    assert len(reordered) == 3 and not calls  # nothing sorted yet
    expected = (memories[2], memories[0], memories[1])
    assert hash(reordered) == hash(expected) and reordered == expected == reordered
    assert calls == [1]
    assert pickle.loads(pickle.dumps(reordered)) == expected
    assert type(pickle.loads(pickle.dumps(reordered))) is tuple
    copied: object = copy.copy(reordered)
    assert type(copied) is tuple


class _RecordFile:
    """A stand-in for an open record file: the record at ``offset`` is memory ``offset``."""

    path = "records"

    def record(self, offset: int, length: int) -> bytes:
        return str(offset).encode()


def test_lazy_memories_decode_only_when_hashed_or_pickled() -> None:
    memories = [_memory(index) for index in range(4)]
    decoded: list[int] = []

    def decode(payload: bytes, path: str) -> GameMemory:
        decoded.append(int(payload))
        return memories[int(payload)]

    lazy = LazyMemories.of([_RecordFile()], [(0, index, 1) for index in range(3)], decode)  # type: ignore[list-item]
    lazy = cast("LazyMemories", concatenated(lazy, (memories[3],)))  # what a grown view does
    assert len(lazy) == 4 and not decoded
    assert hash(lazy) == hash(tuple(memories)) and lazy == tuple(memories)
    assert sorted(decoded) == [0, 1, 2]
    assert pickle.loads(pickle.dumps(lazy)) == tuple(memories)
    assert type(pickle.loads(pickle.dumps(lazy))) is tuple


# 3. derive_memory_id refuses, naming the argument, what would not be the same id.

AT = GameMoment(timeline_id="main", tick=5)
ARGUMENTS: dict[str, Any] = {
    "session_id": "s",
    "owner_id": "o",
    "source_input_id": "in",
    "moment": AT,
}


def test_derive_memory_id_keeps_the_ids_it_gave() -> None:
    """The reference-compatible digest is unchanged (the value before the audit's fix)."""
    expected = "oga-memory-v1:17ea480dfc71e760cfab0ffec09493658bdfa3799689b6efff2a3301fd26a6a4"
    assert derive_memory_id("s", "o", "in", AT, turn=1) == expected
    assert derive_memory_id("s", "o", "in", AT, turn=np.int64(1)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("turn", 0),
        ("turn", 1.0),
        ("turn", True),
        ("turn", 1.5),
        ("turn", "1"),
        ("turn", None),
        ("call_index", -1),
        ("call_index", None),
        ("call_index", False),
        ("call_index", 0.0),
        ("moment", None),
        ("moment", {"timeline_id": "main", "tick": 5}),
        ("session_id", ""),
        ("owner_id", " "),
        ("owner_id", None),
        ("source_input_id", 5),
        ("operation", ""),
        ("operation", None),
    ],
)
def test_derive_memory_id_refuses_a_bad_argument_naming_it(argument: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^{argument} "):
        derive_memory_id(**{**ARGUMENTS, argument: value})


# 4. The strict integer check names the field it checks.


@pytest.mark.parametrize(("value", "says"), [(True, "an integer"), (2.5, "a whole number")])
def test_a_query_limit_is_refused_as_a_limit(value: object, says: str) -> None:
    with pytest.raises(ValidationError) as raised:
        GameMemoryQuery(session_id="s", limit=value)  # type: ignore[arg-type]
    message = _message(raised.value)
    assert f"limit must be {says}" in message and "tick" not in message


@pytest.mark.parametrize(("value", "says"), [(True, "an integer"), (2.5, "a whole number")])
def test_a_tick_is_still_refused_as_a_tick(value: object, says: str) -> None:
    with pytest.raises(ValidationError) as raised:
        GameMoment(timeline_id="main", tick=value)  # type: ignore[arg-type]
    assert f"tick must be {says}" in _message(raised.value)


# 5. A status reads back its own dump; the computed field is checked, never taken.

IDENTITY = MemoryEmbeddingIdentity(provider_id="p", model_id="m", version="1", dimensions=4)
STATUSES = [
    VectorMemoryStatus.lexical(3),
    VectorMemoryStatus.from_counts(IDENTITY, ready=0, pending=0, stale=0, orphans=0),
    VectorMemoryStatus.from_counts(IDENTITY, ready=1, pending=2, stale=1, orphans=1),
]


@pytest.mark.parametrize("status", STATUSES, ids=lambda status: status.state.value)
def test_a_status_reads_back_its_own_dump(status: VectorMemoryStatus) -> None:
    assert VectorMemoryStatus.model_validate(status.model_dump()) == status
    assert VectorMemoryStatus.model_validate(status.model_dump(mode="json")) == status
    assert VectorMemoryStatus.model_validate_json(status.model_dump_json()) == status


@pytest.mark.parametrize("claimed", [True, "false", 0])
def test_a_status_refuses_a_requires_rebuild_its_counts_do_not_give(claimed: object) -> None:
    dump = VectorMemoryStatus.lexical(2).model_dump()
    with pytest.raises(ValidationError, match="requires_rebuild is computed from the counts"):
        VectorMemoryStatus.model_validate({**dump, "requires_rebuild": claimed})
    with pytest.raises(ValidationError, match="Extra inputs"):
        VectorMemoryStatus.model_validate({**dump, "unknown": 1})


async def test_a_store_status_reads_back_its_own_dump() -> None:
    async with VectorMemoryStore(InMemoryGameMemoryStore()) as store:
        await store.append(_memory(1))
        status = await store.get_status("s")
    assert VectorMemoryStatus.model_validate_json(status.model_dump_json()) == status


# 6. The README's Python example type-checks as written, and runs.


def _readme_example() -> str:
    text = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"^```python\n(.*?)^```$", text, re.M | re.S)
    return str(example)


def test_the_readme_python_example_passes_mypy_strict(tmp_path: Path) -> None:
    from mypy import api

    script = tmp_path / "readme_example.py"
    script.write_text(_readme_example(), encoding="utf-8")
    config = str(REPOSITORY / "pyproject.toml")
    report, errors, status = api.run(["--config-file", config, "--strict", str(script)])
    assert status == 0, report + errors


def test_the_readme_python_example_runs_lexically(tmp_path: Path) -> None:
    """The same example without a model (``test_docs`` runs it on the real one)."""
    example = _readme_example()
    assert 'open_memory("saves/slot1")' in example
    script = tmp_path / "example.py"
    script.write_text(
        example.replace(
            'open_memory("saves/slot1")', 'open_memory("saves/slot1", model="lexical")'
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "The thief grabbed the coin purse at the well." in result.stdout
