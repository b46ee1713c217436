"""Audit s17 (benchmarks): the scripts and ``game-memory bench`` keep a run's work, refuse
bad arguments as usage errors, tell a benchmark's failure from a bug and from a Ctrl-C, and
leave nothing behind.

* ``--out FILE`` that cannot be written lost the whole report (written before printed);
* ``warm_recall.py`` without ``--seed`` timed recalls over an empty save it had just made;
* ``session_wide.py --directory`` reused a world whatever ``--per-npc`` (or a Ctrl-C cut
  short) made it, and reported memories it computed instead of counting;
* bad arguments were tracebacks (exit 1 or 70) instead of usage errors (exit 2);
* ``game-memory bench`` called a benchmark's failure a bug (70), cut its message to 300
  characters, and a Ctrl-C that killed ``bench npc``'s worker first was a bug too;
* ``session_wide.py`` and ``append_throughput.py`` left their folders, ``store`` and
  ``hybrid`` an empty ``game-memory-benchmarks``;
* an unprepared ``--home`` was a Diagnostic's repr advising a command without ``--home``.

The scripts run with their smallest options (a few seconds in all).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from game_memory.cli import maintenance
from game_memory.cli.parser import main

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
#: The benchmark modules (and the siblings they import) a test imported: removed after it.
_SIBLINGS = (
    "cache_bounds",
    "npc_sides",
    "npc_workload",
    "onnx_spinning",
    "peer_sqlite",
    "report_out",
    "script_support",
    "session_wide",
)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A loader of the benchmark scripts as modules (they are scripts, not a package);
    BLAS single-threaded so a script's ``__main__`` never re-executes the test process."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    yield importlib
    for name in _SIBLINGS:
        sys.modules.pop(name, None)


def script(
    name: str, *arguments: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/name`` in a fresh interpreter, as a user would."""
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=240,
        check=False,
    )


# -- 1. --out that cannot be written: the report is printed first ------------------------


def test_emit_prints_the_report_before_an_out_file_that_cannot_be_written(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emit = bench.import_module("report_out").emit
    missing = tmp_path / "no-such-folder" / "report.json"
    assert emit({"benchmark": "x", "figures": [1, 2]}, str(missing)) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"benchmark": "x", "figures": [1, 2]}
    assert err.count("\n") == 1 and f"could not write the report to {missing}" in err
    assert "No such file or directory" in err
    written = tmp_path / "report.json"
    assert emit({"ok": True}, str(written)) == 0
    assert json.loads(written.read_text(encoding="utf-8")) == {"ok": True}


def test_reranker_promises_prints_its_report_when_out_cannot_be_written(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no-such-folder" / "report.json"
    done = script("reranker_promises.py", "--modes", "lexical", "--out", str(missing))
    assert done.returncode == 1
    assert json.loads(done.stdout)["benchmark"] == "reranker_promises"
    assert "could not write the report" in done.stderr and "Traceback" not in done.stderr


# -- 2. warm_recall.py measures only a seeded save ---------------------------------------


def test_warm_recall_refuses_a_root_that_was_never_seeded(tmp_path: Path) -> None:
    done = script("warm_recall.py", "--root", str(tmp_path), "--size", "100", "--rounds", "1")
    assert done.returncode == 2
    assert "no seeded save" in done.stderr and "--seed first" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created


# -- 3, 7. session_wide.py: exact reuse, memories counted, its RAM folder removed ---------


def test_session_wide_reuses_only_a_completed_world_of_the_same_options(
    bench: ModuleType, tmp_path: Path
) -> None:
    session_wide = bench.import_module("session_wide")
    small = session_wide.world_folder(tmp_path, 3, 2)
    assert small != session_wide.world_folder(tmp_path, 3, 5)  # --per-npc shapes the world
    # A world cut short (no record of a completed seeding) is seeded again, from nothing.
    small.mkdir(parents=True)
    (small / "left-by-a-ctrl-c").write_text("x")
    session_wide.ensure_world(small, 3, 2)
    assert not (small / "left-by-a-ctrl-c").exists()
    assert session_wide.seeded_shape(small) == {"npcs": 3, "per_npc": 2}
    # A completed one is reused as it is.
    (small / "kept").write_text("x")
    session_wide.ensure_world(small, 3, 2)
    assert (small / "kept").exists()


def test_session_wide_counts_the_memories_of_each_world(tmp_path: Path) -> None:
    reported = {}
    for per_npc in (2, 5):
        done = script(
            "session_wide.py", "--directory", str(tmp_path), "--npcs", "3",
            "--per-npc", str(per_npc), "--rounds", "1",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        (world,) = json.loads(done.stdout)["worlds"]
        reported[per_npc] = world["memories"]
    assert reported == {2: 6, 5: 15}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["world-3x2", "world-3x5"]


def test_session_wide_without_a_directory_removes_its_ram_folder() -> None:
    done = script("session_wide.py", "--npcs", "3", "--per-npc", "2", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    used = Path(json.loads(done.stdout)["directory"])
    assert used.name.startswith("session-wide-") and not used.exists()


# -- 8. append_throughput.py, store and hybrid leave nothing behind ------------------------


@pytest.mark.parametrize("ending", ["done", "interrupted"])
def test_append_throughput_removes_its_folder(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """Its measurements run under strace, which the machines need not have: the run is
    replaced here by one that fills the folder, then ends or is interrupted."""
    module = bench.import_module("append_throughput")
    monkeypatch.delitem(sys.modules, "append_throughput")

    def run_builds(builds: list[str], base: Path, args: argparse.Namespace) -> dict[str, str]:
        (base / "build-0-round-0").mkdir()
        (base / "build-0-round-0" / "ledger.log").write_bytes(b"x" * 128)
        if ending == "interrupted":
            raise KeyboardInterrupt
        return {"done": "yes"}

    monkeypatch.setattr(module, "run_builds", run_builds)
    monkeypatch.setattr(sys, "argv", ["append_throughput.py", "--directory", str(tmp_path)])
    if ending == "interrupted":
        with pytest.raises(KeyboardInterrupt):
            module.main()
    else:
        module.main()
    assert list(tmp_path.iterdir()) == []


def test_store_and_hybrid_remove_their_shared_folder_once_empty(tmp_path: Path) -> None:
    done = script(
        "store_scale.py", "--entries", "100", "--rounds", "1", env={"TMPDIR": str(tmp_path)}
    )
    assert done.returncode == 0, done.stderr
    done = script("hybrid_scale.py", "--sizes", "1", "--repeats", "3", "--directory", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []


# -- 4. bad arguments are usage errors ---------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["hybrid", "--", "--sizes", "x"],
        ["npc", "--", "--sizes", "1e4"],
        ["bounds", "--", "--settings", "x"],
        ["spinning", "--", "--gaps", "x"],
        ["threads", "--", "--rounds", "0"],
        ["promises", "--", "--modes", "lexical", "--reranker", "notjson"],
        ["promises", "--", "--modes", "lexical", "--fusion", '{"vector_weight": "much"}'],
        ["beliefs", "--", "--modes", "lexical", "--fusion", "notjson"],
    ],
)
def test_a_bad_benchmark_argument_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert "usage:" in err and f"argument {argv[-2]}" in err
    assert "internal error" not in err and "Traceback" not in err


def test_beliefs_markdown_of_a_file_that_is_not_its_report_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "store.json"
    other.write_text('{"benchmark": "store_scale", "entries": 100}', encoding="utf-8")
    for path in (other, tmp_path / "missing.json"):
        assert main(["bench", "beliefs", "--", "--markdown", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"--markdown {path}" in err and "internal error" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["cold_start.py", "--sizes", "x"],
        ["decode_documents.py", "--rounds", "0", "--size", "10"],
        ["decode_documents.py", "--only", "nosuch", "--size", "10"],
        ["compaction.py", "--owners", "0", "--memories", "10"],
        ["eviction.py", "--bound", "0", "--owners", "1", "--appends", "10"],
    ],
)
def test_a_bad_script_argument_is_a_usage_error(argv: list[str]) -> None:
    done = script(*argv)
    assert done.returncode == 2
    assert "usage:" in done.stderr and "Traceback" not in done.stderr


# -- 5, 6. game-memory bench: the benchmark's failure, a Ctrl-C ---------------------------


def _as_benchmark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str, name: str = "store"
) -> None:
    """Make ``game-memory bench name`` run a script of ``body``."""
    path = tmp_path / "bench_script.py"
    path.write_text(body, encoding="utf-8")
    monkeypatch.setitem(maintenance._BENCHMARKS, name, str(path))


def test_a_failing_benchmark_is_its_failure_said_in_full(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worker_output = "\n".join(f"  frame {n} of the worker" for n in range(40))
    body = f"raise RuntimeError('the worker failed:\\n' + {worker_output!r} + '\\nTHE CAUSE')\n"
    _as_benchmark(monkeypatch, tmp_path, body)
    assert main(["bench", "store"]) == 1
    err = capsys.readouterr().err
    assert "the benchmark bench_script.py failed" in err and "RuntimeError" in err
    assert "frame 39 of the worker" in err and err.rstrip().endswith("THE CAUSE")
    assert "internal error" not in err and "bug" not in err


def test_a_worker_killed_by_a_ctrl_c_is_interrupted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    killed = (
        "import os, signal, subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', 'import os, signal; "
        "signal.signal(signal.SIGINT, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGINT)'],"
        " check=True)\n"
    )
    _as_benchmark(monkeypatch, tmp_path, killed)
    assert main(["bench", "store"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
    _as_benchmark(monkeypatch, tmp_path, "raise KeyboardInterrupt\n")
    assert main(["bench", "store"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def _worker_ending(code: int, stderr: str) -> object:
    """A ``subprocess.run`` whose worker ends with exit code ``code`` (negative: killed)."""

    def run(command: list[str], *_: object, **__: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, code, "", stderr)

    return run


def test_npc_workload_spawn_raises_keyboard_interrupt_for_a_worker_killed_by_sigint(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    npc_workload = bench.import_module("npc_workload")
    args = argparse.Namespace(repeats=1)
    monkeypatch.setattr(npc_workload.subprocess, "run", _worker_ending(-signal.SIGINT, ""))
    with pytest.raises(KeyboardInterrupt):
        npc_workload.spawn(args, "open", "game_memory", tmp_path, 100)
    failed = _worker_ending(1, "Traceback ...\nValueError: THE CAUSE\n")
    monkeypatch.setattr(npc_workload.subprocess, "run", failed)
    with pytest.raises(RuntimeError, match="THE CAUSE"):
        npc_workload.spawn(args, "open", "game_memory", tmp_path, 100)


# -- 9. an unprepared --home: the message, naming the command for that home ---------------


async def test_a_missing_model_in_a_given_home_names_the_command_for_that_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from game_memory.onnx import OnnxEmbeddingError, load_named_provider

    home = tmp_path / "a home"
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_named_provider("default", home)
    assert f"run 'game-memory models prepare default --home '{home}'' once" in str(caught.value)
    monkeypatch.setenv("GAME_MEMORY_HOME", str(home))  # no home given: the bare command
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_named_provider("default")
    assert "run 'game-memory models prepare default' once" in str(caught.value)


def test_spinning_without_a_model_in_its_home_says_the_message_not_a_repr(
    bench: ModuleType, tmp_path: Path
) -> None:
    onnx_spinning = bench.import_module("onnx_spinning")
    home = tmp_path / "empty-home"
    with pytest.raises(SystemExit) as caught:
        onnx_spinning.seed(tmp_path / "save", 1, str(home))
    said = str(caught.value.code)
    assert said.startswith("the default model is not available: recall is lexical only")
    assert f"game-memory models prepare default --home {home}'" in said
    assert "severity=" not in said and "code=" not in said
