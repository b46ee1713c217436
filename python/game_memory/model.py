"""The data shared by every layer: game moments, memories, queries and search metrics.

All models are immutable pydantic v2 models validated on construction, with the bounds of
the reference design. Time is *game* time only: a :class:`GameMoment` is a tick on a named
timeline, and nothing here ever reads the wall clock.

"Ordinal" order (ids, tags) is the order of UTF-16 code units, as in the reference
implementation, so that saves sort identically whichever runtime wrote them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from game_memory.strict_json import parse_strict_json

__all__ = [
    "MAXIMUM_ID_CHARACTERS",
    "GameMemory",
    "GameMemoryKind",
    "GameMemoryQuery",
    "GameMemorySearchSnapshot",
    "GameMemorySearchStage",
    "GameMemorySearchStageKind",
    "GameMoment",
    "memory_matches_query",
    "ordinal_key",
]

MAXIMUM_ID_CHARACTERS = 1_024
MAXIMUM_PAYLOAD_CHARACTERS = 10_000_000
MAXIMUM_PAYLOAD_DEPTH = 128
MAXIMUM_SEARCHABLE_TEXT_CHARACTERS = 1_000_000
MAXIMUM_TAGS = 256
MAXIMUM_METADATA_ENTRIES = 256
MAXIMUM_METADATA_KEY_CHARACTERS = 256
MAXIMUM_METADATA_VALUE_CHARACTERS = 65_536
MAXIMUM_QUERY_LIMIT = 100_000
MAXIMUM_QUERY_TEXT_CHARACTERS = 1_000_000
MAXIMUM_SNAPSHOT_MEMORIES = 1_000_000
MAXIMUM_STAGES = 64
MAXIMUM_STAGE_COUNT = 1_000_000
MAXIMUM_STAGE_MILLISECONDS = 86_400_000.0
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


_ModelT = TypeVar("_ModelT", bound=BaseModel)
_set_attribute = object.__setattr__


def assemble_validated(cls: type[_ModelT], values: dict[str, Any]) -> _ModelT:
    """Build a model from ``values`` that already satisfy every rule of ``cls``.

    What ``model_construct`` does, without its per-field bookkeeping: for bulk decoding
    whose checks are proven equal to the model's (see ``store/plain_legacy.py``). ``values``
    must hold every field, in declaration order, already in its validated form.
    """
    instance = cls.__new__(cls)
    _set_attribute(instance, "__dict__", values)
    _set_attribute(instance, "__pydantic_fields_set__", set(values))
    _set_attribute(instance, "__pydantic_extra__", None)
    _set_attribute(instance, "__pydantic_private__", None)
    return instance


def ordinal_key(text: str) -> str:
    """Sort key that orders strings by UTF-16 code units (.NET ``StringComparer.Ordinal``).

    For text inside the Basic Multilingual Plane code-point order already is UTF-16 order,
    so the text is its own key; characters beyond it are spelled as their surrogate pairs.
    """
    if text.isascii() or max(text) < "\U00010000":
        return text
    return "".join(_surrogates(char) for char in text)


def _surrogates(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return char
    code -= 0x10000
    return chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF))


def _check_unicode(value: str, what: str) -> None:
    if value.isascii():  # O(1) in CPython, and ASCII text is always valid
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} contains an unpaired surrogate and is not valid Unicode") from exc


def check_bounded_id(value: str, what: str = "id", maximum: int = MAXIMUM_ID_CHARACTERS) -> str:
    """Validate an identifier: a non-blank string of at most ``maximum`` characters."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    if len(value) > maximum:
        raise ValueError(f"{what} is {len(value)} characters long; the limit is {maximum}")
    if not value.strip():
        raise ValueError(f"{what} must not be blank")
    _check_unicode(value, what)
    return value


def _bounded_id(value: Any) -> str:
    return check_bounded_id(value)


BoundedId = Annotated[str, BeforeValidator(_bounded_id)]


class GameMemoryKind(StrEnum):
    """What a memory records. The declaration order is the reference's ordinal order."""

    EVENT = "event"
    FACT = "fact"
    RELATIONSHIP = "relationship"
    GOAL = "goal"
    REFLECTION = "reflection"
    PROCEDURE = "procedure"

    @property
    def ordinal(self) -> int:
        """The reference implementation's integer for this kind (Event=0 ... Procedure=5)."""
        return _KIND_ORDER.index(self)

    @property
    def reference_name(self) -> str:
        """The reference implementation's PascalCase name (``"Fact"``)."""
        return self.value.capitalize()

    @classmethod
    def parse(cls, value: object) -> GameMemoryKind:
        """Accept a kind, its value or name in any case (``"fact"``, ``"Fact"``), or an ordinal."""
        if isinstance(value, GameMemoryKind):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value < len(_KIND_ORDER):
                return _KIND_ORDER[value]
            raise ValueError(f"memory kind ordinal {value} is not defined")
        if isinstance(value, str):
            try:
                return cls(value.lower())
            except ValueError:
                pass
        names = ", ".join(kind.value for kind in _KIND_ORDER)
        raise ValueError(f"unknown memory kind {value!r}; expected one of {names}")


_KIND_ORDER: tuple[GameMemoryKind, ...] = tuple(GameMemoryKind)

Kind = Annotated[GameMemoryKind, BeforeValidator(GameMemoryKind.parse)]


def _strict_int(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a tick must be an integer, not a boolean")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("a tick must be a whole number")
        return int(value)
    return value


class GameMoment(BaseModel):
    """A point in game time: a tick on one timeline.

    Moments compare only within one timeline; comparing moments of two timelines raises
    ``ValueError`` (a save loaded from another branch of history is not "earlier").
    ``calendar_json`` is carried through persistence but never interpreted.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeline_id: BoundedId
    tick: Annotated[int, BeforeValidator(_strict_int), Field(ge=_INT64_MIN, le=_INT64_MAX)]
    calendar_json: str | None = None

    @field_validator("calendar_json")
    @classmethod
    def _calendar_is_json(cls, value: str | None) -> str | None:
        if value is not None:
            if len(value) > MAXIMUM_METADATA_VALUE_CHARACTERS:
                raise ValueError("calendar_json is longer than 65,536 characters")
            _check_unicode(value, "calendar_json")
            parse_strict_json(value, "calendar_json", MAXIMUM_PAYLOAD_DEPTH)
        return value

    def _comparable(self, other: object) -> GameMoment:
        if not isinstance(other, GameMoment):
            raise TypeError("a game moment compares only with another game moment")
        if other.timeline_id != self.timeline_id:
            raise ValueError(
                f"moments on timelines {self.timeline_id!r} and {other.timeline_id!r} "
                "cannot be ordered"
            )
        return other

    def __lt__(self, other: object) -> bool:
        return self.tick < self._comparable(other).tick

    def __le__(self, other: object) -> bool:
        return self.tick <= self._comparable(other).tick

    def __gt__(self, other: object) -> bool:
        return self.tick > self._comparable(other).tick

    def __ge__(self, other: object) -> bool:
        return self.tick >= self._comparable(other).tick


def _string_list(value: Any, what: str) -> Iterable[Any]:
    """``value`` if it is a list-like of items, else a ``ValueError`` naming ``what``."""
    if type(value) is list or type(value) is tuple:
        return value
    if isinstance(value, str):
        raise ValueError(f"{what} must be a list of strings, not one string")
    if isinstance(value, bytes | Mapping) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a list of strings")
    return value


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    unique = {check_bounded_id(tag, "tag") for tag in _string_list(value, "tags")}
    if len(unique) > MAXIMUM_TAGS:
        raise ValueError(f"a memory has {len(unique)} distinct tags; the limit is {MAXIMUM_TAGS}")
    return tuple(sorted(unique, key=ordinal_key))


def _metadata(value: Any) -> dict[str, str]:
    # Returns a plain dict: pydantic checks a dict without the slow ``Mapping`` ABC test,
    # and the field's after-validator freezes it.
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):  # dict: skip the ABC check
        raise ValueError("metadata must be a mapping of strings to strings")
    if len(value) > MAXIMUM_METADATA_ENTRIES:
        raise ValueError(
            f"metadata has {len(value)} entries; the limit is {MAXIMUM_METADATA_ENTRIES}"
        )
    copied: dict[str, str] = {}
    for key, item in value.items():
        check_bounded_id(key, "metadata key", MAXIMUM_METADATA_KEY_CHARACTERS)
        if not isinstance(item, str):
            raise ValueError(f"metadata value of {key!r} must be a string")
        if len(item) > MAXIMUM_METADATA_VALUE_CHARACTERS:
            raise ValueError(f"metadata value of {key!r} is longer than 65,536 characters")
        _check_unicode(item, f"metadata value of {key!r}")
        copied[key] = item
    return copied


# The mapping is validated as a dict, then frozen again (pydantic would hand back a mutable
# dict), so a stored memory's metadata cannot be changed in place.
Metadata = Annotated[
    Mapping[str, str],
    BeforeValidator(_metadata),
    AfterValidator(MappingProxyType),
    PlainSerializer(lambda value: dict(value), return_type=dict[str, str]),
]
Tags = Annotated[tuple[str, ...], BeforeValidator(_tags)]


def _importance(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("importance must be a number, not a boolean")
    if isinstance(value, int) and not 0 <= value <= 1:
        # Checked as an integer: a huge one cannot even be converted to a float.
        raise ValueError("importance must be between 0 and 1")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("importance must be finite")
    return value


Importance = Annotated[float, BeforeValidator(_importance), Field(ge=0.0, le=1.0)]


class GameMemory(BaseModel):
    """One immutable memory of one NPC (its *owner*) in one save (its *session*).

    Identity is the triple ``(session_id, owner_id, memory_id)``. Two memories are
    content-equivalent when every field is equal (``==``); re-appending an equivalent
    memory is a no-op, and reusing an id for different content is a conflict.
    ``payload_json`` is the memory's structured content as JSON text; ``searchable_text``
    is the prose lexical and semantic recall read first.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_id: BoundedId
    session_id: BoundedId
    owner_id: BoundedId
    scope: BoundedId
    kind: Kind
    payload_json: str
    moment: GameMoment
    importance: Importance = 0.5
    searchable_text: str | None = None
    tags: Tags = ()
    source_input_id: BoundedId | None = None
    expires_at: GameMoment | None = None
    metadata: Metadata = Field(default_factory=lambda: MappingProxyType({}))

    @field_validator("payload_json")
    @classmethod
    def _payload_is_json(cls, value: str) -> str:
        if len(value) > MAXIMUM_PAYLOAD_CHARACTERS:
            raise ValueError(
                f"payload_json is {len(value)} characters long; "
                f"the limit is {MAXIMUM_PAYLOAD_CHARACTERS}"
            )
        _check_unicode(value, "payload_json")
        parse_strict_json(value, "payload_json", MAXIMUM_PAYLOAD_DEPTH)
        return value

    @field_validator("searchable_text")
    @classmethod
    def _searchable_text_bounded(cls, value: str | None) -> str | None:
        if value is not None:
            if len(value) > MAXIMUM_SEARCHABLE_TEXT_CHARACTERS:
                raise ValueError("searchable_text is longer than 1,000,000 characters")
            _check_unicode(value, "searchable_text")
        return value

    @model_validator(mode="after")
    def _expiry_follows_moment(self) -> GameMemory:
        expiry = self.expires_at
        if expiry is not None:
            if expiry.timeline_id != self.moment.timeline_id:
                raise ValueError("expires_at must be on the same timeline as moment")
            if expiry.tick < self.moment.tick:
                raise ValueError("expires_at must not be before moment")
        return self

    @property
    def key(self) -> tuple[str, str, str]:
        """The identity triple ``(session_id, owner_id, memory_id)``."""
        return (self.session_id, self.owner_id, self.memory_id)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> GameMemory:
        """A memory is immutable, so its deep copy is itself."""
        return self

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        values = dict(state["__dict__"])
        values["metadata"] = dict(values["metadata"])  # a read-only mapping cannot be pickled
        return {**state, "__dict__": values}

    def __setstate__(self, state: dict[Any, Any]) -> None:
        values = dict(state["__dict__"])
        values["metadata"] = MappingProxyType(dict(values["metadata"]))
        super().__setstate__({**state, "__dict__": values})


def _unique_ids(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    seen: dict[str, None] = {}
    for item in _string_list(value, what):
        seen.setdefault(check_bounded_id(item, what[:-1] if what.endswith("s") else what), None)
    if len(seen) > MAXIMUM_TAGS:
        raise ValueError(f"a query has {len(seen)} {what}; the limit is {MAXIMUM_TAGS}")
    return tuple(seen)


def _unique_kinds(value: Any) -> tuple[GameMemoryKind, ...]:
    if value is None:
        return ()
    if isinstance(value, str | GameMemoryKind):
        value = [value]
    seen: dict[GameMemoryKind, None] = {}
    for item in _string_list(value, "kinds"):
        seen.setdefault(GameMemoryKind.parse(item), None)
    return tuple(seen)


class GameMemoryQuery(BaseModel):
    """What to recall: one session, optionally one owner, filters, text and a game moment.

    ``at_or_before`` is the game moment the question is asked at: memories from later
    ticks, from other timelines, or expired at that moment (expiry is exclusive) are
    invisible. Without it there is no time filtering at all. ``limit`` 0 is legal and
    recalls nothing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: BoundedId
    limit: Annotated[int, BeforeValidator(_strict_int), Field(ge=0, le=MAXIMUM_QUERY_LIMIT)]
    owner_id: BoundedId | None = None
    scopes: Annotated[tuple[str, ...], BeforeValidator(lambda v: _unique_ids(v, "scopes"))] = ()
    kinds: Annotated[tuple[GameMemoryKind, ...], BeforeValidator(_unique_kinds)] = ()
    tags: Annotated[tuple[str, ...], BeforeValidator(lambda v: _unique_ids(v, "tags"))] = ()
    text: str | None = None
    at_or_before: GameMoment | None = None
    minimum_importance: Importance = 0.0

    @field_validator("text")
    @classmethod
    def _text_bounded(cls, value: str | None) -> str | None:
        if value is not None:
            if len(value) > MAXIMUM_QUERY_TEXT_CHARACTERS:
                raise ValueError("query text is longer than 1,000,000 characters")
            _check_unicode(value, "query text")
        return value


def memory_matches_query(memory: GameMemory, query: GameMemoryQuery) -> bool:
    """Return whether ``memory`` is visible to ``query`` (the canonical visibility predicate).

    Same session (and owner, if the query names one); scope and kind in the query's sets
    when those are non-empty; every query tag present; importance at least the minimum;
    and, when ``at_or_before`` is set, on the same timeline, not after it, and not expired
    at it (``at.tick < expires_at.tick``). Every recall path applies exactly this rule.
    """
    if memory.session_id != query.session_id:
        return False
    if query.owner_id is not None and memory.owner_id != query.owner_id:
        return False
    if query.scopes and memory.scope not in query.scopes:
        return False
    if query.kinds and memory.kind not in query.kinds:
        return False
    if query.tags:
        memory_tags = memory.tags
        if not all(tag in memory_tags for tag in query.tags):
            return False
    if memory.importance < query.minimum_importance:
        return False
    at = query.at_or_before
    if at is not None:
        moment = memory.moment
        if moment.timeline_id != at.timeline_id or moment.tick > at.tick:
            return False
        expiry = memory.expires_at
        if expiry is not None and not at.tick < expiry.tick:
            return False
    return True


class GameMemorySearchStageKind(IntEnum):
    """The stages of one search, in the reference's ordinal order."""

    STORAGE_MIGRATION = 0
    AUTHORITATIVE_SNAPSHOT = 1
    LEXICAL_SEARCH = 2
    VECTOR_INDEX_READ = 3
    EMBEDDING = 4
    VECTOR_SCORING = 5
    RERANK = 6


class GameMemorySearchStage(BaseModel):
    """How long one stage of a search took and how much it touched: never text or ids."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: GameMemorySearchStageKind
    duration_ms: Annotated[float, Field(ge=0.0, le=MAXIMUM_STAGE_MILLISECONDS, allow_inf_nan=False)]
    scanned_count: Annotated[int, Field(ge=0, le=MAXIMUM_STAGE_COUNT)] = 0
    candidate_count: Annotated[int, Field(ge=0, le=MAXIMUM_STAGE_COUNT)] = 0
    reused: bool = False

    @classmethod
    def measured(
        cls,
        stage: GameMemorySearchStageKind,
        seconds: float,
        scanned: int = 0,
        candidates: int = 0,
        reused: bool = False,
    ) -> GameMemorySearchStage:
        """Build a stage from a duration in seconds, clamping every value into its bounds."""
        milliseconds = seconds * 1000.0
        if not math.isfinite(milliseconds):
            milliseconds = MAXIMUM_STAGE_MILLISECONDS if milliseconds > 0 else 0.0
        return cls(
            stage=GameMemorySearchStageKind(stage),
            duration_ms=min(max(milliseconds, 0.0), MAXIMUM_STAGE_MILLISECONDS),
            scanned_count=min(max(int(scanned), 0), MAXIMUM_STAGE_COUNT),
            candidate_count=min(max(int(candidates), 0), MAXIMUM_STAGE_COUNT),
            reused=bool(reused),
        )


class GameMemorySearchSnapshot(BaseModel):
    """A search result: the ranked memories, the authoritative snapshot they came from, stages.

    ``authoritative_memories`` is the exact bounded session (or session and owner)
    partition the search read; every returned memory is one of them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memories: Annotated[tuple[GameMemory, ...], Field(max_length=MAXIMUM_SNAPSHOT_MEMORIES)]
    authoritative_memories: Annotated[
        tuple[GameMemory, ...], Field(max_length=MAXIMUM_SNAPSHOT_MEMORIES)
    ]
    stages: Annotated[tuple[GameMemorySearchStage, ...], Field(max_length=MAXIMUM_STAGES)]

    def stage(self, kind: GameMemorySearchStageKind) -> GameMemorySearchStage | None:
        """Return the first stage of ``kind``, or ``None`` when the search had none."""
        return next((stage for stage in self.stages if stage.stage == kind), None)
