"""The power-loss explorer at full size: every distinct crash state, single and double.

Runs ``tests/crash/explorer.py`` (CI runs it capped at a few thousand states): the fixed
workload (a legacy migration, appends across log segments, a vector rebuild, appends
through the front door, ``check --fix``) is recorded once; every distinct state a power
loss could leave under the strict POSIX model is built and checked, and so are the states
of a second power loss during the next program's recovery, for many first crashes. Prints
JSON: the operations recorded, the states checked (single, double), the violations (should
be 0) with up to ten examples, and the seconds. Usage:
``python benchmarks/power_loss.py [--single N] [--double N] [--first-crashes N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from crash.explorer import explore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--single", type=int, default=1_000_000, help="cap on single-crash states (default: all)"
    )
    parser.add_argument(
        "--double", type=int, default=10_000, help="cap on double-crash states (default 10,000)"
    )
    parser.add_argument(
        "--first-crashes", type=int, default=200, help="first crashes to recover from (200)"
    )
    parser.add_argument("--seed", type=int, default=17, help="fixes every sampling choice")
    args = parser.parse_args()
    # Damaged indexes in crash states are expected and logged as warnings; keep stdout JSON.
    logging.getLogger("game_memory").setLevel(logging.ERROR)

    def progress(done: int, planned: int) -> None:
        if done % 500 == 0:
            print(f"{done} of about {planned} states", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="gm-power-loss-") as folder:
        result = explore(
            Path(folder),
            single=args.single,
            double=args.double,
            first_crashes=args.first_crashes,
            seed=args.seed,
            progress=progress,
        )
    report = {"benchmark": "power_loss", "python": platform.python_version(), **result.as_json()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
