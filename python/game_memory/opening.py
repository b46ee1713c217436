"""``open_memory``: a save folder and a model name, opened as the one front door.

What the README example, ``game-memory serve``, every other CLI command and the demo call.
It composes ``VectorMemoryStore(FileGameMemoryStore(save), FileVectorMemoryIndex(index),
provider, reranker=GameAwareMemoryReranker(...))``, or the same front door without a
provider in lexical mode (:mod:`game_memory.models` says which). The index folder defaults
to the sibling ``<save parent>/<save name>.index``: derived data never lives in the save.

A save or index folder is opened by its real path (:func:`resolve_folder`): the links
above it that the system or the user made (macOS's ``/tmp`` and ``/var``) are followed
once here, and the stores then refuse any link on that path; on Windows the path is also
put in its extended-length form, so no path the stores derive from it meets ``MAX_PATH``.

A ``postgresql://`` URL as the save (or the index) opens the PostgreSQL backends of
``game_memory.postgres`` instead (the optional extra ``game-memory[postgres]``, imported
only then); the index then defaults to the save's database.

``maximum_entries`` is the save's store-wide bound, the one way past the file store's
default of 100,000 memories: every CLI command takes it as ``--maximum-entries N`` and the
Godot node passes its ``maximum_entries`` setting to the sidecar it launches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from game_memory.durable import fs, portable
from game_memory.durable.folder_paths import folder_text, refuse_nul
from game_memory.embedding.provider import EmbeddingProvider
from game_memory.errors import DerivedIndexError, InvalidArgumentError, PersistenceError
from game_memory.index.file_index import FileVectorMemoryIndex
from game_memory.index.protocol import VectorIndex
from game_memory.memory import VectorMemoryStore, check_provider
from game_memory.model import DiagnosticSink
from game_memory.models import ModelChoice, load_model
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.reranker import GameAwareMemoryReranker, GameAwareMemoryRerankerOptions
from game_memory.store.file_store import MAXIMUM_ENTRIES_LIMIT, FileGameMemoryStore
from game_memory.store.protocol import GameMemoryStore

__all__ = [
    "check_maximum_entries",
    "default_index_dir",
    "is_database",
    "open_memory",
    "resolve_folder",
]

_DATABASE_SCHEMES = ("postgresql://", "postgres://")
#: The derived index's default bound on one NPC's entries (``FileVectorMemoryIndex``).
_CAPACITY = 100_000
#: Whether folders get Windows' extended-length form (:func:`resolve_folder`).
_WINDOWS = os.name == "nt"


def is_database(location: str | os.PathLike[str] | None) -> bool:
    """Whether ``location`` is a PostgreSQL URL (the test lives here: the extra is optional;
    the CLI's ``--database`` is checked with it too)."""
    return isinstance(location, str) and location.lower().startswith(_DATABASE_SCHEMES)


def _require_postgres() -> None:
    try:
        import game_memory.postgres  # noqa: F401  (only whether it imports)
    except ImportError as exc:
        raise InvalidArgumentError(
            "a postgresql:// save needs the PostgreSQL backend: pip install "
            f"'game-memory[postgres]' ({exc})"
        ) from exc


def _check_location(name: str, location: object) -> None:
    """A save or index location is a folder path or a ``postgresql://`` URL: refuse
    anything else before a model is loaded or a file touched (``durable.folder_paths``)."""
    folder_text(location, name, "a folder path (str or os.PathLike) or a postgresql:// URL")


class _Closable(Protocol):
    """What :func:`_close_quietly` closes: a store, an index or a provider."""

    async def aclose(self) -> None: ...


async def _close_quietly(error: BaseException, *parts: _Closable | None) -> None:
    """Close what an ``open_memory`` that failed had opened, without hiding ``error``.

    A close that fails too (a provider whose model will not close, a store that cannot
    flush) is added to ``error`` as a note, never raised in its place: the caller must
    hear the first failure, the one that says what to fix.
    """
    for part in parts:
        if part is None:
            continue
        try:
            await part.aclose()
        except Exception as exc:
            error.add_note(
                f"while closing after that error, {type(part).__name__}.aclose() failed "
                f"too ({type(exc).__name__}: {exc})"
            )


def check_maximum_entries(value: object) -> int | None:
    """Return ``value`` as a save's store-wide bound: ``None`` (the store's default) or an
    integer from 1 to 1,000,000 (the bound of both the file and the PostgreSQL store).

    Checked here, before a model is loaded, so that every caller (the CLI included) gets
    the same message whichever store the save turns out to be.

    Raises:
        InvalidArgumentError: anything else (a bool, a float, a string, out of range).
    """
    if value is None:
        return None
    limit = MAXIMUM_ENTRIES_LIMIT
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit:
        return value
    shown = repr(value) if isinstance(value, (int, float)) else type(value).__name__
    raise InvalidArgumentError(
        f"maximum_entries must be an integer from 1 to {limit:,} (the most "
        f"memories the save may hold) or None for the store's default, not {shown}"
    )


#: The widest vectors a named model has (BGE-M3): the stored-values bound follows a raised
#: entries bound at this width, so that any model can be opened with it.
_WIDEST_VECTORS = 1_024


def _session_bounds(
    options: VectorMemoryStoreOptions | None, maximum_entries: int | None
) -> VectorMemoryStoreOptions | None:
    """``options`` with the front door's session-wide bounds raised to a save's raised
    store-wide bound (unless ``options`` set them): a status or rebuild reads a whole
    session, which ``maximum_index_entries`` (100,000 by default) bounds, and the CLI and
    the sidecar cannot set it; a save opened to hold more memories than that would
    otherwise hold sessions no status or rebuild could read."""
    current = options or VectorMemoryStoreOptions()
    if maximum_entries is None or maximum_entries <= current.maximum_index_entries:
        return options
    if "maximum_index_entries" in current.model_fields_set:
        return options  # the caller chose it
    update: dict[str, int] = {"maximum_index_entries": maximum_entries}
    if "maximum_stored_vector_values" not in current.model_fields_set:
        values = max(current.maximum_stored_vector_values, maximum_entries * _WIDEST_VECTORS)
        update["maximum_stored_vector_values"] = values
    return current.model_copy(update=update)


def _save(
    save: str | os.PathLike[str], create: bool, maximum_entries: int | None
) -> GameMemoryStore:
    if is_database(save):
        from game_memory.postgres import PostgresGameMemoryStore

        assert isinstance(save, str)
        # ``create`` maps to the schema: a reading tool refuses a database without one.
        # ``None`` keeps the database's default: no store-wide bound.
        return PostgresGameMemoryStore(save, migrate=create, maximum_entries=maximum_entries)
    if maximum_entries is None:
        return FileGameMemoryStore(save, create=create)  # its default bound, 100,000
    return FileGameMemoryStore(save, create=create, maximum_entries=maximum_entries)


def _index(
    save: str | os.PathLike[str],
    index: str | os.PathLike[str] | None,
    create: bool,
    maximum_entries: int | None,
) -> VectorIndex:
    """The derived index; its bound on one NPC's entries (``capacity``, 100,000 by default)
    is raised with a larger ``maximum_entries``: an NPC may hold as many memories as the
    save, and one past the index's bound was saved without a vector that no rebuild could
    ever write."""
    location = index if index is not None else save
    capacity = max(_CAPACITY, maximum_entries or 0)
    if is_database(location):
        from game_memory.postgres import PostgresVectorIndex

        assert isinstance(location, str)
        return PostgresVectorIndex(location, migrate=create, capacity=capacity)
    return FileVectorMemoryIndex(
        index if index is not None else default_index_dir(save), create=create, capacity=capacity
    )


def default_index_dir(save: str | os.PathLike[str]) -> Path:
    """Return the default index folder of a save: ``<parent>/<name>.index``.

    Raises:
        InvalidArgumentError: the save is the root of a file system (``/``, a Windows
            drive such as ``E:\\``), which has no parent to hold a sibling: such a save
            needs its index folder given (``index=``, the CLI's ``--index-dir``), outside
            the save.
    """
    folder = Path(os.path.abspath(os.fspath(save)))
    if not folder.name:
        raise InvalidArgumentError(
            f"the save folder {folder} is the root of a file system, which has no "
            "parent folder for the default index beside it: give the index folder "
            "(index=... in Python, --index-dir on the command line), outside the save, "
            "or put the save in a folder"
        )
    return folder.with_name(folder.name + ".index")


def resolve_folder(folder: str | os.PathLike[str]) -> Path:
    """The path a save or index folder is opened by: absolute, with the links above it
    followed (:func:`game_memory.durable.fs.resolve_ancestors`), and on Windows in the
    extended-length form (:func:`game_memory.durable.portable.extended_length`).

    Why here, once: the stores refuse any link on their path so that nothing is read or
    written through a link leading elsewhere; following the ones above the folder that the
    system or the user made (macOS's temporary folder is under the link ``/var``) before the
    stores see the path keeps that rule for the folder and everything in it, and opens
    what the user named. Windows refuses paths past 260 characters unless they carry the
    extended-length prefix; every path the stores make is their folder's path and a name,
    so prefixing the folder exempts them all.

    Raises:
        PersistenceError: a link above the folder is owned by another user, or a folder
            on the way cannot be inspected.
    """
    real = fs.resolve_ancestors(Path(os.path.abspath(os.fspath(folder))))
    if _WINDOWS:
        return Path(portable.extended_length(os.fspath(real)))
    return real


def _resolve_index(index: str | os.PathLike[str]) -> Path:
    """:func:`resolve_folder` of an index folder: what it refuses is the derived index's
    problem (``DerivedIndexError``), never the save's."""
    try:
        return resolve_folder(index)
    except PersistenceError as exc:
        raise DerivedIndexError(f"{exc} (this is the derived vector index folder)") from exc


async def open_memory(
    save: str | os.PathLike[str],
    *,
    index: str | os.PathLike[str] | None = None,
    model: str | os.PathLike[str] | EmbeddingProvider = "default",
    options: VectorMemoryStoreOptions | None = None,
    reranker: GameAwareMemoryRerankerOptions | None = None,
    diagnostics: DiagnosticSink | None = None,
    home: str | os.PathLike[str] | None = None,
    create: bool = True,
    create_index: bool | None = None,
    maximum_entries: int | None = None,
) -> VectorMemoryStore:
    """Open a save folder (or a PostgreSQL database) with the chosen model.

    Nothing is read from the save yet: the stores open their files (or connect) on first use;
    only the links above a save or index folder are followed here (:func:`resolve_folder`).

    Args:
        save: The authoritative save folder (created on the first write), or a
            ``postgresql://`` URL: the save in that database (``game_memory.postgres``).
        index: The derived index folder, or a ``postgresql://`` URL; default
            :func:`default_index_dir` of a folder (a save at the root of a file system
            has none: give one), the save's own database for a URL. A folder must not be
            inside the save.
        model: ``"default"``, ``"lexical"``, ``"hashing"``, a model folder (see
            :func:`game_memory.models.load_model`), or a provider object to use as is (the
            memory then owns and closes it). When ``"default"`` is unavailable the memory
            opens in lexical mode and :attr:`VectorMemoryStore.notice` says why.
        options: Bounds, switches and the fusion of the front door.
        reranker: The game-time reranker's weights (default weights when ``None``).
        diagnostics: Receives every :class:`MemoryVectorDiagnostic` the memory reports
            (sync or async callable). The start-up notice is not sent to it.
        home: The model cache folder for ``"default"`` (default ``$GAME_MEMORY_HOME``).
        create: Create the save folder on first use when it does not exist (what writers
            want). ``False`` for tools that only read: a missing folder, or a folder
            without a save, raises ``PersistenceError`` and nothing is created. For a
            database, ``False`` refuses one whose schema is not current (it is not migrated).
        create_index: The same for the index folder (default: as ``create``). Without it a
            missing index reads as an empty one (every memory pending) and is not created.
        maximum_entries: The most memories the whole save may hold, 1..1,000,000; ``None``
            keeps the store's default (100,000 for a save folder; no store-wide bound for
            a database, where a bound serializes every append). An append past it raises
            ``CapacityExceededError``. A save grown past the default must be opened with
            its bound from then on: reads of a session larger than the bound fail, and a
            ledger of more than twice the bound is refused as not written by this store.
            Above 100,000 it also raises ``options.maximum_index_entries`` (what a status
            or rebuild of one session reads) to it, and ``maximum_stored_vector_values``
            to match, unless ``options`` set them.

    Returns:
        The front door; close it with ``aclose()`` (or ``async with``).

    Raises:
        PersistenceError: the save folder is unsafe (a symbolic link, or a link above it
            owned by another user).
        DerivedIndexError: a link above the index folder is owned by another user.
        InvalidArgumentError: ``save``, ``index`` or ``home`` is not a path or URL (not a
            ``str`` or ``os.PathLike``, empty, or holding a NUL character), ``model`` is a
            provider class rather than an instance, the index folder is inside the save
            folder, the save is the root of a file system and no
            ``index`` is given (unless ``model="lexical"``), an option (``maximum_entries``
            included) is out of range or of the wrong type, or a URL is given without the
            ``postgres`` extra installed.
        EmbeddingUnavailableError: a model folder given as ``model`` cannot be loaded.
    """
    _check_location("save", save)
    if index is not None:
        _check_location("index", index)
    if home is not None:
        folder_text(home, "home", "the model cache folder's path (str or os.PathLike) or None")
    maximum_entries = check_maximum_entries(maximum_entries)
    if reranker is not None and not isinstance(reranker, GameAwareMemoryRerankerOptions):
        raise InvalidArgumentError(
            "reranker must be GameAwareMemoryRerankerOptions (the reranker's weights) or None, "
            f"not {type(reranker).__name__}"
        )
    if isinstance(model, os.PathLike):
        model = os.fspath(model)  # a model folder
    if isinstance(model, str):
        refuse_nul(model, "model")
    elif isinstance(model, EmbeddingProvider):
        check_provider(model, "model")  # a provider class passes the isinstance: refused
    else:
        raise InvalidArgumentError(
            "model must be 'default', 'lexical', 'hashing', a model folder or an "
            f"EmbeddingProvider, not {model!r}"
        )
    if is_database(save) or is_database(index):
        _require_postgres()  # a clear error before a model is loaded, when the extra is missing
    if not is_database(save):
        save = resolve_folder(save)
        if index is None and model != "lexical":
            index = default_index_dir(save)  # a save at a root: refused before a model loads
    if index is not None and not is_database(index):
        index = _resolve_index(index)
    choice = await load_model(model, home) if isinstance(model, str) else ModelChoice(model)
    provider = choice.provider
    try:
        authoritative = _save(save, create, maximum_entries)
    except BaseException as exc:
        await _close_quietly(exc, provider)
        raise
    try:
        derived = (
            None
            if provider is None
            else _index(
                save, index, create if create_index is None else create_index, maximum_entries
            )
        )
        return VectorMemoryStore(
            authoritative,
            derived,
            provider,
            reranker=GameAwareMemoryReranker(reranker),
            diagnostics=diagnostics,
            options=_session_bounds(options, maximum_entries),
            notice=choice.notice,
        )
    except BaseException as exc:
        await _close_quietly(exc, authoritative, provider)
        raise
