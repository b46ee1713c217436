"""NPC workload, side by side: game-memory against SQLite + sqlite-vec + FTS5 (issue 12).

The same workload on both, in one run: memories of NPCs with 12 words of text, one tick
apart, and fixed random 384-dim unit vectors (a fake provider: a text's vector is drawn
once, so embedding costs nothing on either side and every recall time *excludes* the query
embedding). Every query is filtered to one NPC and to ticks at or before a moment, top 8,
32 candidates per channel, both channels fused by reciprocal-rank fusion (k = 60).
game-memory runs through its public API (``FileGameMemoryStore`` + ``FileVectorMemoryIndex``
+ ``VectorMemoryStore``, fusion ``RRF``, plus the ``GameAwareMemoryReranker`` that
``open_memory`` composes: a stage the peer does not run). The peer is ``peer_sqlite.py``.

Per workload (``--sizes`` memories in one NPC, and the largest over ``--many-npcs`` NPCs):

* **bulk ingest** on a RAM file system (``/dev/shm``; fsync costs nothing there, so this is
  the software cost): game-memory's ``append_many`` in batches of 10,000 (each one atomic,
  durable batch); the peer in one transaction. The same on the disk for ``--disk-ingest``
  memories into an empty save (the table's last row). Both sides' inputs are built first
  and frozen (``gc.freeze``), so a full collection during one side walks what that side
  made, not the other side's inputs.
* The saves are then copied to the disk (``--directory``, default the temporary folder) and
  every other figure is measured there, each in a **fresh process** per side:
* the **first open after seeding** (game-memory builds its derived files then: a one-time
  cost, its own row), then **open + first recall**, with the save's files evicted from the
  OS page cache
  (``posix_fadvise(DONTNEED)`` after ``sync``, checked with ``fincore``; only these files,
  so nobody else's cache is dropped) and with them cached; the process's imports are done
  before the clock starts; and once more after the warm session below appended (a game
  loaded again after a session that learned: a single sample per side);
* **warm hybrid recall** median and p99 (wall), and its median **CPU time** (the process's,
  all threads: what a recall costs whatever else the machine runs, since a shared machine's
  wall times vary severalfold); **peak RSS** (``VmHWM``) after those recalls, and the RSS
  then split into private memory (``RssAnon``) and pages of mapped files (``RssFile``:
  game-memory maps its rows and read files; the peer reads its file with ``read()``, so
  its file pages sit in the OS page cache without counting in its RSS);
* the **memory held after recalls, page cache counted**: from an evicted page cache, a fresh
  process per side opens and asks the 16 queries once, then counts its private memory, the
  side's files resident in the page cache (``fincore``: what its recalls read or mapped)
  and the resident pages of the libraries it maps; the same count for both, where RSS
  counts a page game-memory maps but not one the peer reads;
* **durable single append** median and p99, and the **first recall right after** each
  append against the same query once more (warm); the **fsyncs per append** counted by
  ``strace -f -c -e trace=fsync,fdatasync`` (a run of N + 1 appends minus a run of one,
  each after an open without appends that does the derived files' one-time upkeep);
* the **close** at the end of the warm session (game-memory writes its derived files for
  what the session added: read files, intent files, stamps; the peer checkpoints its WAL);
* **disk size** of the save (+ index) and of the database file.

Prints JSON: a ``table`` (each figure side by side with ``game_memory_over_peer``), the
details of each side (game-memory's recall stages at cold start, warm and after an append),
and the machine facts. ``--help`` imports neither numpy nor sqlite-vec. Usage:
``python benchmarks/npc_workload.py [--sizes 10000,100000] [--repeats N] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import peer_sqlite
from npc_sides import (
    DIMENSIONS,
    LIMIT,
    FakeProvider,
    Json,
    gm_ingest,
    gm_memory,
    gm_open,
    log,
    median_ms,
    memory_records,
    peer_memory,
    projected,
    resident_bytes,
    side_files,
    worker,
)
from script_support import int_list, worker_failed

BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Seconds after which a load stamps a read file as checked (``store/read_files.py``'s
#: ``SETTLED_NS`` is 2 s), with a margin.
STAMP_AGE = 2.2


def spawn(
    args: argparse.Namespace, kind: str, side: str, root: Path, size: int, **extra: Any
) -> Json:
    """Run one worker in a fresh interpreter and return its JSON (optionally under strace)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--side", side]
    command += ["--root", str(root), "--size", str(size), "--repeats", str(args.repeats)]
    command += ["--appends", str(extra.get("appends", 0))]
    command += ["--long-session", str(extra.get("long_session", 0))]
    trace = extra.get("strace")
    if trace is not None:
        command = ["strace", "-f", "-c", "--seccomp-bpf", "-e", "trace=fsync,fdatasync", "-o",
                   str(trace), *command]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # killed by a Ctrl-C: KeyboardInterrupt (script_support.py)
        worker_failed(done, f"the {kind} worker of {side}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def fsync_calls(trace: Path) -> int:
    calls = 0
    for line in trace.read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] in {"fsync", "fdatasync"}:
            calls += int(parts[3])
    return calls


# -- the parent ---------------------------------------------------------------------------


def page_cache(root: Path, evict: bool) -> float | None:
    """Evict (or read into the cache) a side's files; return the fraction resident after."""
    os.sync()
    for path in side_files(root):
        with path.open("rb") as handle:
            if evict:
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while handle.read(1 << 20):
                    pass
    counted = resident_bytes(side_files(root))
    if counted is None:
        return None
    resident, total = counted
    return round(resident / total, 4) if total else 1.0


def disk_bytes(root: Path) -> Json:
    files = side_files(root)
    return {
        "apparent_mb": round(sum(p.stat().st_size for p in files) / 1e6, 1),
        "allocated_mb": round(sum(p.stat().st_blocks * 512 for p in files) / 1e6, 1),
        "files": len(files),
    }


async def ingest(root: Path, records: list[Json], vectors: FakeProvider) -> Json:
    """Seed both sides under ``root`` from ``records``; return memories/s of each."""
    texts = [projected(record) for record in records]
    vectors.draw(texts, seed=len(records))
    peers = [peer_memory(record, vectors) for record in records]
    memories = [gm_memory(record) for record in records]
    # The inputs (both sides' memories, the records, the vectors) are the benchmark's, not
    # either side's: frozen, a full collection in one side's timing walks only what that
    # side made, not the other side's inputs (which one pays otherwise depends only on
    # where the collector's count happens to cross its threshold).
    gc.collect()
    gc.freeze()
    try:
        (root / "game_memory").mkdir(parents=True)
        store = gm_open(root / "game_memory", len(records) + 10_000, vectors)
        started = time.perf_counter()
        await gm_ingest(store, memories)
        await store.aclose()
        ours = time.perf_counter() - started
        (root / "peer").mkdir()
        started = time.perf_counter()
        peer = peer_sqlite.PeerStore(root / "peer" / "npc.db", DIMENSIONS, create=True)
        peer.append_many(peers)
        peer.close()
        theirs = time.perf_counter() - started
    finally:
        gc.unfreeze()
    return {
        "memories": len(records),
        "game_memory_per_s": round(len(records) / ours),
        "peer_per_s": round(len(records) / theirs),
    }


def row(figure: str, workload: str, ours: Any, theirs: Any, unit: str, lower: bool) -> Json:
    exact = ours / theirs if ours and theirs else None
    ratio = None if exact is None else round(exact, 3 if exact < 0.1 else 2)
    verdict = None
    if exact is not None:
        ahead = exact < 1 if lower else exact > 1
        factor = 1 / exact if ahead == lower else exact
        verdict = f"game-memory {'leads' if ahead else 'behind'} {factor:.1f}×"
    return {"figure": figure, "workload": workload, "game_memory": ours, "peer": theirs,
            "unit": unit, "game_memory_over_peer": ratio, "lower_is_better": lower,
            "verdict": verdict}  # fmt: skip


async def measure(args: argparse.Namespace, size: int, npcs: int, ram: Path, disk: Path) -> Json:
    name = f"{size}x{npcs}" if npcs > 1 else str(size)
    log(f"workload {name}: seeding {size:,} memories over {npcs} NPC(s) in {ram}")
    records = memory_records(size, npcs)
    bulk = await ingest(ram / name, records, FakeProvider())
    shutil.copytree(ram / name, disk / name)
    shutil.rmtree(ram / name)
    sides = {"game_memory": disk / name / "game_memory", "peer": disk / name / "peer"}
    details: Json = {"workload": name, "memories": size, "npcs": npcs, "bulk_ingest_ram": bulk}
    details["disk"] = {side: disk_bytes(root) for side, root in sides.items()}
    cold: Json = {side: {"evicted": [], "cached": []} for side in sides}
    resident: Json = {"evicted": [], "cached": []}
    # The first open of the copied save builds game-memory's derived files (read, intent
    # and index stamps); it is reported as its own row, so the evicted row measures what a
    # game's every later start costs after a reboot, not this one-time build. Stamps are
    # written only for files changed at least 2 s before (store/read_files.py): wait.
    first = {side: spawn(args, "open", side, root, size) for side, root in sides.items()}
    time.sleep(2.1)
    for side, root in sides.items():  # settle: the stamps of the files just written
        spawn(args, "open", side, root, size)
    for repeat in range(args.cold_repeats):
        for state in ("evicted", "cached"):
            for side in sorted(sides, reverse=repeat % 2 == 1):
                resident[state].append(page_cache(sides[side], evict=state == "evicted"))
                cold[side][state].append(spawn(args, "open", side, sides[side], size))
    # What each side's recalls hold on the machine, its files in the page cache counted
    # (RSS leaves out the pages the peer reads with read()): a pass of the queries from an
    # evicted page cache, in a fresh process per side.
    footprint = {}
    for side, root in sides.items():
        page_cache(root, evict=True)
        footprint[side] = spawn(args, "footprint", side, root, size)
    details["footprint"] = footprint
    for root in sides.values():  # the warm session below starts warm, as before this row
        page_cache(root, evict=False)
    log(f"workload {name}: cold opens done; warm sessions with {args.appends} appends")
    details["resident_fraction_before_open"] = resident
    details["open"] = cold
    details["first_open"] = first
    session = {s: spawn(args, "session", s, root, size, appends=args.appends,
                        long_session=args.long_session)
               for s, root in sides.items()}  # fmt: skip
    details["session"] = session
    # A game plays, saves and is loaded again: the open after the session's appends (their
    # files STAMP_AGE old, as a load the next day finds them), once per side. game-memory's
    # load checks the read-file part the session's close wrote and the log it grew.
    time.sleep(STAMP_AGE)
    after_session = {s: spawn(args, "open", s, root, size) for s, root in sides.items()}
    details["open_after_session"] = after_session
    details["durable_appends"] = appended = spawn(
        args, "durable", "both", disk / name, size, appends=args.appends
    )
    answers = [session[s].pop("answers") for s in sides]
    overlap = [len(set(a) & set(b)) / LIMIT for a, b in zip(*answers, strict=True)]
    details["top8_overlap_mean"] = round(statistics.mean(overlap), 3)
    fsyncs = {}
    for side, root in sides.items():
        counted: dict[int, list[int]] = {}
        # 1 + N appends minus 1 append: both runs pay the same open and close (the peer's
        # WAL checkpoint at close), so the difference is what N appends cost. A load also
        # keeps game-memory's derived files (it stamps read files and the save files they
        # cover, written at least STAMP_AGE before: a file's fsync, a stamp and its
        # folder's, once per file and session): left to the counted runs, that work fell
        # in whichever came first (1.6 "fsyncs per append" over 200 NPCs with N = 5, 4.2
        # on a fresh copy). So each counted run follows an open without appends, STAMP_AGE
        # after the run before, and each count is the fewer of two runs (the upkeep only
        # ever adds fsyncs).
        for appends in (args.fsync_appends + 1, 1) * 2:
            time.sleep(STAMP_AGE)
            spawn(args, "appends", side, root, size, appends=0)
            trace = disk / name / f"{side}-{appends}.strace"
            spawn(args, "appends", side, root, size, appends=appends, strace=trace)
            counted.setdefault(appends, []).append(fsync_calls(trace))
        details.setdefault("fsync_calls", {})[side] = counted
        more, one = (min(counted[n]) for n in (args.fsync_appends + 1, 1))
        fsyncs[side] = round((more - one) / args.fsync_appends, 2)
    details["fsyncs_per_append"] = fsyncs

    for side in sides:
        session[side]["after_append_over_same_query_warm"] = round(
            session[side]["after_append_median_ms"] / session[side]["same_query_again_median_ms"], 2
        )

    def of(key: str) -> Any:
        return lambda side: session[side][key]

    def opened(state: str) -> Any:
        return lambda side: round(
            statistics.median(r["open_first_recall_ms"] for r in cold[side][state]), 3
        )

    def held(part: str) -> Any:
        return lambda side: footprint[side]["footprint_after_recalls_mb"][part]

    specs = [
        ("hybrid recall warm, median", of("warm_median_ms"), "ms", True),
        ("hybrid recall warm, p99", of("warm_p99_ms"), "ms", True),
        ("hybrid recall warm, CPU time median", of("warm_cpu_median_ms"), "ms", True),
        ("first open after seeding (derived files built)",
         lambda side: first[side]["open_first_recall_ms"], "ms", True),
        ("open + first recall, page cache evicted", opened("evicted"), "ms", True),
        ("open + first recall, page cache warm", opened("cached"), "ms", True),
        ("open + first recall after a session that appended",
         lambda side: after_session[side]["open_first_recall_ms"], "ms", True),
        ("durable append, median", lambda side: appended[side]["append_median_ms"], "ms", True),
        ("durable append, p99", lambda side: appended[side]["append_p99_ms"], "ms", True),
        ("fsyncs per append", fsyncs.get, "calls", True),
        ("bulk ingest (RAM disk)", lambda side: bulk[f"{side}_per_s"], "memories/s", False),
        ("first recall after an append, median", of("after_append_median_ms"), "ms", True),
        ("after an append over warm (same query)", of("after_append_over_same_query_warm"),
         "ratio", True),
        ("peak RSS after recalls", of("peak_rss_after_recalls_mb"), "MB", True),
        ("of the RSS after recalls: private (RssAnon)",
         lambda side: session[side]["rss_split_after_recalls_mb"]["anon"], "MB", True),
        ("of the RSS after recalls: mapped files (RssFile)",
         lambda side: session[side]["rss_split_after_recalls_mb"]["file"], "MB", True),
        ("peak RSS after appends too", of("peak_rss_after_appends_mb"), "MB", True),
        ("close after the warm session (its appends, and more with --long-session)",
         of("close_ms"), "ms", True),
        ("memory held after recalls, page cache counted (private + own files cached + "
         "libraries)", held("total"), "MB", True),
        ("of it: the side's files in the page cache", held("files_cached"), "MB", True),
    ]  # fmt: skip
    if args.long_session:
        specs += [
            (f"peak RSS after {args.long_session:,} more appends",
             of("peak_rss_after_long_session_mb"), "MB", True),
            ("RSS added per appended memory", of("rss_per_appended_memory_kb"), "KB", True),
        ]  # fmt: skip
    specs += [
        ("disk size", lambda side: details["disk"][side]["allocated_mb"], "MB", True),
    ]  # fmt: skip
    table = [
        row(figure, name, get("game_memory"), get("peer"), unit, lower)
        for figure, get, unit, lower in specs
    ]
    return {"table": table, "details": details}


def file_system(path: Path) -> str:
    best, kind = "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, point, fs_type, *_ = line.split()
        if str(path.resolve()).startswith(point) and len(point) > len(best):
            best, kind = point, fs_type
    return kind


def fsync_latency(disk: Path) -> float:
    """The median of 30 fsyncs of a 256-byte append on the disk folder, in ms."""
    probe = disk / "fsync.probe"
    timings = []
    with probe.open("ab") as handle:
        for _ in range(30):
            handle.write(b"x" * 256)
            handle.flush()
            started = time.perf_counter()
            os.fsync(handle.fileno())
            timings.append(time.perf_counter() - started)
    probe.unlink()
    return median_ms(timings)


async def machine(args: argparse.Namespace, disk: Path) -> Json:
    """Facts, the bare fsync latency and the on-disk bulk ingest into an empty save."""
    import numpy as np

    facts: Json = {
        "cpus": os.cpu_count(),
        "python": f"CPython {platform.python_version()}",
        "numpy": np.__version__,
        **peer_sqlite.versions(),
        "game_memory": __import__("game_memory").__version__,
        "disk_folder": str(disk),
        "disk_file_system": file_system(disk),
        "bare_fsync_median_ms_at_start": fsync_latency(disk),
        "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
        "blas_threads": {v: os.environ.get(v) for v in BLAS_VARIABLES if v in os.environ},
        "page_cache": "per-file posix_fadvise(DONTNEED) for 'evicted' (global caches not "
        "dropped); files read through for 'cached'",
    }
    records = memory_records(args.disk_ingest, 1, "ingest")
    facts["bulk_ingest_disk"] = await ingest(disk / "ingest", records, FakeProvider())
    shutil.rmtree(disk / "ingest")
    return facts


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int_list(100, 500_000), default="10000,100000",
                        help="memories in the one NPC, by commas (100..500,000 each)")  # fmt: skip
    parser.add_argument("--many-npcs", type=int, default=200,
                        help="also the largest size over this many NPCs (0: skip)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=6, help="passes over the 16 queries")
    parser.add_argument("--cold-repeats", type=int, default=3, help="fresh opens per state")
    parser.add_argument("--appends", type=int, default=100, help="durable appends timed")
    parser.add_argument("--fsync-appends", type=int, default=100, help="appends under strace")
    parser.add_argument("--disk-ingest", type=int, default=1_000, help="on-disk bulk ingest")
    parser.add_argument(
        "--long-session", type=int, default=1_000, help="more appends (a recall every 10): RSS"
    )
    parser.add_argument("--directory", default=None, help="disk folder (default: temp folder)")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--keep", action="store_true", help="keep the data folders")
    for hidden in ("--worker", "--side", "--root"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.cold_repeats = [2000], 2, 1
        args.many_npcs = min(args.many_npcs, 20)
        args.appends, args.fsync_appends, args.disk_ingest = 10, 5, 100
        args.long_session = min(args.long_session, 100)
    args.size_list = args.sizes
    appends_ok = args.appends >= 1 or args.worker is not None
    if not (1 <= args.repeats <= 100 and 1 <= args.cold_repeats <= 20 and appends_ok):
        parser.error("--repeats 1..100, --cold-repeats 1..20, --appends ≥ 1")
    if args.fsync_appends < 1 or args.disk_ingest < 10 or args.many_npcs < 0:
        parser.error("--fsync-appends ≥ 1, --disk-ingest ≥ 10, --many-npcs ≥ 0")
    if not 0 <= args.long_session <= 9_000:
        parser.error("--long-session 0..9,000 (the save holds 10,000 more than its size)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        json.dump(asyncio.run(worker(args)), sys.stdout)
        print()
        return 0
    if shutil.which("strace") is None:
        print("npc_workload needs strace to count fsyncs (apt-get install strace)", file=sys.stderr)
        return 2
    base = Path(args.directory or tempfile.gettempdir()) / f"npc-workload-{uuid.uuid4().hex[:8]}"
    ram = Path("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()) / base.name
    base.mkdir(parents=True)
    ram.mkdir(parents=True)
    try:
        report: Json = {"benchmark": "npc_workload", "command": " ".join(sys.argv)}
        report["machine"] = asyncio.run(machine(args, base))
        workloads = [(size, 1) for size in args.size_list]
        if args.many_npcs > 1:
            workloads.append((max(args.size_list), args.many_npcs))
        results = [asyncio.run(measure(args, size, npcs, ram, base)) for size, npcs in workloads]
        on_disk = report["machine"]["bulk_ingest_disk"]
        report["table"] = [line for result in results for line in result["table"]] + [
            row(
                "bulk ingest (disk, into an empty save)",
                str(on_disk["memories"]),
                on_disk["game_memory_per_s"],
                on_disk["peer_per_s"],
                "memories/s",
                False,
            )
        ]
        report["workloads"] = [result["details"] for result in results]
        report["machine"]["bare_fsync_median_ms_at_end"] = fsync_latency(base)
        report["machine"]["load_average_at_end"] = [round(load, 2) for load in os.getloadavg()]
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(ram, ignore_errors=True)
    json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


def single_threaded_blas() -> None:
    """Re-run with single-threaded BLAS unless the caller chose (as ``hybrid_scale.py``)."""
    chosen = any(variable in os.environ for variable in BLAS_VARIABLES)
    if chosen or {"-h", "--help"} & set(sys.argv):
        return
    environment = dict(os.environ, **dict.fromkeys(BLAS_VARIABLES, "1"))
    os.execve(sys.executable, [sys.executable, *sys.argv], environment)


if __name__ == "__main__":
    single_threaded_blas()
    sys.exit(main())
