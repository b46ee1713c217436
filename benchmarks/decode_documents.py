"""Decoding record payloads: the plain-record fast path against the full model, in turns.

The records of a real save (``npc_sides.py``'s memories, as the NPC workload and
``cold_start.py`` write them: 12 words, a tiny payload, no tags) and a richer shape (BMP
text, tags, metadata, a calendar, an expiry), each encoded with ``encode_document``, then
decoded ``--rounds`` times by every variant in turns (the order rotating each round), CPU
time per pass (``time.process_time``: the machine is shared, wall time holds waits):

* ``model``: ``json.loads`` + ``GameMemory.model_validate``, the full way (the whole of
  ``decode_document`` before the fast path, kept as ``documents._decode_through_model``);
* ``decode_document``: the fast path first (``store/plain_document.py``), the model for the
  rest;
* ``plain_with_json_loads``: the fast path parsing with ``json.loads`` instead of
  ``pydantic_core.from_json``, to weigh the parser alone;
* ``json.loads`` and ``from_json``: parsing alone.

Every variant's memories are checked equal first. Prints JSON: per shape and variant the
median and spread of microseconds per record, and ``speedup`` (model / decode_document).
For instruction counts, which the machine's load cannot move: ``--only VARIANT --passes N``
decodes N passes without timing; run it under ``valgrind --tool=callgrind`` with N and 0
and divide the difference by N x size.
Usage: ``PYTHONPATH=python python benchmarks/decode_documents.py [--size 10000] [--rounds
15] [--only decode_document --passes 3]``.

Measured 2026-12-04 on the shared 2-core machine (load average 2), ``--rounds 15``, CPU
microseconds per record, median (min-max):

==========================  ==================  ==================
variant                     npc (405 bytes)     rich (550 bytes)
==========================  ==================  ==================
model (before)              12.2 (11.5-13.1)    18.5 (17.6-20.0)
decode_document (after)     6.6 (6.2-7.0)       12.1 (11.4-12.4)
plain_with_json_loads       8.8 (8.6-9.1)       14.6 (14.1-15.2)
json.loads alone            3.8                 5.3
from_json alone             1.6                 2.5
==========================  ==================  ==================

Under callgrind (``--size 10000``, a pass minus no pass), 135k -> 84k instructions a record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from npc_sides import gm_memory, memory_records
from script_support import int_range

Decoder = Callable[[bytes], Any]


def npc_payloads(size: int) -> list[bytes]:
    """The records of ``size`` memories of one NPC, as the NPC workload writes them."""
    from game_memory.store.documents import encode_document

    return [encode_document(gm_memory(record)) for record in memory_records(size, 1)]


def rich_payloads(size: int) -> list[bytes]:
    """The same memories with BMP text, tags, metadata, a calendar and an expiry."""
    from game_memory import GameMemory, GameMoment
    from game_memory.store.documents import encode_document

    kana = "あいうえおかきくけこさしすせそたちつてと"
    payloads = []
    for record in memory_records(size, 1):
        memory = gm_memory(record)
        tick = record["tick"]
        text = record["text"] + " " + "".join(kana[(tick + i) % len(kana)] for i in range(8))
        payloads.append(
            encode_document(
                GameMemory.model_validate(
                    {
                        **dict(memory),
                        "searchable_text": text,
                        "moment": GameMoment(
                            timeline_id="main", tick=tick, calendar_json=f'{{"day":{tick}}}'
                        ),
                        "expires_at": GameMoment(timeline_id="main", tick=tick + 100),
                        "tags": ["quest", f"topic-{tick % 7}", "町"],
                        "metadata": {"mood": "calm", "place": "鍛冶屋"},
                        "source_input_id": f"input-{tick}",
                    }
                )
            )
        )
    return payloads


def variants() -> dict[str, Decoder]:
    from pydantic_core import from_json

    from game_memory.store import plain_document
    from game_memory.store.documents import _decode_through_model, decode_document

    def loads(payload: bytes, cache_strings: bool) -> Any:
        return json.loads(payload)

    def plain_with_json_loads(payload: bytes) -> Any:
        plain_document.from_json = loads  # type: ignore[assignment]
        try:
            return plain_document.decode_plain_document(payload)
        finally:
            plain_document.from_json = from_json

    return {
        "model": _decode_through_model,
        "decode_document": decode_document,
        "plain_with_json_loads": plain_with_json_loads,
        "json.loads": json.loads,
        "from_json": lambda payload: from_json(payload, cache_strings=False),
    }


def check(decoders: dict[str, Decoder], payloads: list[bytes]) -> None:
    """Every memory-building variant builds the same memories (equal, and equal bytes)."""
    from game_memory.store.documents import encode_document

    for payload in payloads:
        model = decoders["model"](payload)
        fast = decoders["decode_document"](payload)
        plain = decoders["plain_with_json_loads"](payload)
        assert fast == model and plain is not None and plain[1] == model
        assert encode_document(fast) == encode_document(model) == payload


def one_pass(decode: Decoder, payloads: list[bytes]) -> float:
    """CPU microseconds per record of one pass of ``decode`` over ``payloads``."""
    start = time.process_time()
    for payload in payloads:
        decode(payload)
    return (time.process_time() - start) / len(payloads) * 1e6


def measure(decoders: dict[str, Decoder], payloads: list[bytes], rounds: int) -> dict[str, Any]:
    names = list(decoders)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm-up: caches, the JSON parser's string cache
        one_pass(decoders[name], payloads)
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(one_pass(decoders[name], payloads))
    result: dict[str, Any] = {
        name: {
            "median_us": round(statistics.median(values), 3),
            "min_us": round(min(values), 3),
            "max_us": round(max(values), 3),
        }
        for name, values in times.items()
    }
    result["speedup"] = round(
        statistics.median(times["model"]) / statistics.median(times["decode_document"]), 2
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    decoders = variants()
    parser.add_argument(
        "--size", type=int_range(1, 1_000_000), default=10_000, help="records per shape"
    )
    parser.add_argument(
        "--rounds", type=int_range(1, 1_000), default=15, help="passes of each variant"
    )
    parser.add_argument(
        "--only", choices=list(decoders), help="decode with this variant only, untimed (callgrind)"
    )
    parser.add_argument(
        "--passes", type=int_range(0, 1_000), default=1, help="with --only: passes to make"
    )
    arguments = parser.parse_args()
    shapes = {"npc": npc_payloads(arguments.size), "rich": rich_payloads(arguments.size)}
    if arguments.only:
        for _ in range(arguments.passes):
            for payload in shapes["npc"]:
                decoders[arguments.only](payload)
        return
    for payloads in shapes.values():
        check(decoders, payloads)
    report: dict[str, Any] = {
        "size": arguments.size,
        "rounds": arguments.rounds,
        "unit": "CPU microseconds per record, median over rounds (min, max)",
        "record_bytes": {name: len(payloads[0]) for name, payloads in shapes.items()},
    }
    for name, payloads in shapes.items():
        report[name] = measure(decoders, payloads, arguments.rounds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
