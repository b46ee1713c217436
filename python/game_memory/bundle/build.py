"""Build a sidecar bundle: freeze, add the model, write the manifest, check, move into place.

Everything is built in a scratch folder beside the target (``DIR/.game-memory-bundle-*``)
and moved into place only after the check passed, so a failed build, or one interrupted
before that, leaves the previous bundle as it was. A folder ``DIR/game-memory`` that is not
a bundle (it has no ``game-memory-bundle.json``) is never replaced.

Moving into place is two renames: the previous bundle into the scratch folder (as
``previous``), then the new one to ``DIR/game-memory``. A failure or a Ctrl-C between them
puts the previous one back at once. A build killed between them (``kill -9``, a power cut)
leaves no ``DIR/game-memory`` for that instant: the next build into ``DIR`` puts
``previous`` back first, before anything else, so that even a next build that fails leaves
the previous bundle in place. That next build also deletes the scratch folders killed builds
left (about 200 MB each). A build holds ``DIR/.game-memory-bundle.lock`` (an empty file,
left in place) from start to end; while one does, a second build into the same ``DIR`` is
refused, so every scratch folder a build finds while it holds the lock is abandoned.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from game_memory.bundle.check import SidecarCheck, check_sidecar
from game_memory.bundle.freeze import freeze_sidecar
from game_memory.bundle.layout import (
    BUNDLE_FOLDER,
    MANIFEST_NAME,
    BundledModel,
    BundleError,
    BundleManifest,
    bundle_platform,
    executable_name,
)
from game_memory.bundle.model_copy import copy_model, resolve_model_choice
from game_memory.durable.lock import ProcessLock
from game_memory.errors import PersistenceError, StoreBusyError

__all__ = ["BuiltBundle", "build_bundle", "folder_size"]

#: Receives one line per stage ("freezing the sidecar with PyInstaller", ...).
StageCallback = Callable[[str], None]

# Godot skips a folder holding this file: no import, not packed into the game's .pck.
_GDIGNORE = ".gdignore"
#: A build's scratch folders in ``DIR`` (hidden: Godot skips names that start with a dot).
_SCRATCH_PREFIX = ".game-memory-bundle-"
#: Held by the build writing into ``DIR``; not a scratch folder's name (no ``-`` after it).
_LOCK_NAME = ".game-memory-bundle.lock"
#: The previous bundle's name inside the scratch folder while the new one moves in.
_PREVIOUS = "previous"


@dataclass(frozen=True)
class BuiltBundle:
    """A bundle that was built and checked.

    Attributes:
        folder: ``DIR/game-memory``.
        manifest: Its manifest.
        total_bytes: Everything in the folder.
        model_bytes: The bundled model's share of it.
        check: What the sidecar reported when it was started once.
        freeze_seconds: How long freezing took.
        build_seconds: How long the whole build took.
    """

    folder: Path
    manifest: BundleManifest
    total_bytes: int
    model_bytes: int
    check: SidecarCheck
    freeze_seconds: float
    build_seconds: float


def folder_size(folder: Path) -> int:
    """The bytes of every regular file under ``folder`` (symbolic links not followed)."""
    return sum(
        path.lstat().st_size
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink()
    )


def _package_version() -> str:
    return importlib.metadata.version("game-memory")


def build_bundle(
    output: Path,
    model: str = "default",
    *,
    home: Path | None = None,
    stage: StageCallback | None = None,
) -> BuiltBundle:
    """Build ``output/game-memory``: the frozen sidecar for this platform and its model.

    Args:
        output: The folder to write the bundle into (created if missing).
        model: ``default`` (prepared first if needed), ``lexical`` or a model folder.
        home: The model cache folder for ``default`` (default ``$GAME_MEMORY_HOME``).
        stage: Receives a line as each stage starts.

    Returns:
        The bundle, checked by starting it once.

    Raises:
        BundleError: Any stage failed, ``output`` is itself a bundle,
            ``output/game-memory`` is a folder that is not a bundle, or another build into
            ``output`` is running; the previous bundle, if any, is left in place (put back
            first, if a killed build had left it aside: see the module docstring).
    """
    report = stage or (lambda _line: None)
    started = time.monotonic()
    output = output.expanduser().resolve()
    target = output / BUNDLE_FOLDER
    if (output / MANIFEST_NAME).is_file():  # --output named the bundle, not its parent
        raise BundleError(
            f"{output} is itself a game-memory bundle; give the folder that holds it "
            f"(--output {output.parent}), and the bundle there is replaced"
        )
    if target.exists() and not (target / MANIFEST_NAME).is_file():
        raise BundleError(
            f"{target} exists and is not a game-memory bundle; move it away or choose another "
            "--output"
        )
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot write into {output}: {exc.strerror or exc}") from exc
    with _building(output):
        _recover(output, target)
        return _build_locked(output, target, model, home, report, started)


def _build_locked(
    output: Path,
    target: Path,
    model: str,
    home: Path | None,
    report: StageCallback,
    started: float,
) -> BuiltBundle:
    """:func:`build_bundle` once it holds the lock and put back what a killed build left."""
    report(f"preparing the model ({model})")
    choice = resolve_model_choice(model, home)
    try:
        scratch = Path(tempfile.mkdtemp(prefix=_SCRATCH_PREFIX, dir=output))
    except OSError as exc:
        raise BundleError(f"cannot write into {output}: {exc.strerror or exc}") from exc
    try:
        report("freezing the sidecar with PyInstaller (a minute or two)")
        frozen = freeze_sidecar(scratch, embedding=choice.source is not None)
        report("copying the model into the bundle")
        relative, model_bytes = copy_model(choice, frozen.folder)
        (frozen.folder / _GDIGNORE).write_bytes(b"")
        draft = BundleManifest(
            version=_package_version(),
            platform=bundle_platform(),
            executable=executable_name(),
            model=BundledModel(kind=choice.kind, folder=relative, bytes=model_bytes),
            freezer=frozen.freezer,
            python=platform.python_version(),
        )
        draft.write(frozen.folder)
        report("starting the bundled sidecar once to check it")
        check = check_sidecar(frozen.folder, expect_model=relative is not None)
        manifest = draft.model_copy(
            update={"model": draft.model.model_copy(update={"identity": check.model})}
        )
        manifest.write(frozen.folder)
        _replace(target, frozen.folder, scratch)
    except OSError as exc:
        raise BundleError(
            f"cannot assemble the bundle in {scratch}: {exc.strerror or exc}"
        ) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return BuiltBundle(
        folder=target,
        manifest=manifest,
        total_bytes=folder_size(target),
        model_bytes=model_bytes,
        check=check,
        freeze_seconds=frozen.seconds,
        build_seconds=time.monotonic() - started,
    )


@contextlib.contextmanager
def _building(output: Path) -> Iterator[None]:
    """Hold ``output``'s build lock for the block, or refuse at once if a build holds it.

    The lock is the operating system's (see :class:`~game_memory.durable.lock.ProcessLock`),
    so a killed build holds it no longer, and what it left is known to be abandoned.

    Raises:
        BundleError: another build into ``output`` is running, or the lock cannot be taken
            (the message names the lock file).
    """
    lock = ProcessLock(output / _LOCK_NAME, timeout=0)
    try:
        lock.acquire()
    except StoreBusyError:
        raise BundleError(
            f"another game-memory bundle build is writing into {output} (it holds "
            f"{output / _LOCK_NAME}); wait for it to finish, or choose another --output"
        ) from None
    except PersistenceError as exc:  # a link, no permission, a file system without locks
        cause = exc.__cause__
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else exc
        raise BundleError(
            f"cannot take the build lock {output / _LOCK_NAME} ({reason}); build into a "
            "folder on a local disk that you can write"
        ) from exc
    try:
        yield
    finally:
        lock.release()


def _abandoned_scratch(output: Path) -> list[Path]:
    """The scratch folders in ``output`` (while its lock is held: left by killed builds),
    the last changed first: moving the bundle aside is the last change a build makes to
    its scratch folder, so of two ``previous`` (two killed swaps, the bundle put back by
    hand between them) the first is the latest bundle."""
    found = [
        path
        for path in output.glob(f"{_SCRATCH_PREFIX}*")
        if path.is_dir() and not path.is_symlink()
    ]
    return sorted(found, key=lambda path: path.lstat().st_mtime_ns, reverse=True)


def _recover(output: Path, target: Path) -> None:
    """Put back the bundle a build killed between its two renames left aside, then delete
    the scratch folders killed builds left. Call with the lock held.

    ``previous`` moves back only where ``target`` is missing: a ``previous`` beside a
    bundle in place was replaced by it (the build was killed after its swap, before its
    clean-up) and goes with its scratch folder.

    Raises:
        BundleError: the previous bundle cannot be moved back (the message says where it is).
    """
    for scratch in _abandoned_scratch(output):
        previous = scratch / _PREVIOUS
        if (previous / MANIFEST_NAME).is_file() and not os.path.lexists(target):
            try:
                previous.rename(target)
            except OSError as exc:
                raise BundleError(
                    f"cannot move the previous bundle back from {previous} to {target} (an "
                    f"earlier build was stopped while replacing it): {exc.strerror or exc}; "
                    "move it there by hand"
                ) from exc
        shutil.rmtree(scratch, ignore_errors=True)


def _replace(target: Path, built: Path, scratch: Path) -> None:
    """Move ``built`` to ``target``; an older bundle there is moved aside first, then deleted
    with the scratch folder (both renames stay on one file system, inside ``output``).

    A failure or an interrupt between the two renames moves the older bundle back before
    it propagates; a kill there leaves it as ``scratch/previous``, which the next build
    puts back (:func:`_recover`).
    """
    previous = scratch / _PREVIOUS
    if target.exists():
        target.rename(previous)
    try:
        built.rename(target)
    except BaseException:
        if previous.exists() and not target.exists():
            previous.rename(target)
        raise
