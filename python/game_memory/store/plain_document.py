"""A fast decoder for this store's record payloads of the plain, common shape.

Every read of a save decodes records (the first recall after an open decodes the ~65
candidates it returns; audits and rewrites decode every record), and pydantic's validation
of a parsed memory costs twice as much as parsing it. Almost every record is plain: the
keys :func:`~game_memory.store.documents.encode_document` writes, valid Unicode text,
integer ticks, lists of ids. For those, this module applies exactly ``GameMemory``'s rules
by hand and assembles the very memory ``GameMemory.model_validate`` would build (same
values, same types, same ``__pydantic_fields_set__``). Like ``plain_legacy``, it only ever
says "valid, here is the memory" or "not plain, ask the model" (``None``); it never
rejects, so every error message still comes from the model.
``tests/store/test_plain_document.py`` checks against the model that it accepts nothing the
model refuses and builds exactly what it builds.

The payload is parsed with ``pydantic_core.from_json`` (a record in ~1.4 µs against
``json.loads``' ~3.6) because, on everything it accepts, it gives what ``json.loads`` gives
(a repeated key: its first place, its last value; ``NaN``/``Infinity`` read; the same
numbers and strings), and what it refuses that ``json.loads`` takes (lone surrogates,
escaped or UTF-8-encoded; a byte order mark; UTF-16/32 text) is "not plain": the caller
then parses with ``json.loads`` and asks the model, as before. The shape checks below reach
every value of an accepted document (no unknown key at any level, nothing nested beyond
moments, tags and metadata), so no value the parsers might read differently slips past
them. The parsers' agreement is property-tested too. Its process-wide string cache is left
off: filling it costs ~0.1 ms at the first record a process reads (a first recall reads
~65), it saves ~0.15 µs a record after that, and it would keep up to 16k short strings (an
erased memory's too) alive; ``json.loads`` keeps none.

If ``GameMemory`` or ``GameMoment`` gains or loses a field or a validator, or changes a
default, the fast path turns itself off (``PLAIN_PATH_ENABLED`` is false, and a test fails)
rather than build memories the model would not: its rules must then be brought up to date.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import from_json

from game_memory.model import GameMemory, GameMemoryKind, GameMoment, ordinal_key
from game_memory.model.fields import (
    INT64_MAX,
    INT64_MIN,
    MAXIMUM_ID_CHARACTERS,
    MAXIMUM_METADATA_ENTRIES,
    MAXIMUM_METADATA_KEY_CHARACTERS,
    MAXIMUM_METADATA_VALUE_CHARACTERS,
    MAXIMUM_PAYLOAD_CHARACTERS,
    MAXIMUM_PAYLOAD_DEPTH,
    MAXIMUM_SEARCHABLE_TEXT_CHARACTERS,
    MAXIMUM_TAGS,
)
from game_memory.model.memory import MAXIMUM_CONSOLIDATED
from game_memory.model.sharing import shared_fields, shared_id, shared_known
from game_memory.strict_json import parse_strict_json

__all__ = ["PLAIN_PATH_ENABLED", "decode_plain_document"]

# The fields (in declaration order) and defaults the rules below were written for.
_MEMORY_DEFAULTS: dict[str, Any] = {
    "importance": 0.5,
    "searchable_text": None,
    "tags": (),
    "source_input_id": None,
    "expires_at": None,
    "metadata": MappingProxyType({}),
    "belief_key": None,
    "consolidates": (),
}
_MEMORY_FIELDS = (
    *("memory_id", "session_id", "owner_id", "scope", "kind", "payload_json", "moment"),
    *_MEMORY_DEFAULTS,
)
_MOMENT_FIELDS = ("timeline_id", "tick", "calendar_json")
_DOCUMENT_KEYS = frozenset({"format_version", "memory"})


# The validators (by name) the rules below mirror, field by field, then the model's own.
_MEMORY_RULES: dict[str, tuple[str, ...]] = {
    "memory_id": ("_bounded_id",),
    "session_id": ("_bounded_id",),
    "owner_id": ("_bounded_id",),
    "scope": ("_bounded_id",),
    "kind": ("GameMemoryKind.parse",),
    "payload_json": (),
    "moment": (),
    "importance": ("_importance", "Ge", "Le"),
    "searchable_text": (),
    "tags": ("_tags",),
    "source_input_id": (),
    "expires_at": (),
    "metadata": ("_metadata", "mappingproxy", "<lambda>"),  # the last: its serializer
    "belief_key": (),
    "consolidates": ("_consolidated",),
    "@field": ("_payload_is_json", "_searchable_text_bounded"),
    "@model": ("_expiry_follows_moment",),
    "@post_init": ("GameMemory.model_post_init",),  # the sharing this module does too
}
_MOMENT_RULES: dict[str, tuple[str, ...]] = {
    "timeline_id": ("_bounded_id",),
    "tick": ("strict_int", "Ge", "Le"),
    "calendar_json": (),
    "@field": ("_calendar_is_json",),
    "@model": (),
    "@post_init": ("GameMoment.model_post_init",),
}


def _rules(model: type[BaseModel]) -> dict[str, tuple[str, ...]]:
    """The names of ``model``'s validators, as ``_MEMORY_RULES`` spells them."""
    rules = {
        name: tuple(
            getattr(getattr(item, "func", None), "__qualname__", type(item).__name__)
            for item in field.metadata
        )
        for name, field in model.model_fields.items()
    }
    decorators = model.__pydantic_decorators__
    rules["@field"] = tuple(decorators.field_validators)
    rules["@model"] = tuple(decorators.model_validators)
    rules["@post_init"] = (model.model_post_init.__qualname__,)
    return rules


def _model_matches(
    memory_model: type[BaseModel] = GameMemory, moment_model: type[BaseModel] = GameMoment
) -> bool:
    """Whether the models still have exactly the fields, defaults and validators written
    for here (a changed validator body is the property tests' to catch)."""
    memory, moment = memory_model.model_fields, moment_model.model_fields
    if tuple(memory) != _MEMORY_FIELDS or tuple(moment) != _MOMENT_FIELDS:
        return False
    if _rules(memory_model) != _MEMORY_RULES or _rules(moment_model) != _MOMENT_RULES:
        return False
    if memory_model.__new__ is not object.__new__ or moment_model.__new__ is not object.__new__:
        return False
    configs = (memory_model.model_config, moment_model.model_config)
    if any(config != {"frozen": True, "extra": "forbid"} for config in configs):
        return False
    if [name for name, field in memory.items() if field.is_required()] != list(_MEMORY_FIELDS[:7]):
        return False
    if not moment["timeline_id"].is_required() or not moment["tick"].is_required():
        return False
    if moment["calendar_json"].is_required() or moment["calendar_json"].default is not None:
        return False
    for name, expected in _MEMORY_DEFAULTS.items():
        default = memory[name].get_default(call_default_factory=True)
        if type(default) is not type(expected) or default != expected:
            return False
    return True


#: False when the models changed under this module: every document then goes to the model.
PLAIN_PATH_ENABLED = _model_matches()

_MEMORY_ALLOWED = frozenset(_MEMORY_FIELDS)
_MEMORY_REQUIRED = frozenset(_MEMORY_FIELDS[:7])
# The keys encode_document writes for a memory without belief_key and consolidates.
_MEMORY_WRITTEN = _MEMORY_ALLOWED - {"belief_key", "consolidates"}
_MOMENT_ALLOWED = frozenset(_MOMENT_FIELDS)
_MOMENT_REQUIRED = frozenset(_MOMENT_FIELDS[:2])
_DEFAULT_IMPORTANCE: float = _MEMORY_DEFAULTS["importance"]
_KINDS = {kind.value: kind for kind in GameMemoryKind}

_ModelT = TypeVar("_ModelT", bound=BaseModel)
# BaseModel's slots, set through their descriptors: what model.fields.assemble_validated
# does through object.__setattr__, in 60% of the time (it is done twice per record).
_SLOTS = BaseModel.__dict__
_set_dict = _SLOTS["__dict__"].__set__
_set_fields_set = _SLOTS["__pydantic_fields_set__"].__set__
_set_extra = _SLOTS["__pydantic_extra__"].__set__
_set_private = _SLOTS["__pydantic_private__"].__set__
_new = object.__new__


def _assemble(cls: type[_ModelT], values: dict[str, Any], fields_set: set[str]) -> _ModelT:
    """The model ``values`` (every field, in declaration order, already validated) make,
    with ``fields_set`` the keys the document held, as model_validate records them (a
    memory without ``belief_key`` has not "set" it)."""
    instance = _new(cls)
    _set_dict(instance, values)
    _set_fields_set(instance, fields_set)
    _set_extra(instance, None)
    _set_private(instance, None)
    return instance


def _encodable(value: str) -> bool:
    # check_unicode: text that is not ASCII must encode as UTF-8 (no unpaired surrogate).
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_text(value: Any, maximum: int) -> bool:
    """A string of at most ``maximum`` characters that is valid Unicode."""
    return type(value) is str and len(value) <= maximum and (value.isascii() or _encodable(value))


def _is_id(value: Any, maximum: int = MAXIMUM_ID_CHARACTERS) -> bool:
    """check_bounded_id: a string of at most ``maximum`` characters, not blank, valid Unicode."""
    return (
        type(value) is str
        and len(value) <= maximum
        and bool(value.strip())
        and (value.isascii() or _encodable(value))
    )


def _is_optional_id(value: Any) -> bool:
    return value is None or _is_id(value)


def _is_json(value: str, what: str) -> bool:
    try:
        parse_strict_json(value, what, MAXIMUM_PAYLOAD_DEPTH)
    except ValueError:
        return False
    return True


#: One set of field names per usual key set, shared by every memory (or moment) decoded
#: with exactly those keys (:func:`_fields_set`): the set ``model_post_init`` shares too.
_SHARED_FIELDS_SETS = {usual: shared_fields(usual) for usual in (_MEMORY_WRITTEN, _MOMENT_ALLOWED)}


def _fields_set(
    value: dict[str, Any], usual: frozenset[str], required: frozenset[str], allowed: frozenset[str]
) -> set[str] | None:
    """The fields model_validate records as set: the keys of ``value``; ``None`` if a
    required one is missing or an unknown one is present (``extra="forbid"``).

    As ``GameMemory.model_post_init`` does, one set is shared by every model with the same
    keys (``model/sharing.py``): the usual ones here without a look-up, the others through
    ``shared_fields``.
    """
    keys = value.keys()
    if keys == usual:  # the usual case: the shared set
        return _SHARED_FIELDS_SETS[usual]
    return shared_fields(keys) if required <= keys <= allowed else None


def _moment(value: Any) -> GameMoment | None:
    if type(value) is not dict:
        return None
    fields_set = _fields_set(value, _MOMENT_ALLOWED, _MOMENT_REQUIRED, _MOMENT_ALLOWED)
    if fields_set is None:
        return None
    timeline, tick = value["timeline_id"], value["tick"]
    calendar = value.get("calendar_json")
    # An integer tick only: the model also takes whole floats and numeric strings.
    if not _is_id(timeline) or type(tick) is not int or not INT64_MIN <= tick <= INT64_MAX:
        return None
    if calendar is not None and not (
        _is_text(calendar, MAXIMUM_METADATA_VALUE_CHARACTERS)
        and _is_json(calendar, "calendar_json")
    ):
        return None
    return _assemble(
        GameMoment,
        {
            "timeline_id": shared_known(timeline) or shared_id(timeline),
            "tick": tick,
            "calendar_json": calendar,
        },
        fields_set,
    )


def _tags(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if type(value) is not list:
        return None
    if not value:
        return ()
    for tag in value:
        if not _is_id(tag):
            return None
    unique = set(value)
    if len(unique) > MAXIMUM_TAGS:
        return None
    if all(map(str.isascii, unique)):  # ASCII: code-point order is UTF-16 (ordinal) order
        return tuple(sorted(unique))
    return tuple(sorted(unique, key=ordinal_key))


def _metadata(value: Any) -> MappingProxyType[str, str] | None:
    if value is None:
        return MappingProxyType({})
    if type(value) is not dict or len(value) > MAXIMUM_METADATA_ENTRIES:
        return None
    for key, item in value.items():
        if not _is_id(key, MAXIMUM_METADATA_KEY_CHARACTERS) or not _is_text(
            item, MAXIMUM_METADATA_VALUE_CHARACTERS
        ):
            return None
    return MappingProxyType(dict(value))


def _consolidates(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if type(value) is not list:
        return None
    for item in value:
        if not _is_id(item):
            return None
    ids = tuple(dict.fromkeys(value))  # first occurrences, in order
    return ids if len(ids) <= MAXIMUM_CONSOLIDATED else None


def _importance(value: Any) -> float | None:
    if type(value) is float:
        return value if 0.0 <= value <= 1.0 else None  # NaN fails both comparisons
    if type(value) is int and 0 <= value <= 1:
        return float(value)
    return None


def _memory(value: Any) -> GameMemory | None:
    """The memory ``model_validate(value)`` builds, if ``value`` is plain; else ``None``."""
    if type(value) is not dict:
        return None
    fields_set = _fields_set(value, _MEMORY_WRITTEN, _MEMORY_REQUIRED, _MEMORY_ALLOWED)
    if fields_set is None:
        return None
    memory_id, session_id = value["memory_id"], value["session_id"]
    owner_id, scope = value["owner_id"], value["scope"]
    if not (_is_id(memory_id) and _is_id(session_id) and _is_id(owner_id) and _is_id(scope)):
        return None
    kind_name = value["kind"]
    kind = _KINDS.get(kind_name) if type(kind_name) is str else None
    payload = value["payload_json"]
    if kind is None or not _is_text(payload, MAXIMUM_PAYLOAD_CHARACTERS):
        return None
    text = value.get("searchable_text")
    source, belief_key = value.get("source_input_id"), value.get("belief_key")
    if text is not None and not _is_text(text, MAXIMUM_SEARCHABLE_TEXT_CHARACTERS):
        return None
    if not (_is_optional_id(source) and _is_optional_id(belief_key)):
        return None
    importance = _importance(value.get("importance", _DEFAULT_IMPORTANCE))
    moment = _moment(value["moment"])
    if importance is None or moment is None:
        return None
    expiry_value = value.get("expires_at")
    expiry = None if expiry_value is None else _moment(expiry_value)
    if expiry_value is not None and (
        expiry is None or expiry.timeline_id != moment.timeline_id or expiry.tick < moment.tick
    ):
        return None
    tags = _tags(value.get("tags"))
    metadata = _metadata(value.get("metadata"))
    consolidates = _consolidates(value.get("consolidates"))
    if tags is None or metadata is None or consolidates is None:
        return None
    if not _is_json(payload, "payload_json"):  # last: the dearest check
        return None
    shared = shared_known  # the ids seen before (ids are never empty: ``or`` is safe)
    return _assemble(
        GameMemory,
        {
            "memory_id": memory_id,
            "session_id": shared(session_id) or shared_id(session_id),
            "owner_id": shared(owner_id) or shared_id(owner_id),
            "scope": shared(scope) or shared_id(scope),
            "kind": kind,
            "payload_json": payload,
            "moment": moment,
            "importance": importance,
            "searchable_text": text,
            "tags": tags,
            "source_input_id": source,
            "expires_at": expiry,
            "metadata": metadata,
            "belief_key": belief_key,
            "consolidates": consolidates,
        },
        fields_set,
    )


def decode_plain_document(payload: bytes) -> tuple[int, GameMemory] | None:
    """The format version and memory of a plain record payload; ``None`` if it is not plain.

    ``None`` says nothing about validity: the caller decodes the payload the full way
    (``json.loads`` and ``GameMemory.model_validate``), which accepts or names the damage.
    A returned memory is exactly what that way would build; the version is an ``int`` not
    yet checked against the readable ones, nor against the fields the memory uses.
    """
    if not PLAIN_PATH_ENABLED:
        return None
    try:
        document = from_json(payload, cache_strings=False)  # see the module's docstring
    except ValueError:  # not JSON, or JSON only json.loads reads: the full way decides
        return None
    if type(document) is not dict or document.keys() != _DOCUMENT_KEYS:
        return None
    version = document["format_version"]
    if type(version) is not int:
        return None
    memory = _memory(document["memory"])
    return None if memory is None else (version, memory)
