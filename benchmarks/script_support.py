"""What the benchmark scripts share on their command line and with their workers.

* Argument types (``type=`` of ``argparse``): a bad value (``--sizes x``, ``--rounds 0``,
  ``--reranker notjson``) is a usage error naming the option and what it takes (exit 2),
  found before any work, never a traceback minutes in.
* :func:`worker_failed`: a worker process that ended badly. One killed by the Ctrl-C that
  reached its whole process group is the user's interrupt (``KeyboardInterrupt``), not the
  benchmark's failure; any other end is a ``RuntimeError`` carrying the worker's stderr.
* :func:`remove_if_empty`: a parent folder shared by runs goes when the last run leaves it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = [
    "float_list",
    "float_range",
    "int_list",
    "int_range",
    "json_options",
    "remove_if_empty",
    "worker_failed",
]

Options = TypeVar("Options", bound=BaseModel)


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """A type for one whole number from ``low`` to ``high`` (no upper bound: ``None``)."""
    wanted = f"a whole number from {low:,}" + ("" if high is None else f" to {high:,}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    return parse


def int_list(low: int, high: int) -> Callable[[str], list[int]]:
    """A type for whole numbers separated by commas (``10000,100000``), each ``low..high``."""
    one = int_range(low, high)

    def parse(text: str) -> list[int]:
        return [one(part.strip()) for part in text.split(",")]

    return parse


def float_range(low: float, high: float) -> Callable[[str], float]:
    """A type for one number from ``low`` to ``high``."""
    wanted = f"a number from {low:g} to {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if not low <= value <= high:  # NaN too
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    return parse


def float_list(low: float, high: float) -> Callable[[str], list[float]]:
    """A type for numbers separated by commas (``0.002,0.05``), each ``low..high``."""
    one = float_range(low, high)

    def parse(text: str) -> list[float]:
        return [one(part.strip()) for part in text.split(",")]

    return parse


def json_options(model: type[Options]) -> Callable[[str], Options]:
    """A type for a JSON object of ``model``'s fields (``'{"vector_weight": 0.9}'``),
    checked by the model itself: what it refuses is said in the usage error."""

    def parse(text: str) -> Options:
        try:
            fields: Any = json.loads(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from None
        if not isinstance(fields, dict):
            wanted = f"a JSON object of {model.__name__} fields"
            raise argparse.ArgumentTypeError(f"{wanted}, not {text!r}")
        try:
            return model(**fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'value'}: {error['msg']}"
                for error in exc.errors()
            )
            raise argparse.ArgumentTypeError(f"{model.__name__} refuses it: {problems}") from None

    return parse


def worker_failed(done: subprocess.CompletedProcess[str], what: str) -> NoReturn:
    """Raise for a worker that did not end with exit code 0.

    Raises:
        KeyboardInterrupt: the worker was killed by SIGINT (a Ctrl-C reaches every process
            of the terminal's group: the parent may see its worker die before it sees its
            own interrupt, and must then stop as interrupted, not as failed).
        RuntimeError: any other end; the message ends with the worker's stderr (its last
            4,000 characters: the traceback's last line is the cause).
    """
    if done.returncode == -signal.SIGINT:
        raise KeyboardInterrupt
    raise RuntimeError(f"{what} failed (exit code {done.returncode}):\n{done.stderr[-4000:]}")


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it is empty: the parent that runs share (another run's data
    keeps it, and a folder already gone is no error)."""
    with contextlib.suppress(OSError):
        folder.rmdir()
