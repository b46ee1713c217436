"""Cold start, the first recall after an append, and peak RSS, side by side (issue 12).

The NPC workload of ``npc_workload.py`` (the same memories, queries, fake provider and the
same fresh-process workers: this script spawns ``npc_workload.py --worker ...``), reduced
to the read-side figures, so a change to the read path can be measured in minutes:

* **open + first recall** (page cache warm), in a fresh process per side (this script's
  ``--worker``), ``--cold-repeats`` times: median and best of the wall and of the CPU
  time (all threads; the machine is shared, the wall time holds waits for a core);
* the **first open after the read files were written** and settled (2 s: a read file is
  stamped only then, see ``store/read_files.py``), which checks every array and stamps
  them, and the **later opens** with the derived files present (read and intent files in
  ``.game-memory/read/``, the stamps): what every later start of the game costs;
* **warm hybrid recall** median, **peak RSS** after the recalls, and the **first recall
  right after an append** over the same query again (``after_append_over_warm``), from
  ``npc_workload.py --worker session`` (skipped with ``--only-opens``);
* with ``--baseline DIR``, the same game-memory figures of another checkout (``DIR`` is its
  ``python/`` folder, put on ``PYTHONPATH``), e.g. main's, on the same save in the same run,
  its opens in turns with ours (``--alternate N``: N opens of each, in turns).

The saves are seeded once (in a RAM folder of this process's own, then copied under
``--directory``) and kept there between runs unless ``--fresh``; derived files are deleted
before each first open so it pays the full cost. Prints JSON: a ``table`` with
``game_memory_over_peer``. Usage: ``python benchmarks/cold_start.py [--sizes 10000,100000]
[--directory DIR] [--only-opens] [--baseline DIR --alternate N]``.

Measured 2026-12-02 on the 2-core machine under load (load average 3 to 4), ``--only-opens
--cold-repeats 3`` with ``--alternate 9`` (10k) and ``7`` (100k), ``--baseline`` main at
14baa10 (peer = SQLite + sqlite-vec + FTS5); see docs/performance.md, "Cold start":

==============================================  ===========  ===========  =========  =========
figure (median wall, CPU in parentheses)        10k ours     10k main     100k ours  100k main
==============================================  ===========  ===========  =========  =========
open + first recall, derived files present      14.2 (14.2)  24.9 (24.8)  128 (84)   199 (131)
  the peer                                      6.7                       48.0
first open after the read files were written    23.9 (17.3)               193 (81)
open + first recall, no derived files yet       909                       9,481
==============================================  ===========  ===========  =========  =========
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
import tempfile
import time
from pathlib import Path
from typing import Any

import peer_sqlite
from npc_sides import (
    DIMENSIONS,
    FakeProvider,
    Side,
    gm_memory,
    gm_open,
    log,
    memory_records,
    peer_memory,
    projected,
    queries,
)
from script_support import int_list, int_range, worker_failed

Json = dict[str, Any]
WORKLOAD = Path(__file__).resolve().parent / "npc_workload.py"
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: ``read_files.SETTLED_NS`` (with a margin), in seconds: a read file younger than this is
#: checked in full at every open and not stamped.
SETTLED_S = 2.2


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


def ram_folder() -> str | None:
    """A RAM file system to seed in (``/dev/shm``), or the default temporary folder."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


async def open_worker(side_name: str, root: Path, size: int) -> Json:
    """Open + first recall in this fresh process: wall and CPU time (all threads).

    As ``npc_sides.worker``'s ``open``, with the process CPU time (``time.process_time``)
    measured over the same span: on a shared 2-core machine the wall time also holds
    the waits for a core.
    """
    import numpy  # noqa: F401  (imported before the clock, like the store's modules)

    if side_name == "game_memory":
        import game_memory  # noqa: F401
    else:
        peer_sqlite.versions()  # loads sqlite-vec once, before the clock
    side = Side(side_name, root, size + 10_000)
    work = queries(size)
    started, cpu = time.perf_counter(), time.process_time()
    await side.open()
    first, _ = await side.recall(work[0])
    figures: Json = {
        "open_first_recall_ms": round((time.perf_counter() - started) * 1000, 3),
        "open_first_recall_cpu_ms": round((time.process_time() - cpu) * 1000, 3),
        "first_recall_ms": round(first * 1000, 3),
        "first_recall_stages_ms": side.stages[:1],
    }
    await side.close()
    return figures


def open_once(side: str, root: Path, size: int, path: str = "") -> Json:
    """:func:`open_worker` in a fresh interpreter (single-threaded BLAS); ``path`` (a
    ``PYTHONPATH``) runs another checkout of game-memory, such as main's."""
    command = [sys.executable, __file__, "--worker", side, "--root", str(root)]
    command += ["--size", str(size)]
    return run(command, path, f"open/{side}")


def run(command: list[str], path: str, what: str) -> Json:
    environment = dict(os.environ, **dict.fromkeys(BLAS_VARIABLES, "1"))
    if path:
        environment["PYTHONPATH"] = path
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if done.returncode != 0:  # killed by a Ctrl-C: KeyboardInterrupt
        worker_failed(done, f"worker {what}")
    result: Json = json.loads(done.stdout)
    return result


def spawn(
    kind: str, side: str, root: Path, size: int, repeats: int, appends: int, path: str = ""
) -> Json:
    """One ``npc_workload.py`` worker in a fresh interpreter (single-threaded BLAS);
    ``path`` (a ``PYTHONPATH``) runs another checkout of game-memory, such as main's."""
    command = [sys.executable, str(WORKLOAD), "--worker", kind, "--side", side]
    command += ["--root", str(root), "--size", str(size), "--repeats", str(repeats)]
    command += ["--appends", str(appends)]
    return run(command, path, f"{kind}/{side}")


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
            found[side].append(open_once(side, folder, size))
    return found


def settle(save: Path) -> float:
    """Wait until the save's read files are :data:`SETTLED_S` old (a load stamps a read file
    only then, see ``read_files.py``); the seconds waited."""
    newest = max(
        (path.stat().st_ctime for path in derived_files(save).rglob("*.read")), default=0.0
    )
    wait = max(0.0, newest + SETTLED_S - time.time())
    time.sleep(wait)
    return round(wait, 2)


def alternated(
    folder: Path, copy: Path, size: int, runs: int, baseline: str
) -> tuple[list[Json], list[Json]]:
    """``runs`` opens of this checkout (``folder``) and of the baseline's (``copy``: a copy
    of the save with the baseline's own derived files) in turns, which goes first
    alternating: the two see the same machine."""
    ours: list[Json] = []
    theirs: list[Json] = []
    for run in range(runs):
        turns = [(ours, folder, ""), (theirs, copy, baseline)]
        for found, where, path in turns if run % 2 == 0 else turns[::-1]:
            found.append(open_once("game_memory", where, size, path))
    return ours, theirs


def summary(results: list[Json]) -> Json:
    """Median and best of the wall and CPU times of some opens."""
    wall = [r["open_first_recall_ms"] for r in results]
    cpu = [r["open_first_recall_cpu_ms"] for r in results]
    return {
        "median_ms": round(statistics.median(wall), 1),
        "best_ms": round(min(wall), 1),
        "cpu_median_ms": round(statistics.median(cpu), 1),
        "cpu_best_ms": round(min(cpu), 1),
        "runs": len(results),
    }


def open_rows(
    size: int,
    opens: Json,
    stamping: list[Json],
    again: Json,
    after_session: list[Json],
    cold: Json | None,
) -> list[Json]:
    """The table rows of the opens (median wall time; best and CPU times beside it)."""
    table: list[Json] = []

    def row(figure: str, ours: list[Json], theirs: list[Json]) -> None:
        mine, other = summary(ours), summary(theirs)
        ratio = round(mine["median_ms"] / other["median_ms"], 2)
        table.append({"figure": figure, "memories": size, "game_memory": mine["median_ms"],
                      "peer": other["median_ms"], "unit": "ms", "game_memory_over_peer": ratio,
                      "game_memory_times": mine, "peer_times": other})  # fmt: skip

    row("open + first recall (no derived read files)", opens["game_memory"], opens["peer"])
    row("open + first recall (read files present, first open: checks and stamps them)",
        stamping, opens["peer"])  # fmt: skip
    row("open + first recall (derived read files present)", again["game_memory"],
        again["peer"])  # fmt: skip
    if again["baseline"]:
        mine, base = summary(again["game_memory"]), summary(again["baseline"])
        table.append({"figure": "baseline open + first recall (derived read files present)",
                      "memories": size, "game_memory": mine["median_ms"],
                      "baseline": base["median_ms"], "unit": "ms", "game_memory_over_baseline":
                      round(mine["median_ms"] / base["median_ms"], 2),
                      "game_memory_times": mine, "baseline_times": base})  # fmt: skip
    if after_session:
        row("open + first recall after a session that appended", after_session, again["peer"])
    if cold is not None:
        row("open + first recall, page cache evicted (derived files present)",
            cold["game_memory"], cold["peer"])  # fmt: skip
    return table


def measure(args: argparse.Namespace, root: Path, size: int) -> Json:
    sides = {"game_memory": root / "game_memory", "peer": root / "peer"}
    save = sides["game_memory"] / "save"
    opens: Json = {side: [] for side in sides}
    for _ in range(args.cold_repeats):
        remove_derived(sides["game_memory"])
        for side, folder in sides.items():
            opens[side].append(open_once(side, folder, size))
    # The derived read files are now written. The first open after they settled checks
    # every array and stamps them (read_files.py); every later start of the game pays the
    # second figure. Ours, the baseline's (if any) and the peer's opens take turns.
    waited = settle(save)
    stamping = [open_once("game_memory", sides["game_memory"], size)]
    # The baseline reads and writes derived files of its own format, which this checkout's
    # would replace (and the other way round) if the two shared a save: it opens a copy,
    # whose derived files it builds and stamps first.
    theirs = root / "game_memory-baseline"
    if args.baseline:
        shutil.rmtree(theirs, ignore_errors=True)
        shutil.copytree(sides["game_memory"], theirs)
        remove_derived(theirs)
        open_once("game_memory", theirs, size, args.baseline)
        settle(theirs / "save")
        open_once("game_memory", theirs, size, args.baseline)
    again: Json = {"game_memory": [], "baseline": [], "peer": []}
    for _ in range(args.cold_repeats):
        again["game_memory"].append(open_once("game_memory", sides["game_memory"], size))
        if args.baseline:
            again["baseline"].append(open_once("game_memory", theirs, size, args.baseline))
        again["peer"].append(open_once("peer", sides["peer"], size))
    cold = evicted_opens(sides, size, args.cold_repeats) if args.evict else None
    if args.alternate:
        again["game_memory"], again["baseline"] = alternated(
            sides["game_memory"], theirs, size, args.alternate, args.baseline
        )
    if args.only_opens:
        return {"table": open_rows(size, opens, stamping, again, [], cold), "details": {
            "seconds_waited_for_read_files_to_settle": waited,
            "stamping_open_stages_ms": [r["first_recall_stages_ms"] for r in stamping],
            "second_open_stages_ms": [r["first_recall_stages_ms"] for r in again["game_memory"]],
        }}  # fmt: skip
    session = {side: spawn("session", side, folder, size, args.repeats, args.appends)
               for side, folder in sides.items()}  # fmt: skip
    for figures in session.values():
        figures.pop("answers", None)
    # The session appended (and closed the store): the derived files are partly stale, as
    # at the start after a play session (read files rewritten moments ago: not stamped).
    after_session = [open_once("game_memory", sides["game_memory"], size)
                     for _ in range(args.cold_repeats)]  # fmt: skip

    table = open_rows(size, opens, stamping, again, after_session, cold)

    def value_row(figure: str, ours: float, theirs: float | None, unit: str) -> None:
        ratio = round(ours / theirs, 2) if theirs else None
        table.append({"figure": figure, "memories": size, "game_memory": ours, "peer": theirs,
                      "unit": unit, "game_memory_over_peer": ratio})  # fmt: skip

    g, p = session["game_memory"], session["peer"]
    value_row("hybrid recall warm, median", g["warm_median_ms"], p["warm_median_ms"], "ms")
    value_row("first recall after an append, median", g["after_append_median_ms"],
              p["after_append_median_ms"], "ms")  # fmt: skip
    for figures in (g, p):
        figures["after_append_over_warm"] = round(
            figures["after_append_median_ms"] / figures["same_query_again_median_ms"], 2
        )
    value_row("after an append over warm (same query)", g["after_append_over_warm"],
              p["after_append_over_warm"], "ratio")  # fmt: skip
    value_row("peak RSS after recalls", g["peak_rss_after_recalls_mb"],
              p["peak_rss_after_recalls_mb"], "MB")  # fmt: skip
    if args.baseline:
        # The same save (its copy with the baseline's own derived files), read by the
        # baseline checkout, its opens in turns with ours above: both see the same machine.
        base_session = spawn("session", "game_memory", theirs, size,
                             args.repeats, args.appends, args.baseline)  # fmt: skip
        base_session.pop("answers", None)
        base_session["after_append_over_warm"] = round(
            base_session["after_append_median_ms"] / base_session["same_query_again_median_ms"], 2
        )
        for figure, ours, theirs in (
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
        "seconds_waited_for_read_files_to_settle": waited,
        "first_open_stages_ms": [r["first_recall_stages_ms"] for r in opens["game_memory"]],
        "stamping_open_stages_ms": [r["first_recall_stages_ms"] for r in stamping],
        "second_open_stages_ms": [r["first_recall_stages_ms"] for r in again["game_memory"]],
        "open_after_session_stages_ms": [r["first_recall_stages_ms"] for r in after_session],
        "session": session,
    }
    return {"table": table, "details": details}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=int_list(100, 500_000),
        default="10000,100000",
        help="memories in the one NPC, by commas (100..500,000 each)",
    )
    parser.add_argument("--directory", default=str(Path.home() / ".cache" / "gm-cold-start"))
    parser.add_argument("--cold-repeats", type=int_range(1, 100), default=3)
    parser.add_argument(
        "--repeats", type=int_range(1, 100), default=3, help="passes over the 16 queries"
    )
    parser.add_argument("--appends", type=int_range(1, 100_000), default=20)
    parser.add_argument("--fresh", action="store_true", help="seed the saves again")
    parser.add_argument("--seed-only", action="store_true")
    parser.add_argument("--baseline", default="", help="PYTHONPATH of a baseline checkout")
    parser.add_argument(
        "--evict", action="store_true", help="also open with the saves' files out of the page cache"
    )
    parser.add_argument("--only-opens", action="store_true", help="skip the session rows")
    parser.add_argument(
        "--alternate",
        type=int_range(0, 1_000),
        default=0,
        help="with --baseline: the derived-files rows from this many opens of each, in turns",
    )
    for hidden in ("--worker", "--root"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.alternate and not args.baseline:
        parser.error("--alternate needs --baseline")
    if args.worker:
        json.dump(asyncio.run(open_worker(args.worker, Path(args.root), args.size)), sys.stdout)
        print()
        return 0
    directory = Path(args.directory)
    report: Json = {"benchmark": "cold_start", "command": " ".join(sys.argv), "table": []}
    report["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    workloads = []
    for size in args.sizes:
        root = directory / str(size)
        if args.fresh:
            shutil.rmtree(root, ignore_errors=True)
        if not (root / "peer" / "npc.db").exists():
            shutil.rmtree(root, ignore_errors=True)
            # A RAM folder of this process's own: two runs seeding at once (the same size,
            # other directories) must not write into one save.
            ram = Path(tempfile.mkdtemp(prefix=f"gm-cold-start-{size}-", dir=ram_folder()))
            try:
                asyncio.run(seed(ram / "workload", size))
                partial = root.with_name(f"{root.name}.{os.getpid()}.partial")
                shutil.copytree(ram / "workload", partial)
                partial.rename(root)  # a cut copy is never taken for a seeded save
            finally:
                shutil.rmtree(ram, ignore_errors=True)
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
