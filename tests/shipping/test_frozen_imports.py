"""The frozen sidecar's imports never reach a module the bundle leaves out.

``bundle/freeze.py`` excludes rich, the PostgreSQL driver, the test tools and others from
the bundle; a module-level import of one of them on the sidecar's path ends every bundled
game's sidecar at start with ``ModuleNotFoundError`` (``game_memory.cli``'s package module
importing the rich-based terminal did). Building a bundle takes minutes
(``test_bundle.py``); this runs the sidecar's entry point with those modules blocked, in a
fresh interpreter, in a second.
"""

from __future__ import annotations

import subprocess
import sys

from game_memory.bundle.freeze import EXCLUDED_MODULES

_PROBE = """
import importlib.abc, sys
blocked = set(sys.argv[1:])

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in blocked or any(name.startswith(b + ".") for b in blocked):
            raise ModuleNotFoundError(f"{name} is left out of the bundle")
        return None

sys.meta_path.insert(0, Block())
from game_memory.cli.frozen_sidecar import main
import game_memory.bridge.server, game_memory.opening  # what serve runs
code = main(["--help"])
print("exit", code)
"""


def test_the_frozen_entry_point_runs_without_the_modules_the_bundle_leaves_out() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *EXCLUDED_MODULES],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "left out of the bundle" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "exit 0" in done.stdout
