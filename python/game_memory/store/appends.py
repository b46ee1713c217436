"""Appending records to an owner's log segments, and cutting a torn tail off the last one.

The same for both of its logs: memories (``o-``) and retractions (``r-``).

A record is appended with one ``write`` and fsynced (and a new segment's folder with it),
so a writer killed mid-append leaves a prefix of the record, which readers treat as a
torn tail and the next writer cuts off. Call these under the store's writer lock, after
the partition was read and checked against the ledger: a torn tail is only cut from a
partition that lost nothing acknowledged.
"""

from __future__ import annotations

import os
from pathlib import Path

from game_memory.durable import fs, portable
from game_memory.durable.names import segment_path
from game_memory.errors import PersistenceError
from game_memory.store.state import PartitionState

__all__ = ["append_records", "cut_tail", "plan_segments", "write_planned"]


def append_records(
    directory: Path,
    state: PartitionState,
    records: list[bytes],
    *,
    maximum_file_bytes: int,
    durable: bool,
    series: str = "o",
) -> list[str]:
    """Append framed ``records`` to the partition's last segment(s); return the files.

    ``series`` is ``"o"`` (the memory log) or ``"r"`` (the retraction log). Cuts off a torn
    tail first and starts a new segment when one would grow past ``maximum_file_bytes``.
    With ``durable`` each write is fsynced, and the folder of a new segment too.
    """
    segments = state.segments if series == "o" else state.retraction_segments
    tail = segments[-1] if segments else None
    if tail is not None and tail.torn_bytes:
        cut_tail(tail.path, tail.end)
    index = len(segments) - 1 if tail is not None else 0
    size = tail.end if tail is not None else 0
    touched: list[str] = []
    pending: list[bytes] = []

    def flush() -> None:
        path = Path(segment_path(directory, state.owner_hash, index, series))
        with fs.open_append(path, durable=durable) as (fd, _):
            fs.append_bytes(fd, b"".join(pending), path, durable=durable)
        touched.append(os.fspath(path))
        pending.clear()

    for record in records:
        if size and size + len(record) > maximum_file_bytes:
            flush()
            index += 1
            size = 0
        pending.append(record)
        size += len(record)
    if pending:
        flush()
    return touched


def plan_segments(
    directory: str | Path,
    state: PartitionState,
    records: list[bytes],
    *,
    maximum_file_bytes: int,
) -> list[tuple[str, int, list[bytes]]]:
    """Where ``records`` go in the partition's memory log: ``(path, size_before, records)``.

    ``size_before`` is the segment's valid size before the write (a torn tail excluded, cut
    first by :func:`write_planned`), ``-1`` for a segment the write creates. Follows the
    rollover rule of :func:`append_records`, so a batch journal can name every segment it
    is about to touch, and undo it exactly.
    """
    segments = state.segments
    tail = segments[-1] if segments else None
    index = len(segments) - 1 if tail is not None else 0
    size = tail.end if tail is not None else 0
    plan: list[tuple[str, int, list[bytes]]] = []
    current: list[bytes] = []
    before = size if tail is not None else -1
    for record in records:
        if size and size + len(record) > maximum_file_bytes:
            plan.append((segment_path(directory, state.owner_hash, index), before, current))
            index, size, before, current = index + 1, 0, -1, []
        current.append(record)
        size += len(record)
    if current:
        plan.append((segment_path(directory, state.owner_hash, index), before, current))
    return plan


def write_planned(
    state: PartitionState, plan: list[tuple[str, int, list[bytes]]], *, durable: bool = False
) -> None:
    """Write a :func:`plan_segments` plan, without fsync (a batch's barrier flushes it) or,
    with ``durable``, fsyncing each segment through the descriptor it was written with (a
    segment the plan creates still needs its folder fsynced: the caller's).

    Cuts a torn tail off the last segment first (durably: it was never acknowledged).
    """
    tail = state.tail
    if tail is not None and tail.torn_bytes:
        cut_tail(tail.path, tail.end)
    for name, _before, records in plan:
        path = Path(name)
        with fs.open_append(path, durable=False) as (fd, _):
            fs.append_bytes(fd, b"".join(records), path, durable=durable)


def cut_tail(path: str, end: int) -> None:
    """Durably cut a segment back to ``end`` (dropping a torn tail)."""
    try:
        fd = os.open(path, os.O_WRONLY | portable.OPEN_FLAGS)
        try:
            os.ftruncate(fd, end)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise PersistenceError(f"could not cut the torn tail of {path}: {exc.strerror}") from exc
