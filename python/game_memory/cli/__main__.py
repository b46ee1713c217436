"""``python -m game_memory.cli``: the same as the ``game-memory`` command."""

import sys

from game_memory.cli.parser import main

sys.exit(main())
