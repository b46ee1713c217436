"""Reading the vector index's partitions into this process's loads (``index_cache.py``).

One statement per partition (or per session) returns the partition's generation and change
counter with the entries changed since the load's watermark; the load is extended, or
replaced when the generation moved on or it holds too many superseded vectors. Identities
(model strings) are numbered in the database once and cached here.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from game_memory.errors import DerivedIndexError
from game_memory.model import MemoryEmbeddingIdentity
from game_memory.postgres import index_statements as sql
from game_memory.postgres.index_cache import EntryRow, Loaded, Loads, load
from game_memory.postgres.rows import from_sql_key, sql_key

__all__ = ["IndexReader"]

_STRIPES = 64
_IDENTITY_ATTEMPTS = 100


class IndexReader:
    """Brings the loads of one index object up to date; thread-safe (striped locks)."""

    def __init__(self, loads: Loads, where: str) -> None:
        self.loads = loads
        self.where = where
        self._stripes = [threading.RLock() for _ in range(_STRIPES)]
        self._identities: dict[str, tuple[int, int]] = {}
        self._dimensions: dict[int, int] = {}

    def _stripe(self, session_id: str, owner_id: str) -> threading.RLock:
        return self._stripes[hash((session_id, owner_id)) % _STRIPES]

    def read_identities(self, connection: psycopg.Connection[Any]) -> None:
        for code, name, dimensions in connection.execute(sql.IDENTITIES).fetchall():
            self._identities[name] = (int(code), int(dimensions))
            self._dimensions[int(code)] = int(dimensions)

    def code(
        self, connection: psycopg.Connection[Any], identity: MemoryEmbeddingIdentity, create: bool
    ) -> int | None:
        """The code of ``identity``; with ``create``, give it one if it has none.

        Adding one is a transaction under an advisory lock, so processes adding different
        identities at once (a rolling model upgrade) take codes in turn and none fails.
        """
        name = str(identity)
        known = self._identities.get(name)
        if known is None:
            self.read_identities(connection)
            known = self._identities.get(name)
        if known is None and create:
            with connection.transaction():
                connection.execute(sql.LOCK_IDENTITIES)
                # Under the lock a code is lost only to a process of an older release (which
                # adds without it): take the next one then.
                for _ in range(_IDENTITY_ATTEMPTS):
                    added = connection.execute(
                        sql.ADD_IDENTITY, {"name": name, "dimensions": identity.dimensions}
                    ).fetchall()
                    if added or connection.execute(sql.IDENTITY, {"name": name}).fetchall():
                        break
            self.read_identities(connection)
            known = self._identities.get(name)
            if known is None:
                raise DerivedIndexError(
                    f"could not record the embedding identity {name} in {self.where}"
                )
        if known is None:
            return None
        if known[1] != identity.dimensions:
            raise DerivedIndexError(f"{self.where} records {name} with other dimensions")
        return known[0]

    def _entry_rows(
        self, rows: list[tuple[Any, ...]]
    ) -> dict[str, tuple[int, int, list[EntryRow]]]:
        """Result rows per owner key: ``(generation, changes, entries in change order)``."""
        grouped: dict[str, tuple[int, int, list[EntryRow]]] = {}
        for owner, generation, changes, change, hashed, digest, state, code, text, vector in rows:
            entry = grouped.setdefault(owner, (int(generation), int(changes), []))
            if change is not None:
                entry[2].append(
                    EntryRow(int(change), hashed, digest, int(state), code, text, vector)
                )
        for _, _, entries in grouped.values():
            entries.sort(key=lambda entry: entry.change)
        return grouped

    def _apply(
        self,
        connection: psycopg.Connection[Any],
        session_id: str,
        owner_id: str,
        base: Loaded | None,
        found: tuple[int, int, list[EntryRow]],
    ) -> Loaded:
        generation, changes, entries = found
        if any(e.identity is not None and e.identity not in self._dimensions for e in entries):
            self.read_identities(connection)
        where = f"partition {owner_id!r} of session {session_id!r} in {self.where}"
        fresh = base is None or base.generation != generation
        if not fresh and base is not None and base.dead_rows > base.partition.live + 1_024:
            return self._reload(connection, session_id, owner_id)
        loaded = load(
            base, session_id, owner_id, generation, changes, entries, self._dimensions, where
        )
        # A load extended in place is counted again too: its growth counts toward the
        # cache's bound (``Loads`` keeps a running total).
        self.loads.remember(loaded)
        return loaded

    def _reload(
        self, connection: psycopg.Connection[Any], session_id: str, owner_id: str
    ) -> Loaded:
        """Load a partition whole (too many superseded rows held)."""
        self.loads.forget(session_id, owner_id)
        loaded = self.refresh(connection, session_id, owner_id)
        assert loaded is not None
        return loaded

    def refresh(
        self, connection: psycopg.Connection[Any], session_id: str, owner_id: str
    ) -> Loaded | None:
        """Bring this process's load of one partition up to date; ``None`` if it has none."""
        with self._stripe(session_id, owner_id):
            base = self.loads.get(session_id, owner_id)
            rows = connection.execute(
                sql.OWNER_ENTRIES,
                {
                    "session": sql_key(session_id),
                    "owner": sql_key(owner_id),
                    "generation": base.generation if base is not None else 0,
                    "seen": base.changes if base is not None else 0,
                },
                binary=True,
            ).fetchall()
            if not rows:
                return base
            found = next(iter(self._entry_rows(rows).values()))
            if base is not None:
                with base.lock:
                    return self._apply(connection, session_id, owner_id, base, found)
            return self._apply(connection, session_id, owner_id, None, found)

    def refresh_session(
        self, connection: psycopg.Connection[Any], session_id: str
    ) -> dict[str, Loaded]:
        """Bring every partition of a session up to date in one statement, by owner id."""
        held = self.loads.session(session_id)
        keys = {sql_key(owner): owner for owner in held}
        rows = connection.execute(
            sql.SESSION_ENTRIES,
            {
                "session": sql_key(session_id),
                "owners": list(keys),
                "generations": [held[o].generation for o in keys.values()],
                "seen": [held[o].changes for o in keys.values()],
            },
            binary=True,
        ).fetchall()
        current = dict(held)
        for owner_key, found in self._entry_rows(rows).items():
            owner = keys.get(owner_key) or from_sql_key(owner_key)
            with self._stripe(session_id, owner):
                base = self.loads.get(session_id, owner)
                if base is not None and (base.generation, base.changes) >= found[:2]:
                    current[owner] = base  # another thread brought it this far already
                    continue
                if base is not None:
                    with base.lock:
                        current[owner] = self._apply(connection, session_id, owner, base, found)
                else:
                    current[owner] = self._apply(connection, session_id, owner, None, found)
        return current
