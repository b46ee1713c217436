"""Crash states under the strict POSIX persistence model, built offline from a recorded log.

A power loss after the first ``point`` operations of a log leaves, for sure, only what was
made durable before it:

* a file's writes and truncations followed (before the crash) by an ``fsync`` of that file;
* a folder's new, removed or renamed names followed by an ``fsync`` of that folder (a
  rename counts as one atomic operation, made durable by an ``fsync`` of either folder).

Every other operation may or may not have reached the disk, in any subset, and a write
that grew a file may have reached it as zeros (the size persisted, the data did not:
``data=writeback``). :func:`crash_states` replays the log with chosen subsets and yields
the trees that result: only what is reachable from the root by names that persisted, as a
``{relative path: bytes, or None for a folder}`` mapping. The subsets tried at each point
are the extremes (nothing, everything), in-order prefixes, each operation alone missing
or alone present, each growing write as zeros, and seeded random subsets; equal trees are
yielded once.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass

from .recorder import Op, Tree

__all__ = ["CrashState", "State", "crash_states", "materialize", "replay", "tree_state"]

#: A materialized tree: relative path -> file bytes, or ``None`` for a folder.
State = dict[str, bytes | None]

_CHANGES = frozenset({"create", "mkdir", "link", "unlink", "rmdir", "rename", "write", "truncate"})
_NEVER = 1 << 62


@dataclass(frozen=True)
class CrashState:
    """One state after a simulated power loss.

    Attributes:
        point: How many operations of the log were issued before the power failed.
        variant: Which subset of the unsynced operations reached the disk.
        tree: The files and folders that survived.
        digest: A hash of ``tree`` (equal trees have equal digests).
    """

    point: int
    variant: str
    tree: State
    digest: str


def _sync_positions(ops: list[Op]) -> list[int]:
    """For each operation, the position of the first later ``fsync`` that makes it durable."""
    following: dict[int, int] = {}
    durable_at = [_NEVER] * len(ops)
    for position in range(len(ops) - 1, -1, -1):
        op = ops[position]
        if op.kind == "fsync":
            following[op.inode] = position
            continue
        if op.kind in ("write", "truncate"):
            durable_at[position] = following.get(op.inode, _NEVER)
        elif op.kind == "rename":
            durable_at[position] = min(
                following.get(op.parent, _NEVER), following.get(op.target, _NEVER)
            )
        elif op.kind in _CHANGES:
            durable_at[position] = following.get(op.parent, _NEVER)
    return durable_at


class _Model:
    """A replayable copy of a tree."""

    def __init__(self, tree: Tree) -> None:
        self.root = tree.root
        self.folders = {inode: dict(entries) for inode, entries in tree.folders.items()}
        self.files = {inode: bytearray(data) for inode, data in tree.files.items()}

    def apply(self, op: Op, *, zeros: bool = False) -> None:
        if op.kind == "create":
            self.files.setdefault(op.inode, bytearray())
            self.folders.setdefault(op.parent, {})[op.name] = op.inode
        elif op.kind == "mkdir":
            self.folders.setdefault(op.inode, {})
            self.folders.setdefault(op.parent, {})[op.name] = op.inode
        elif op.kind == "link":
            self.folders.setdefault(op.parent, {})[op.name] = op.inode
        elif op.kind in ("unlink", "rmdir"):
            entries = self.folders.get(op.parent, {})
            if entries.get(op.name) == op.inode:
                del entries[op.name]
        elif op.kind == "rename":
            source = self.folders.get(op.parent, {})
            if source.get(op.name) == op.inode:
                del source[op.name]
            self.folders.setdefault(op.target, {})[op.target_name] = op.inode
        elif op.kind == "write":
            data = self.files.setdefault(op.inode, bytearray())
            end = op.offset + len(op.data)
            if len(data) < end:
                data.extend(bytes(end - len(data)))
            if not zeros:
                data[op.offset : end] = op.data
        elif op.kind == "truncate":
            data = self.files.setdefault(op.inode, bytearray())
            if len(data) > op.offset:
                del data[op.offset :]
            else:
                data.extend(bytes(op.offset - len(data)))

    def state(self) -> State:
        found: State = {}

        def walk(inode: int, prefix: str, depth: int) -> None:
            if depth > 64:
                return
            for name, child in sorted(self.folders.get(inode, {}).items()):
                path = f"{prefix}{name}"
                if child in self.folders:
                    found[path] = None
                    walk(child, path + "/", depth + 1)
                else:
                    found[path] = bytes(self.files.get(child, b""))

        walk(self.root, "", 0)
        return found


def tree_state(tree: Tree) -> State:
    """The materialized form of a recorded tree."""
    return _Model(tree).state()


def replay(tree: Tree, ops: list[Op], kept: set[int] | None = None, zeroed: int = -1) -> State:
    """Replay ``ops`` on ``tree``: all of them, or only the positions in ``kept``."""
    model = _Model(tree)
    for position, op in enumerate(ops):
        if op.kind in _CHANGES and (kept is None or position in kept):
            model.apply(op, zeros=position == zeroed)
    return model.state()


def _digest(state: State) -> str:
    hasher = hashlib.sha256()
    for path in sorted(state):
        data = state[path]
        hasher.update(
            path.encode() + (b"/" if data is None else b"=" + hashlib.sha256(data).digest())
        )
    return hasher.hexdigest()


def _grows(ops: list[Op], position: int, sizes: dict[int, int]) -> bool:
    op = ops[position]
    return op.kind == "write" and op.offset + len(op.data) > sizes.get(op.inode, 0)


def crash_states(
    tree: Tree,
    ops: list[Op],
    *,
    seed: int,
    random_subsets: int = 2,
    singles: int = 6,
) -> Iterator[CrashState]:
    """Yield the distinct crash states of ``ops`` (applied to ``tree``) at every point."""
    chooser = random.Random(seed)
    durable_at = _sync_positions(ops)
    seen: set[tuple[int, str]] = set()
    sizes: dict[int, int] = {inode: len(data) for inode, data in tree.files.items()}
    growing: set[int] = set()
    for position, op in enumerate(ops):
        if _grows(ops, position, sizes):
            growing.add(position)
        if op.kind == "write":
            sizes[op.inode] = max(sizes.get(op.inode, 0), op.offset + len(op.data))
        elif op.kind == "truncate":
            sizes[op.inode] = op.offset
    for point in range(len(ops) + 1):
        # A point right after a mark has the states of the point before, with more promises.
        issued = [p for p in range(point) if ops[p].kind in _CHANGES]
        forced = {p for p in issued if durable_at[p] < point}
        optional = [p for p in issued if p not in forced]
        variants: list[tuple[str, set[int], int]] = [("synced only", set(forced), -1)]
        if optional:
            variants.append(("everything", set(issued), -1))
            half = optional[: len(optional) // 2]
            variants.append(("older half", forced | set(half), -1))
            picked = optional if len(optional) <= singles else chooser.sample(optional, singles)
            for p in picked:
                variants.append((f"all but op {p}", set(issued) - {p}, -1))
                variants.append((f"only op {p}", forced | {p}, -1))
            zero = [p for p in optional if p in growing]
            for p in zero if len(zero) <= singles else chooser.sample(zero, singles):
                variants.append((f"op {p} as zeros", set(issued), p))
            for number in range(random_subsets):
                subset = {p for p in optional if chooser.random() < 0.5}
                variants.append((f"random subset {number}", forced | subset, -1))
        for variant, kept, zeroed in variants:
            state = replay(tree, ops[:point], kept, zeroed)
            digest = _digest(state)
            if (point, digest) in seen:
                continue
            seen.add((point, digest))
            yield CrashState(point, variant, state, digest)


def materialize(state: State, folder: str) -> None:
    """Write ``state`` under ``folder`` (which must exist and be empty)."""
    for path in sorted(state):
        data = state[path]
        target = os.path.join(folder, path)
        if data is None:
            os.mkdir(target)
        else:
            with open(target, "wb") as handle:
                handle.write(data)
