"""Game moments and memories: the immutable records every layer shares.

All models are immutable pydantic v2 models validated on construction, with the bounds of
the reference design. Time is *game* time only: a :class:`GameMoment` is a tick on a named
timeline, and nothing here ever reads the wall clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from game_memory.errors import InvalidArgumentError
from game_memory.model.fields import (
    INT64_MAX,
    INT64_MIN,
    MAXIMUM_METADATA_ENTRIES,
    MAXIMUM_METADATA_KEY_CHARACTERS,
    MAXIMUM_METADATA_VALUE_CHARACTERS,
    MAXIMUM_PAYLOAD_CHARACTERS,
    MAXIMUM_PAYLOAD_DEPTH,
    MAXIMUM_SEARCHABLE_TEXT_CHARACTERS,
    MAXIMUM_TAGS,
    BoundedId,
    Importance,
    check_bounded_id,
    check_unicode,
    ordinal_key,
    strict_int,
    string_list,
)
from game_memory.model.sharing import shared_fields, shared_id
from game_memory.strict_json import out_of_range_number, parse_strict_json

__all__ = ["MAXIMUM_CONSOLIDATED", "GameMemory", "GameMemoryKind", "GameMoment", "memory_list"]

_set_attribute = object.__setattr__


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


#: The validation context a store passes when it decodes what it holds
#: (``GameMemory.model_validate(data, context=STORED)``): rules added for new memories
#: after a save was written (the number range below) must not make it unreadable.
STORED: Mapping[str, bool] = MappingProxyType({"stored": True})


def check_number_range(text: str, what: str, info: ValidationInfo) -> None:
    """Refuse, in a new memory, a number beyond the range of a 64-bit float.

    Raises:
        ValueError: such a number, named (not for a memory a store decodes: ``STORED``).
    """
    context = info.context
    if isinstance(context, Mapping) and context.get("stored"):
        return
    number = out_of_range_number(text)
    if number is not None:
        raise ValueError(
            f"{what} holds the number {number}, beyond the range of a 64-bit float (about "
            "1.8e308), which Godot, JavaScript and the bridge read as infinity; store it as "
            "a string"
        )


class GameMoment(BaseModel):
    """A point in game time: a tick on one timeline.

    Moments compare only within one timeline; comparing moments of two timelines raises
    ``ValueError`` (a save loaded from another branch of history is not "earlier").
    ``calendar_json`` is carried through persistence but never interpreted.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeline_id: BoundedId
    tick: Annotated[int, BeforeValidator(strict_int), Field(ge=INT64_MIN, le=INT64_MAX)]
    calendar_json: str | None = None

    @field_validator("calendar_json")
    @classmethod
    def _calendar_is_json(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            if len(value) > MAXIMUM_METADATA_VALUE_CHARACTERS:
                raise ValueError("calendar_json is longer than 65,536 characters")
            check_unicode(value, "calendar_json")
            check_number_range(value, "calendar_json", info)
            parse_strict_json(value, "calendar_json", MAXIMUM_PAYLOAD_DEPTH)
        return value

    def model_post_init(self, context: Any, /) -> None:
        """Share the timeline id and the set of field names with every moment built alike
        (``model/sharing.py``: what many moments repeat, held once)."""
        values = self.__dict__
        values["timeline_id"] = shared_id(values["timeline_id"])
        _set_attribute(self, "__pydantic_fields_set__", shared_fields(self.model_fields_set))

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


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    unique = {check_bounded_id(tag, "tag") for tag in string_list(value, "tags")}
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
        check_unicode(item, f"metadata value of {key!r}")
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


def _is_none(value: object) -> bool:
    return value is None


def _is_empty(value: object) -> bool:
    return value == ()


def _consolidated(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    ids = tuple(
        dict.fromkeys(
            check_bounded_id(item, "a consolidated memory id")
            for item in string_list(value, "consolidates")
        )
    )
    if len(ids) > MAXIMUM_CONSOLIDATED:
        raise ValueError(
            f"a summary consolidates {len(ids)} memories; the limit is {MAXIMUM_CONSOLIDATED}"
        )
    return ids


#: Most memories one summary may consolidate.
MAXIMUM_CONSOLIDATED = 1_024
Consolidated = Annotated[tuple[str, ...], BeforeValidator(_consolidated)]


class GameMemory(BaseModel):
    """One immutable memory of one NPC (its *owner*) in one save (its *session*).

    Identity is the triple ``(session_id, owner_id, memory_id)``. Two memories are
    content-equivalent when every field is equal (``==``); re-appending an equivalent
    memory is a no-op, and reusing an id for different content is a conflict.
    ``payload_json`` is the memory's structured content as JSON text; ``searchable_text``
    is the prose lexical and semantic recall read first.

    ``consolidates`` lists the ids of the memories a summary (a ``reflection``) stands for:
    as of the summary's moment they are retracted (``VectorMemoryStore.consolidate``); an
    earlier moment still recalls them. Empty for an ordinary memory (and then not written).

    ``belief_key`` (a bounded id such as ``"bridge.eastmarch"``) makes memories of one owner
    versions of one belief: as of a moment only the newest visible version is recalled
    (see :func:`game_memory.model.query.memory_matches_query` and the partition rule in
    ``store/view.py``). It is part of content equivalence. A memory without one serializes
    exactly as before the field existed, so its content digest is unchanged.
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
    belief_key: BoundedId | None = Field(default=None, exclude_if=_is_none)
    consolidates: Consolidated = Field(default=(), exclude_if=_is_empty)

    @field_validator("payload_json")
    @classmethod
    def _payload_is_json(cls, value: str, info: ValidationInfo) -> str:
        if len(value) > MAXIMUM_PAYLOAD_CHARACTERS:
            raise ValueError(
                f"payload_json is {len(value)} characters long; "
                f"the limit is {MAXIMUM_PAYLOAD_CHARACTERS}"
            )
        check_unicode(value, "payload_json")
        check_number_range(value, "payload_json", info)
        parse_strict_json(value, "payload_json", MAXIMUM_PAYLOAD_DEPTH)
        return value

    @field_validator("searchable_text")
    @classmethod
    def _searchable_text_bounded(cls, value: str | None) -> str | None:
        if value is not None:
            if len(value) > MAXIMUM_SEARCHABLE_TEXT_CHARACTERS:
                raise ValueError("searchable_text is longer than 1,000,000 characters")
            check_unicode(value, "searchable_text")
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

    def model_post_init(self, context: Any, /) -> None:
        """Share the ids every memory of a partition repeats (session, owner, scope) and
        the set of field names with every memory built alike (``model/sharing.py``: about
        1 KB of each memory a game keeps alive, held once)."""
        values = self.__dict__
        values["session_id"] = shared_id(values["session_id"])
        values["owner_id"] = shared_id(values["owner_id"])
        values["scope"] = shared_id(values["scope"])
        _set_attribute(self, "__pydantic_fields_set__", shared_fields(self.model_fields_set))

    @property
    def key(self) -> tuple[str, str, str]:
        """The identity triple ``(session_id, owner_id, memory_id)``."""
        return (self.session_id, self.owner_id, self.memory_id)

    def __hash__(self) -> int:
        """The identity triple's hash: equal memories share it (the metadata mapping,
        which pydantic's frozen hash would take, is not hashable)."""
        return hash(self.key)

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


def memory_list(memories: object, what: str = "append_many") -> list[GameMemory]:
    """``memories`` (a batch, as ``append_many`` takes it) as a list.

    Raises:
        InvalidArgumentError: ``memories`` is not an iterable (``None``, a number, a text
            or bytes, each of which ``list`` would take apart or refuse with a raw
            ``TypeError``), or an element is not a ``GameMemory``; ``what`` names the call.
    """
    if isinstance(memories, (str, bytes)) or not isinstance(memories, Iterable):
        raise InvalidArgumentError(
            f"{what} takes a list of GameMemory, not {type(memories).__name__}"
        )
    batch = list(memories)
    if not all(isinstance(memory, GameMemory) for memory in batch):
        raise InvalidArgumentError(f"{what} takes GameMemory objects")
    return batch
