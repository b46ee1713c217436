"""Rows of the save's memory table: keys, canonical documents, and their checked decoding.

A memory is stored as its canonical JSON (the bytes ``content_digest`` hashes) with that
digest beside it, so a row proves its own integrity (``sha256(document) = digest``, which
``check`` also verifies in SQL) and idempotence compares digests without decoding.

PostgreSQL ``text`` cannot hold U+0000, which ids may contain, so key columns hold
:func:`sql_key` of an id: backslash and NUL escaped (``\\\\`` and ``\\0``), every other id
unchanged. The document keeps the exact id; keys are only for lookup and distribution.
"""

from __future__ import annotations

import hashlib

from pydantic import ValidationError

from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.model.memory import STORED
from game_memory.store.plain_document import decode_plain_document

__all__ = ["decode_row", "encode_memory", "from_sql_key", "sql_key"]

_SERIALIZER = GameMemory.__pydantic_serializer__
#: A row's document inside the record payload the fast decoder reads (format 2 admits
#: every field a memory may carry).
_WRAPPED = b'{"format_version":2,"memory":'


def sql_key(value: str) -> str:
    """The key column value of an id (injective; the id itself unless it has ``\\`` or NUL)."""
    if "\\" not in value and "\x00" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\x00", "\\0")


def from_sql_key(key: str) -> str:
    """The id of a key column value (the inverse of :func:`sql_key`)."""
    if "\\" not in key:
        return key
    parts: list[str] = []
    index = 0
    while index < len(key):
        char = key[index]
        if char == "\\" and index + 1 < len(key):
            parts.append("\x00" if key[index + 1] == "0" else key[index + 1])
            index += 2
        else:
            parts.append(char)
            index += 1
    return "".join(parts)


def encode_memory(memory: GameMemory) -> tuple[bytes, bytes]:
    """The canonical JSON document of ``memory`` and its SHA-256 (the content digest)."""
    document = _SERIALIZER.to_json(memory)
    return document, hashlib.sha256(document).digest()


def decode_row(
    document: bytes, digest: bytes, session_key: str, owner_key: str, memory_key: str, where: str
) -> GameMemory:
    """Decode one stored memory, checking it is whole and in its own partition.

    Raises:
        PersistenceError: the document does not match its digest, does not decode, or
            names another session, owner or id than its row's keys.
    """
    document = bytes(document)
    if hashlib.sha256(document).digest() != bytes(digest):
        raise PersistenceError(
            f"memory {memory_key!r} of owner {owner_key!r} in session {session_key!r} in {where} "
            "does not match its content digest: the row was changed outside game-memory or is "
            "damaged. Restore it from a backup."
        )
    # The file store's fast decoder first (its plain shape, the model's rules by hand: a
    # fifth of the model's cost, which made the first recall of an NPC with 100k memories
    # take 4 s); the document is the memory object a file record wraps, so it is wrapped
    # the same way. Anything it is unsure of goes to the model, which names the damage.
    plain = decode_plain_document(_WRAPPED + document + b"}")
    if plain is not None and plain[0] == 2:
        memory = plain[1]
    else:
        memory = _validated(document, session_key, owner_key, memory_key, where)
    if (
        sql_key(memory.session_id) != session_key
        or sql_key(memory.owner_id) != owner_key
        or sql_key(memory.memory_id) != memory_key
    ):
        raise PersistenceError(
            f"the row of memory {memory_key!r} of owner {owner_key!r} in session {session_key!r} "
            f"in {where} holds another memory ({memory.key!r}): the save is damaged"
        )
    return memory


def _validated(
    document: bytes, session_key: str, owner_key: str, memory_key: str, where: str
) -> GameMemory:
    """The memory the model decodes from ``document``, or the damage named."""
    try:
        return GameMemory.model_validate_json(document, context=STORED)
    except ValidationError as exc:
        raise PersistenceError(
            f"memory {memory_key!r} of owner {owner_key!r} in session {session_key!r} in {where} "
            f"is not a valid memory ({exc.error_count()} problems); restore it from a backup"
        ) from exc
