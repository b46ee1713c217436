"""``python -m game_memory.cli``: the same as the ``game-memory`` command."""

import sys

from game_memory.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
