"""Run a script in a fresh interpreter whose BLAS runs one thread.

BLAS reads its thread count when numpy loads, so a test of bit-identical products (which
hold for a single-threaded BLAS only) runs its check in a new process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["run_with_one_blas_thread"]

_ROOT = Path(__file__).resolve().parents[2]


def run_with_one_blas_thread(script: str) -> str:
    """Run ``script`` with ``python -c`` and one BLAS thread; its output (it must succeed)."""
    threads = dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **threads, "PYTHONPATH": str(_ROOT / "python")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
