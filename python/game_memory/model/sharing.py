"""One object for what many memories repeat: their ids of a partition and their field names.

A game keeps many memories alive at once (a partition's parsed memories, every memory it
appends in a session), and each would otherwise carry its own copies of what all of them
share: the session, owner, scope and timeline ids (about 60 bytes each) and pydantic's set
of the field names it was given (0.7 KB for a memory's 14 or 15 names, 0.2 KB for a
moment's). Shared, a memory costs about 1 KB less. ``GameMemory`` and ``GameMoment`` share
them as they are built (``model_post_init``); the store's fast decoder
(``store/plain_document.py``) shares them the same way without building through pydantic.

Both tables are bounded and forgotten all at once when full: they hold ids and field
names, never content (an erased memory leaves nothing of its own here; its partition's ids
are kept by the partition hash cache too, ``durable/names.py``).

A shared field-name set is safe only because the models that take one are frozen: pydantic
adds a name to ``__pydantic_fields_set__`` on assignment alone, which a frozen model
refuses, and ``model_copy(update=...)`` updates a copy of the set. No code may mutate a
model's ``model_fields_set``.
"""

from __future__ import annotations

from collections.abc import Set

__all__ = ["SHARED_FIELD_SETS", "SHARED_IDS", "shared_fields", "shared_id", "shared_known"]

#: Most id strings :func:`shared_id` keeps (then forgotten all at once): the session,
#: owner, scope and timeline ids of the partitions a process reads are far fewer.
SHARED_IDS = 4_096
#: Most distinct field-name sets :func:`shared_fields` keeps: memories are built from a
#: handful of key sets (a document's, a bridge's remember, a constructor's usual calls).
SHARED_FIELD_SETS = 64

_IDS: dict[str, str] = {}
_FIELD_SETS: dict[frozenset[str], set[str]] = {}


def shared_id(text: str) -> str:
    """The one string object kept for every string equal to ``text`` (``text`` itself the
    first time)."""
    found = _IDS.get(text)
    if found is None:
        if len(_IDS) >= SHARED_IDS:
            _IDS.clear()
        found = _IDS.setdefault(text, text)
    return found


#: ``_IDS.get``, for hot loops: the kept string or ``None`` (ids are never empty, so
#: ``shared_known(text) or shared_id(text)`` is the same as ``shared_id(text)``, faster).
shared_known = _IDS.get


def shared_fields(names: Set[str]) -> set[str]:
    """The one set kept for every set of field names equal to ``names``, for a frozen
    model's ``__pydantic_fields_set__`` (see the module's docstring)."""
    key = frozenset(names)
    found = _FIELD_SETS.get(key)
    if found is None:
        if len(_FIELD_SETS) >= SHARED_FIELD_SETS:
            _FIELD_SETS.clear()
        found = _FIELD_SETS.setdefault(key, set(key))
    return found
