"""The NPC workload of ``npc_workload.py`` and its two sides, as a worker process runs them.

* the workload: memories spread round-robin over NPCs (12 words each, tick = index), the 16
  queries (two topic words and a common word, a moment in the second half of the ticks), and
  fixed random 384-dim unit vectors (:class:`FixedVectors`; :class:`FakeProvider` is the
  same as game-memory's ``EmbeddingProvider``);
* :class:`Side`: game-memory through its public API, or the peer of ``peer_sqlite.py``,
  opened, recalled (seconds *excluding* the query embedding on both sides) and appended to;
* :func:`worker`: one measurement in a fresh process (``open``: open + first recall;
  ``session``: that, then warm recalls, peak RSS, durable appends each followed by a recall;
  ``appends``: open, first recall and appends, counted under strace by the parent;
  ``footprint``: open and one pass of the queries, then the memory they hold counted with
  the side's files in the OS page cache, :func:`footprint_mb`).

Nothing here is imported at module level but the standard library and ``peer_sqlite``
(itself standard library until used), so ``npc_workload.py --help`` stays fast.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import peer_sqlite

__all__ = [
    "CANDIDATES",
    "DIMENSIONS",
    "LIMIT",
    "FakeProvider",
    "FixedVectors",
    "Json",
    "gm_ingest",
    "gm_memory",
    "gm_open",
    "log",
    "median_ms",
    "memory_records",
    "peer_memory",
    "projected",
    "resident_bytes",
    "side_files",
    "worker",
]

DIMENSIONS = 384
LIMIT = 8
CANDIDATES = 32
SESSION = "bench-session"
TARGET = "npc-000"
QUERIES = 16
SPECIAL = ["blacksmith", "sword", "river", "tavern", "dragon", "merchant", "harvest", "storm"]
WORDS = [f"w{index}" for index in range(2_000)] + SPECIAL
Json = dict[str, Any]


def log(message: str) -> None:
    print(f"[npc_workload] {message}", file=sys.stderr, flush=True)


# -- the workload -------------------------------------------------------------------------


def memory_records(size: int, npcs: int, prefix: str = "memory", start: int = 0) -> list[Json]:
    """``size`` memories spread round-robin over ``npcs`` NPCs, tick = index."""
    import numpy as np

    rng = np.random.default_rng([size, npcs, start])
    words = rng.integers(0, len(WORDS), (size, 12)).tolist()
    importance = rng.random(size).tolist()
    return [
        {
            "memory_id": f"{prefix}-{start + i:06d}",
            "owner": f"npc-{(start + i) % npcs:03d}" if prefix == "memory" else TARGET,
            "tick": start + i,
            "importance": round(importance[i], 6),
            "text": " ".join(WORDS[w] for w in words[i]),
            "payload": f'{{"n":{start + i}}}',
        }
        for i in range(size)
    ]


def queries(size: int) -> list[Json]:
    """The queries: two topic words and one common word, a moment in the second half."""
    import numpy as np

    rng = np.random.default_rng(12_345)
    found = []
    for _ in range(QUERIES):
        a, b = rng.choice(len(SPECIAL), 2, replace=False).tolist()
        text = f"{SPECIAL[a]} {SPECIAL[b]} w{int(rng.integers(0, 2_000))}"
        found.append({"text": text, "tick": int(rng.integers(size // 2, size))})
    return found


def projected(record: Json) -> str:
    """The text game-memory embeds for a memory (``MemoryTextProjector``: text, payload)."""
    return f"{record['text']}\n{record['payload']}"


class FixedVectors:
    """Fixed random unit vectors: drawn once per text (seeded by its hash), or given."""

    def __init__(self) -> None:
        self.known: dict[str, Any] = {}

    def vector(self, text: str) -> Any:
        import hashlib

        import numpy as np

        found = self.known.get(text)
        if found is None:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            values = np.random.default_rng(seed).standard_normal(DIMENSIONS)
            found = (values / np.linalg.norm(values)).astype(np.float32)
        return found

    def draw(self, texts: list[str], seed: int) -> None:
        """Give ``texts`` random unit vectors in one draw (fast for 100k)."""
        import numpy as np

        matrix = np.random.default_rng(seed).standard_normal((len(texts), DIMENSIONS))
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        self.known.update(zip(texts, matrix.astype(np.float32), strict=True))


class FakeProvider(FixedVectors):
    """The embedding provider game-memory is given (an ``EmbeddingProvider``)."""

    def __init__(self) -> None:
        from game_memory import MemoryEmbeddingIdentity

        super().__init__()
        self.identity = MemoryEmbeddingIdentity(
            provider_id="benchmark", model_id="fixed-random", version="1", dimensions=DIMENSIONS
        )

    async def embed_query(self, text: str) -> Any:
        return self.vector(text)

    async def embed_documents(self, texts: Sequence[str]) -> list[Any]:
        return [self.vector(text) for text in texts]

    async def aclose(self) -> None:
        return None


# -- the two sides ------------------------------------------------------------------------


def gm_open(
    root: Path,
    bound: int,
    provider: FakeProvider,
    cache_entries: int | None = None,
    digest_cache_entries: int = 200_000,
) -> Any:
    """The front door over a file store and a file index under ``root`` (the caches'
    bounds at their defaults unless given: ``cache_bounds.py``)."""
    from game_memory import (
        FileGameMemoryStore,
        FileVectorMemoryIndex,
        FusionMode,
        FusionOptions,
        GameAwareMemoryReranker,
        VectorMemoryStore,
        VectorMemoryStoreOptions,
    )

    return VectorMemoryStore(
        FileGameMemoryStore(root / "save", maximum_entries=bound, cache_entries=cache_entries),
        FileVectorMemoryIndex(
            root / "index", capacity=bound, digest_cache_entries=digest_cache_entries
        ),
        provider,
        reranker=GameAwareMemoryReranker(),
        options=VectorMemoryStoreOptions(
            maximum_index_entries=bound,
            maximum_stored_vector_values=bound * DIMENSIONS,
            maximum_vector_comparisons_per_search=bound * DIMENSIONS,
            fusion=FusionOptions(mode=FusionMode.RRF),
        ),
    )


def gm_memory(record: Json) -> Any:
    from game_memory import GameMemory, GameMemoryKind, GameMoment

    return GameMemory(
        memory_id=record["memory_id"],
        session_id=SESSION,
        owner_id=record["owner"],
        scope="personal",
        kind=GameMemoryKind.EVENT,
        payload_json=record["payload"],
        moment=GameMoment(timeline_id="main", tick=record["tick"]),
        importance=record["importance"],
        searchable_text=record["text"],
    )


async def gm_ingest(store: Any, memories: list[Any], batch: int = 10_000) -> None:
    """The bulk row's game-memory side: ``append_many`` in batches of ``batch`` memories.

    Each batch is one atomic, durable batch of the save (a few fsyncs in all) and one
    embedding call per 256 memories, the counterpart of the peer's one transaction.
    """
    for start in range(0, len(memories), batch):
        await store.append_many(memories[start : start + batch])
        if (start // batch) % 2 == 1:
            log(f"  game-memory: {start + batch:,} appended")


def peer_memory(record: Json, vectors: FixedVectors) -> peer_sqlite.PeerMemory:
    vector = vectors.vector(projected(record)).tobytes()
    return peer_sqlite.PeerMemory(vector=vector, **record)


class Side:
    """One side in a worker process: open, recall (seconds excluding embedding), append."""

    def __init__(self, name: str, root: Path, bound: int) -> None:
        self.name, self.root, self.bound = name, root, bound
        self.vectors = FakeProvider() if name == "game_memory" else FixedVectors()
        self.store: Any = None
        self.stages: list[dict[str, float]] = []
        self.cpu: list[float] = []  # process CPU seconds of each recall (all its threads)

    async def open(self) -> None:
        if self.name == "game_memory":
            assert isinstance(self.vectors, FakeProvider)
            self.store = gm_open(self.root, self.bound, self.vectors)
        else:
            self.store = peer_sqlite.PeerStore(self.root / "npc.db", DIMENSIONS)

    async def recall(self, query: Json) -> tuple[float, list[str]]:
        if self.name != "game_memory":
            vector = self.vectors.vector(query["text"]).tobytes()
            started, cpu = time.perf_counter(), time.process_time()
            rows = self.store.recall(TARGET, query["text"], vector, query["tick"], limit=LIMIT)
            self.cpu.append(time.process_time() - cpu)
            return time.perf_counter() - started, [row[0] for row in rows]
        from game_memory import GameMemoryQuery, GameMoment

        request = GameMemoryQuery(
            session_id=SESSION,
            owner_id=TARGET,
            limit=LIMIT,
            text=query["text"],
            at_or_before=GameMoment(timeline_id="main", tick=query["tick"]),
        )
        started, cpu = time.perf_counter(), time.process_time()
        result = await self.store.recall(request)
        seconds = time.perf_counter() - started
        self.cpu.append(time.process_time() - cpu)
        if result.fallback:
            raise RuntimeError("game-memory fell back to lexical recall: the vectors are not used")
        stages = {s.stage.name: round(s.duration_ms, 3) for s in result.snapshot.stages}
        self.stages.append(stages)
        return seconds - stages.get("EMBEDDING", 0.0) / 1000, [m.memory_id for m in result.memories]

    async def append(self, record: Json) -> float:
        if self.name == "game_memory":
            memory = gm_memory(record)
            # The vector is drawn before the clock: embedding is excluded on both sides.
            text = projected(record)
            self.vectors.known[text] = self.vectors.vector(text)
            started = time.perf_counter()
            try:
                await self.store.append(memory)
            finally:
                # The store embedded it: the harness keeps nothing of it, so the RSS an
                # append adds is the store's alone (it kept each drawn vector, about
                # 1.7 KB an append, until 6 December 2026: charged to game-memory).
                elapsed = time.perf_counter() - started
                self.vectors.known.pop(text, None)
            return elapsed
        else:
            memory = peer_memory(record, self.vectors)
            started = time.perf_counter()
            self.store.append(memory)
        return time.perf_counter() - started

    async def close(self) -> None:
        if self.name == "game_memory":
            await self.store.aclose()
        else:
            self.store.close()


# -- workers (one fresh process per measurement) ------------------------------------------


async def long_session(side: Side, work: list[Json], appends: int, size: int) -> Json:
    """``appends`` more appends, a recall after every tenth: the RSS they add (what a game
    that plays on holds), measured as the process's resident set before and after."""
    records = memory_records(appends, 1, f"long-{uuid.uuid4().hex[:8]}", size)
    before = rss_mb()
    for index, record in enumerate(records):
        await side.append(record)
        if index % 10 == 9:
            await side.recall(dict(work[index % len(work)], tick=record["tick"]))
    after = rss_mb()
    return {
        "long_session_appends": appends,
        "rss_after_long_session_mb": after,
        "peak_rss_after_long_session_mb": max_rss_mb(),
        "rss_per_appended_memory_kb": round((after - before) * 1024 / appends, 1),
    }


def rss_mb() -> float:
    """This process's resident set now (``VmRSS``), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return max_rss_mb()


def rss_split_mb() -> dict[str, float]:
    """This process's resident set now, split as the kernel counts it (``/proc/self/status``):
    ``anon`` is private memory (the heap, arrays, SQLite's own page cache), ``file`` pages
    of mapped files. A clean mapped page is the OS page cache's, shared with every reader
    of the file, and the kernel can drop it under memory pressure without swapping (a read
    maps it again); a file read with ``read()`` (the peer's way) sits in that same page
    cache but never counts in the reader's RSS."""
    split = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssFile", "RssShmem"):
            split[name[3:].lower()] = round(int(value.split()[0]) / 1024, 1)
    return split


def side_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def resident_bytes(files: Sequence[Path]) -> tuple[int, int] | None:
    """Bytes of ``files`` in the OS page cache and their size (``fincore``; ``None``
    without it): the page cache is per file, whether a page was mapped or read."""
    if shutil.which("fincore") is None or not files:
        return None
    output = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE",
         *map(str, files)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pairs = [tuple(int(x) for x in line.split()) for line in output.splitlines() if line.strip()]
    return sum(resident for resident, _ in pairs), sum(size for _, size in pairs)


_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+ *(.*)$")


def mapped_rss_kb(root: Path) -> dict[str, int]:
    """This process's resident pages of mapped files (``/proc/self/smaps``), split into the
    side's own files (under ``root``) and every other file (the interpreter, its shared
    libraries: numpy's, sqlite-vec's, ...)."""
    split = {"own": 0, "other": 0}
    where, prefix = "other", str(root.resolve()) + "/"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        header = _MAPPING.match(line)
        if header is not None:
            path = header.group(1)
            where = "own" if path.startswith(prefix) else "other" if path.startswith("/") else ""
        elif line.startswith("Rss:") and where:
            split[where] += int(line.split()[1])
    return split


def footprint_mb(root: Path) -> Json:
    """The memory a side's recalls hold on the machine, its page cache counted.

    RSS counts a page of a mapped file (game-memory maps its rows) but not the same page
    read with ``read()`` (the peer's SQLite), although both sit in the one OS page cache.
    So: private memory (``RssAnon``) + the side's files resident in the page cache
    (``fincore``, mapped or read) + resident pages of every other mapped file (libraries).
    Measured after a pass of the queries over a page cache the parent evicted first, it is
    the working set each side's recalls need, counted the same way for both."""
    split = rss_split_mb()
    mapped = mapped_rss_kb(root)
    cached = resident_bytes(side_files(root))
    if cached is None:
        return {"anon": split["anon"], "files_cached": None, "libraries": None, "total": None}
    files_cached = round(cached[0] / 2**20, 1)
    libraries = round(mapped["other"] / 1024, 1)
    return {
        "anon": split["anon"],
        "files_cached": files_cached,
        "files_size": round(cached[1] / 2**20, 1),
        "own_files_mapped": round(mapped["own"] / 1024, 1),
        "libraries": libraries,
        "total": round(split["anon"] + files_cached + libraries, 1),
    }


def max_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``), in MB.

    Not ``ru_maxrss``: on Linux it survives ``execve``, so a worker forked from the parent
    (which holds the seeded workload) would report the parent's peak instead of its own.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


def p99_ms(values: list[float]) -> float:
    import numpy as np

    return round(float(np.percentile(values, 99)) * 1000, 3)


def stage_medians(stages: list[dict[str, float]]) -> dict[str, float]:
    names = {name for entry in stages for name in entry}
    return {n: round(statistics.median(e.get(n, 0.0) for e in stages), 3) for n in sorted(names)}


async def worker(args: argparse.Namespace) -> Json:
    """One measurement in this fresh process; ``args.worker`` says which."""
    import numpy  # noqa: F401  (imported before the clock, like the store's modules)

    if args.worker == "durable":
        return await durable(args)
    if args.side == "game_memory":
        import game_memory  # noqa: F401
    else:
        peer_sqlite.versions()  # loads sqlite-vec once, before the clock
    side = Side(args.side, Path(args.root), args.size + 10_000)
    work = queries(args.size)
    figures: Json = {"rss_after_imports_mb": max_rss_mb()}
    started = time.perf_counter()
    await side.open()
    first, _ = await side.recall(work[0])
    figures["open_first_recall_ms"] = round((time.perf_counter() - started) * 1000, 3)
    figures["first_recall_ms"] = round(first * 1000, 3)
    figures["first_recall_stages_ms"] = side.stages[:1]
    if args.worker == "session":
        # The query vectors are drawn before the warm clock (as the peer's are), so the
        # warm CPU time holds no embedding on either side.
        side.vectors.known.update((q["text"], side.vectors.vector(q["text"])) for q in work)
        side.cpu.clear()
        times, answers = [], []
        for _ in range(args.repeats):
            for query in work:
                seconds, ids = await side.recall(query)
                times.append(seconds)
                answers.append(ids)
        figures.update(warm_median_ms=median_ms(times), warm_p99_ms=p99_ms(times))
        figures["warm_cpu_median_ms"] = median_ms(side.cpu)
        figures.update(warm_samples=len(times), answers=answers[: len(work)])
        figures["warm_stages_ms"] = stage_medians(side.stages[1:])
        figures["peak_rss_after_recalls_mb"] = max_rss_mb()
        figures["rss_split_after_recalls_mb"] = rss_split_mb()
    if args.worker == "footprint":
        for query in work[1:]:
            await side.recall(query)
        figures["footprint_after_recalls_mb"] = footprint_mb(side.root)
        figures["peak_rss_after_recalls_mb"] = max_rss_mb()
        await side.close()
        return figures
    side.stages.clear()
    appended = memory_records(args.appends, 1, f"appended-{uuid.uuid4().hex[:8]}", args.size)
    appends, after, again = [], [], []
    for index, record in enumerate(appended):
        appends.append(await side.append(record))
        if args.worker == "session":
            query = dict(work[index % len(work)], tick=record["tick"])
            after.append((await side.recall(query))[0])
            again.append((await side.recall(query))[0])
    if args.worker == "session" and appended:
        figures["session_append_median_ms"] = median_ms(appends)
        figures.update(appends=len(appends), after_append_median_ms=median_ms(after))
        figures["same_query_again_median_ms"] = median_ms(again)
        figures["after_append_stages_ms"] = stage_medians(side.stages[0::2])
        # A game learns as it plays: the peak over the whole session, appends included.
        figures["peak_rss_after_appends_mb"] = max_rss_mb()
        if args.side == "peer":
            figures["vector_channel_exact"] = peer_exactness(side, work[0])
    if args.worker == "session" and args.long_session:
        figures.update(await long_session(side, work, args.long_session, args.size))
    started = time.perf_counter()
    await side.close()  # game-memory writes its derived files here; the peer checkpoints
    figures["close_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return figures


async def durable(args: argparse.Namespace) -> Json:
    """Durable single appends on both sides in one process, alternating which goes first.

    A shared virtual disk's fsync latency drifts by 10× within minutes; interleaving the
    two sides' appends gives both the same disk, so their ratio is not that drift.
    """
    import game_memory  # noqa: F401

    peer_sqlite.versions()
    root, bound, work = Path(args.root), args.size + 10_000, queries(args.size)
    sides = [Side(name, root / name, bound) for name in ("game_memory", "peer")]
    for side in sides:
        await side.open()
        await side.recall(work[0])
    times: dict[str, list[float]] = {side.name: [] for side in sides}
    records = memory_records(args.appends, 1, f"durable-{uuid.uuid4().hex[:8]}", args.size)
    for index, record in enumerate(records):
        for side in sides if index % 2 == 0 else sides[::-1]:
            times[side.name].append(await side.append(record))
    for side in sides:
        await side.close()
    return {
        name: {"append_median_ms": median_ms(v), "append_p99_ms": p99_ms(v), "appends": len(v)}
        for name, v in times.items()
    }


def peer_exactness(side: Side, query: Json) -> bool:
    """Whether the peer's filtered KNN equals an exact numpy top-32 over the same rows."""
    import numpy as np

    vector = side.vectors.vector(query["text"])
    _, knn = side.store.channels(TARGET, query["text"], vector.tobytes(), query["tick"], CANDIDATES)
    ids, blobs = side.store.owner_vectors(TARGET, query["tick"])
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), DIMENSIONS)
    best = np.argsort(-(matrix @ vector), kind="stable")[:CANDIDATES]
    return bool([ids[i] for i in best] == knn)
