"""Idempotent memory ids: the same logical "remember" always gets the same id.

Two rules, both here so no layer mints ids of its own: :func:`derive_memory_id` (the
reference's id of one agent call) and :func:`content_memory_id` (the bridge's default id, a
digest of the content).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Iterable, Sequence
from typing import SupportsIndex, cast

from game_memory.errors import InvalidArgumentError
from game_memory.model.fields import check_bounded_id
from game_memory.model.memory import GameMemoryKind, GameMoment

__all__ = ["content_memory_id", "derive_memory_id"]

_MEMORY_ID_DOMAIN = "OpenGameAgent.ExtensionOperationId.v1"
_MEMORY_ID_PREFIX = "oga-memory-v1:"
_DIGEST_DOMAIN = "game-memory.bridge.remember.v1"
#: Put before a summary's source count and ids in its digest.
_SOURCES_MARKER = "\x1fconsolidates"


def derive_memory_id(
    session_id: str,
    owner_id: str,
    source_input_id: str,
    moment: GameMoment,
    turn: int = 1,
    call_index: int = 0,
    operation: str = "remember_game_memory",
) -> str:
    """Derive the idempotent id of one logical "remember" call.

    The id is a versioned SHA-256 digest of the session, owner (actor), source input,
    game moment, agent turn (first turn is 1) and call position within the turn, each
    length-prefixed (4-byte big-endian) so no two field lists collide. Retrying the same
    logical call yields the same id, so a retry is a no-op and a retry with different
    content fails closed with ``MemoryConflictError``. Compatible with the reference.

    Only an integer is a turn or a call index (an ``int`` or anything that is one through
    ``__index__``, such as a numpy integer; never a bool): ``1.0`` or ``True`` would spell
    another id than ``1``, and a retry would no longer be idempotent.

    Raises:
        InvalidArgumentError: naming the argument, when an id or ``operation`` is not a
            non-blank string (of at most 1,024 characters), ``moment`` is not a
            :class:`GameMoment`, ``turn`` is not an integer of 1 or more, or
            ``call_index`` is not an integer of 0 or more.
    """
    fields: Iterable[str] = (
        _MEMORY_ID_DOMAIN,
        _checked_id(session_id, "session_id"),
        _checked_id(owner_id, "owner_id"),
        _checked_id(source_input_id, "source_input_id"),
        *_moment_fields(moment),
        str(_counter(turn, "turn", 1)),
        str(_counter(call_index, "call_index", 0)),
        _checked_id(operation, "operation"),
    )
    digest = hashlib.sha256()
    for field in fields:
        data = field.encode("utf-8")
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return _MEMORY_ID_PREFIX + digest.hexdigest()


def _checked_id(value: object, what: str) -> str:
    """``value`` if it is a valid id (``check_bounded_id``), else ``InvalidArgumentError``."""
    try:
        return check_bounded_id(cast("str", value), what)
    except ValueError as exc:
        shown = "" if isinstance(value, str) else f", not {_shown(value)}"
        raise InvalidArgumentError(f"{exc}{shown}") from None


def _moment_fields(moment: object) -> tuple[str, str]:
    """The timeline and the tick (decimal) of ``moment``, which must be a ``GameMoment``."""
    if not isinstance(moment, GameMoment):
        raise InvalidArgumentError(
            f"moment must be a GameMoment (a timeline and a tick), not {_shown(moment)}"
        )
    return moment.timeline_id, str(moment.tick)


def _counter(value: object, what: str, first: int) -> int:
    """``value`` as an ``int`` when it is an integer (not a bool) of at least ``first``."""
    try:
        if isinstance(value, bool) or not isinstance(value, SupportsIndex):
            raise TypeError(what)
        number = operator.index(value)  # numpy's bool has ``__index__``, and raises
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be an integer of {first} or more, not {_shown(value)}"
        ) from None
    if number < first:
        raise InvalidArgumentError(f"{what} starts at {first}, not {number}")
    return number


def _shown(value: object) -> str:
    """``value`` for a message: its repr, cut short (an id may be a megabyte long)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def content_memory_id(
    session_id: str,
    owner_id: str,
    moment: GameMoment,
    kind: GameMemoryKind,
    scope: str,
    text: str,
    payload_json: str,
    belief_key: str | None = None,
    consolidates: Sequence[str] = (),
) -> str:
    """Return the default id of a remembered memory: ``"gm-"`` and 32 hex digits.

    The digest is SHA-256 over a domain string and then session, owner, timeline, tick
    (decimal), kind (lower case), scope, text and canonical payload JSON (and the belief
    key, when there is one: ids of memories without a key are unchanged; and for a
    summary, the marker ``"\x1fconsolidates"``, the number of sources (decimal) and each
    source id in order, so two summaries of one text and moment over other sources get
    other ids; the count keeps the fields unambiguous whatever the ids hold), each as UTF-8
    preceded by its byte length as a 4-byte big-endian integer; the id keeps the first
    32 hex digits (128 bits). Equal content always yields the equal id.
    """
    digest = hashlib.sha256()
    for field in (
        _DIGEST_DOMAIN,
        session_id,
        owner_id,
        moment.timeline_id,
        str(moment.tick),
        kind.value,
        scope,
        text,
        payload_json,
        *(() if belief_key is None else (belief_key,)),
        *(() if not consolidates else (_SOURCES_MARKER, str(len(consolidates)), *consolidates)),
    ):
        data = field.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return "gm-" + digest.hexdigest()[:32]
