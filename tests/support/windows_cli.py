"""Run one ``game-memory`` command on a CPython made to look like Windows' (for
``tests/test_windows_like_platform.py``).

Usage: ``python windows_cli.py ARGUMENT...`` (the command's arguments, as after
``game-memory``). Installs :mod:`windows_like` first, runs the command's ``main`` in this
process, and prints, as the last line on stderr, one JSON object: the exit code, the calls
the emulation refused (``violations``) and the renames or removals of files held open or
mapped (``sharing_conflicts``). The command's own output goes where it always does.
"""

import importlib
import sys

windows_like = importlib.import_module("windows_like")  # first: before game_memory

import json  # noqa: E402

from game_memory.cli.parser import main  # noqa: E402


def run(arguments: list[str]) -> int:
    code = main(arguments)
    sys.stdout.flush()
    report = {
        "code": code,
        "violations": windows_like.violations(),
        "sharing_conflicts": windows_like.sharing_conflicts(),
    }
    print(json.dumps(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
