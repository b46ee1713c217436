"""What one memory costs in Python memory: built, decoded, and appended through the front door.

Counted with ``tracemalloc`` (the bytes Python and numpy allocate and still hold), so the
figures are exact and do not depend on the allocator or the machine's load:

- ``built_bytes``: a ``GameMemory`` built by its constructor, as a game or the bridge's
  ``memory.remember`` builds one (``model_validate_bytes``: through ``model_validate``);
- ``decoded_bytes``: one read back from a save record by the fast decoder
  (``store/plain_document.py``), as every parsed memory of a partition is;
- ``appended_bytes``: what the front door keeps per memory appended to an NPC of
  ``--size`` memories (file store and file index, fixed vectors: no model; a recall after
  every tenth append), counted over ``--appends`` appends after a warm-up of 200, with the
  top allocation sites (``appended_sites``) to say where it goes. ``--rounds`` fresh saves,
  the median reported: the store's background work (a read-file thread) sometimes decodes
  the NPC's older memories inside the counted window (then about 2 KB more an append,
  ``plain_document.py`` among the sites), sometimes before it.

Prints one JSON object. Usage: ``python benchmarks/memory_cost.py [--count 2000]
[--size 5000] [--appends 3000] [--rounds 3] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from report_out import emit

Json = dict[str, Any]


def _memory(number: int) -> Any:
    from game_memory import GameMemory, GameMoment

    return GameMemory(
        memory_id=f"memory-{number:08d}",
        session_id="save-slot-1",
        owner_id="npc.blacksmith",
        scope="personal",
        kind="event",
        payload_json=json.dumps({"text": f"the smith tempered blade number {number}"}),
        moment=GameMoment(timeline_id="main", tick=1_000 + number),
        importance=0.5,
        searchable_text=f"the smith tempered blade number {number}",
    )


def _held(build: Any, count: int) -> float:
    """Bytes held per object of ``count`` built by ``build(number)``."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [build(number) for number in range(count)]
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del kept
    return round(held / count, 1)


def per_memory(count: int) -> Json:
    from game_memory import GameMemory
    from game_memory.store.documents import encode_document
    from game_memory.store.plain_document import decode_plain_document

    records = [encode_document(_memory(number)) for number in range(count)]
    plain = [json.loads(record)["memory"] for record in records]

    def decoded(number: int) -> Any:
        found = decode_plain_document(records[number])
        assert found is not None, "the fast decoder refused a plain record"
        return found[1]

    return {
        "count": count,
        "built_bytes": _held(_memory, count),
        "model_validate_bytes": _held(lambda n: GameMemory.model_validate(plain[n]), count),
        "decoded_bytes": _held(decoded, count),
    }


async def per_append(size: int, appends: int) -> Json:
    import npc_sides

    from game_memory import GameMemoryQuery

    with tempfile.TemporaryDirectory(prefix="memory-cost-") as folder:
        root = Path(folder)
        provider = npc_sides.FakeProvider()
        store = npc_sides.gm_open(root, 400_000, provider)
        seed = npc_sides.memory_records(size, 1)
        await npc_sides.gm_ingest(store, [npc_sides.gm_memory(record) for record in seed])
        await store.aclose()
        provider = npc_sides.FakeProvider()
        store = npc_sides.gm_open(root, 400_000, provider)
        query = GameMemoryQuery(
            session_id=npc_sides.SESSION, owner_id=npc_sides.TARGET, text="forge river", limit=8
        )
        await store.recall(query)
        records = npc_sides.memory_records(appends + 200, 1, "appended", size)

        async def append(record: Json) -> None:
            text = npc_sides.projected(record)
            provider.known[text] = provider.vector(text)
            await store.append(npc_sides.gm_memory(record))
            provider.known.pop(text, None)  # the store embedded it: the harness keeps nothing

        for number, record in enumerate(records):
            if number == 200:  # after the warm-up: first reads, columns grown once
                gc.collect()
                tracemalloc.start(1)
                first = tracemalloc.take_snapshot()
            await append(record)
            if number % 10 == 9:
                await store.recall(query)
        gc.collect()
        last = tracemalloc.take_snapshot()
        tracemalloc.stop()
        await store.aclose()
    changes = last.compare_to(first, "lineno")
    package = str(Path(__file__).resolve().parents[1])
    return {
        "size": size,
        "appends": appends,
        "appended_bytes": round(sum(change.size_diff for change in changes) / appends, 1),
        "appended_sites": [
            {
                "site": f"{change.traceback[0].filename.replace(package, '.')}:"
                f"{change.traceback[0].lineno}",
                "bytes_per_append": round(change.size_diff / appends, 1),
            }
            for change in changes[:12]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2_000, help="memories built per figure")
    parser.add_argument("--size", type=int, default=5_000, help="memories in the NPC first")
    parser.add_argument("--appends", type=int, default=3_000, help="appends counted")
    parser.add_argument("--rounds", type=int, default=3, help="fresh saves appended to")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    if min(args.count, args.size, args.appends, args.rounds) < 1:
        parser.error("--count, --size, --appends and --rounds must be at least 1")
    rounds = [asyncio.run(per_append(args.size, args.appends)) for _ in range(args.rounds)]
    figures = [round_["appended_bytes"] for round_ in rounds]
    middle = sorted(rounds, key=lambda round_: round_["appended_bytes"])[len(rounds) // 2]
    result = {
        "benchmark": "memory_cost",
        "python": sys.version.split()[0],
        "per_memory": per_memory(args.count),
        "per_append": {
            **middle,
            "appended_bytes": statistics.median(figures),
            "appended_bytes_rounds": figures,
        },
    }
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
