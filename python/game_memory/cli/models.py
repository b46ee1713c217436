"""``game-memory models prepare [default|multilingual]`` and ``game-memory models info``."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

from game_memory.onnx import MODEL_NAMES, prepare_named_model
from game_memory.onnx.build.prepare import (
    MODEL_SOURCES,
    abandoned_preparations,
    prepared_model_problems,
)
from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError, OnnxFailureKind
from game_memory.onnx.model_files import ModelFileManifest, ModelFileRecord
from game_memory.onnx.model_home import default_model_home
from game_memory.onnx.named_models import named_model, named_model_directory
from game_memory.onnx.options import SentenceEncoderOnnxEmbeddingOptions
from game_memory.onnx.prepared_manifest import PreparedModelManifest
from game_memory.onnx.sentence_encoder import sentence_encoder_identity

__all__ = ["run_info", "run_prepare"]

_STAGES = {
    "verify": "verify the model files' hashes",
    "build": "build the ONNX graph (layers)",
    "quantize": "quantize to INT8 per channel",
    "check": "load and run both graphs",
    "write": "write the manifest",
    "ready": "already prepared and intact",
}


def _home(args: argparse.Namespace) -> Path | None:
    home = getattr(args, "home", None)
    return Path(home).expanduser() if home else None


def run_prepare(args: argparse.Namespace) -> int:
    """Prepare model ``args.name`` (default ``default``) under ``--home``; print its folder.

    Exit 0, or 1 with one line on stderr naming the failed stage.
    """
    home = _home(args)
    name = getattr(args, "name", None) or "default"
    errors = Console(stderr=True, emoji=False)
    stages = {"download": f"download {MODEL_SOURCES[name].requirement} (pip)", **_STAGES}
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=errors) as bar:
            tasks: dict[str, TaskID] = {}

            def progress(stage: str, done: int, total: int) -> None:
                # The download has no byte count: show it as indeterminate until it ends.
                shown_total = None if stage == "download" and done < total else total
                task = tasks.get(stage)
                if task is None:
                    tasks[stage] = bar.add_task(
                        stages.get(stage, stage), total=shown_total, completed=done
                    )
                else:
                    bar.update(task, total=shown_total, completed=done)

            directory = prepare_named_model(name, home, force=bool(args.force), progress=progress)
    except ModelPreparationError as exc:
        errors.print(
            f"game-memory models prepare: {exc.stage} failed: {exc}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 1
    print(f"{named_model(name).model_id} (INT8) is prepared in {directory}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    """Show every named model's folder, state, identities and files, and what killed
    preparations left behind.

    A folder is "prepared and intact" only if the loader accepts it
    (:func:`prepared_model_problems` with the model's source). Leftovers do not change the
    exit status: exit 0 when at least one model is prepared and every prepared one is
    intact, else 1.
    """
    home = _home(args)
    out = Console(soft_wrap=True, highlight=False, emoji=False)
    out.print(f"model home:   {home if home is not None else default_model_home()}", markup=False)
    states = []
    for name in MODEL_NAMES:
        states.append(_show_model(out, name, home))
        _show_leftovers(out, name, home)
    return 0 if "intact" in states and "damaged" not in states else 1


def _show_leftovers(out: Console, name: str, home: Path | None) -> None:
    """Name each scratch folder a killed preparation of ``name`` left, with its size and
    the command that removes it (any preparation of the model does)."""
    for folder in abandoned_preparations(MODEL_SOURCES[name], home):
        out.print(
            f"  leftover:   {folder} ({_megabytes(folder)}), left by an interrupted "
            f"preparation; '{_prepare(name, home)}' removes it",
            markup=False,
        )


def _megabytes(folder: Path) -> str:
    """The size of the files under ``folder`` (links not followed), e.g. ``81.2 MB``."""
    total = 0
    for root, _, files in os.walk(folder):
        for file in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(root, file)).st_size
    return f"{total / 1e6:,.1f} MB"


def _prepare(name: str, home: Path | None, *, force: bool = False) -> str:
    """The command that prepares ``name`` into ``home``: without ``--home`` it would prepare
    into another folder than the one just shown."""
    command = named_model(name).prepare_command
    if home is not None:
        command += f" --home {shlex.quote(str(home))}"
    return command + (" --force" if force else "")


def _show_model(out: Console, name: str, home: Path | None) -> str:
    """Print one model's section; return ``"intact"``, ``"damaged"`` or ``"missing"``."""
    model = named_model(name)
    directory = named_model_directory(name, home)
    out.print("", markup=False)
    out.print(f"{name}: {model.summary}", markup=False)
    out.print(f"  folder:     {directory}", markup=False)
    try:
        prepared = PreparedModelManifest.read(directory)
    except OnnxEmbeddingError as exc:
        if exc.kind is OnnxFailureKind.MISSING_MODEL_FILE:
            out.print(f"  state:      not prepared; run '{_prepare(name, home)}'", markup=False)
            return "missing"
        # A manifest that cannot be read or parsed: prepared once, damaged since (the
        # loader refuses it with the same error).
        reason = str(exc).rstrip(".")
        advice = "" if "read access" in reason else f"; run '{_prepare(name, home, force=True)}'"
        out.print(f"  state:      damaged: {reason}{advice}", markup=False)
        return "damaged"
    problems = prepared_model_problems(directory, MODEL_SOURCES[name])
    state = (
        "prepared and intact"
        if not problems
        else f"damaged: {'; '.join(problems)}; run '{_prepare(name, home, force=True)}'"
    )
    out.print(f"  state:      {state}", markup=False)
    files = ModelFileManifest(
        directory=directory,
        files=tuple(ModelFileRecord(f.path, f.bytes, f.sha256) for f in prepared.files),
    )
    try:
        for precision in ("int8", "fp32"):
            options = SentenceEncoderOnnxEmbeddingOptions(directory, precision=precision)
            identity = sentence_encoder_identity(options, files, prepared)
            out.print(f"  identity ({precision}): {identity}", markup=False)
    except OnnxEmbeddingError as exc:
        out.print(f"  identity:   unavailable ({exc})", markup=False)
    except KeyError as exc:  # a file the identity hashes that the manifest does not list
        out.print(
            f"  identity:   unavailable (the manifest does not list {exc.args[0]})",
            markup=False,
        )
    source = ", ".join(f"{key}={value}" for key, value in sorted(prepared.source.items()))
    out.print(f"  source:     {source}", markup=False)
    out.print("  files:", markup=False)
    for entry in prepared.files:
        out.print(f"    {entry.path:<24} {entry.bytes:>12,}  {entry.sha256}", markup=False)
    return "intact" if not problems else "damaged"
