"""The sidecar rounds of the SIGKILL campaign: ``game-memory serve --stdio`` killed mid-request.

The client writes a batch of JSON-RPC requests at once, waits a random time and kills the
sidecar; an answered request (a ``result``) is acknowledged, anything else may or may not
have happened. Two kinds:

* ``sidecar``: ``memory.remember`` requests;
* ``sidecar_lifecycle``: ``memory.remember`` of new memories interleaved with
  ``memory.forget``, ``memory.consolidate`` and ``memory.erase`` (listed memories, and a
  whole owner that no request of the batch writes to) of acknowledged ones; the targets
  of the forgets, consolidations and erases are disjoint, so every request holds whatever
  order the sidecar runs them in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from typing import Any

from game_memory import FileGameMemoryStore, GameMemory
from game_memory.bridge.convert import build_memory, build_summary
from game_memory.bridge.params import ConsolidateParams, RememberParams

from .campaign_ledger import EraseCall
from .campaign_memories import memory
from .harness import Harness
from .lifecycle_rounds import partitions

__all__ = ["sidecar", "sidecar_lifecycle"]

#: Requests one batch sends: the sidecar refuses more than 64 in flight on a connection.
_IN_FLIGHT = 60


def _remember_params(item: GameMemory) -> dict[str, Any]:
    return {
        "session_id": item.session_id,
        "owner_id": item.owner_id,
        "memory_id": item.memory_id,
        "text": item.searchable_text,
        "scope": "campaign",
        "moment": {"timeline_id": "world", "tick": item.moment.tick},
        "payload": json.loads(item.payload_json),
    }


def _serve(harness: Harness, requests: list[tuple[str, dict[str, Any]]]) -> dict[int, Any]:
    """Send ``requests`` (ids 1, 2, ...) to a new sidecar, kill it; the answered results."""
    command = [sys.executable, "-m", "game_memory.cli", "serve", "--stdio"]
    command += ["--model", "hashing", "--save-dir", str(harness.save)]
    command += ["--index-dir", str(harness.index)]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None
    hello = {"protocol_version": 1}
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}]
    for number, (method, params) in enumerate(requests, start=1):
        lines.append({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
    process.stdout.readline()  # the ready line (or end of output if it failed)
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        process.stdin.flush()
    time.sleep(harness.chooser.uniform(0.0, 0.6))
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
        harness.killed()
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()
    output = process.stdout.read()
    process.stdout.close()
    process.wait(timeout=60)
    answers: dict[int, Any] = {}
    for line in output.splitlines():
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the kill was never received: not acknowledged
        if answer.get("id") is None or answer["id"] == 0:
            continue
        if "result" in answer:
            answers[answer["id"]] = answer["result"]
        else:
            harness.result.problems.append(
                f"round {harness.round}: request {answer['id']} failed: {answer.get('error')}"
            )
    return answers


def sidecar(harness: Harness) -> bool:
    """``memory.remember`` requests; acknowledged = answered."""
    requests: list[tuple[str, dict[str, Any]]] = []
    stored: list[GameMemory] = []
    for number in range(_IN_FLIGHT):
        params = _remember_params(memory(f"sc{harness.round}-{number}"))
        requests.append(("memory.remember", params))
        stored.append(build_memory(RememberParams.model_validate(params)))
    for request_id in _serve(harness, requests):
        item = stored[request_id - 1]  # exactly what the sidecar stored
        harness.ledger.known[item.memory_id] = item
        harness.ledger.appended(item)
    return True


def sidecar_lifecycle(harness: Harness) -> bool:
    """Remembers interleaved with forgets, consolidations and erases (see the docstring)."""
    ledger, chooser = harness.ledger, harness.chooser
    grouped = sorted(partitions(harness).items())
    if len(grouped) < 2:
        return False
    (whole_session, whole_owner), _ = chooser.choice(grouped)
    requests: list[tuple[str, dict[str, Any], Any]] = []
    for number in range(20):
        item = memory(f"sl{harness.round}-{number}")
        if (item.session_id, item.owner_id) == (whole_session, whole_owner):
            continue
        params = _remember_params(item)
        requests.append(
            ("memory.remember", params, build_memory(RememberParams.model_validate(params)))
        )
    taken: set[str] = set()
    for (session, owner), group in grouped:
        if (session, owner) == (whole_session, whole_owner):
            continue
        free = [item for item in group if item.memory_id not in taken]
        chooser.shuffle(free)
        for item in free[: chooser.randint(0, 2)]:
            taken.add(item.memory_id)
            tick = item.moment.tick + chooser.randint(1, 300)
            at = {"timeline_id": "world", "tick": tick}
            params = {
                "session_id": session,
                "owner_id": owner,
                "memory_id": item.memory_id,
                "at": at,
            }
            requests.append(("memory.forget", params, (item, tick)))
            ledger.forget_sent(item.memory_id, tick)
        free = free[2:]
        if len(free) >= 2 and chooser.random() < 0.5:
            sources = free[: chooser.randint(2, min(4, len(free)))]
            taken.update(source.memory_id for source in sources)
            tick = max(source.moment.tick for source in sources) + chooser.randint(1, 100)
            summary_id = f"ss{harness.round}-{len(requests)}"
            params = {
                "session_id": session,
                "owner_id": owner,
                "memory_ids": [source.memory_id for source in sources],
                "summary": {
                    "memory_id": summary_id,
                    "text": f"memory {summary_id} of the kill campaign",
                    "scope": "campaign",
                    "moment": {"timeline_id": "world", "tick": tick},
                },
            }
            built = build_summary(ConsolidateParams.model_validate(params))
            stored = built.model_copy(update={"consolidates": tuple(params["memory_ids"])})
            ledger.consolidation_sent(stored)
            requests.append(("memory.consolidate", params, stored))
            free = free[len(sources) :]
        if free and chooser.random() < 0.5:
            listed = free[: chooser.randint(1, min(5, len(free)))]
            ids = tuple(item.memory_id for item in listed)
            taken.update(ids)
            call = EraseCall(session, owner, ids, frozenset(ids))
            params = {"session_id": session, "owner_id": owner, "memory_ids": list(ids)}
            requests.append(("memory.erase", params, call))
    owner_call = EraseCall(
        whole_session, whole_owner, None, _present(harness, whole_session, whole_owner)
    )
    requests.append(
        ("memory.erase", {"session_id": whole_session, "owner_id": whole_owner}, owner_call)
    )
    chooser.shuffle(requests)
    for method, _params, what in requests:
        if method == "memory.erase":
            ledger.erase_sent(what)
    answers = _serve(harness, [(method, params) for method, params, _ in requests])
    for request_id in sorted(answers):
        method, _params, what = requests[request_id - 1]
        if method == "memory.remember":
            ledger.known[what.memory_id] = what
            ledger.appended(what)
        elif method == "memory.forget":
            ledger.forgot(what[0], what[1])
        elif method == "memory.consolidate":
            ledger.consolidated(what)
        else:
            ledger.erase_done(what)
    return True


def _present(harness: Harness, session: str, owner: str) -> frozenset[str]:
    """Every memory of the owner now (acknowledged or not): what an owner erase takes."""

    async def read() -> frozenset[str]:
        async with FileGameMemoryStore(harness.save) as store:
            return frozenset(item.memory_id for item in await store.enumerate(session, owner))

    return asyncio.run(read())
