"""Build a sidecar bundle: freeze, add the model, write the manifest, check, move into place.

Everything is built in a scratch folder beside the target (``DIR/.game-memory-bundle-*``)
and moved into place only after the check passed, so an interrupted or failed build leaves
the previous bundle as it was. A folder ``DIR/game-memory`` that is not a bundle (it has no
``game-memory-bundle.json``) is never replaced.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
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

__all__ = ["BuiltBundle", "build_bundle", "folder_size"]

#: Receives one line per stage ("freezing the sidecar with PyInstaller", ...).
StageCallback = Callable[[str], None]

# Godot skips a folder holding this file: no import, not packed into the game's .pck.
_GDIGNORE = ".gdignore"


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
        BundleError: Any stage failed, ``output`` is itself a bundle, or
            ``output/game-memory`` is a folder that is not a bundle; the previous bundle,
            if any, is left untouched.
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
    report(f"preparing the model ({model})")
    choice = resolve_model_choice(model, home)
    try:
        output.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".game-memory-bundle-", dir=output))
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


def _replace(target: Path, built: Path, scratch: Path) -> None:
    """Move ``built`` to ``target``; an older bundle there is moved aside first, then deleted
    with the scratch folder (both renames stay on one file system, inside ``output``)."""
    if target.exists():
        target.rename(scratch / "previous")
    built.rename(target)
