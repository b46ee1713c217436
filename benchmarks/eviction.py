"""Eviction benchmark: what a bounded NPC costs per append, with and without the hysteresis.

``maximum_memories_per_owner`` erases an owner's lowest-value memories when an append takes
it past the bound, and an erase rewrites the owner's partition. The policy erases down to
90% of the bound (``store/lifecycle.py``: ``eviction_target``), so a full partition is
rewritten once per tenth of the bound appended. This script measures, side by side in one
run, the same appends (OWNERS owners, APPENDS each, importance and game time varying) on a
file store through the front door (lexical mode: the store's cost alone):

* ``unbounded``: no policy;
* ``bounded_90_percent``: the policy as shipped;
* ``bounded_one_at_a_time``: the policy evicting down to the bound exactly (every append past
  the bound rewrites the partition), which the shipped policy avoids. The benchmark makes it
  by replacing ``eviction_target`` for that run only.

For each: seconds, appends per second, evictions (erase calls), memories evicted, bytes the
process wrote (``wchar`` of ``/proc/self/io``), the memories left per owner and the save's
size at the end. Prints JSON with the ratios against ``unbounded``. Usage:
``python benchmarks/eviction.py [--owners 4] [--appends 1500] [--bound 500]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from script_support import int_range

from game_memory import (
    FileGameMemoryStore,
    GameMemory,
    GameMoment,
    MemoryVectorDiagnostic,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
    forgetting,
)
from game_memory.store.erasing import save_bytes


def memory(owner: int, number: int) -> GameMemory:
    return GameMemory(
        memory_id=f"o{owner}-m{number}",
        session_id="slot",
        owner_id=f"npc-{owner}",
        scope="village",
        kind="event",
        payload_json=json.dumps({"n": number}),
        moment=GameMoment(timeline_id="main", tick=number * 10),
        importance=((number * 7919) % 100) / 100,
        searchable_text=f"npc {owner} saw event {number} at the market square " * 2,
    )


def _written() -> int:
    with open("/proc/self/io", encoding="ascii") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


@contextmanager
def _one_at_a_time() -> Iterator[None]:
    """Evict down to the bound itself (the benchmark's naive policy)."""
    original = forgetting.eviction_target
    forgetting.eviction_target = lambda bound: bound
    try:
        yield
    finally:
        forgetting.eviction_target = original


async def _variant(folder: Path, owners: int, appends: int, bound: int | None) -> dict[str, object]:
    evictions: list[int] = []

    def sink(diagnostic: MemoryVectorDiagnostic) -> None:
        if diagnostic.code == "memories_evicted":
            evictions.append(int(diagnostic.details["count"]))

    options = VectorMemoryStoreOptions(maximum_memories_per_owner=bound)
    store = FileGameMemoryStore(folder / "save", maximum_entries=owners * appends)
    async with VectorMemoryStore(store, options=options, diagnostics=sink) as front:
        written = _written()
        started = time.perf_counter()
        for number in range(appends):
            for owner in range(owners):
                await front.append(memory(owner, number))
        seconds = time.perf_counter() - started
        written = _written() - written
        left = [len(await front.enumerate("slot", f"npc-{owner}")) for owner in range(owners)]
        check = await front.check()
    return {
        "seconds": round(seconds, 2),
        "appends_per_second": round(owners * appends / seconds, 1),
        "evictions": len(evictions),
        "memories_evicted": sum(evictions),
        "bytes_written": written,
        "memories_left_per_owner": sorted(set(left)),
        "save_bytes": save_bytes(folder / "save" / ".game-memory"),
        "check_consistent": check.ok,
    }


async def run(owners: int, appends: int, bound: int) -> dict[str, object]:
    results: dict[str, dict[str, object]] = {}
    for name, limit in (
        ("unbounded", None),
        ("bounded_90_percent", bound),
        ("bounded_one_at_a_time", bound),
    ):
        with tempfile.TemporaryDirectory(prefix="gm-eviction-") as folder:
            if name == "bounded_one_at_a_time":
                with _one_at_a_time():
                    results[name] = await _variant(Path(folder), owners, appends, limit)
            else:
                results[name] = await _variant(Path(folder), owners, appends, limit)
            os.sync()
    base = results["unbounded"]
    ratios = {
        name: {
            "time_over_unbounded": round(float(r["seconds"]) / float(base["seconds"]), 2),
            "bytes_written_over_unbounded": round(
                int(r["bytes_written"]) / max(1, int(base["bytes_written"])), 2
            ),
        }
        for name, r in results.items()
        if name != "unbounded"
    }
    return {
        "benchmark": "eviction",
        "owners": owners,
        "appends_per_owner": appends,
        "maximum_memories_per_owner": bound,
        "results": results,
        "ratios": ratios,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--owners", type=int_range(1, 10_000), default=4)
    parser.add_argument("--appends", type=int_range(1, 1_000_000), default=1_500)
    # maximum_memories_per_owner's own range (VectorMemoryStoreOptions)
    parser.add_argument("--bound", type=int_range(1, 1_000_000), default=500)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.owners, args.appends, args.bound)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
