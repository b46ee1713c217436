"""The ``game-memory`` command line: the only place that turns strings into objects.

``parser`` owns the argument surface; each command's module runs one call of the Python
API and prints its outcome.
"""

from game_memory.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
