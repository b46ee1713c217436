"""The data model: bounds, the visibility predicate, content equivalence, ordinal order, ids."""

from __future__ import annotations

import contextlib
import copy
import math
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from game_memory import (
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    GameMoment,
    derive_memory_id,
)
from game_memory.model import (
    check_bounded_id,
    memories_match_query,
    memory_matches_query,
    ordinal_key,
    sharing,
)
from game_memory.strict_json import parse_strict_json


def memory(**fields: Any) -> GameMemory:
    values: dict[str, Any] = {
        "memory_id": "m",
        "session_id": "s",
        "owner_id": "o",
        "scope": "personal",
        "kind": "fact",
        "payload_json": "{}",
        "moment": GameMoment(timeline_id="world", tick=1),
    }
    values.update(fields)
    return GameMemory(**values)


# -- identifiers ------------------------------------------------------------------------


@given(st.text(max_size=1_100))
def test_bounded_id_accepts_exactly_non_blank_valid_text_up_to_1024_characters(text: str) -> None:
    try:
        text.encode("utf-8")
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    expected = bool(text.strip()) and len(text) <= 1_024 and encodable
    try:
        check_bounded_id(text)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == expected


@pytest.mark.parametrize("value", ["", "   ", "\t\n", "x" * 1_025, "a\ud800b", 5, None])
def test_memory_rejects_a_bad_memory_id_with_a_validation_error(value: object) -> None:
    with pytest.raises(ValidationError):
        memory(memory_id=value)


def test_an_id_of_exactly_1024_characters_is_accepted() -> None:
    assert memory(memory_id="x" * 1_024).memory_id == "x" * 1_024


# -- numbers and moments ----------------------------------------------------------------


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_importance_is_accepted_exactly_when_finite_and_between_zero_and_one(value: float) -> None:
    expected = math.isfinite(value) and 0.0 <= value <= 1.0
    try:
        accepted = memory(importance=value).importance == value
    except ValidationError:
        accepted = False
    assert accepted == expected


def test_importance_defaults_to_one_half_and_refuses_a_boolean() -> None:
    assert memory().importance == 0.5
    with pytest.raises(ValidationError):
        memory(importance=True)


@pytest.mark.parametrize("value", [10**400, -(10**400), 2, -1])
def test_an_integer_importance_out_of_range_is_a_validation_error_even_when_huge(
    value: int,
) -> None:
    with pytest.raises(ValidationError):
        memory(importance=value)
    with pytest.raises(ValidationError):
        GameMemoryQuery(session_id="s", limit=1, minimum_importance=value)
    assert memory(importance=1).importance == 1.0


@given(st.integers(min_value=-(2**64), max_value=2**64))
def test_a_tick_is_any_signed_64_bit_integer(tick: int) -> None:
    expected = -(2**63) <= tick <= 2**63 - 1
    try:
        accepted = GameMoment(timeline_id="w", tick=tick).tick == tick
    except ValidationError:
        accepted = False
    assert accepted == expected


@pytest.mark.parametrize("tick", [True, 1.5, "later"])
def test_a_tick_must_be_a_whole_number(tick: object) -> None:
    with pytest.raises(ValidationError):
        GameMoment(timeline_id="w", tick=tick)


def test_moments_order_within_a_timeline_and_refuse_to_compare_across_timelines() -> None:
    early, late = GameMoment(timeline_id="w", tick=1), GameMoment(timeline_id="w", tick=2)
    assert early < late and late >= early and not late <= early
    with pytest.raises(ValueError, match="cannot be ordered"):
        _ = early < GameMoment(timeline_id="other", tick=5)


def test_calendar_json_must_be_json_and_is_carried_but_not_interpreted() -> None:
    moment = GameMoment(timeline_id="w", tick=1, calendar_json='{"day": 3}')
    assert moment.calendar_json == '{"day": 3}'
    assert moment != GameMoment(timeline_id="w", tick=1)
    with pytest.raises(ValidationError):
        GameMoment(timeline_id="w", tick=1, calendar_json="{day: 3}")
    with pytest.raises(ValidationError):
        GameMoment(timeline_id="w", tick=1, calendar_json='"\ud800"')


def test_expiry_must_share_the_timeline_and_not_precede_the_moment() -> None:
    assert memory(expires_at=GameMoment(timeline_id="world", tick=1)).expires_at is not None
    with pytest.raises(ValidationError, match="same timeline"):
        memory(expires_at=GameMoment(timeline_id="other", tick=9))
    with pytest.raises(ValidationError, match="before moment"):
        memory(expires_at=GameMoment(timeline_id="world", tick=0))


# -- payload, text, tags, metadata ------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "{",
        "NaN",
        '{"a": Infinity}',
        '{"a": 1, "a": 2}',
        '{"outer": {"a": 1, "a": 1}}',
        "[" * 129 + "]" * 129,
        '"\ud800"',
    ],
)
def test_payload_must_be_strict_json_without_duplicates_or_deep_nesting(payload: str) -> None:
    with pytest.raises(ValidationError):
        memory(payload_json=payload)


def test_payload_nested_128_levels_deep_is_accepted() -> None:
    payload = "[" * 128 + "]" * 128
    assert memory(payload_json=payload).payload_json == payload


def test_payload_longer_than_ten_million_characters_is_refused() -> None:
    with pytest.raises(ValidationError, match="10000000"):
        memory(payload_json='"' + "x" * 10_000_000 + '"')


def test_searchable_text_is_bounded_to_a_million_characters() -> None:
    assert memory(searchable_text="x" * 1_000_000).searchable_text is not None
    with pytest.raises(ValidationError):
        memory(searchable_text="x" * 1_000_001)


@given(st.lists(st.text(alphabet="ab\U0001f600\uff5e", min_size=1, max_size=3), max_size=20))
def test_tags_are_deduplicated_and_sorted_by_utf16_code_units(tags: list[str]) -> None:
    stored = memory(tags=tags).tags
    assert list(stored) == sorted(set(tags), key=lambda tag: tag.encode("utf-16-be"))


def test_at_most_256_distinct_tags_are_allowed_counting_after_deduplication() -> None:
    many = [f"t{index}" for index in range(256)]
    assert len(memory(tags=many + many).tags) == 256
    with pytest.raises(ValidationError, match="256"):
        memory(tags=[*many, "one-more"])


@pytest.mark.parametrize("tags", ["one", 5, b"bytes", {"a": 1}, [5], [""]])
def test_tags_of_the_wrong_shape_raise_a_validation_error_not_a_crash(tags: object) -> None:
    with pytest.raises(ValidationError):
        memory(tags=tags)


def test_metadata_bounds_entries_keys_and_values() -> None:
    assert dict(memory(metadata={f"k{i}": "v" for i in range(256)}).metadata)["k0"] == "v"
    for bad in (
        {f"k{i}": "v" for i in range(257)},
        {"k" * 257: "v"},
        {"": "v"},
        {"k": "v" * 65_537},
        {"k": 5},
        {"k": "\ud800"},
        ["not", "a", "mapping"],
    ):
        with pytest.raises(ValidationError):
            memory(metadata=bad)


def test_memories_are_immutable() -> None:
    stored = memory(metadata={"k": "v"})
    with pytest.raises(ValidationError):
        stored.memory_id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        stored.metadata["k"] = "changed"  # type: ignore[index]
    assert copy.deepcopy(stored) is stored
    restored = pickle.loads(pickle.dumps(stored))
    assert restored == stored
    with pytest.raises(TypeError):
        restored.metadata["k"] = "changed"  # type: ignore[index]


def test_memories_built_alike_share_their_repeated_ids_and_field_names_safely(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What a game keeps alive in numbers (appended memories, parsed partitions) must not
    # carry its own copies of its partition's ids and of pydantic's set of field names
    # (about 1 KB a memory): one object each, within a bound, and safe because frozen.
    def fresh(text: str) -> str:  # an equal string, never the same object
        return "".join(list(text))

    session, owner, scope, timeline = "save-1", "npc-7", "personal", "world"
    one = memory(
        session_id=fresh(session),
        owner_id=fresh(owner),
        scope=fresh(scope),
        moment=GameMoment(timeline_id=fresh(timeline), tick=1),
    )
    other = GameMemory.model_validate(
        {**one.model_dump(), "memory_id": "n", "session_id": fresh(session)}
        | {"owner_id": fresh(owner), "scope": fresh(scope)}
        | {"moment": {"timeline_id": fresh(timeline), "tick": 2}}
    )
    for name in ("session_id", "owner_id", "scope"):
        assert getattr(one, name) is getattr(other, name)
    assert one.moment.timeline_id is other.moment.timeline_id
    assert one.model_fields_set < other.model_fields_set  # other keys given: another set
    again = memory(memory_id="p", session_id=session, owner_id=owner, scope=scope)
    assert again.__pydantic_fields_set__ is one.__pydantic_fields_set__
    later = GameMoment(timeline_id="elsewhere", tick=3)
    assert again.moment.__pydantic_fields_set__ is later.__pydantic_fields_set__
    # Nothing can add to a shared set: assignment is refused, a changed copy gets its own.
    before = set(one.model_fields_set)
    with pytest.raises(ValidationError):
        one.importance = 0.1  # type: ignore[misc]
    changed = one.model_copy(update={"importance": 0.9, "tags": ("x",)})
    assert changed.importance == 0.9 and "tags" in changed.model_fields_set
    assert one.model_fields_set == again.model_fields_set == before
    assert pickle.loads(pickle.dumps(one)) == one
    # Bounded: the tables are forgotten at once when full; values are never changed.
    monkeypatch.setattr(sharing, "SHARED_IDS", 8)
    monkeypatch.setattr(sharing, "SHARED_FIELD_SETS", 4)
    sharing._IDS.clear()
    sharing._FIELD_SETS.clear()
    optional = ("importance", "searchable_text", "tags", "source_input_id", "belief_key")
    for number in range(40):
        given = {name: memory().__dict__[name] for name in optional[: number % 6]}
        built = memory(owner_id=f"owner-{number}", session_id=f"session-{number}", **given)
        assert built.owner_id == f"owner-{number}" and built.model_fields_set >= set(given)
        assert len(sharing._IDS) <= 8 and len(sharing._FIELD_SETS) <= 4


# -- kinds ------------------------------------------------------------------------------


def test_kinds_keep_the_reference_ordinals_and_names() -> None:
    assert [kind.ordinal for kind in GameMemoryKind] == [0, 1, 2, 3, 4, 5]
    assert GameMemoryKind.RELATIONSHIP.reference_name == "Relationship"
    assert GameMemoryKind.parse("Fact") is GameMemoryKind.FACT
    assert GameMemoryKind.parse(5) is GameMemoryKind.PROCEDURE
    for bad in (6, -1, True, "feeling", None):
        with pytest.raises(ValueError):
            GameMemoryKind.parse(bad)


# -- content equivalence ----------------------------------------------------------------


def test_content_equivalence_compares_every_field_exactly() -> None:
    base = memory(tags=["b", "a"], metadata={"x": "1", "y": "2"}, importance=0.25)
    same = memory(tags=["a", "b", "a"], metadata={"y": "2", "x": "1"}, importance=0.25)
    assert base == same
    variants = [
        {"scope": "other"},
        {"kind": "event"},
        {"payload_json": "{ }"},
        {"moment": GameMoment(timeline_id="world", tick=1, calendar_json="{}")},
        {"importance": 0.25 + 1e-12},
        {"searchable_text": ""},
        {"tags": ["a"]},
        {"source_input_id": "input"},
        {"expires_at": GameMoment(timeline_id="world", tick=9)},
        {"metadata": {"x": "1"}},
    ]
    for change in variants:
        fields = {"tags": ["a", "b"], "metadata": {"x": "1", "y": "2"}, "importance": 0.25}
        fields.update(change)
        assert memory(**fields) != base, change


# -- ordinal order ----------------------------------------------------------------------


@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=4), max_size=12))
def test_ordinal_key_orders_strings_by_utf16_code_units(texts: list[str]) -> None:
    by_key = sorted(texts, key=ordinal_key)
    by_units = sorted(texts, key=lambda text: text.encode("utf-16-be"))
    assert by_key == by_units


def test_a_character_beyond_the_bmp_sorts_before_the_end_of_the_bmp() -> None:
    # U+1F600 is the surrogate pair D83D DE00, which orders before U+FF5E in UTF-16.
    assert sorted(["\uff5e", "\U0001f600"], key=ordinal_key) == ["\U0001f600", "\uff5e"]


# -- queries and the visibility predicate -----------------------------------------------


def test_query_bounds_and_normalisation() -> None:
    query = GameMemoryQuery(session_id="s", limit=0, scopes=["b", "a", "b"], kinds="fact")
    assert query.scopes == ("b", "a") and query.kinds == (GameMemoryKind.FACT,)
    assert GameMemoryQuery(session_id="s", limit=100_000).limit == 100_000
    for bad in (
        {"limit": -1},
        {"limit": 100_001},
        {"limit": True},
        {"session_id": " "},
        {"owner_id": ""},
        {"scopes": 5},
        {"tags": "one"},
        {"kinds": 7},
        {"minimum_importance": 1.5},
        {"text": "x" * 1_000_001},
    ):
        with pytest.raises(ValidationError):
            GameMemoryQuery(**{"session_id": "s", "limit": 1, **bad})


def reference_matches(memory: GameMemory, query: GameMemoryQuery) -> bool:
    """§1.5 of the reference, spelled out independently of the implementation."""
    if memory.session_id != query.session_id:
        return False
    if query.owner_id is not None and query.owner_id != memory.owner_id:
        return False
    if len(query.scopes) > 0 and memory.scope not in set(query.scopes):
        return False
    if len(query.kinds) > 0 and memory.kind not in set(query.kinds):
        return False
    if not set(query.tags) <= set(memory.tags):
        return False
    if not memory.importance >= query.minimum_importance:
        return False
    at = query.at_or_before
    if at is None:
        return True
    if memory.moment.timeline_id != at.timeline_id or memory.moment.tick > at.tick:
        return False
    return memory.expires_at is None or at.tick < memory.expires_at.tick


_small = st.sampled_from(["a", "b"])
_moments = st.builds(GameMoment, timeline_id=_small, tick=st.integers(-3, 3))


@st.composite
def memories(draw: st.DrawFn) -> GameMemory:
    moment = draw(_moments)
    expiry = draw(st.none() | st.integers(0, 4))
    return memory(
        session_id=draw(_small),
        owner_id=draw(_small),
        scope=draw(_small),
        kind=draw(st.sampled_from(list(GameMemoryKind)[:3])),
        tags=draw(st.lists(_small, max_size=2)),
        importance=draw(st.sampled_from([0.0, 0.5, 1.0])),
        moment=moment,
        expires_at=None
        if expiry is None
        else GameMoment(timeline_id=moment.timeline_id, tick=moment.tick + expiry),
    )


queries = st.builds(
    GameMemoryQuery,
    session_id=_small,
    limit=st.just(10),
    owner_id=st.none() | _small,
    scopes=st.lists(_small, max_size=2),
    kinds=st.lists(st.sampled_from(list(GameMemoryKind)[:3]), max_size=2),
    tags=st.lists(_small, max_size=2),
    at_or_before=st.none() | _moments,
    minimum_importance=st.sampled_from([0.0, 0.5, 1.0]),
)


@settings(max_examples=500)
@given(memories(), queries)
def test_the_visibility_predicate_matches_the_reference_rule(
    stored: GameMemory, query: GameMemoryQuery
) -> None:
    assert memory_matches_query(stored, query) == reference_matches(stored, query)


@settings(max_examples=500)
@given(st.lists(memories(), max_size=6), queries, st.booleans())
def test_the_batch_predicate_equals_the_predicate_memory_by_memory(
    stored: list[GameMemory], query: GameMemoryQuery, unfiltered: bool
) -> None:
    if unfiltered:  # no scope, kind or tag filter: the batch checks each condition at once
        query = query.model_copy(update={"scopes": (), "kinds": (), "tags": ()})
    expected = all(memory_matches_query(one, query) for one in stored)
    assert memories_match_query(stored, query) == expected


def test_expiry_is_exclusive_and_ignored_without_at_or_before() -> None:
    expiring = memory(
        moment=GameMoment(timeline_id="world", tick=1),
        expires_at=GameMoment(timeline_id="world", tick=5),
    )
    at = [
        GameMemoryQuery(
            session_id="s", limit=1, at_or_before=GameMoment(timeline_id="world", tick=t)
        )
        for t in (0, 1, 4, 5)
    ]
    assert [memory_matches_query(expiring, query) for query in at] == [False, True, True, False]
    assert memory_matches_query(expiring, GameMemoryQuery(session_id="s", limit=1))
    lasting = memory(memory_id="n", moment=GameMoment(timeline_id="world", tick=0))
    together = [lasting, expiring, lasting]
    assert [memories_match_query(together, query) for query in at] == [False, True, True, False]


# -- stages and ids ---------------------------------------------------------------------


def test_a_measured_stage_clamps_every_value_into_its_bounds() -> None:
    stage = GameMemorySearchStage.measured(
        GameMemorySearchStageKind.RERANK, 1e12, scanned=-5, candidates=10**9
    )
    assert stage.duration_ms == 86_400_000.0
    assert (stage.scanned_count, stage.candidate_count) == (0, 1_000_000)
    assert GameMemorySearchStage.measured(GameMemorySearchStageKind.RERANK, -1.0).duration_ms == 0
    nan = GameMemorySearchStage.measured(GameMemorySearchStageKind.RERANK, math.nan)
    assert nan.duration_ms == 0.0
    assert GameMemorySearchStage.model_validate(stage.model_dump()) == stage


def test_derive_memory_id_reproduces_the_reference_test_vector() -> None:
    moment = GameMoment(timeline_id="world", tick=5)
    derived = derive_memory_id("session", "actor", "stable-input", moment, turn=1, call_index=0)
    assert derived == (
        "oga-memory-v1:b8aad55ba1fdfac2905e0ba394d8b8ecd02de5c063210260f9c507d3e16a706d"
    )


def test_derive_memory_id_is_stable_and_separates_every_field() -> None:
    moment = GameMoment(timeline_id="world", tick=5)
    first = derive_memory_id("s", "a", "i", moment)
    assert derive_memory_id("s", "a", "i", moment) == first
    others = {
        derive_memory_id("s", "b", "i", moment),
        derive_memory_id("s", "a", "j", moment),
        derive_memory_id("s", "a", "i", GameMoment(timeline_id="world", tick=6)),
        derive_memory_id("s", "a", "i", moment, turn=2),
        derive_memory_id("s", "a", "i", moment, call_index=1),
    }
    assert first not in others and len(others) == 5
    # Fields are length-prefixed, so moving text from one field to the next changes the id.
    assert derive_memory_id("ab", "c", "i", moment) != derive_memory_id("a", "bc", "i", moment)
    with pytest.raises(ValueError):
        derive_memory_id("s", "a", "i", moment, turn=0)
    with pytest.raises(ValueError):
        derive_memory_id("s", "a", "i", moment, call_index=-1)


def test_strict_json_parsing_names_what_is_wrong() -> None:
    assert parse_strict_json('{"a": [1, 2]}', "x", 128) == {"a": [1, 2]}
    with pytest.raises(ValueError, match="duplicate property name 'a'"):
        parse_strict_json('{"a": 1, "a": 2}', "x", 128)


any_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=4),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(list(GameMemory.model_fields)), any_values, max_size=3))
def test_a_memory_of_arbitrary_values_validates_or_raises_a_validation_error(
    changes: dict[str, Any],
) -> None:
    with contextlib.suppress(ValidationError):
        memory(**changes)


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(list(GameMemoryQuery.model_fields)), any_values, max_size=3))
def test_a_query_of_arbitrary_values_validates_or_raises_a_validation_error(
    changes: dict[str, Any],
) -> None:
    with contextlib.suppress(ValidationError):
        GameMemoryQuery(**{"session_id": "s", "limit": 1, **changes})


def test_stages_and_results_built_without_validation_equal_those_of_pydantic() -> None:
    """``measured``, ``as_reused`` and ``assembled`` skip pydantic's per-field bookkeeping
    (a recall builds several): the same models as ``model_construct`` and ``model_copy``."""
    kind = GameMemorySearchStageKind.AUTHORITATIVE_SNAPSHOT
    stage = GameMemorySearchStage.measured(kind, 0.0025, 7, 3)
    expected = GameMemorySearchStage.model_construct(
        stage=kind, duration_ms=2.5, scanned_count=7, candidate_count=3, reused=False
    )
    for built, wanted in (
        (stage, expected),
        (stage.as_reused(), expected.model_copy(update={"reused": True})),
    ):
        assert built == wanted
        assert built.model_fields_set == wanted.model_fields_set
        assert built.model_dump() == wanted.model_dump()
        assert list(vars(built)) == list(vars(wanted))
    assert stage.reused is False and stage.as_reused().reused is True
    found = (memory(memory_id="a"),)
    result = GameMemorySearchSnapshot.assembled(found, found, (stage,))
    constructed = GameMemorySearchSnapshot.model_construct(
        memories=found, authoritative_memories=found, stages=(stage,)
    )
    assert result == constructed
    assert result.model_fields_set == constructed.model_fields_set
    assert result.model_dump_json() == constructed.model_dump_json()
