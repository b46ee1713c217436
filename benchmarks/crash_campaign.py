"""The SIGKILL crash campaign at full size: at least 500 kills over every kind of operation.

Runs ``tests/crash/campaign.py`` (the same campaign CI runs with tens of kills): processes
appending, migrating legacy documents, rebuilding the vector index, running
``check --fix`` and ``check --fix --accept-loss``, forgetting, consolidating, erasing
(listed memories, a whole owner, a whole session), compacting (``game-memory compact``
beside a process that appends, forgets and compacts), and the real ``game-memory serve``
sidecar answering ``memory.remember`` or ``memory.forget``/``erase``/``consolidate``, each
killed with SIGKILL at a random instant; after every kill the save is opened and checked
against every acknowledged operation. Prints JSON: the kills per operation, the rounds of
each kind, the acknowledged operations, the lost acknowledged operations (memories,
forgets, consolidations, erases: an erased memory back or a byte of it left under the save
or index folder), the half-erased states, the stores that would not open, the stores
``check --fix`` left inconsistent and the indexes a rebuild did not repair (all should be
0). Usage: ``python benchmarks/crash_campaign.py [--kills 500] [--seed N] [--progress]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from crash.campaign import run_campaign


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=500, help="processes to kill (default 500)")
    parser.add_argument("--seed", type=int, default=None, help="fix the random instants")
    parser.add_argument("--progress", action="store_true", help="a line per round on stderr")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    with tempfile.TemporaryDirectory(prefix="gm-crash-campaign-") as folder:
        result = run_campaign(Path(folder), args.kills, seed=seed, progress=args.progress)
    report = {
        "benchmark": "crash_campaign",
        "seed": seed,
        "python": platform.python_version(),
        **result.as_json(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
