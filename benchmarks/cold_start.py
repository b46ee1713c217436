"""Cold start, the first recall after an append, and peak RSS, side by side (issue 12).

The NPC workload of ``npc_workload.py`` (the same memories, queries, fake provider and the
same fresh-process workers: this script spawns ``npc_workload.py --worker ...``), reduced
to the read-side figures, so a change to the read path can be measured in minutes:

* **open + first recall** (page cache warm), in a fresh process per side, ``--cold-repeats``
  times: the median; game-memory's first recall stages alongside;
* a **second open** of the same save after the first one wrote its derived files (read and
  intent files in ``.game-memory/read/``, the index's verified stamps): what every later
  start of the game costs;
* **warm hybrid recall** median, **peak RSS** after the recalls, and the **first recall
  right after an append** over the same query again (``after_append_over_warm``);
* with ``--baseline DIR``, the same game-memory figures of another checkout (``DIR`` is its
  ``python/`` folder, put on ``PYTHONPATH``), e.g. main's, on the same save in the same run.

The saves are seeded once (RAM file system, then copied under ``--directory``) and kept
there between runs unless ``--fresh``; derived files are deleted before each run so the
first open pays the full cost. Prints JSON: a ``table`` with ``game_memory_over_peer``.
Usage: ``python benchmarks/cold_start.py [--sizes 10000,100000] [--directory DIR]``.

Measured 2026-12-02 on the 2-core machine under load (load average about 5), with
``--cold-repeats 3`` (10k) and ``2`` (100k) and ``--baseline`` main at 7a1a927 (peer =
SQLite + sqlite-vec + FTS5); see docs/performance.md, "Cold start":

=============================================  ==========  ==========  ========  =========
figure                                          10k ours    10k peer    100k ours 100k peer
=============================================  ==========  ==========  ========  =========
open + first recall, derived files present      25.6 ms     21.9 ms     402 ms    384 ms
  the same, main                                306 ms                  8,962 ms
open + first recall after a session             51.3 ms                 271 ms
open + first recall, no derived files yet       2,133 ms                27,809 ms
first recall after an append / warm             1.36        0.94        1.48      1.06
  the same, main                                1.27                    1.72
peak RSS after recalls                          83.2 MB     47.8 MB     295 MB    48.5 MB
  the same, main                                99.6 MB                 365 MB
=============================================  ==========  ==========  ========  =========
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import peer_sqlite
from npc_sides import (
    DIMENSIONS,
    FakeProvider,
    gm_memory,
    gm_open,
    log,
    memory_records,
    peer_memory,
    projected,
)

Json = dict[str, Any]
WORKLOAD = Path(__file__).resolve().parent / "npc_workload.py"
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


async def seed(root: Path, size: int) -> None:
    """Seed both sides of one workload (``size`` memories in one NPC) under ``root``."""
    records = memory_records(size, 1)
    vectors = FakeProvider()
    vectors.draw([projected(record) for record in records], seed=size)
    (root / "game_memory").mkdir(parents=True)
    store = gm_open(root / "game_memory", size + 10_000, vectors)
    started = time.perf_counter()
    for index, record in enumerate(records):
        await store.append(gm_memory(record))
        if index % 20_000 == 19_999:
            log(f"  seeding {size:,}: {index + 1:,} appended")
    await store.aclose()
    log(f"  seeded game-memory {size:,} in {time.perf_counter() - started:.1f} s")
    (root / "peer").mkdir()
    peer = peer_sqlite.PeerStore(root / "peer" / "npc.db", DIMENSIONS, create=True)
    peer.append_many([peer_memory(record, vectors) for record in records])
    peer.close()


def spawn(
    kind: str, side: str, root: Path, size: int, repeats: int, appends: int, path: str = ""
) -> Json:
    """One ``npc_workload.py`` worker in a fresh interpreter (single-threaded BLAS);
    ``path`` (a ``PYTHONPATH``) runs another checkout of game-memory, such as main's."""
    command = [sys.executable, str(WORKLOAD), "--worker", kind, "--side", side]
    command += ["--root", str(root), "--size", str(size), "--repeats", str(repeats)]
    command += ["--appends", str(appends)]
    environment = dict(os.environ, **dict.fromkeys(BLAS_VARIABLES, "1"))
    if path:
        environment["PYTHONPATH"] = path
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {kind}/{side} failed:\n{done.stderr[-4000:]}")
    result: Json = json.loads(done.stdout)
    return result


def derived_files(save: Path) -> Path:
    return save / ".game-memory" / "read"


def remove_derived(folder: Path) -> None:
    """Delete what makes an open fast and is rebuilt when missing: the save's read and intent
    files (``.game-memory/read``) and the vector index's verified stamps (``*.verified``)."""
    shutil.rmtree(derived_files(folder / "save"), ignore_errors=True)
    for stamp in (folder / "index").glob(".game-memory-index/s-*/*.verified"):
        stamp.unlink()


def evict(folder: Path) -> None:
    """Drop ``folder``'s files from the page cache (``POSIX_FADV_DONTNEED``; other files and
    other processes keep theirs), so the next open reads them from the disk."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)  # dirty pages are not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def evicted_opens(sides: dict[str, Path], size: int, repeats: int) -> Json:
    """Open + first recall of each side right after its files left the page cache."""
    found: Json = {side: [] for side in sides}
    for _ in range(repeats):
        for side, folder in sides.items():
            evict(folder)
            found[side].append(spawn("open", side, folder, size, 1, 0))
    return found


def measure(args: argparse.Namespace, root: Path, size: int) -> Json:
    sides = {"game_memory": root / "game_memory", "peer": root / "peer"}
    remove_derived(sides["game_memory"])
    opens: Json = {side: [] for side in sides}
    for _ in range(args.cold_repeats):
        remove_derived(sides["game_memory"])
        for side, folder in sides.items():
            opens[side].append(spawn("open", side, folder, size, 1, 0))
    # The derived read files are now written: every later start of the game pays this.
    again = [spawn("open", "game_memory", sides["game_memory"], size, 1, 0)
             for _ in range(args.cold_repeats)]  # fmt: skip
    cold = evicted_opens(sides, size, args.cold_repeats) if args.evict else None
    session = {side: spawn("session", side, folder, size, args.repeats, args.appends)
               for side, folder in sides.items()}  # fmt: skip
    for figures in session.values():
        figures.pop("answers", None)
    # The session appended (and closed the store): the derived files are partly stale, as
    # at the start after a play session.
    after_session = [spawn("open", "game_memory", sides["game_memory"], size, 1, 0)
                     for _ in range(args.cold_repeats)]  # fmt: skip

    def median_open(results: list[Json]) -> float:
        return round(statistics.median(r["open_first_recall_ms"] for r in results), 1)

    ours_first, peer_first = median_open(opens["game_memory"]), median_open(opens["peer"])
    ours_again = median_open(again)
    table = []

    def row(figure: str, ours: float, theirs: float | None, unit: str) -> None:
        ratio = round(ours / theirs, 2) if theirs else None
        table.append({"figure": figure, "memories": size, "game_memory": ours, "peer": theirs,
                      "unit": unit, "game_memory_over_peer": ratio})  # fmt: skip

    row("open + first recall (no derived read files)", ours_first, peer_first, "ms")
    row("open + first recall (derived read files present)", ours_again, peer_first, "ms")
    row("open + first recall after a session that appended", median_open(after_session),
        peer_first, "ms")  # fmt: skip
    if cold is not None:
        row("open + first recall, page cache evicted (derived files present)",
            median_open(cold["game_memory"]), median_open(cold["peer"]), "ms")  # fmt: skip
    g, p = session["game_memory"], session["peer"]
    row("hybrid recall warm, median", g["warm_median_ms"], p["warm_median_ms"], "ms")
    row("first recall after an append, median", g["after_append_median_ms"],
        p["after_append_median_ms"], "ms")  # fmt: skip
    for figures in (g, p):
        figures["after_append_over_warm"] = round(
            figures["after_append_median_ms"] / figures["same_query_again_median_ms"], 2
        )
    row("after an append over warm (same query)", g["after_append_over_warm"],
        p["after_append_over_warm"], "ratio")  # fmt: skip
    row("peak RSS after recalls", g["peak_rss_after_recalls_mb"],
        p["peak_rss_after_recalls_mb"], "MB")  # fmt: skip
    if args.baseline:
        # The same save, read by the baseline checkout (it ignores read files), in turns
        # with this one, so both see the same machine.
        base = [spawn("open", "game_memory", sides["game_memory"], size, 1, 0, args.baseline)
                for _ in range(args.cold_repeats)]  # fmt: skip
        base_session = spawn("session", "game_memory", sides["game_memory"], size,
                             args.repeats, args.appends, args.baseline)  # fmt: skip
        base_session.pop("answers", None)
        base_session["after_append_over_warm"] = round(
            base_session["after_append_median_ms"] / base_session["same_query_again_median_ms"], 2
        )
        for figure, ours, theirs in (
            ("baseline open + first recall", ours_again, median_open(base)),
            ("baseline hybrid recall warm, median", g["warm_median_ms"],
             base_session["warm_median_ms"]),
            ("baseline after an append over warm", g["after_append_over_warm"],
             base_session["after_append_over_warm"]),
            ("baseline peak RSS after recalls", g["peak_rss_after_recalls_mb"],
             base_session["peak_rss_after_recalls_mb"]),
        ):  # fmt: skip
            table.append({"figure": figure, "memories": size, "game_memory": ours,
                          "baseline": theirs, "game_memory_over_baseline":
                          round(ours / theirs, 2) if theirs else None})  # fmt: skip
    details = {
        "first_open_stages_ms": [r["first_recall_stages_ms"] for r in opens["game_memory"]],
        "second_open_stages_ms": [r["first_recall_stages_ms"] for r in again],
        "open_after_session_stages_ms": [r["first_recall_stages_ms"] for r in after_session],
        "session": session,
    }
    return {"table": table, "details": details}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="memories in the one NPC")
    parser.add_argument("--directory", default=str(Path.home() / ".cache" / "gm-cold-start"))
    parser.add_argument("--cold-repeats", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the 16 queries")
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--fresh", action="store_true", help="seed the saves again")
    parser.add_argument("--seed-only", action="store_true")
    parser.add_argument("--baseline", default="", help="PYTHONPATH of a baseline checkout")
    parser.add_argument(
        "--evict", action="store_true", help="also open with the saves' files out of the page cache"
    )
    args = parser.parse_args()
    directory = Path(args.directory)
    report: Json = {"benchmark": "cold_start", "command": " ".join(sys.argv), "table": []}
    report["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    workloads = []
    for size in (int(s) for s in args.sizes.split(",")):
        root = directory / str(size)
        if args.fresh:
            shutil.rmtree(root, ignore_errors=True)
        if not (root / "peer" / "npc.db").exists():
            shutil.rmtree(root, ignore_errors=True)
            ram = Path("/dev/shm") / f"gm-cold-start-{size}"
            shutil.rmtree(ram, ignore_errors=True)
            asyncio.run(seed(ram, size))
            shutil.copytree(ram, root)
            shutil.rmtree(ram)
        if args.seed_only:
            continue
        log(f"cold start {size:,}")
        result = measure(args, root, size)
        report["table"].extend(result["table"])
        workloads.append(result["details"])
    report["workloads"] = workloads
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
