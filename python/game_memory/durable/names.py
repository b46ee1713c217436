"""Names in the store: identity hashes, and the paths of partition log segments.

An owner partition has two series of segments in its session folder: its memories
(``o-<sha256(owner)>.log``, ``.1.log``, ...) and its retractions (``r-<sha256(owner)>.log``...).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

__all__ = ["identity_hash", "partition_hash", "segment_path"]


def identity_hash(value: str) -> str:
    """SHA-256 of the UTF-8 bytes of ``value``, as 64 lower-case hex digits."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=4_096)
def partition_hash(value: str) -> str:
    """:func:`identity_hash` of a session or owner id, memoized (they repeat on every call)."""
    return identity_hash(value)


def segment_path(
    session_directory: str | Path, owner_hash: str, index: int, series: str = "o"
) -> str:
    """The path of log segment ``index`` (0 = the first) of an owner partition.

    ``series`` is ``"o"`` for the memory log, ``"r"`` for the retraction log.
    """
    suffix = "" if index == 0 else f".{index}"
    return f"{os.fspath(session_directory)}{os.sep}{series}-{owner_hash}{suffix}.log"
