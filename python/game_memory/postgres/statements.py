"""The SQL the save sends: one statement per call, each filtered on one session first.

Every statement names ``session_id`` in its ``WHERE`` clause (or its inserted row), so on
Citus each is a single-shard ("router") statement and the tables stay colocated by session
(``COUNT_ENTRIES``, which only a store-wide ``maximum_entries`` sends, is the exception).

**Lock order.** A transaction of the save that takes more than one lock takes them in this
order, so two writers never wait on each other in a cycle (PostgreSQL would abort one with
"deadlock detected"):

1. the store-wide entries lock (``LOCK_ENTRIES``), only with a ``maximum_entries`` bound;
2. partition rows (``game_memory_partitions``), in key order: session, then owner, in the
   C collation (code point order);
3. the rows of those partitions' memories and retractions.

Appends (``writes.py``), consolidate, forget and erase (``lifecycle.py``) and the partition
repair of ``check.py`` follow it; a new writer must too: take ``LOCK_ENTRIES`` first, before
any partition row, or not at all.
"""

from __future__ import annotations

__all__ = [
    "APPEND",
    "APPEND_MANY",
    "COUNT_ENTRIES",
    "EXISTING",
    "HELD",
    "LOCK_ENTRIES",
    "OWNER_ROWS",
    "PARTITION_LOCKED",
    "SESSION_ROWS",
]

#: Add one memory in one round trip (one autocommit statement: atomic and, with
#: ``synchronous_commit = on``, durable when it returns).
#:
#: ``existing`` reads the id's row as of the statement's snapshot; only when there is none
#: does ``partition`` take the partition row's lock and move its ``next_seq`` on (unless the
#: partition is full), and ``inserted`` adds the memory at that position, doing nothing if
#: a concurrent append of the same id committed meanwhile (then the position stays unused,
#: a harmless gap, and the caller reads that row to tell a duplicate from a conflict).
#: Positions are assigned under the partition row's lock, which is held until commit, so
#: within a partition they increase in commit order: what ``views.py`` relies on.
APPEND = """
WITH existing AS (
    SELECT digest, document FROM game_memory_memories
    WHERE session_id = %(session)s AND owner_id = %(owner)s AND memory_id = %(memory)s
), partition AS (
    INSERT INTO game_memory_partitions AS p (session_id, owner_id, next_seq)
    SELECT %(session)s, %(owner)s, 1 WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (session_id, owner_id) DO UPDATE SET next_seq = p.next_seq + 1
        WHERE p.next_seq < %(capacity)s
    RETURNING p.next_seq - 1 AS seq
), inserted AS (
    INSERT INTO game_memory_memories (session_id, owner_id, memory_id, seq, digest, document)
    SELECT %(session)s, %(owner)s, %(memory)s, seq, %(digest)s, %(document)s FROM partition
    ON CONFLICT (session_id, owner_id, memory_id) DO NOTHING
    RETURNING seq
)
SELECT
    (SELECT seq FROM inserted),
    (SELECT digest FROM existing),
    (SELECT document FROM existing WHERE digest <> %(digest)s),
    (SELECT count(*) FROM partition)
"""

#: Add many memories of one partition in one statement (the bulk form of ``APPEND``, run in
#: the caller's transaction, which rolls back on a conflict, a full partition or a race).
#: ``incoming`` must hold distinct ids. Returns how many were new, whether the partition
#: had room for them, how many were inserted, the stored rows whose digest differs, and
#: the ids already stored.
APPEND_MANY = """
WITH incoming AS (
    SELECT * FROM unnest(%(memories)s::text[], %(digests)s::bytea[], %(documents)s::bytea[])
        WITH ORDINALITY AS t(memory_id, digest, document, n)
), existing AS (
    SELECT m.memory_id, m.digest, m.document FROM game_memory_memories m
    WHERE m.session_id = %(session)s AND m.owner_id = %(owner)s
        AND m.memory_id = ANY(%(memories)s::text[])
), new AS (
    SELECT i.memory_id, i.digest, i.document, row_number() OVER (ORDER BY i.n) - 1 AS rank
    FROM incoming i WHERE NOT EXISTS (SELECT 1 FROM existing e WHERE e.memory_id = i.memory_id)
), partition AS (
    INSERT INTO game_memory_partitions AS p (session_id, owner_id, next_seq)
    SELECT %(session)s, %(owner)s, count(*) FROM new
    HAVING count(*) > 0 AND count(*) <= %(capacity)s
    ON CONFLICT (session_id, owner_id) DO UPDATE SET next_seq = p.next_seq + excluded.next_seq
        WHERE p.next_seq + excluded.next_seq <= %(capacity)s
    RETURNING p.next_seq - (SELECT count(*) FROM new) AS first
), inserted AS (
    INSERT INTO game_memory_memories (session_id, owner_id, memory_id, seq, digest, document)
    SELECT %(session)s, %(owner)s, new.memory_id, partition.first + new.rank, new.digest,
        new.document
    FROM new, partition
    ON CONFLICT (session_id, owner_id, memory_id) DO NOTHING
    RETURNING 1
)
SELECT
    (SELECT count(*) FROM new),
    (SELECT count(*) FROM partition),
    (SELECT count(*) FROM inserted),
    (SELECT coalesce(array_agg(e.memory_id ORDER BY e.memory_id), '{}') FROM existing e
        JOIN incoming i USING (memory_id) WHERE e.digest <> i.digest),
    (SELECT coalesce(array_agg(e.digest ORDER BY e.memory_id), '{}') FROM existing e
        JOIN incoming i USING (memory_id) WHERE e.digest <> i.digest),
    (SELECT coalesce(array_agg(e.document ORDER BY e.memory_id), '{}') FROM existing e
        JOIN incoming i USING (memory_id) WHERE e.digest <> i.digest),
    (SELECT coalesce(array_agg(e.memory_id), '{}') FROM existing e)
"""

#: With a store-wide ``maximum_entries``: serialize every append of the schema (an advisory
#: lock held to the end of the caller's transaction; first in the lock order above). Opt-in:
#: one lock for all writers of the database is what the per-partition design otherwise
#: avoids.
LOCK_ENTRIES = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':game-memory entries'))"

#: How many memories the store holds. Sent as its own statement after ``LOCK_ENTRIES``, never
#: in the same one: under READ COMMITTED a statement reads the snapshot taken when it starts,
#: before it waits for the lock, so a count in the locking statement would miss the memories
#: the previous holder committed while it waited (and the store would pass its bound).
COUNT_ENTRIES = "SELECT count(*) FROM game_memory_memories"

#: The row of one id, read after a concurrent append of it won the race.
EXISTING = """
SELECT digest, document FROM game_memory_memories
WHERE session_id = %(session)s AND owner_id = %(owner)s AND memory_id = %(memory)s
"""

#: An owner partition's ``next_seq``, its row locked to the end of the caller's transaction:
#: no append to the partition commits until then, so ``HELD`` counts it exactly.
PARTITION_LOCKED = """
SELECT next_seq FROM game_memory_partitions
WHERE session_id = %(session)s AND owner_id = %(owner)s FOR UPDATE
"""

#: How many memories one owner partition holds (after erasures, fewer than its positions).
HELD = """
SELECT count(*) FROM game_memory_memories WHERE session_id = %(session)s AND owner_id = %(owner)s
"""

#: The rows of one owner partition from position ``seen`` on, with its ``next_seq`` and
#: ``generation``; no row when the partition is unchanged since (``seen``, ``generation``)
#: (or absent). In another generation (a forget or an erase moved it on) every row is read
#: again, and so are the partition's retractions, as rows of kind 1 (``memory_id``, and
#: the moment's JSON as ``document``); memory rows are kind 0. The limit bounds memory rows
#: only. One statement: one committed state.
OWNER_ROWS = """
WITH p AS (
    SELECT owner_id, next_seq, generation FROM game_memory_partitions
    WHERE session_id = %(session)s AND owner_id = %(owner)s
        AND (next_seq > %(seen)s OR generation <> %(generation)s)
), memories AS (
    SELECT p.owner_id, p.next_seq, p.generation, m.seq, m.memory_id, m.digest, m.document
    FROM p
    LEFT JOIN LATERAL (
        SELECT seq, memory_id, digest, document FROM game_memory_memories m
        WHERE m.session_id = %(session)s AND m.owner_id = p.owner_id
            AND m.seq >= CASE WHEN p.generation = %(generation)s THEN %(seen)s ELSE 0 END
        ORDER BY m.seq
    ) m ON true
    LIMIT %(limit)s
)
SELECT 0, * FROM memories
UNION ALL
SELECT 1, p.owner_id, p.next_seq, p.generation, NULL, r.memory_id, NULL, r.moment
FROM p JOIN game_memory_retractions r
    ON r.session_id = %(session)s AND r.owner_id = p.owner_id
WHERE p.generation <> %(generation)s
"""

#: Every partition of a session that changed since what the caller has (``owners``,
#: ``seen`` and ``generations`` are parallel arrays; an owner not listed is read whole),
#: with new rows, and the retractions of each partition read whole (see ``OWNER_ROWS``).
SESSION_ROWS = """
WITH p AS (
    SELECT p.owner_id, p.next_seq, p.generation,
        CASE WHEN p.generation = known.generation THEN known.seen ELSE 0 END AS seen,
        known.generation IS DISTINCT FROM p.generation AS whole
    FROM game_memory_partitions p
    LEFT JOIN unnest(%(owners)s::text[], %(seen)s::bigint[], %(generations)s::bigint[])
        AS known(owner_id, seen, generation) ON known.owner_id = p.owner_id
    WHERE p.session_id = %(session)s
        AND (p.next_seq > coalesce(known.seen, 0) OR known.generation IS DISTINCT FROM p.generation)
), memories AS (
    SELECT p.owner_id, p.next_seq, p.generation, m.seq, m.memory_id, m.digest, m.document
    FROM p
    LEFT JOIN LATERAL (
        SELECT seq, memory_id, digest, document FROM game_memory_memories m
        WHERE m.session_id = %(session)s AND m.owner_id = p.owner_id AND m.seq >= p.seen
        ORDER BY m.seq
    ) m ON true
    LIMIT %(limit)s
)
SELECT 0, * FROM memories
UNION ALL
SELECT 1, p.owner_id, p.next_seq, p.generation, NULL, r.memory_id, NULL, r.moment
FROM p JOIN game_memory_retractions r
    ON r.session_id = %(session)s AND r.owner_id = p.owner_id
WHERE p.whole
"""
