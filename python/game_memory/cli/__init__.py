"""The ``game-memory`` command line: the only place that turns strings into objects.

``parser`` owns the argument surface; each command's module runs one call of the Python
API and prints its outcome.
"""

from __future__ import annotations

from collections.abc import Sequence

from game_memory import _startup
from game_memory.cli import parser
from game_memory.cli.encoding import prepare_output
from game_memory.cli.parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``game-memory`` (the console script and ``python -m game_memory.cli``).

    Sets up stdout and stderr first, so that output the stream's encoding cannot carry (a
    Windows redirect in the ANSI code page) is escaped instead of ending the command as
    an internal error; then :func:`game_memory.cli.parser.main` runs it and returns its
    exit code.
    """
    _startup.started()  # a Ctrl-C from here on is the command's to handle
    prepare_output()
    return parser.main(argv)
