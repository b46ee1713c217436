"""Bridge clients get the protocol's advice, never the Python API's (derive_memory_id)."""

from __future__ import annotations

import pytest

from game_memory.bridge.codes import ErrorCode, error_from_exception
from game_memory.errors import MemoryConflictError, MemoryNotFoundError

CONFLICT = (
    "memory id 'gm-1' of owner 'npc' in session 's' already holds different content; an id "
    "cannot be reused. Use a new id (derive_memory_id gives stable ones)."
)
NOT_FOUND = (
    "owner 'npc' of session 's' holds no memory 'm'; nothing was forgotten. Check the id "
    "(enumerate lists what the owner holds)"
)


@pytest.mark.parametrize(
    ("error", "code", "kept", "advice"),
    [
        (
            MemoryConflictError(CONFLICT),
            ErrorCode.CONFLICT,
            "already holds different content",
            "use a new memory_id, or omit it",
        ),
        (
            MemoryNotFoundError(NOT_FOUND),
            ErrorCode.NOT_FOUND,
            "holds no memory 'm'",
            "memory.recall lists what the NPC remembers",
        ),
        (
            MemoryNotFoundError("owner 'npc' of session 's' holds no memory 'a', 'b'"),
            ErrorCode.NOT_FOUND,
            "holds no memory 'a', 'b'",
            "check the memory ids",
        ),
    ],
)
def test_core_advice_is_replaced_by_the_protocols(
    error: Exception, code: ErrorCode, kept: str, advice: str
) -> None:
    translated = error_from_exception(error, "memory.forget")
    assert translated.code is code
    assert kept in translated.message and advice in translated.message
    for python_only in ("derive_memory_id", "enumerate", "Use a new id"):
        assert python_only not in translated.message


def test_a_conflict_says_what_to_do_about_default_ids() -> None:
    message = error_from_exception(MemoryConflictError(CONFLICT)).message
    assert "give it a memory_id of its own" in message
