"""Numbers beyond a 64-bit float in a memory's JSON: refused in a new memory, read as they
are from what a store holds, and never the end of a bridge recall.

``json.loads`` reads ``1e400`` as infinity, which the bridge cannot send back: a memory
holding one failed every bridge recall that would return it. An integer of more than 4,300
digits was refused with CPython's advice to raise an interpreter-wide limit, after which
only the process that raised it could read the save.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.bridge.messages import encode_message
from game_memory.bridge.results import memory_to_json
from game_memory.model.memory import STORED

HUGE = ['{"x":1e400}', '{"x":-1E+999}', '{"x":' + "9" * 400 + "}", '{"x":' + "1" * 5_000 + "}"]


def memory(payload: str = "{}", **fields: object) -> GameMemory:
    values: dict[str, object] = {
        "memory_id": "m1",
        "session_id": "s",
        "owner_id": "npc",
        "scope": "world",
        "kind": "fact",
        "payload_json": payload,
        "moment": {"timeline_id": "main", "tick": 1},
        "searchable_text": "a number",
    }
    values.update(fields)
    return GameMemory.model_validate(values)


@pytest.mark.parametrize("payload", HUGE)
def test_a_new_memory_refuses_a_number_beyond_a_float_and_says_why(payload: str) -> None:
    with pytest.raises(ValidationError, match="beyond the range of a 64-bit float") as raised:
        memory(payload)
    assert "set_int_max_str_digits" not in str(raised.value)


def test_a_calendar_beyond_a_float_is_refused_too() -> None:
    with pytest.raises(ValidationError, match="calendar_json holds the number 1e400"):
        GameMoment(timeline_id="main", tick=1, calendar_json='{"day":1e400}')


def test_numbers_a_float_holds_and_strings_of_digits_are_kept() -> None:
    payload = '{"a":1e308,"b":-5e-324,"c":' + "9" * 300 + ',"d":"' + "7" * 500 + '"}'
    assert memory(payload).payload_json == payload


@pytest.mark.parametrize("payload", HUGE[:2])
async def test_what_a_store_holds_is_read_and_sent_by_the_bridge(
    payload: str, tmp_path: Path
) -> None:
    # A save written before the rule (or migrated from one) still holds such a number.
    held = memory().model_copy(update={"payload_json": payload})  # as an earlier release
    async with FileGameMemoryStore(tmp_path / "save") as store:
        assert await store.append(held) is True
    async with FileGameMemoryStore(tmp_path / "save") as store:
        (read,) = await store.enumerate("s")
    assert read.payload_json == payload
    stored = GameMemory.model_validate(json.loads(read.model_dump_json()), context=STORED)
    assert stored.payload_json == payload
    sent = json.loads(encode_message(memory_to_json(read)))
    assert sent["payload"]["x"] == payload[5:-1]  # as its text: a float cannot hold it
