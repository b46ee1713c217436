"""Which embedding provider a model name means: the one place names become providers.

* ``"lexical"``: no provider (lexical recall).
* ``"hashing"``: the deterministic :class:`HashingEmbeddingProvider` (tests; not semantic).
* ``"default"`` (the prepared all-MiniLM-L6-v2, English) and ``"multilingual"``
  (multilingual-e5-small, about 100 languages): named models of ``game_memory.onnx``. When
  one is not prepared or cannot load, no provider and a :class:`MemoryVectorDiagnostic`
  notice saying why and what to do: a game keeps working lexically.
* any other value: a model folder (``game_memory.onnx.load_provider_from_directory``);
  failing to load it is an error, because the user asked for that folder explicitly (an
  embedding runtime that cannot be imported included: an ``EmbeddingUnavailableError``
  saying so, not an ``ImportError``).

The notice is always a ``warning``, whatever the cause (a model not prepared, a damaged
file, a runtime that cannot be imported): it reports a fallback the game keeps working
through, with recall lexical, and one code keeps one severity, so a game that shows
warnings and errors differently needs no table of causes. ``error`` is for an operation
that failed (a rebuild, for example), which this is not.

The advice in a notice is chosen by the failure's *kind* (``OnnxFailureKind``), never by
reading its message. ``game_memory.onnx`` is imported only when a model needs it, so a
lexical sidecar never pays for onnxruntime.
"""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass
from pathlib import Path

from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.embedding.provider import EmbeddingProvider
from game_memory.errors import EmbeddingUnavailableError
from game_memory.model import DiagnosticSeverity, MemoryVectorDiagnostic

__all__ = ["DEFAULT_MODEL_UNAVAILABLE", "NAMED_MODELS", "ModelChoice", "load_model"]

#: The diagnostic code of the lexical fallback when the default model is missing.
DEFAULT_MODEL_UNAVAILABLE = "embedding_model_unavailable"

#: The model names :func:`load_model` knows besides a folder path; ``default`` and
#: ``multilingual`` are ``game_memory.onnx.MODEL_NAMES`` (a test keeps them equal).
NAMED_MODELS = ("default", "multilingual", "lexical", "hashing")
_PREPARED_MODELS = ("default", "multilingual")

#: What to do, by failure kind, when the default model cannot be used.
_ADVICE = {
    # The provider's own message names the prepare command.
    "missing_model_file": "restart",
    "model_integrity": "run 'game-memory models prepare --force', then restart",
}
_OTHER_ADVICE = "run 'game-memory models prepare', then restart"
#: Reasons that already say what to do (the provider names the command, or the repair is
#: not a command: a permission, a reinstall), where the advice above would contradict them.
_REASONS_THAT_ADVISE = ("'game-memory models prepare", "read access", "reinstall game-memory")


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """A provider for a model name (``None``: lexical) and why it is less than asked."""

    provider: EmbeddingProvider | None
    notice: MemoryVectorDiagnostic | None = None


async def load_model(model: str, home: str | os.PathLike[str] | None = None) -> ModelChoice:
    """Turn a model name (or folder) into a provider; see the module docstring.

    Args:
        model: ``"default"``, ``"multilingual"``, ``"lexical"``, ``"hashing"`` or a model
            folder.
        home: The model cache folder of the named models (default ``$GAME_MEMORY_HOME``).

    Raises:
        EmbeddingUnavailableError: a model folder given as ``model`` cannot be loaded.
    """
    if model == "lexical":
        return ModelChoice(None)
    if model == "hashing":
        return ModelChoice(HashingEmbeddingProvider())
    if model not in _PREPARED_MODELS:
        try:
            from game_memory import onnx
        except ImportError as exc:  # the folder asked for cannot load: an error, in one line
            raise EmbeddingUnavailableError(
                f"cannot load the model folder {model}: {_runtime_missing(exc)}"
            ) from exc
        return ModelChoice(await _ready(await onnx.load_provider_from_directory(model)))
    try:
        from game_memory import onnx
    except ImportError as exc:  # a broken install: keep the game working, say why
        return ModelChoice(None, _notice(model, _runtime_missing(exc), None))
    try:
        provider = await onnx.load_named_provider(model, None if home is None else Path(home))
    except EmbeddingUnavailableError as exc:
        kind = getattr(exc, "kind", None)
        return ModelChoice(None, _notice(model, str(exc), getattr(kind, "value", None)))
    return ModelChoice(await _ready(provider))


async def _ready(provider: EmbeddingProvider) -> EmbeddingProvider:
    """``provider``, after one query embedded and a full garbage collection: the one-time
    costs of a model's first run and of the collection its loading makes due, paid while
    the model loads instead of inside the first answer. A game loads a model behind a
    loading screen and asks its first question later.

    Measured with the default model (fresh process each): its first query took 3.2–6.4 ms
    against 1.7–1.9 ms for the next, and 2.0–2.6 ms after a one-word query at load (which
    took 2.7–8.9 ms). Importing onnxruntime and loading a model leave the collector's
    counters such that the first recall's allocations set off a full collection of every
    object the process holds: on a 3k-memory save a 12–15 ms pause inside the first recall
    (25.1–32.1 ms, against 12.0–22.7 ms with the collection here, which adds about 10 ms to
    a load of 100–180 ms). A provider that fails the first query is returned as it is: the
    first recall reports the failure as it would have; one cancelled meanwhile is closed.
    """
    try:
        with contextlib.suppress(Exception):
            await provider.embed_query("warm up")
    except BaseException:
        await provider.aclose()  # cancelled: nobody else holds the provider to close it
        raise
    gc.collect()
    return provider


def _runtime_missing(exc: ImportError) -> str:
    """Why nothing can embed when ``game_memory.onnx`` (onnxruntime) cannot be imported, and
    the repair: preparing a model again would not bring the runtime back."""
    return (
        f"the embedding runtime cannot be imported ({exc}); reinstall game-memory (a game "
        "that bundles it: repair or reinstall the game)"
    )


def _notice(model: str, reason: str, kind: str | None) -> MemoryVectorDiagnostic:
    """The ``embedding_model_unavailable`` notice: why ``model`` is not used, what to do.

    Its severity is ``warning`` for every ``kind``: the notice reports a fallback (recall
    goes on, lexically), as docs/protocol.md promises; see the module docstring.
    """
    advice = _ADVICE.get(kind or "", _OTHER_ADVICE)
    if model != "default":
        advice = advice.replace("models prepare", f"models prepare {model}")
    if any(said in reason for said in _REASONS_THAT_ADVISE):
        advice = "restart"  # the reason says what repairs it; a second command would not
    which = "default" if model == "default" else f"{model!r}"
    message = (
        f"recall is lexical only because the {which} embedding model is unavailable: "
        f"{reason.rstrip('.')}; {advice} the server (or run the command, or open the save, "
        "again) to enable semantic recall"
    )
    return MemoryVectorDiagnostic(
        code=DEFAULT_MODEL_UNAVAILABLE,
        severity=DiagnosticSeverity.WARNING,
        message=message[:4_096],
        details=None if kind is None else {"kind": kind},
    )
