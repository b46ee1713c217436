"""``game-memory addon``: write the addon's Asset Library zip (``addons/game_memory/**``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from game_memory.bundle.addon_archive import write_addon_archive
from game_memory.bundle.layout import BundleError
from game_memory.cli.folders import output_problem

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Write the zip into ``--output``; print its path, size and file count. Exit 0 or 1."""
    source = Path(args.source) if args.source else None
    problem = output_problem(args.output)
    if problem is not None:
        print(f"game-memory addon: {problem}", file=sys.stderr)
        return 1
    try:
        archive = write_addon_archive(Path(args.output), source)
    except BundleError as exc:
        print(f"game-memory addon: {exc}", file=sys.stderr)
        return 1
    print(
        f"{archive.path} ({len(archive.files)} files, {archive.bytes:,} bytes, "
        f"addon version {archive.version})"
    )
    return 0
