"""Fixes found by the sixteenth audit, in the real Godot engine against the real sidecar:
deep payloads come back whole, floats are stored exactly, a PackedByteArray is refused, a node
being stopped emits nothing, and a connection reserves no more than its largest answer
needs."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases
from .harness import EngineRun
from .sidecar import SidecarProcess

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_a_payload_as_deep_as_the_sidecar_stores_comes_back_whole(
    sidecars: SidecarStarter,
) -> None:
    """Godot's ``duplicate(true)`` stopped at about 100 levels; 128 are stored."""
    run = run_cases(["audit16_deep_payload"], sidecars("lexical"))
    assert_clean_run(run)
    checks = {"backend_ready"}
    for levels in (100, 128):
        checks |= {
            f"a_payload_of_{levels}_levels_is_stored",
            f"the_remember_echo_holds_all_{levels}_levels",
            f"the_recall_holds_all_{levels}_levels",
        }
    assert_case_passed(run, "audit16_deep_payload", checks)


def test_floats_are_stored_exactly_and_byte_arrays_are_refused(
    sidecars: SidecarStarter,
) -> None:
    """The floats' bits, as the engine printed them, are compared with the JSON text the addon
    writes and with what the sidecar stored, both read by Python's exact reader: Godot's
    reader rounds many decimals a float or so off, so it cannot judge."""
    sidecar = sidecars("lexical")
    run = run_cases(["audit16_exact_numbers"], sidecar)
    assert_clean_run(run)
    assert_case_passed(
        run,
        "audit16_exact_numbers",
        {
            "backend_ready",
            "the_auditors_floats_are_stored",
            "they_come_back_exactly",
            "random_floats_are_stored",
            "a_byte_array_is_unsendable",
            "a_byte_array_in_a_payload_is_refused",
            "a_byte_array_in_metadata_is_refused",
            "converted_with_array_it_is_stored_as_numbers",
            "nothing_was_stored_as_text",
        },
    )
    sent = _note(run, "audit16_exact_numbers", "sent")
    bits = [int(value) for value in sent["bits"]]
    assert [_bits(value) for value in json.loads(sent["written"])] == bits
    memories = _recall(sidecar, "audit16_exact_numbers", sent["owner"], tick=2)
    assert len(memories) == 1, memories
    assert [_bits(value) for value in memories[0]["payload"]["floats"]] == bits


def test_a_node_being_stopped_emits_nothing(sidecars: SidecarStarter) -> None:
    """stop(), leaving the tree and being freed, each with a rebuild and a remember pending
    on a frozen sidecar. The hashing model, so a rebuild can succeed."""
    sidecar = sidecars("hashing")
    run = run_cases(["audit16_stop_signals"], sidecar, controls=sidecar.controls())
    assert_clean_run(run)
    checks = {"ready_again", "a_rebuild_that_finishes_still_emits_rebuild_completed"}
    for how in ("stop", "leaving_the_tree", "being_freed"):
        checks |= {
            f"{how}_ready",
            f"{how}_frozen",
            f"{how}_emits_nothing",
            f"{how}_resolves_the_pending_calls_with_stopped",
            f"{how}_thawed",
        }
    assert_case_passed(run, "audit16_stop_signals", checks)


def test_a_connection_reserves_only_what_the_largest_answer_needs(
    sidecars: SidecarStarter,
) -> None:
    """The socket's inbound buffer is exactly the 16 MiB cap (Godot stores a message without
    its frame header), and an answer of about 16,000,000 bytes still arrives whole. The
    memories are stored through a plain client: 1 MB texts are slow to build in GDScript."""
    sidecar = sidecars("lexical")
    text = "chronicle " * 100_000  # 1,000,000 characters
    asyncio.run(_remember_texts(sidecar, "audit16_big_answer", "chronicler", text, count=16))
    run = run_cases(["audit16_big_answer"], sidecar, timeout=120.0)
    assert_clean_run(run)
    assert_case_passed(
        run,
        "audit16_big_answer",
        {
            "backend_ready",
            "the_socket_holds_exactly_the_largest_answer",
            "an_answer_near_the_cap_arrives_whole",
        },
    )


async def _remember_texts(
    sidecar: SidecarProcess, session: str, owner: str, text: str, count: int
) -> None:
    """Store ``count`` memories of ``owner`` whose text is ``text`` and whose payload is empty
    (so the text is in each answer once), at ticks 1 to ``count``."""
    async with connect(sidecar.url, max_size=None) as socket:
        await _call(socket, 0, "initialize", {"protocol_version": 1, "token": sidecar.token})
        for tick in range(1, count + 1):
            params = {
                "session_id": session,
                "owner_id": owner,
                "text": text,
                "moment": {"timeline_id": "main", "tick": tick},
                "payload": {},
            }
            await _call(socket, tick, "memory.remember", params)


def _note(run: EngineRun, case: str, event: str) -> dict[str, Any]:
    """Return the ``GMTEST_NOTE`` record ``event`` of ``case``."""
    notes = [
        record
        for record in run.records("GMTEST_NOTE")
        if record.get("case") == case and record.get("event") == event
    ]
    assert notes, f"{case} printed no {event} note\n{run.describe()}"
    return notes[0]


def _bits(value: float) -> int:
    return int(struct.unpack("<q", struct.pack("<d", value))[0])


def _recall(sidecar: SidecarProcess, session: str, owner: str, tick: int) -> list[Any]:
    """Recall ``owner``'s memories through a plain WebSocket client of the sidecar."""

    async def ask() -> list[Any]:
        async with connect(sidecar.url, max_size=None) as socket:
            await _call(socket, 0, "initialize", {"protocol_version": 1, "token": sidecar.token})
            at = {"timeline_id": "main", "tick": tick}
            params = {"session_id": session, "owner_id": owner, "text": "", "at_or_before": at}
            result = await _call(socket, 1, "memory.recall", params)
            return list(result["memories"])

    return asyncio.run(ask())


async def _call(
    socket: ClientConnection, request_id: int, method: str, params: dict[str, Any]
) -> Any:
    """Send one request and return its result, skipping notifications."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    await socket.send(json.dumps(message))
    while True:
        answer = json.loads(await socket.recv())
        if answer.get("id") == request_id:
            assert "result" in answer, answer
            return answer["result"]
