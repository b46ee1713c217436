"""``game-memory bundle``: build the self-contained sidecar a game ships beside itself.

Stages go to stderr as they start; the result (folder, size, model, the check's time to
the ready line) goes to stdout, as text or, with ``--json``, as one JSON object. A failed
stage is one message on stderr and exit code 1; a previous bundle is left as it was.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from game_memory.bundle.build import BuiltBundle, build_bundle
from game_memory.bundle.layout import BundleError
from game_memory.cli.folders import output_problem

__all__ = ["run", "summary"]

_MB = 1_000_000


def summary(bundle: BuiltBundle) -> dict[str, object]:
    """The figures ``--json`` prints: folder, sizes, model, timings."""
    manifest = bundle.manifest
    return {
        "bundle": str(bundle.folder),
        "executable": str(bundle.folder / manifest.executable),
        "platform": manifest.platform,
        "version": manifest.version,
        "freezer": manifest.freezer,
        "model": manifest.model.kind,
        "model_folder": manifest.model.folder,
        "model_identity": manifest.model.identity,
        "total_bytes": bundle.total_bytes,
        "model_bytes": bundle.model_bytes,
        "mode": bundle.check.mode,
        "ready_seconds": round(bundle.check.ready_seconds, 3),
        "freeze_seconds": round(bundle.freeze_seconds, 1),
        "build_seconds": round(bundle.build_seconds, 1),
    }


def run(args: argparse.Namespace) -> int:
    """Build the bundle ``--output`` names; print where it is and how big. Exit 0 or 1."""
    started = time.monotonic()

    def stage(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {line}", file=sys.stderr, flush=True)

    home = Path(args.home).expanduser() if args.home else None
    problem = output_problem(args.output)
    if problem is not None:
        print(f"game-memory bundle: {problem}", file=sys.stderr)
        return 1
    try:
        bundle = build_bundle(Path(args.output), args.model, home=home, stage=stage)
    except BundleError as exc:
        print(f"game-memory bundle: {exc}", file=sys.stderr)
        return 1
    figures = summary(bundle)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    model = bundle.manifest.model
    described = "none (lexical recall)" if model.folder is None else f"{model.folder}"
    print(f"bundle:   {bundle.folder}")
    print(f"run:      {figures['executable']} serve --websocket 127.0.0.1:0 --save-dir DIR")
    print(
        f"size:     {bundle.total_bytes / _MB:.1f} MB (sidecar "
        f"{(bundle.total_bytes - bundle.model_bytes) / _MB:.1f} MB, model "
        f"{bundle.model_bytes / _MB:.1f} MB)"
    )
    print(f"model:    {described}" + (f", {model.identity}" if model.identity else ""))
    print(f"platform: {bundle.manifest.platform} ({bundle.manifest.freezer})")
    print(
        f"checked:  ready line after {bundle.check.ready_seconds:.2f} s, "
        f"{bundle.check.mode} recall; built in {bundle.build_seconds:.0f} s"
    )
    return 0
