"""The SQL the vector index sends; like the save's, every statement filters on one session.

Lock order, everywhere: a partition's row in ``game_memory_index_partitions`` first, then
its entries. Writers, the orphan sweep and resets all follow it, so they never deadlock.
"""

from __future__ import annotations

__all__ = [
    "ADD_IDENTITY",
    "BUMP",
    "COMPACT_SESSION",
    "DELETE_ORPHANS",
    "ENTRY",
    "IDENTITIES",
    "IDENTITY",
    "LOCK_IDENTITIES",
    "LOCK_PARTITION",
    "LOCK_SESSION",
    "OWNER_ENTRIES",
    "RESET",
    "SESSION_ENTRIES",
    "SETTLE",
    "UPSERT",
    "VERIFY",
]

IDENTITIES = "SELECT code, name, dimensions FROM game_memory_identities"

IDENTITY = "SELECT code FROM game_memory_identities WHERE name = %(name)s"

#: Serialize the processes adding identities to this schema's table (held to the end of
#: the adding transaction): without it, processes adding different identities at once all
#: take the same next code and all but one lose, again and again.
LOCK_IDENTITIES = (
    "SELECT pg_advisory_xact_lock(hashtext('game-memory identities ' || current_schema()))"
)

#: Give a new identity the next code, under :data:`LOCK_IDENTITIES`; nothing when another
#: process added it first.
ADD_IDENTITY = """
INSERT INTO game_memory_identities (code, name, dimensions)
SELECT coalesce(max(code) + 1, 0), %(name)s, %(dimensions)s FROM game_memory_identities
ON CONFLICT DO NOTHING
RETURNING code
"""

#: Lock a partition's row (creating it) and reserve ``count`` change numbers; returns the
#: last number before them and the partition's entry count.
BUMP = """
INSERT INTO game_memory_index_partitions AS p
    (session_id, owner_id, generation, changes, entries)
VALUES (%(session)s, %(owner)s, 1, %(count)s, 0)
ON CONFLICT (session_id, owner_id) DO UPDATE SET changes = p.changes + %(count)s
RETURNING p.changes - %(count)s, p.entries
"""

#: Write one memory's entry (the latest wins); ``true`` when the memory had none.
UPSERT = """
INSERT INTO game_memory_index_entries AS e
    (session_id, owner_id, memory_hash, change, state, identity, digest, code, embedding)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (session_id, owner_id, memory_hash) DO UPDATE SET
    change = excluded.change, state = excluded.state, identity = excluded.identity,
    digest = excluded.digest, code = excluded.code, embedding = excluded.embedding
RETURNING (xmax = 0)
"""

SETTLE = """
UPDATE game_memory_index_partitions SET entries = entries + %(added)s
WHERE session_id = %(session)s AND owner_id = %(owner)s
"""

_ENTRY_COLUMNS = "e.change, e.memory_hash, e.digest, e.state, e.identity, e.code, e.embedding"

#: One partition's generation and change counter, with its entries changed since ``seen``
#: (all of them in another generation); no row when nothing changed (or no partition).
OWNER_ENTRIES = f"""
SELECT p.owner_id, p.generation, p.changes, {_ENTRY_COLUMNS}
FROM game_memory_index_partitions p
LEFT JOIN LATERAL (
    SELECT * FROM game_memory_index_entries e
    WHERE e.session_id = p.session_id AND e.owner_id = p.owner_id
        AND e.change > CASE WHEN p.generation = %(generation)s THEN %(seen)s ELSE 0 END
    ORDER BY e.change
) e ON true
WHERE p.session_id = %(session)s AND p.owner_id = %(owner)s
    AND (p.generation <> %(generation)s OR p.changes > %(seen)s)
"""

#: The same for every partition of a session, given what the caller holds (parallel arrays).
SESSION_ENTRIES = f"""
SELECT p.owner_id, p.generation, p.changes, {_ENTRY_COLUMNS}
FROM game_memory_index_partitions p
LEFT JOIN unnest(%(owners)s::text[], %(generations)s::bigint[], %(seen)s::bigint[])
    AS known(owner_id, generation, seen) ON known.owner_id = p.owner_id
LEFT JOIN LATERAL (
    SELECT * FROM game_memory_index_entries e
    WHERE e.session_id = p.session_id AND e.owner_id = p.owner_id
        AND e.change > CASE WHEN p.generation = known.generation THEN known.seen ELSE 0 END
    ORDER BY e.change
) e ON true
WHERE p.session_id = %(session)s
    AND (known.owner_id IS NULL OR p.generation <> known.generation OR p.changes > known.seen)
"""

#: One memory's entry (is its vector ready?).
ENTRY = """
SELECT state, identity, digest FROM game_memory_index_entries
WHERE session_id = %(session)s AND owner_id = %(owner)s AND memory_hash = %(hash)s
"""

LOCK_PARTITION = """
SELECT entries FROM game_memory_index_partitions
WHERE session_id = %(session)s AND owner_id = %(owner)s FOR UPDATE
"""

#: Every partition row of a session, locked in one order (two sweeps never deadlock).
LOCK_SESSION = """
SELECT owner_id, entries FROM game_memory_index_partitions
WHERE session_id = %(session)s ORDER BY owner_id FOR UPDATE
"""

#: After a sweep: a new generation (and the entry count) for each listed partition.
COMPACT_SESSION = """
UPDATE game_memory_index_partitions p
SET generation = p.generation + 1, entries = c.entries
FROM unnest(%(owners)s::text[], %(entries)s::bigint[]) AS c(owner_id, entries)
WHERE p.session_id = %(session)s AND p.owner_id = c.owner_id
"""

#: Delete listed entries still unchanged since they were listed (same change number).
DELETE_ORPHANS = """
DELETE FROM game_memory_index_entries e
USING unnest(%(hashes)s::bytea[], %(changes)s::bigint[]) AS listed(memory_hash, change)
WHERE e.session_id = %(session)s AND e.owner_id = %(owner)s
    AND e.memory_hash = listed.memory_hash AND e.change = listed.change
"""

#: After deleting entries: a new generation (readers reload) and the entry count.
RESET = """
UPDATE game_memory_index_partitions SET generation = generation + 1, entries = %(entries)s
WHERE session_id = %(session)s AND owner_id = %(owner)s
"""

#: Per partition of a session: entries, malformed entries, and the recorded entry count.
VERIFY = """
SELECT p.owner_id, p.entries, count(e.memory_hash),
    count(*) FILTER (WHERE e.state NOT IN (1, 2, 3)
        OR length(e.memory_hash) <> 32 OR length(e.digest) <> 32
        OR (e.state = 1 AND (e.embedding IS NULL OR i.code IS NULL
            OR vector_dims(e.embedding) <> i.dimensions)))
FROM game_memory_index_partitions p
LEFT JOIN game_memory_index_entries e USING (session_id, owner_id)
LEFT JOIN game_memory_identities i ON i.code = e.identity
WHERE p.session_id = %(session)s
GROUP BY p.owner_id, p.entries
"""
