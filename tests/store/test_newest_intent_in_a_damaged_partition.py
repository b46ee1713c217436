"""The newest intent of a damaged partition is an acknowledged memory, never a pending append.

Issue 17, item 1, with the newest memory in the damaged partition: an owner's log cut in
the middle of a record (``truncate -s 4000``) reads like a torn tail, so the newest intent,
whose record is gone with the others, looked like an append in flight. Then ``check`` named
it "a pending append", ``check --fix`` dropped its intent (one more on every run), and so
did the recovery of the next append to *any* partition: an acknowledged memory left the
ledger without a trace, and the salvage could no longer record its id as lost.
"""

from __future__ import annotations

import json
from pathlib import Path

from game_memory.durable.names import identity_hash
from game_memory.store.records import HEADER_BYTES

from .helpers import MemoryFactory, StoreFactory, log_path


async def _cut_mid_record(make_store: StoreFactory, make_memory: MemoryFactory) -> Path:
    """``j0`` of jory, then ``m0`` ... ``m9`` of mira (the newest); mira's log cut inside m6."""
    store = make_store()
    await store.append(make_memory("j0", owner_id="jory"))
    for index in range(10):
        await store.append(make_memory(f"m{index}", owner_id="mira", text=f"memory {index}"))
    await store.aclose()
    save = Path(store.directory)
    log = log_path(save, "session", "mira")
    data, position, starts = log.read_bytes(), 0, []
    while position + HEADER_BYTES <= len(data):
        starts.append(position)
        position += HEADER_BYTES + int.from_bytes(data[position + 4 : position + 8], "little")
    log.write_bytes(data[: starts[6] + 30])  # m6 cut, m7 ... m9 (the newest) gone
    return save


async def test_check_counts_the_newest_intent_among_the_lost_and_fix_keeps_it(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await _cut_mid_record(make_store, make_memory)
    store = make_store(save)
    report = await store.check()
    assert not any("pending" in problem for problem in report.problems), report.problems
    assert any("4 acknowledged memories are lost" in p for p in report.problems), report.problems
    for _ in range(2):
        fixed = await store.check(fix=True)
        assert not any("pending" in repair for repair in fixed.repairs), fixed.repairs
        assert await store.count() == 11  # no acknowledged intent dropped, run after run


async def test_an_append_elsewhere_keeps_the_newest_intent_of_a_damaged_partition(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await _cut_mid_record(make_store, make_memory)
    store = make_store(save)
    assert await store.append(make_memory("j1", owner_id="jory")) is True  # recovery runs first
    assert await store.count() == 12
    salvaged = await store.check(accept_loss=True)
    assert salvaged.ok
    assert any("dropped 4 of lost memories" in repair for repair in salvaged.repairs)
    (report,) = (save / ".game-memory" / "damaged").glob("*/report.json")
    lost = {item["memory_hash"] for item in json.loads(report.read_text())["lost_memories"]}
    assert lost == {identity_hash(f"m{index}") for index in (6, 7, 8, 9)}  # the newest too
    assert await store.count() == 8 and len(await store.enumerate("session")) == 8
