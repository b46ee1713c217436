"""The consistency checker of one store folder: every partition record against the ledger.

Meant for the ``game-memory check`` command, post-mortems and tests. It reads everything
from disk (not the caches), tolerantly (``audit.py``), under the writer lock, and names
what it finds in sentences that give the partition, the count and what to do, never a
memory's text. It tells apart:

* an **append that was never acknowledged**: the newest intent without a record (only
  the newest intent can be one: writers append the intent, then the record, one at a
  time), a torn record after a partition's last record, a torn or zero-filled ledger
  tail, an uncommitted migration batch. ``fix=True`` resolves these; nothing is lost;
* **acknowledged memories lost or unreadable**: any other intent without an intact
  record, because a file was cut short, deleted or damaged. ``fix=True`` does not touch
  them (it says so). ``accept_loss=True`` salvages the partition (``salvage.py``): every
  intact record is kept, the damaged bytes are moved aside, and the lost ids are recorded;
* memories without an intent (the count is too low; ``fix=True`` adds the intents), and
  damaged ledger records (``accept_loss=True`` rebuilds the ledger from the partitions).

Retractions (``forget``) are checked the same way against the retraction ledger, per
partition and by identity (the memory each retracts), not only by count: a retraction log
segment that is another partition's (copied, swapped or renamed) is damage, which
``fix=True`` never confirms by adding intents and ``accept_loss=True`` moves aside
(``survey.py``). A damaged pack that holds no intact record of its session (one copied
from another session's folder) is named on its own. An erase or a compaction left
unfinished (``rewrite.json``) is reported alone: ``fix=True`` finishes it first (as any
writer would), then checks the rest. A journal that must not be applied (an old copy put
back, or an earlier release's in a save this one finished an operation in:
``journal_traces.py``) is reported alone too, and ``fix=True`` sets it aside, with the
staged files (``*.new``) of the partition it names. If it is an erase's, the memories it
names that the ledger no longer counts get no intent from that check: the erase may have
been committed (an earlier release interrupted in it), or the journal may be an old copy
and they memories learned again, and nothing in the save tells the two apart. Nothing is
erased either (that would destroy them in the second case): the check names them
(:func:`_withheld_problems`), to be erased again if they were erased; the next
``check --fix`` (no journal names them any longer) gives them their intents.

Opening the save (``StoreEngine.settle``, at every store object's first use, this check's
included) rolls back a batch that never committed and reconciles a killed group commit
before the check looks: the report names what it did, among the repairs, so a plain check
never calls a save consistent without saying that the open changed it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError
from game_memory.model import StoreCheckReport
from game_memory.store.audit import DamagedFile, OwnerAudit, SessionAudit
from game_memory.store.engine import Settled, StoreEngine
from game_memory.store.erasing import held_partitions
from game_memory.store.journal import RolledBack
from game_memory.store.journal_traces import StaleJournalError
from game_memory.store.ledger import RECORD_BYTES, LedgerEntry
from game_memory.store.read_files import READ_FOLDER, remove_unheld_read_files, unheld_read_files
from game_memory.store.rewrite_journal import Rewrite, mismatch
from game_memory.store.rewriting import staged_files
from game_memory.store.salvage import new_damaged_folder, salvage
from game_memory.store.survey import Survey, survey_store

__all__ = ["check_store"]

_LISTED_IDS = 50


def problems_of(survey: Survey, engine: StoreEngine, *, list_ids: bool) -> list[str]:
    """The survey's problems as sentences (partition, count, what to do; never a text)."""
    problems = list(survey.unreadable)
    problems.extend(_unknown_problems(survey))
    by_owner: dict[tuple[str, str], list[int]] = {}
    for index, owner in survey.lost.items():
        by_owner.setdefault((owner.session_hash, owner.owner_hash), []).append(index)
    for session in survey.sessions.values():
        for owner in session.owners.values():
            if owner.owner_hash in session.unknown_owners:
                continue  # reported as not checked
            lost = by_owner.get((owner.session_hash, owner.owner_hash), [])
            if not lost and not owner.damaged:
                continue
            problems.append(_partition_problem(survey, engine, session, owner, lost, list_ids))
        problems.extend(_unattributed_problems(engine, session))
    if survey.pending is not None:
        entry = survey.intents[survey.pending]
        assert entry is not None
        owner = survey.owner(entry)
        problems.append(
            f"ledger intent {survey.pending} (the newest) has no record in "
            f"{owner.name(survey.session_id(owner))}: an append that was never acknowledged "
            "(a pending append: its writer stopped before finishing it); check --fix drops it"
        )
    if survey.batch is not None:
        count = len(survey.intents) - survey.batch
        what = f"({count} intents, {len(survey.uncommitted)} of them without their record yet)"
        problems.append(
            f"{engine.journal.path} marks an append_many batch that never committed {what}: "
            "it was never acknowledged; check --fix rolls it back (the batch is absent, as "
            "if never sent)"
            if survey.appended_batch
            else f"{engine.journal.path} marks an uncommitted migration batch {what}; check "
            "--fix rolls it back, and the next open migrates the legacy documents again"
        )
    for session in survey.sessions.values():
        for owner in session.owners.values():
            if (
                owner.torn is not None
                and not owner.damaged
                and survey.known(owner.session_hash, owner.owner_hash)
            ):
                path, end, torn = owner.torn
                problems.append(
                    f"{_short(engine, path)} ends with {torn} bytes of a record that was never "
                    "acknowledged "
                    f"(after byte {end:,}): a torn record; check --fix cuts them"
                )
    if survey.unwritten:
        problems.append(
            f"{engine.ledger.path} ends with {survey.unwritten} bytes of an intent that was "
            "never written whole (a torn record); check --fix cuts them"
        )
    problems.extend(_retraction_problems(survey, engine))
    unlisted: Counter[tuple[str, str]] = Counter()
    owners: dict[tuple[str, str], OwnerAudit] = {}
    for owner, _memory_hash in survey.unlisted:
        key = (owner.session_hash, owner.owner_hash)
        unlisted[key] += 1
        owners[key] = owner
    # With damaged intents in the ledger, a memory "without an intent" may be one whose
    # intent is damaged: --fix cannot tell, the salvage's rebuilt ledger gives it one.
    adds = (
        "check --fix --accept-loss rebuilds the ledger, which gives them one"
        if survey.damaged_intents
        else "check --fix adds the intents"
    )
    for key, count in sorted(unlisted.items()):
        owner = owners[key]
        problems.append(
            f"{owner.name(survey.session_id(owner))}: {count} memor"
            f"{'y has' if count == 1 else 'ies have'} no ledger intent (the store's count is "
            f"too low); {adds}"
        )
    for entry in survey.repeated:
        problems.append(f"memory {entry.memory_hash[:12]}… has more than one ledger intent")
    damaged = survey.damaged_intents
    if damaged:
        shown = ", ".join(str(index) for index in damaged[:10])
        more = ", …" if len(damaged) > 10 else ""
        problems.append(
            f"{engine.ledger.path} is corrupt at record{'s' if len(damaged) > 1 else ''} "
            f"{shown}{more}: the memories those intents name cannot be known. check --fix "
            "--accept-loss rebuilds the ledger from the partitions"
        )
    return problems


def _unattributed_problems(engine: StoreEngine, session: SessionAudit) -> list[str]:
    """The damaged packs no partition's sentence names: those without one intact record of
    the session (a pack copied from another session's folder, or unreadable throughout).
    A read of the session fails closed on such a pack, so check must say so too."""
    problems = []
    for path, scanned in sorted(session.files.items()):
        if scanned.pack and not scanned.kept:
            problems.append(
                f"{_short(engine, path)} holds no intact record of its session, only damage "
                f"at {'; '.join(_spans(scanned))}: a read of the session fails closed on it. "
                f"Nothing was dropped: {_SALVAGE_ADVICE}"
            )
    return problems


def _unknown_problems(survey: Survey) -> list[str]:
    """What was not checked because it could not be read (named above): never loss."""
    after = (
        "neither counted as lost nor dropped by --fix. Fix what is named above (a "
        "link to replace by the real folder or file, a permission), or restore the save "
        "from a backup, then check again"
    )
    if not survey.listed:
        count = len(survey.intents)
        return [
            f"no partition was checked, since the data folder could not be read: the ledger's "
            f"{count:,} intent{'' if count == 1 else 's'} {'is' if count == 1 else 'are'} "
            f"unknown, {after}"
        ]
    problems = []
    for session_hash in sorted(survey.unknown_sessions):
        count = sum(n for (s, _o), n in survey.unknown.items() if s == session_hash)
        problems.append(
            f"session s-{session_hash[:12]}… was not checked, since a file or folder of it "
            f"could not be read: its {count:,} ledger intent{'' if count == 1 else 's'} "
            f"{'is' if count == 1 else 'are'} unknown, {after}"
        )
    for session in survey.sessions.values():
        for owner_hash in sorted(session.unknown_owners):
            count = survey.unknown[(session.session_hash, owner_hash)]
            problems.append(
                f"session s-{session.session_hash[:12]}…, owner o-{owner_hash[:12]}… was not "
                f"checked, since a file of it could not be read: its {count:,} ledger "
                f"intent{'' if count == 1 else 's'} {'is' if count == 1 else 'are'} unknown, "
                f"{after}"
            )
    return problems


def _retraction_problems(survey: Survey, engine: StoreEngine) -> list[str]:
    """The retraction log's and the retraction ledger's problems, as sentences."""
    problems: list[str] = []
    for (session_hash, owner_hash), count in sorted(survey.lost_retractions.items()):
        owner = survey.owner(LedgerEntry(session_hash, owner_hash, ""))
        problems.append(
            f"{owner.name(survey.session_id(owner))}: {count} acknowledged retraction"
            f"{'' if count == 1 else 's'} (forget) lost or unreadable; {len(owner.retractions)} "
            f"intact. Nothing was dropped: {_SALVAGE_ADVICE}"
        )
    if survey.pending_retraction is not None:
        problems.append(
            f"retraction intent {survey.pending_retraction} (the newest) has no record: a "
            "forget that was never acknowledged (its writer stopped before finishing it); "
            "check --fix drops it"
        )
    for session in survey.sessions.values():
        for owner in session.owners.values():
            if owner.retraction_torn is not None and not owner.retractions_damaged:
                path, end, torn = owner.retraction_torn
                problems.append(
                    f"{_short(engine, path)} ends with {torn} bytes of a retraction that was "
                    f"never acknowledged (after byte {end:,}): a torn record; check --fix cuts them"
                )
            elif (
                owner.retractions_damaged
                and not survey.lost_retractions.get((owner.session_hash, owner.owner_hash))
                and (owner.session_hash, owner.owner_hash) not in survey.foreign_retractions
            ):
                problems.append(
                    f"{owner.name(session.session_id)}: its retraction log is damaged, though no "
                    f"acknowledged retraction is lost. Nothing was dropped: {_SALVAGE_ADVICE}"
                )
    for (session_hash, owner_hash), paths in sorted(survey.foreign_retractions.items()):
        owner = survey.sessions[session_hash].owner(owner_hash)
        shown = ", ".join(_short(engine, path) for path in paths)
        plural = len(paths) > 1
        problems.append(
            f"{owner.name(survey.session_id(owner))}: {shown} hold{'' if plural else 's'} "
            "retractions that no retraction intent of this owner names: another owner's "
            "retraction log, copied, swapped or renamed (a retraction names no owner, so "
            f"none of {'their' if plural else 'its'} retractions can be trusted). A recall "
            "applies them to this owner; check --fix does not confirm them. Nothing was "
            f"dropped: {_SALVAGE_ADVICE} (the memories they retract are recalled again, and "
            "the owner's own retractions found nowhere else are given up)"
        )
    for (session_hash, owner_hash), hashes in sorted(survey.unlisted_retractions.items()):
        count = len(hashes)
        owner = survey.sessions[session_hash].owner(owner_hash)
        adds = (
            "check --fix --accept-loss rebuilds the retraction ledger, which gives them one"
            if survey.damaged_retraction_intents
            else "check --fix adds the intents"
        )
        problems.append(
            f"{owner.name(survey.session_id(owner))}: {count} retraction"
            f"{' has' if count == 1 else 's have'} no intent in the retraction ledger; {adds}"
        )
    if survey.retraction_unwritten:
        problems.append(
            f"{engine.retraction_ledger.path} ends with {survey.retraction_unwritten} bytes of "
            "an intent that was never written whole (a torn record); check --fix cuts them"
        )
    damaged = survey.damaged_retraction_intents
    if damaged:
        shown = ", ".join(str(index) for index in damaged[:10])
        problems.append(
            f"{engine.retraction_ledger.path} is corrupt at record"
            f"{'s' if len(damaged) > 1 else ''} {shown}{', …' if len(damaged) > 10 else ''}; "
            "check --fix --accept-loss rebuilds it from the retraction logs"
        )
    return problems


def _partition_problem(
    survey: Survey,
    engine: StoreEngine,
    session: SessionAudit,
    owner: OwnerAudit,
    lost: list[int],
    list_ids: bool,
) -> str:
    where = owner.name(session.session_id)
    causes: list[str] = []
    for path, scanned in sorted(session.files.items()):
        if not any(kept[0] == owner.owner_hash for kept in scanned.kept) and not (
            path.rsplit("/", 1)[-1].startswith(f"o-{owner.owner_hash}")
        ):
            continue
        causes.extend(_file_causes(engine, path, scanned))
    for path in session.gaps:
        name = path.rsplit("/", 1)[-1]
        if name.startswith(f"o-{owner.owner_hash}") or name.startswith("p-"):
            causes.append(f"{_short(engine, path)} is missing from its series")
    if not causes:
        causes.append("their records are gone: a file was cut short or deleted")
    count = len(lost)
    if count:
        head = (
            f"{where}: {count} acknowledged memor{'y is' if count == 1 else 'ies are'} lost or "
            f"unreadable; {len(owner.memories)} intact"
        )
    else:
        head = f"{where}: damaged, though no acknowledged memory is lost"
    sentence = f"{head} ({'; '.join(causes)})"
    if list_ids and count:
        sentence += "; " + _lost_ids(survey, owner, lost)
    return sentence + f". Nothing was dropped: {_SALVAGE_ADVICE}"


def _file_causes(engine: StoreEngine, path: str, scanned: DamagedFile) -> list[str]:
    """A damaged file's first three damaged stretches (and how many more) as clauses."""
    causes = [
        f"{_short(engine, path)} is corrupt at {span}" for span in _spans(scanned, more=False)
    ]
    if len(scanned.ranges) > 3:
        more = len(scanned.ranges) - 3
        causes.append(f"{_short(engine, path)} has {more} more corrupt stretches")
    return causes


def _spans(scanned: DamagedFile, *, more: bool = True) -> list[str]:
    """``bytes A–B (reason)`` for a file's first three damaged stretches (then how many
    more, if ``more``)."""
    spans = [
        f"{f'bytes {offset:,}–{offset + length:,}' if length else 'its end'} ({reason})"
        for offset, length, reason in scanned.ranges[:3]
    ]
    if more and len(scanned.ranges) > 3:
        spans.append(f"{len(scanned.ranges) - 3} more stretches")
    return spans


def _short(engine: StoreEngine, path: str) -> str:
    """A store file's path relative to the save folder (the messages stay readable)."""
    return os.path.relpath(path, engine.root)


_SALVAGE_ADVICE = (
    "check --fix --accept-loss keeps every intact memory, moves the damaged bytes aside into "
    ".game-memory/damaged/ and records the lost ids; or restore the save from a backup"
)


def _lost_ids(survey: Survey, owner: OwnerAudit, lost: list[int]) -> str:
    known: list[str] = []
    hashes: list[str] = []
    for index in lost:
        entry = survey.intents[index]
        assert entry is not None
        memory_id = owner.readable_ids.get(entry.memory_hash)
        if memory_id is not None:
            known.append(repr(memory_id))
        else:
            hashes.append(entry.memory_hash[:16] + "…")
    parts = []
    if known:
        parts.append("lost ids: " + ", ".join(known[:_LISTED_IDS]))
    if hashes:
        parts.append("ids known only by their SHA-256: " + ", ".join(hashes[:_LISTED_IDS]))
    more = max(0, len(known) - _LISTED_IDS) + max(0, len(hashes) - _LISTED_IDS)
    return "; ".join(parts) + (f" and {more} more" if more else "")


def _repair(engine: StoreEngine, survey: Survey) -> list[str]:
    """The repairs that cannot lose an acknowledged memory (after recovery)."""
    repairs: list[str] = []
    lost_owners = {(o.session_hash, o.owner_hash) for o in survey.lost.values()}
    for session in survey.sessions.values():
        for owner in session.owners.values():
            key = (owner.session_hash, owner.owner_hash)
            if not survey.known(*key):
                continue  # nothing is cut where a file could not be read
            if owner.torn is not None and not owner.damaged and key not in lost_owners:
                path, end, _torn = owner.torn
                engine.cut_tail(path, end)
                repairs.append(f"cut the torn tail of {path} at byte {end:,}")
            if owner.retraction_torn is not None and not owner.retractions_damaged:
                path, end, _torn = owner.retraction_torn
                engine.cut_tail(path, end)
                repairs.append(f"cut the torn tail of {path} at byte {end:,}")
    if survey.unlisted and not survey.damaged_intents:
        entries = [
            LedgerEntry(owner.session_hash, owner.owner_hash, memory_hash)
            for owner, memory_hash in survey.unlisted
        ]
        engine.ledger.append(entries, first_index=engine.ledger.count())
        count = len(entries)
        repairs.append(f"added {count} missing ledger intent{'s' if count > 1 else ''}")
    if survey.unlisted_retractions and not survey.damaged_retraction_intents:
        # Only retractions the survey found to be the partition's own (see survey.py):
        # never one of another partition's log, which a salvage moves aside instead.
        entries = [
            LedgerEntry(session_hash, owner_hash, memory_hash)
            for (session_hash, owner_hash), hashes in sorted(survey.unlisted_retractions.items())
            for memory_hash in hashes
        ]
        engine.retraction_ledger.append(entries, first_index=engine.retraction_ledger.count())
        count = len(entries)
        repairs.append(f"added {count} missing retraction intent{'s' if count > 1 else ''}")
    return repairs


def _stale_journal(engine: StoreEngine) -> StaleJournalError | None:
    """The save's first journal that is an old copy of a finished operation's (refused,
    never applied: ``journal_traces.py``), if any. Every read and write of the save fails
    on it until it is set aside, so the check reports it first and surveys nothing."""
    try:
        rewrite = engine.rewrites.read()
        if rewrite is not None:
            # As the writer that would finish it checks it (``finish_rewrite``): a journal
            # with no trace to judge it is compared with the save's ledgers.
            problem = mismatch(rewrite, engine.ledger, engine.retraction_ledger)
            if problem is not None:
                return StaleJournalError(engine.rewrites.path, problem)
        engine.journal.read()
    except StaleJournalError as exc:
        return exc
    return None


def _set_aside(engine: StoreEngine, stale: StaleJournalError, named: Rewrite | None) -> str:
    """Move an old journal into a new ``damaged/<UTC time>/`` folder (it holds no memory;
    kept there for a post-mortem), then the staged files of the partition it names
    (``named``: what it names, if it is a rewrite's; :func:`_set_aside_staged`); the
    repair, as a sentence.

    The journal goes first: it is what could act. A crash between the two leaves staged
    files that nothing acts on (the next rewrite of their partition starts by removing
    them, and a journal put back with them is refused), which ``compact`` removes.

    Raises:
        PersistenceError: a file could not be moved.
    """
    folder = new_damaged_folder(engine.data)
    try:
        os.replace(stale.journal, folder / stale.journal.name)
    except OSError as exc:
        raise PersistenceError(
            f"could not move {stale.journal} aside: {exc.strerror or exc}"
        ) from exc
    fs.fsync_directory(folder)
    fs.fsync_directory(stale.journal.parent)
    staged = 0 if named is None else _set_aside_staged(engine, named, folder)
    sentence = (
        f"moved {stale.journal.name}, a journal that cannot be applied safely "
        f"({stale.reason}), to {folder}: it was never applied, and holds no memory"
    )
    if staged:
        sentence += (
            f"; moved the {staged} staged file{'s' if staged > 1 else ''} (*.new) of the "
            "partition it names there too: never switched in, so the partition's own files "
            "are as they were"
        )
    if named is not None and named.erases and named.generation == 0:
        sentence += (
            f". If an earlier release was interrupted in this erase ({_scope(named)}), "
            "what it names is still in the save: erase it again"
        )
    return sentence


def _set_aside_staged(engine: StoreEngine, named: Rewrite, folder: Path) -> int:
    """Move the staged files (``*.new``) of the partition a journal set aside names into
    ``folder``, as ``s-<session hash>.<name>``, and fsync both folders; how many. They
    would otherwise sit where a later journal's switch renames them over the partition's
    files (``rewriting.staged_files``). Named as a salvage names what it sets aside, so a
    later erase of the partition deletes them too (``copies.py``): they hold its records.

    Raises:
        PersistenceError: the session's folder could not be listed, or a file moved.
    """
    moved = 0
    paths = staged_files(engine.data, named)
    for path in paths:
        try:
            os.replace(path, folder / f"{path.parent.name}.{path.name}")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise PersistenceError(f"could not move {path} aside: {exc.strerror or exc}") from exc
        moved += 1
    if moved:
        fs.fsync_directory(folder)
        fs.fsync_directory(paths[0].parent)
    return moved


def _rewrite_named(engine: StoreEngine, stale: StaleJournalError) -> Rewrite | None:
    """What a refused rewrite journal about to be set aside names (``None`` for the batch
    journal): ``check`` must know which partition's staged files go with it, and which
    memories an erase journal names.

    Raises:
        PersistenceError: the journal is corrupt (it was read just before, so only if it
            changed since).
    """
    if stale.journal != engine.rewrites.path:
        return None
    return engine.rewrites.named()


def _withhold(survey: Survey, erases: Sequence[Rewrite]) -> dict[tuple[str, str], set[str]]:
    """Take out of ``survey.unlisted`` (memories without an intent, which ``--fix`` would
    give one) those an erase journal this check set aside names, by partition.

    Why: that erase may have been committed (an earlier release interrupted in it, after
    it rewrote the ledger), and an intent would un-erase them; or the journal is an old
    copy, and they are memories learned again. Nothing in the save tells the two apart,
    so neither is done: they stay as they are, without an intent, and are named
    (:func:`_withheld_problems`). The next ``check --fix`` sets no journal aside, so it
    gives them their intents."""
    withheld: dict[tuple[str, str], set[str]] = {}
    if not erases:
        return withheld
    kept: list[tuple[OwnerAudit, str]] = []
    for owner, memory_hash in survey.unlisted:
        key = (owner.session_hash, owner.owner_hash)
        if any(erase.covers(*key, memory_hash) for erase in erases):
            withheld.setdefault(key, set()).add(memory_hash)
        else:
            kept.append((owner, memory_hash))
    survey.unlisted = kept
    return withheld


def _withheld_problems(survey: Survey, withheld: dict[tuple[str, str], set[str]]) -> list[str]:
    """The memories of :func:`_withhold`, as sentences that say what to do."""
    problems: list[str] = []
    for (session_hash, owner_hash), hashes in sorted(withheld.items()):
        owner = survey.sessions[session_hash].owner(owner_hash)
        one = len(hashes) == 1
        it, memories = ("it", "the memory") if one else ("them", "the memories")
        problems.append(
            f"{owner.name(survey.session_id(owner))}: {len(hashes)} "
            f"{'memory has' if one else 'memories have'} no ledger intent, and the erase "
            f"journal check --fix set aside names {it}: check --fix gave {it} none and "
            "erased nothing, because that erase may have been committed and left unfinished, "
            f"or the journal may be an old copy and {memories} learned again, which the save "
            f"cannot tell apart. Erase {it} again if {'it was' if one else 'they were'} "
            f"erased; if not, check --fix again gives {it} {'its' if one else 'their'} "
            f"intent{'' if one else 's'}"
        )
    return problems


def _unheld_read_files(
    engine: StoreEngine, survey: Survey, *, fix: bool, damaged: bool
) -> tuple[list[str], list[str]]:
    """Read files of partitions the save no longer holds (``read_files.unheld_read_files``:
    what an erase by a build that predates read files leaves; they hold the erased
    memories' ids and text): removed with ``fix`` (a repair), else reported (a problem).

    ``damaged``: this check found the save damaged (before or after its repairs). Then
    they are only reported, never removed: they may be all that is left of memories the
    save lost, and a save's damage is repaired first. ``([], [])`` when there are none, or
    when the survey could not read which partitions the save holds (a ledger record or a
    folder unreadable: the problems above say why).
    """
    if _unknowable(survey):
        return [], []
    try:
        held = held_partitions(engine)
        if fix and not damaged:
            removed = remove_unheld_read_files(engine.data, held)
            if not removed:
                return [], []
            return [
                f"removed {removed} read file{'s' if removed > 1 else ''} of NPCs the save no "
                "longer holds (derived files an erase by an earlier release left; they held "
                "the erased memories' ids and text)"
            ], []
        unheld = unheld_read_files(engine.data, held)
    except PersistenceError:
        return [], []
    if not unheld:
        return [], []
    remedy = (
        "check --fix removes them once the damage above is repaired (it removes none from a "
        "damaged save)"
        if damaged
        else "check --fix or compact removes them"
    )
    return [], [
        f"{len(unheld)} read file{'s' if len(unheld) > 1 else ''} of NPCs the save no longer "
        f"holds {'are' if len(unheld) > 1 else 'is'} left in {engine.data / READ_FOLDER} "
        "(derived files an erase by an earlier release left; they may hold the erased "
        f"memories' ids and text): {remedy}"
    ]


def _damaged(survey: Survey) -> bool:
    """Whether the survey found the save damaged, or could not read all of it."""
    return survey.needs_salvage or bool(survey.unreadable) or _unknowable(survey)


def _unknowable(survey: Survey) -> bool:
    """Whether the survey could not read which partitions the save holds: a ledger, a
    ledger record, or a folder it could not read."""
    return (
        not (survey.listed and survey.ledger_read and survey.retraction_ledger_read)
        or bool(survey.damaged_intents or survey.damaged_retraction_intents)
        or bool(survey.unknown_sessions or survey.unknown)
    )


def _settled(settled: Settled) -> list[str]:
    """What opening the save did before the check looked (``StoreEngine.settle``), as
    repairs: it changed the save, and the check must say so."""
    repairs = [
        f"{_rolled_back(rolled)}, when the save was opened (before this check)"
        for rolled in settled.batches
    ]
    if settled.dropped:
        plural = "s" if settled.dropped > 1 else ""
        repairs.append(
            f"dropped {settled.dropped} pending ledger intent{plural} of appends a killed "
            "writer never acknowledged, when the save was opened (before this check)"
        )
    if settled.added:
        plural = "s" if settled.added > 1 else ""
        repairs.append(
            f"added {settled.added} missing ledger intent{plural} (of memories a power loss "
            "left without one), when the save was opened (before this check)"
        )
    return repairs


def _rolled_back(rolled: RolledBack) -> str:
    """A rolled-back batch in words: what it was and how many intents it had written."""
    count = f"{rolled.intents} intent{'' if rolled.intents == 1 else 's'}"
    if rolled.appended:
        return (
            f"rolled back an append_many batch that never committed ({count}; never "
            "acknowledged: the batch is absent, as if never sent)"
        )
    return f"rolled back an uncommitted migration batch ({count}; the next open migrates again)"


def _recover(engine: StoreEngine) -> list[str]:
    """Run the writers' recovery and say what it did."""
    repairs: list[str] = []
    unwritten = engine.ledger.unwritten_tail()
    retraction_unwritten = engine.retraction_ledger.unwritten_tail()
    batch = engine.journal.read()
    uncommitted = batch is not None
    appended = engine.journal.last_version == 2
    rewrite = engine.rewrites.read()
    before = engine.ledger.count() - unwritten // RECORD_BYTES
    retractions = engine.retraction_ledger.count() - retraction_unwritten // RECORD_BYTES
    engine.reconciled = (0, 0)
    engine.recover(force=True)
    reconciled_adds = engine.reconciled[1]
    for ledger, cut in (
        (engine.ledger, unwritten),
        (engine.retraction_ledger, retraction_unwritten),
    ):
        if cut:
            repairs.append(f"cut {cut} bytes of a torn record off {ledger.path}")
    if batch is not None:
        repairs.append(_rolled_back(RolledBack(appended, max(0, before - batch[0]))))
    if rewrite is not None:
        repairs.append(f"finished {describe_rewrite(rewrite)}")
    dropped = before - engine.ledger.count() + reconciled_adds
    if dropped > 0 and not uncommitted and rewrite is None:
        repairs.append(f"dropped {dropped} pending ledger intent (an append never acknowledged)")
    if reconciled_adds:
        plural = "s" if reconciled_adds > 1 else ""
        repairs.append(f"added {reconciled_adds} missing ledger intent{plural}")
    dropped = retractions - engine.retraction_ledger.count()
    if dropped > 0 and rewrite is None:
        repairs.append(f"dropped {dropped} pending retraction intent (a forget never acknowledged)")
    return repairs


def describe_rewrite(rewrite: Rewrite) -> str:
    """An unfinished rewrite in words (hashes shortened; never an id or a text)."""
    what = "an erase" if rewrite.erases else "a compaction"
    writer = "its writer (an earlier release)" if rewrite.generation == 0 else "its writer"
    return f"{what} {_scope(rewrite)} that {writer} did not finish"


def _scope(rewrite: Rewrite) -> str:
    """What a rewrite covers, in words (hashes shortened)."""
    if rewrite.owner_hash is None:
        return f"of session s-{rewrite.session_hash[:12]}…"
    owner = f"owner o-{rewrite.owner_hash[:12]}… in session s-{rewrite.session_hash[:12]}…"
    if rewrite.memory_hashes is not None:
        count = len(rewrite.memory_hashes)
        return f"of {count} memor{'y' if count == 1 else 'ies'} of {owner}"
    return f"of {owner}"


def check_store(
    engine: StoreEngine, *, fix: bool = False, accept_loss: bool = False, list_ids: bool = False
) -> StoreCheckReport:
    """Check (and optionally repair) the store; see the module docstring.

    Holds the writer lock throughout, so the report describes one consistent state: an
    append of another process waits until the check is done (readers are not blocked).
    ``accept_loss`` implies ``fix``.
    """
    engine.layout.guard()
    with engine.locked():
        engine.layout.guard()
        repairs = _settled(engine.take_settled())
        erases: list[Rewrite] = []  # the erase journals set aside
        stale = _stale_journal(engine)
        for _ in range(2):  # two journals at most: the batch's and the rewrite's
            if stale is None or not (fix or accept_loss):
                break
            named = _rewrite_named(engine, stale)
            repairs.append(_set_aside(engine, stale, named))
            erases.extend([named] if named is not None and named.erases else [])
            stale = _stale_journal(engine)
        if stale is not None:
            return StoreCheckReport(
                memories=engine.ledger.count(),
                ledger_entries=engine.ledger.count(),
                problems=(str(stale),),
                repairs=tuple(repairs),
            )
        rewrite = engine.rewrites.read()
        if rewrite is not None and not (fix or accept_loss):
            return StoreCheckReport(
                memories=engine.ledger.count(),
                ledger_entries=engine.ledger.count(),
                problems=(
                    f"the save holds {describe_rewrite(rewrite)} (rewrite.json; it is committed "
                    "and only needs finishing): the next write, a read, or check --fix "
                    "finishes it. Check again then",
                ),
                repairs=tuple(repairs),
            )
        unrecovered: PersistenceError | None = None
        if fix or accept_loss:
            try:
                repairs.extend(_recover(engine))
            except PersistenceError as exc:
                # The salvage repairs what recovery cannot read past (a damaged newest
                # intent); --fix alone reports what the survey finds and repairs nothing,
                # rather than end in the recovery's one line with no report.
                if not accept_loss:
                    unrecovered = exc
        survey = survey_store(engine)
        withheld = _withhold(survey, erases)
        damaged = _damaged(survey)
        if unrecovered is None and (fix or accept_loss):
            repaired = _repair(engine, survey)
            repairs.extend(repaired)
            if repaired:  # what the salvage sees is what the repairs left
                survey = survey_store(engine)
                withheld = _withhold(survey, erases)
            if accept_loss and survey.needs_salvage and not survey.unreadable:
                salvaged = salvage(engine, survey)
                repairs.extend(salvaged)
                if salvaged:
                    survey = survey_store(engine)
                    withheld = _withhold(survey, erases)
        problems = problems_of(survey, engine, list_ids=list_ids)
        problems.extend(_withheld_problems(survey, withheld))
        swept, unheld = _unheld_read_files(
            engine,
            survey,
            fix=unrecovered is None and (fix or accept_loss),
            damaged=damaged or unrecovered is not None or _damaged(survey),
        )
        repairs.extend(swept)
        problems.extend(unheld)
        if unrecovered is not None:
            problems.append(
                f"check --fix could not recover the save, so it repaired nothing: {unrecovered}"
            )
        elif fix and not accept_loss and survey.needs_salvage:
            problems.append(
                "check --fix repaired none of the damage above: it never drops an "
                "acknowledged memory. Run check --fix --accept-loss to salvage the save"
            )
    return StoreCheckReport(
        memories=survey.memories,
        ledger_entries=survey.valid_intents,
        problems=tuple(problems),
        repairs=tuple(repairs),
    )
