"""What a sidecar bundle holds and where: one source of truth for the builder and the sidecar.

``game-memory bundle --output DIR`` writes one folder, ``DIR/game-memory/``::

    game-memory/
      game-memory            the frozen sidecar (game-memory.exe on Windows)
      _internal/             the Python runtime and libraries it loads (PyInstaller's folder)
      models/<name>/         the bundled embedding model (absent in a lexical bundle)
      game-memory-bundle.json   this module's BundleManifest: version, platform, model
      .gdignore              so the folder can sit inside a Godot project unimported

The manifest is how the frozen sidecar finds its model: it names the model folder relative
to the bundle, and the sidecar's entry point turns ``--model default`` into that folder's
absolute path (see ``game_memory.cli.frozen_sidecar``). Nothing depends on
``GAME_MEMORY_HOME`` or the current directory.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "BUNDLE_FOLDER",
    "MANIFEST_NAME",
    "MODELS_FOLDER",
    "BundleError",
    "BundleManifest",
    "BundledModel",
    "ModelKind",
    "bundle_platform",
    "executable_name",
]

#: The folder ``game-memory bundle`` writes inside ``--output``, and the addon looks for
#: beside the game's executable.
BUNDLE_FOLDER = "game-memory"
#: The bundle's manifest, at the top of the bundle folder.
MANIFEST_NAME = "game-memory-bundle.json"
#: Where bundled models live inside the bundle folder.
MODELS_FOLDER = "models"
_MANIFEST_BYTES = 65_536

#: What a bundle's model is: the prepared default, a model folder, or none (lexical recall).
ModelKind = Literal["default", "folder", "lexical"]


class BundleError(Exception):
    """A bundle cannot be built, or a bundle folder is missing, damaged or foreign.

    The message says what happened and what to do; the command line prints it without a
    traceback.
    """


def executable_name(system: str | None = None) -> str:
    """The sidecar's file name on ``system`` (default: this one): ``game-memory[.exe]``."""
    return "game-memory.exe" if (system or sys.platform) == "win32" else "game-memory"


def bundle_platform() -> str:
    """This machine as ``<os>-<arch>``, spelled like Godot's feature tags.

    The os is ``linux``, ``windows`` or ``macos`` and the arch ``x86_64``, ``arm64``,
    ``x86_32`` or ``arm32``, so the export plugin can compare a bundle with an export preset
    (``OS.has_feature``) before copying it.
    """
    system = {"win32": "windows", "darwin": "macos"}.get(sys.platform, sys.platform)
    if system.startswith("linux"):
        system = "linux"
    machine = platform.machine().lower()
    arch = {
        "amd64": "x86_64",
        "x64": "x86_64",
        "aarch64": "arm64",
        "arm64": "arm64",
        "i386": "x86_32",
        "i686": "x86_32",
        "x86": "x86_32",
        "armv7l": "arm32",
    }.get(machine, machine)
    return f"{system}-{arch}"


class BundledModel(BaseModel):
    """The embedding model a bundle carries.

    Attributes:
        kind: ``default`` (the prepared all-MiniLM-L6-v2), ``folder`` (a model folder given
            to ``--model PATH``) or ``lexical`` (no model: lexical recall only).
        folder: The model folder relative to the bundle (POSIX separators), or ``None`` for
            a lexical bundle.
        identity: The embedding identity the sidecar reported when the build checked it.
        bytes: The model folder's size.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ModelKind
    folder: str | None = None
    identity: str | None = None
    bytes: Annotated[int, Field(ge=0)] = 0

    @field_validator("folder")
    @classmethod
    def _inside_the_bundle(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or not path.parts or "\\" in value:
            raise ValueError(f"the model folder {value!r} must be a relative path inside it")
        return value


class BundleManifest(BaseModel):
    """``game-memory-bundle.json``: what a bundle is, written last by the builder.

    Attributes:
        format: Always ``game-memory-bundle``.
        format_version: 1.
        version: The game-memory version frozen into it (the addon's version must match).
        platform: Where it runs, as :func:`bundle_platform` spells it.
        executable: The sidecar's file name inside the bundle.
        model: The bundled model.
        freezer: The freezer and its version, e.g. ``pyinstaller 6.22.3``.
        python: The Python version frozen into it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["game-memory-bundle"] = "game-memory-bundle"
    format_version: Literal[1] = 1
    version: Annotated[str, Field(min_length=1, max_length=64)]
    platform: Annotated[str, Field(pattern=r"^[a-z0-9]+-[a-z0-9_]+$")]
    executable: Annotated[str, Field(pattern=r"^game-memory(\.exe)?$")]
    model: BundledModel
    freezer: Annotated[str, Field(min_length=1, max_length=128)]
    python: Annotated[str, Field(min_length=1, max_length=64)]

    @classmethod
    def read(cls, bundle: Path) -> BundleManifest:
        """Read the manifest of the bundle folder ``bundle``.

        Raises:
            BundleError: There is none (not a bundle, or its build did not finish), or it
                cannot be parsed; the message names the file.
        """
        path = bundle / MANIFEST_NAME
        try:
            with path.open("rb") as stream:
                data = stream.read(_MANIFEST_BYTES + 1)
        except FileNotFoundError:
            raise BundleError(
                f"{bundle} is not a game-memory bundle ({MANIFEST_NAME} is missing); build "
                "one with 'game-memory bundle --output DIR'"
            ) from None
        except OSError as exc:
            raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if len(data) > _MANIFEST_BYTES:
            raise BundleError(f"{path} is over {_MANIFEST_BYTES} bytes; build the bundle again")
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the document"
            raise BundleError(
                f"{path} is not a valid bundle manifest ({where}: {first['msg']}); build the "
                "bundle again"
            ) from exc

    def write(self, bundle: Path) -> Path:
        """Write the manifest into ``bundle`` (indented JSON, newline-terminated)."""
        path = bundle / MANIFEST_NAME
        text = self.model_dump_json(indent=2) + "\n"
        path.write_text(text, encoding="utf-8")
        return path

    def model_folder(self, bundle: Path) -> Path | None:
        """The absolute folder of the bundled model, or ``None`` in a lexical bundle."""
        if self.model.folder is None:
            return None
        return bundle.joinpath(*PurePosixPath(self.model.folder).parts).resolve()
