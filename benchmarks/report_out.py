"""How a benchmark hands out its JSON report: printed, and written to ``--out`` too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["emit"]


def emit(result: Any, out: str | None) -> int:
    """Print ``result`` as indented JSON (non-ASCII text kept as it is) and, with ``out``,
    write the same text to that file; return the exit code 0."""
    report = json.dumps(result, indent=2, ensure_ascii=False)
    if out:
        Path(out).write_text(report + "\n", encoding="utf-8")
    print(report)
    return 0
