"""The power-loss explorer: record the workload, build crash states, check every promise.

:func:`explore` runs the workload of ``workload.py`` once under a :class:`Recorder`, builds
the crash states of its log (``states.py``) and checks the promises on each. For the
*double* crashes it then takes some of those states, runs the next program's recovery on
each (recorded again), and checks the crash states of that second run too: a crash
during recovery must not undo what the first crash left safe. The number of states is
capped (``single`` and ``double``): the states are sampled evenly over the crash points
with a fixed seed. The recordings themselves are not fixed: the store fsyncs several files
in parallel (``durable/fs.py``, ``sync_all``), so their order, and with it the sampled
states, differs from run to run (which widens what repeated runs cover). A run that finds
a violation therefore saves its recordings (``recordings.pickle`` in ``workdir``, named in
:attr:`Exploration.recordings`), from which the failing states can be rebuilt exactly.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from .recorder import Op, Recorder
from .states import CrashState, crash_states, materialize
from .workload import (
    PROMISE_MARKS,
    Promises,
    check_state,
    legacy_memories,
    prepare,
    promises_at,
    run_recovery,
    run_workload,
)

__all__ = ["Exploration", "Violation", "explore", "record"]


@dataclass(frozen=True)
class Violation:
    """A broken promise in one crash state."""

    crash: str
    problems: tuple[str, ...]


@dataclass
class Exploration:
    """What a run of the explorer found."""

    operations: int = 0
    recovery_operations: int = 0
    single_states: int = 0
    double_states: int = 0
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0
    #: Where the recordings of a run with violations were saved (``None``: none found).
    recordings: str | None = None

    @property
    def states(self) -> int:
        return self.single_states + self.double_states

    def as_json(self) -> dict[str, object]:
        return {
            "operations": self.operations,
            "recovery_operations": self.recovery_operations,
            "states": self.states,
            "single_crash_states": self.single_states,
            "double_crash_states": self.double_states,
            "violations": len(self.violations),
            "examples": [
                {"crash": v.crash, "problems": list(v.problems)} for v in self.violations[:10]
            ],
            "seconds": round(self.seconds, 1),
            "recordings": self.recordings,
        }


def record(base: Path, run: Callable[[Path, Recorder], Awaitable[None]]) -> Recorder:
    """Run ``run(base, recorder)`` with the recorder active; return the recorder."""
    recorder = Recorder(str(base))
    with recorder.active():
        asyncio.run(run(base, recorder))
    return recorder


def _acknowledged(ops: list[Op]) -> list[int]:
    """For each point, how many promise marks (``ack``, ``forgot``, ``erased``, ...) come
    before it."""
    counts = [0]
    for op in ops:
        counts.append(counts[-1] + (op.kind == "mark" and op.name in PROMISE_MARKS))
    return counts


def _index_started(ops: list[Op], point: int) -> bool:
    return any(
        op.kind == "mark" and op.name == "phase" and op.data == b"rebuild" for op in ops[:point]
    )


def _sample(states: list[CrashState], limit: int, chooser: random.Random) -> list[CrashState]:
    """At most ``limit`` states, spread over the crash points (every point keeps one first)."""
    if len(states) <= limit:
        return states
    by_point: dict[int, list[CrashState]] = {}
    for state in states:
        by_point.setdefault(state.point, []).append(state)
    rounds = [chooser.sample(group, len(group)) for _, group in sorted(by_point.items())]
    chosen: list[CrashState] = []
    depth = 0
    while len(chosen) < limit:
        for group in rounds:
            if depth < len(group) and len(chosen) < limit:
                chosen.append(group[depth])
        depth += 1
    return chosen


def _distinct(states: list[CrashState], ops: list[Op]) -> list[CrashState]:
    """Equal trees with the same promises are one state, whatever the crash point."""
    acks = _acknowledged(ops)
    seen: set[tuple[str, int, bool]] = set()
    kept: list[CrashState] = []
    for state in states:
        key = (state.digest, acks[state.point], _index_started(ops, state.point))
        if key not in seen:
            seen.add(key)
            kept.append(state)
    return kept


def _scratch(workdir: Path) -> Path:
    """Where crash states are written: memory (``/dev/shm``) when there is one.

    Checking a state writes and fsyncs a few dozen small files; on a real disk that is
    most of the cost, and the simulation needs no durability of its own.
    """
    shared = Path("/dev/shm")
    if shared.is_dir() and os.access(shared, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="gm-power-loss-", dir=shared))
    scratch = workdir / "states"
    scratch.mkdir()
    return scratch


def _check(state: CrashState, promises: Promises, scratch: Path) -> tuple[str, ...]:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    try:
        materialize(state.tree, str(folder))
        return tuple(asyncio.run(check_state(folder, promises)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def explore(
    workdir: Path,
    *,
    single: int,
    double: int,
    first_crashes: int,
    seed: int = 17,
    progress: Callable[[int, int], None] | None = None,
) -> Exploration:
    """Explore the workload's crash states (see the module docstring).

    Args:
        workdir: An empty scratch folder.
        single: At most this many single-crash states are checked.
        double: At most this many double-crash states are checked in all.
        first_crashes: How many single-crash states get a recovery run and second crashes.
        seed: Fixes every sampling choice.
        progress: Called with (states checked, states planned).
    """
    started = time.perf_counter()
    chooser = random.Random(seed)
    result = Exploration()
    legacy = frozenset(memory.memory_id for memory in legacy_memories())
    base = workdir / "workload"
    prepare(base)
    recorder = record(base, run_workload)
    recordings: list[tuple[str, object, list[Op]]] = [("workload", recorder.initial, recorder.ops)]
    ops = recorder.ops
    result.operations = len(ops)
    scratch = _scratch(workdir)
    states = _sample(
        _distinct(list(crash_states(recorder.initial, ops, seed=seed)), ops), single, chooser
    )
    planned = len(states) + double
    done = 0
    for state in states:
        promises = promises_at(ops, state.point, Promises(legacy, False))
        problems = _check(state, promises, scratch)
        if problems:
            result.violations.append(Violation(f"point {state.point}, {state.variant}", problems))
        done += 1
        if progress is not None:
            progress(done, planned)
    result.single_states = len(states)

    firsts = chooser.sample(states, min(first_crashes, len(states)))
    per_first = max(1, double // max(1, len(firsts)))
    for number, first in enumerate(firsts):
        if result.double_states >= double:
            break
        recovery_base = workdir / f"recovery-{number}"
        recovery_base.mkdir()
        materialize(first.tree, str(recovery_base))
        try:
            second = record(recovery_base, run_recovery)
        except Exception as exc:  # the recovery itself failed: already a violation above
            result.violations.append(
                Violation(f"recovery after point {first.point}, {first.variant}", (repr(exc),))
            )
            continue
        result.recovery_operations += len(second.ops)
        recordings.append((f"recovery after point {first.point}, {first.variant}",
                           second.initial, second.ops))  # fmt: skip
        before = promises_at(ops, first.point, Promises(legacy, False))
        candidates = _distinct(
            list(crash_states(second.initial, second.ops, seed=seed)), second.ops
        )
        budget = min(per_first, double - result.double_states)
        for state in _sample(candidates, budget, chooser):
            promises = promises_at(second.ops, state.point, before)
            problems = _check(state, promises, scratch)
            if problems:
                where = (
                    f"point {first.point} ({first.variant}), then recovery point "
                    f"{state.point} ({state.variant})"
                )
                result.violations.append(Violation(where, problems))
            result.double_states += 1
            done += 1
            if progress is not None:
                progress(done, planned)
        shutil.rmtree(recovery_base, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    if result.violations:
        saved = workdir / "recordings.pickle"
        with saved.open("wb") as file:
            pickle.dump(recordings, file)
        result.recordings = str(saved)
    result.seconds = time.perf_counter() - started
    return result
