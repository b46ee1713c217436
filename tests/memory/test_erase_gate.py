"""The erase gate (``write_guards.EraseGate``): appends share it, an erase holds it alone."""

from __future__ import annotations

import asyncio

from game_memory.write_guards import EraseGate


async def _hold(gate: EraseGate, kind: str, log: list[str], release: asyncio.Event) -> None:
    async with gate.appending() if kind.startswith("append") else gate.erasing():
        log.append(f"{kind} in")
        await release.wait()
        log.append(f"{kind} out")


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_appends_share_the_gate_and_an_erase_waits_for_them_and_holds_back_new_ones() -> None:
    gate, log = EraseGate(), []
    first, second = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(_hold(gate, "append1", log, first))]
    tasks.append(asyncio.create_task(_hold(gate, "append2", log, first)))
    await _settle()
    assert log == ["append1 in", "append2 in"]  # shared
    tasks.append(asyncio.create_task(_hold(gate, "erase", log, second)))
    await _settle()
    tasks.append(asyncio.create_task(_hold(gate, "append3", log, first)))
    await _settle()
    assert log == ["append1 in", "append2 in"] and gate.busy
    first.set()
    await _settle()
    assert log[2:] == ["append1 out", "append2 out", "erase in"]  # append3 waits for it
    second.set()
    await asyncio.gather(*tasks)
    assert log[5:] == ["erase out", "append3 in", "append3 out"]
    assert not gate.busy


async def test_erases_run_one_at_a_time() -> None:
    gate, log = EraseGate(), []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_hold(gate, f"erase{n}", log, release)) for n in range(3)]
    await _settle()
    assert log == ["erase0 in"]
    release.set()
    await asyncio.gather(*tasks)
    assert log == [f"erase{n} {way}" for n in range(3) for way in ("in", "out")]


async def test_a_cancelled_waiting_erase_lets_the_appends_it_held_back_through() -> None:
    gate, log = EraseGate(), []
    held, never = asyncio.Event(), asyncio.Event()
    append1 = asyncio.create_task(_hold(gate, "append1", log, held))
    await _settle()
    erase = asyncio.create_task(_hold(gate, "erase", log, never))
    await _settle()
    append2 = asyncio.create_task(_hold(gate, "append2", log, never))
    await _settle()
    assert log == ["append1 in"]
    erase.cancel()
    await _settle()
    assert log == ["append1 in", "append2 in"]  # no longer held back by the erase
    held.set()
    never.set()
    await asyncio.gather(append1, append2)
    assert erase.cancelled() and not gate.busy
