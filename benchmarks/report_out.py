"""How a benchmark hands out its JSON report: printed, and written to ``--out`` too."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["emit"]


def emit(result: Any, out: str | None) -> int:
    """Print ``result`` as indented JSON (non-ASCII text kept as it is) and, with ``out``,
    write the same text to that file; return the exit code.

    The report is printed first: a run takes minutes, and a file that cannot be written (a
    missing folder, a typo) must not lose it. That file is then one line on stderr, after
    the JSON, and exit code 1; otherwise 0.
    """
    report = json.dumps(result, indent=2, ensure_ascii=False)
    print(report, flush=True)
    if out:
        try:
            Path(out).write_text(report + "\n", encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            print(
                f"error: could not write the report to {out} ({reason}); it is printed in "
                "full on stdout: next time give --out a file in a folder that exists",
                file=sys.stderr,
            )
            return 1
    return 0
