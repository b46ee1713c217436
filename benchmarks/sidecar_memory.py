"""Sidecar memory benchmark: the resident memory of ``game-memory serve`` with the default model.

Starts ``game-memory serve --stdio --model default`` on a fresh save (the model home is
``--home``, else ``$GAME_MEMORY_HOME``; the default model must be prepared there:
``game-memory models prepare``), waits for its ready line, initializes over the bridge,
remembers ``--remembers`` memories and recalls ``--recalls`` times (the way a game's
first minutes use it), then idles ``--idle`` seconds and reads the process's memory from
``/proc/<pid>/status``:

- ``idleRssMegabytes``: the resident set after the idle period (the goal is <= 150 MB);
- ``peakRssMegabytes``: the high-water mark (``VmHWM``) over the whole run;
- ``readyRssMegabytes``: the resident set right after the ready line (before any request);
- ``rssAnonMegabytes`` / ``rssFileMegabytes``: the idle resident set split into private
  memory and mapped files (the shared libraries onnxruntime and numpy bring).

It also reports the bridge-side median latency of a remember (one embedding of one text)
and of a recall (one query embedding plus the search), measured in the same run, so a
memory setting that slows embedding shows up here. Every eighth remember is a long text
(cut at 256 tokens). The embedding-only comparison of the session settings is
``--compare-sessions [ROUNDS]``: the same prepared INT8 model run as the previous release
ran it (a bare session, its arena left as it grows) against ``OnnxSessionInference`` (the
heap trimmed after loading, the arena's growth given back after a second idle; see
``game_memory.onnx.arena``): the time of the same steps (a query, 16 short texts, 16 long
texts, a query again) in alternating bursts of 5 rounds in one process, and the RSS each
adds after each step and after 1.5 s idle, each in its own child process so one's arena
does not hide the other's.

Prints one JSON object. Usage:
``python benchmarks/sidecar_memory.py [--home H] [--remembers 32] [--recalls 16]
[--idle 3] [--compare-sessions [ROUNDS]]``. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

Json = dict[str, Any]

GOAL_IDLE_MEGABYTES = 150.0
_READY_TIMEOUT_SECONDS = 120.0

TEXTS = [
    "The guard saw a hooded thief slip past the old mill after midnight.",
    "Mira the innkeeper remembers the bard who never paid for his ale.",
    "A dragon flew over the northern village at dawn and burned two barns.",
    "The blacksmith sold a silver sword to a traveller from the coast.",
    "Wolves howled in the forest while the hunter slept beside the fire.",
    "The merchant lost his purse on the bridge and blamed the children.",
    "Children played by the river under the old willow tree all afternoon.",
    "Rain flooded the cellar of the tavern during the spring storm.",
]
# Every eighth remember is a long memory (cut at the model's 256 tokens): what a game's
# journal entries or dialogue summaries look like, and what grows an allocator that keeps
# its peak (onnxruntime's arena).
LONG_TEXT = " ".join(TEXTS * 6)
QUESTIONS = [
    "Who took the money?",
    "What happened at the mill last night?",
    "Did anyone see the dragon?",
    "Where did the rain do damage?",
]


def memory_status(pid: int) -> dict[str, float]:
    """``VmRSS``, ``VmHWM``, ``RssAnon``, ``RssFile`` of ``pid`` in megabytes (10^6 bytes)."""
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                fields[name] = int(value.split()[0]) * 1024 / 1e6
    return fields


class Sidecar:
    """A ``game-memory serve --stdio`` child spoken to one JSON-RPC line at a time."""

    def __init__(self, save: Path, home: Path, model: str, extra_env: dict[str, str]) -> None:
        executable = shutil.which("game-memory", path=os.path.dirname(sys.executable))
        command = (
            [executable]
            if executable
            else [sys.executable, "-c", "from game_memory.cli import main; main()"]
        )
        env = {**os.environ, "GAME_MEMORY_HOME": os.fspath(home), **extra_env}
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [*command, "serve", "--stdio", "--save-dir", os.fspath(save), "--model", model],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        self.next_id = 0
        ready = self._line()
        if ready.get("event") != "ready":
            raise RuntimeError(f"the sidecar did not print a ready line: {ready}")
        self.ready_seconds = time.perf_counter() - self.started

    def _line(self) -> Json:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            stderr = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"the sidecar exited ({self.process.wait()}): {stderr[-2000:]}")
        value: Json = json.loads(line)
        return value

    def call(self, method: str, params: Json) -> Json:
        """Send one request and return its result (notifications in between are skipped)."""
        assert self.process.stdin is not None
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        while True:
            message = self._line()
            if message.get("id") != self.next_id:
                continue  # a notification (memory.diagnostic, ...)
            if "error" in message:
                raise RuntimeError(f"{method} failed: {message['error']}")
            result: Json = message["result"]
            return result

    def stop(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()  # end of input: the sidecar stops cleanly
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def run_sidecar(
    home: Path, model: str, remembers: int, recalls: int, idle: float, extra_env: dict[str, str]
) -> Json:
    """One sidecar's life: ready, initialize, remembers, recalls, idle; its memory figures."""
    with tempfile.TemporaryDirectory(prefix="game-memory-sidecar-") as folder:
        sidecar = Sidecar(Path(folder) / "save", home, model, extra_env)
        try:
            pid = sidecar.process.pid
            at_ready = memory_status(pid)
            info = sidecar.call("initialize", {"protocol_version": 1})
            remember_ms: list[float] = []
            for number in range(remembers):
                started = time.perf_counter()
                sidecar.call(
                    "memory.remember",
                    {
                        "session_id": "slot1",
                        "owner_id": f"npc-{number % 4}",
                        "text": f"{LONG_TEXT if number % 8 == 7 else TEXTS[number % 8]} ({number})",
                        "moment": {"timeline_id": "main", "tick": number},
                    },
                )
                remember_ms.append((time.perf_counter() - started) * 1000)
            recall_ms: list[float] = []
            hits = 0
            for number in range(recalls):
                started = time.perf_counter()
                result = sidecar.call(
                    "memory.recall",
                    {
                        "session_id": "slot1",
                        "owner_id": f"npc-{number % 4}",
                        "text": QUESTIONS[number % len(QUESTIONS)],
                        "at_or_before": {"timeline_id": "main", "tick": remembers},
                        "limit": 8,
                    },
                )
                recall_ms.append((time.perf_counter() - started) * 1000)
                hits += len(result["memories"])
            after_work = memory_status(pid)
            time.sleep(idle)
            idle_status = memory_status(pid)
        finally:
            exit_code = sidecar.stop()
    if info.get("mode") != "hybrid":
        raise RuntimeError(
            f"the sidecar runs in {info.get('mode')!r} mode, not hybrid: prepare the default "
            "model (game-memory models prepare) in the model home"
        )
    return {
        "model": info.get("model"),
        "mode": info.get("mode"),
        "readySeconds": round(sidecar.ready_seconds, 3),
        "readyRssMegabytes": round(at_ready["VmRSS"], 1),
        "afterWorkRssMegabytes": round(after_work["VmRSS"], 1),
        "idleRssMegabytes": round(idle_status["VmRSS"], 1),
        "peakRssMegabytes": round(idle_status["VmHWM"], 1),
        "rssAnonMegabytes": round(idle_status.get("RssAnon", 0.0), 1),
        "rssFileMegabytes": round(idle_status.get("RssFile", 0.0), 1),
        "remembers": remembers,
        "recalls": recalls,
        "recalledHits": hits,
        "rememberMedianMilliseconds": round(statistics.median(remember_ms), 3),
        "recallMedianMilliseconds": round(statistics.median(recall_ms), 3) if recall_ms else None,
        "exitCode": exit_code,
    }


_BURST = 5
_STEPS = ("query", "shortBatch", "longBatch", "queryAfterLong")


def _feeds() -> list[tuple[Any, Any]]:
    """``(input_ids, attention_mask)`` of each step: a query (1 x 16 tokens), 16 short texts
    (x 24), 16 long ones (x 256, a rebuild's batch), and a query again."""
    import numpy as np

    rng = np.random.default_rng(0)
    steps = []
    for size, length in ((1, 16), (16, 24), (16, 256), (1, 16)):
        ids = rng.integers(1_000, 20_000, size=(size, length)).astype(np.int64)
        ids[:, 0] = 101
        steps.append((ids, np.ones_like(ids)))
    return steps


class _Runner:
    """One way of running the model: onnxruntime as the previous release ran it, or ours."""

    def __init__(self, model_path: Path, mode: str) -> None:
        import onnxruntime as ort

        from game_memory.onnx.session import OnnxSessionInference, session_options
        from game_memory.onnx.tokens import RunControl

        self.mode = mode
        self._control = RunControl
        if mode == "provider":  # heap trimmed after loading, arena shrunk when idle
            self._inference = OnnxSessionInference(model_path, hidden_size=384)
            self._session = None
        else:  # the same session options, the arena left as it grows
            self._session = ort.InferenceSession(
                os.fspath(model_path),
                sess_options=session_options(),
                providers=["CPUExecutionProvider"],
            )

    def run(self, ids: Any, mask: Any) -> None:
        if self._session is None:
            self._inference.run(ids, mask, self._control())
        else:
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
            self._session.run(["last_hidden_state"], feeds)


def _model_path(home: Path) -> Path:
    return home / "models" / "all-MiniLM-L6-v2" / "onnx" / "model_int8.onnx"


def _session_child(mode: str, home: Path) -> Json:
    """In a child process: the RSS one way of running adds, loaded and after the steps."""
    import onnxruntime  # noqa: F401 (imported before the first reading: not the session's)

    import game_memory.onnx.session  # noqa: F401

    started = memory_status(os.getpid())["VmRSS"]
    runner = _Runner(_model_path(home), mode)
    loaded = memory_status(os.getpid())["VmRSS"]
    after: Json = {}
    for name, (ids, mask) in zip(_STEPS, _feeds(), strict=True):
        runner.run(ids, mask)
        after[name] = round(memory_status(os.getpid())["VmRSS"] - started, 1)
    time.sleep(1.5)  # past game_memory.onnx.arena.IDLE_SECONDS
    return {
        "loadedAddsMegabytes": round(loaded - started, 1),
        "addsAfterEachStepMegabytes": after,
        "addsAfterIdleMegabytes": round(memory_status(os.getpid())["VmRSS"] - started, 1),
        "peakAddsMegabytes": round(memory_status(os.getpid())["VmHWM"] - started, 1),
    }


def compare_sessions(home: Path, rounds: int) -> Json:
    """onnxruntime as before against the provider's session: RSS each adds, and speed.

    The RSS of each comes from its own child process; the times from one process holding
    both, the same steps interleaved so both see the same machine.
    """
    memory: Json = {}
    for mode in ("defaults", "provider"):
        output = subprocess.run(
            [sys.executable, __file__, "--session-child", mode, "--home", os.fspath(home)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        memory[mode] = json.loads(output)
    runners = [_Runner(_model_path(home), mode) for mode in ("defaults", "provider")]
    feeds = _feeds()
    timings: dict[str, dict[str, list[float]]] = {
        runner.mode: {name: [] for name in _STEPS} for runner in runners
    }
    for runner in runners:  # warm-up
        for ids, mask in feeds:
            runner.run(ids, mask)
    # Blocks of bursts, alternating: within a burst no session idles long enough to shrink
    # its arena (that costs the first batch after an idle second a regrowth, which a
    # round-by-round interleave would charge to every batch).
    for block in range(0, rounds, _BURST):
        for runner in runners:
            for _ in range(min(_BURST, rounds - block)):
                for name, (ids, mask) in zip(_STEPS, feeds, strict=True):
                    started = time.perf_counter()
                    runner.run(ids, mask)
                    timings[runner.mode][name].append((time.perf_counter() - started) * 1000)
    speed: Json = {}
    for name in _STEPS:
        defaults = statistics.median(timings["defaults"][name])
        provider = statistics.median(timings["provider"][name])
        speed[name] = {
            "defaultsMedianMilliseconds": round(defaults, 3),
            "providerMedianMilliseconds": round(provider, 3),
            "providerOverDefaults": round(provider / defaults, 3),
        }
    return {"rounds": rounds, "memory": memory, "speed": speed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="the model home (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--remembers", type=int, default=32)
    parser.add_argument("--recalls", type=int, default=16)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds idle before reading")
    parser.add_argument(
        "--compare-sessions",
        type=int,
        nargs="?",
        const=30,
        default=0,
        metavar="ROUNDS",
        help="also compare onnxruntime's defaults with the provider's session settings",
    )
    parser.add_argument("--session-child", choices=("defaults", "provider"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    home_text = args.home or os.environ.get("GAME_MEMORY_HOME")
    if not home_text:
        parser.error("set --home or GAME_MEMORY_HOME to a model home with the default model")
    if args.session_child:
        print(json.dumps(_session_child(args.session_child, Path(home_text))))
        return 0
    if not 1 <= args.remembers <= 10_000 or not 0 <= args.recalls <= 10_000:
        parser.error("--remembers must be 1..10000 and --recalls 0..10000")
    if not sys.platform.startswith("linux"):
        parser.error("sidecar_memory.py reads /proc: Linux only")
    result = run_sidecar(
        Path(home_text), args.model, args.remembers, args.recalls, args.idle, extra_env={}
    )
    report: Json = {
        "benchmark": "sidecar_memory",
        "command": " ".join(sys.argv),
        **result,
        "goalIdleRssMegabytes": GOAL_IDLE_MEGABYTES,
        "idleWithinGoal": result["idleRssMegabytes"] <= GOAL_IDLE_MEGABYTES,
        "sessionSettings": (
            compare_sessions(Path(home_text), args.compare_sessions)
            if args.compare_sessions
            else None
        ),
        "cpuCount": os.cpu_count(),
        "operatingSystem": platform.system(),
        "framework": f"CPython {platform.python_version()}",
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
