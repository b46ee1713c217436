"""The one error table: every failure maps to its stable code with an actionable message."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from game_memory.bridge.codes import (
    ERROR_ADVICE,
    ErrorCode,
    RpcError,
    describe_validation_error,
    error_from_exception,
)
from game_memory.bridge.params import RecallParams
from game_memory.errors import (
    CapacityExceededError,
    DerivedIndexError,
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    GameMemoryError,
    InvalidArgumentError,
    MemoryConflictError,
    PersistenceError,
    StoreBusyError,
    StoreClosedError,
)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidArgumentError("limit is negative"), -32602),
        (MemoryConflictError("memory m-1 exists with other content"), -32002),
        (CapacityExceededError("too many entries", bound="maximum_entries"), -32003),
        (DerivedIndexError("the index is stale"), -32004),
        (EmbeddingUnavailableError("no model"), -32005),
        (PersistenceError("journal.bin is truncated"), -32006),
        (StoreBusyError("lock held"), -32007),
        (EmbeddingTimeoutError("the model missed its deadline"), -32008),
        (TimeoutError("slow disk"), -32008),
        (StoreClosedError("closed"), -32009),
    ],
)
def test_each_core_error_maps_to_its_stable_code(error: BaseException, code: int) -> None:
    rpc = error_from_exception(error, "memory.recall")
    assert int(rpc.code) == code
    assert rpc.data is not None and rpc.data["kind"] == type(error).__name__
    if isinstance(error, MemoryConflictError):  # the protocol's advice, not the Python API's
        assert rpc.message == f"{error}; {ERROR_ADVICE[rpc.code]}"
    elif isinstance(error, GameMemoryError):  # its message already says what to do
        assert rpc.message == str(error)
    else:
        assert rpc.message == f"{error}; {ERROR_ADVICE[rpc.code]}"


def test_a_timeout_maps_to_timeout_not_to_embedding_unavailable() -> None:
    assert issubclass(EmbeddingTimeoutError, EmbeddingUnavailableError)
    assert error_from_exception(EmbeddingTimeoutError("late")).code is ErrorCode.TIMEOUT


def test_an_embedding_error_that_is_also_busy_maps_to_busy() -> None:
    class QueueFull(EmbeddingUnavailableError, StoreBusyError):
        pass

    assert error_from_exception(QueueFull("every ticket is taken")).code is ErrorCode.BUSY


def test_a_capacity_error_carries_its_bound() -> None:
    rpc = error_from_exception(CapacityExceededError("full", bound="maximum_file_bytes"))
    assert rpc.to_json()["data"] == {"kind": "CapacityExceededError", "bound": "maximum_file_bytes"}


def test_a_validation_error_names_the_field_without_echoing_the_input() -> None:
    secret = "s" * 2_000
    with pytest.raises(ValidationError) as caught:
        RecallParams.model_validate({"session_id": "s", "limit": secret})
    rpc = error_from_exception(caught.value, "memory.recall")
    assert rpc.code is ErrorCode.INVALID_PARAMS
    assert rpc.message.startswith("invalid params for memory.recall: limit:")
    assert secret not in rpc.message
    assert rpc.data == {"kind": "ValidationError", "field": "limit"}


class _Holder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: JsonValue = None
    names: dict[str, int] = {}


def _refusal(data: Any) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Holder.model_validate(data)
    return caught.value


@pytest.mark.parametrize("shape", ["dict", "list"])
def test_pydantic_depth_errors_are_described_without_type_names_or_a_long_path(
    shape: str,
) -> None:
    deep: Any = 1
    for _ in range(400):  # past pydantic's own nesting limit (about 255 levels)
        deep = {"dict": deep} if shape == "dict" else [deep]
    error = _refusal({"value": deep})
    assert len(str(error.errors()[0]["loc"])) > 1_000  # what pydantic itself reports
    text, field = describe_validation_error(error, prefix="memories.2")
    assert field == "memories.2.value"
    assert text == "memories.2.value: nested too deeply"
    rpc = error_from_exception(error, "memory.remember")
    assert rpc.data == {"kind": "ValidationError", "field": "value"}
    assert "Recursion" not in rpc.message and len(rpc.message) < 200


def test_a_long_unknown_name_is_clipped_in_the_field_and_the_message() -> None:
    name = "n" * 5_000
    error = _refusal({name: 1, "names": {name: "x", "b" * 3_000: "y"}})
    text, field = describe_validation_error(error, prefix="memories.250")
    assert field == "memories.250.names." + "n" * 61 + "..."  # each name at most 64
    assert text.count("memories.250.") == 3 and len(text) < 600
    rpc = error_from_exception(error, "memory.remember")
    assert len(rpc.message) < 700 and rpc.data is not None and len(rpc.data["field"]) <= 128


def test_a_dict_key_that_looks_like_a_type_name_stays_in_the_path() -> None:
    # Only pydantic's own labels are dropped, not a client's keys at the same place.
    _, field = describe_validation_error(_refusal({"names": {"dict": "one"}}))
    assert field == "names.dict"


def test_unknown_errors_are_internal_and_say_nothing_about_themselves() -> None:
    rpc = error_from_exception(ZeroDivisionError("/home/user/secret"))
    assert rpc.code is ErrorCode.INTERNAL_ERROR
    assert "secret" not in rpc.message
    assert "stderr" in rpc.message


def test_a_bridge_error_passes_through_unchanged() -> None:
    error = RpcError(ErrorCode.BUSY, "busy now")
    assert error_from_exception(error) is error


def test_every_game_memory_error_class_has_a_code_other_than_internal() -> None:
    pending: list[type[GameMemoryError]] = list(GameMemoryError.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        try:
            error = cls("x", bound="b") if issubclass(cls, CapacityExceededError) else cls("x")
        except TypeError:
            continue  # classes with extra required arguments (e.g. an ONNX kind)
        assert error_from_exception(error).code is not ErrorCode.INTERNAL_ERROR, cls


def test_every_code_has_advice() -> None:
    assert set(ERROR_ADVICE) == set(ErrorCode)


def _lock_refused(number: int) -> PersistenceError:
    """The store's error for a lock file it may not open (chained, as the store raises it)."""
    path = "/saves/slot-1/.game-memory/lock"
    try:
        try:
            raise OSError(number, os.strerror(number), path)
        except OSError as exc:
            raise PersistenceError(f"could not open the lock file {path}: {exc.strerror}") from exc
    except PersistenceError as error:
        return error


@pytest.mark.parametrize(
    ("number", "said"),
    [
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "no permission to write"),
        (errno.EPERM, "no permission to write"),
    ],
)
def test_a_save_the_server_may_not_write_is_named_so_not_corrupt(number: int, said: str) -> None:
    rpc = error_from_exception(_lock_refused(number), "memory.remember")
    assert rpc.code is ErrorCode.STORAGE_CORRUPT  # the code stays; the advice changes
    assert rpc.data == {"kind": "PersistenceError", "reason": "not_permitted"}
    assert "could not open the lock file /saves/slot-1/.game-memory/lock" in rpc.message
    assert said in rpc.message and "not damaged" in rpc.message
    assert "write access to the save folder" in rpc.message
    for remedy in ("check --fix", "restore", "accept-loss"):
        assert remedy not in rpc.message


def test_a_damaged_save_keeps_the_damage_advice() -> None:
    try:
        raise PersistenceError("journal.bin is truncated") from OSError(errno.EIO, "I/O error")
    except PersistenceError as error:
        rpc = error_from_exception(error)
    assert rpc.data == {"kind": "PersistenceError"}
    assert rpc.message == "journal.bin is truncated"
