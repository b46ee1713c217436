"""The failures of the in-process ONNX providers, each with a stable kind.

Every failure of a provider is an :class:`OnnxEmbeddingError` (an
``EmbeddingUnavailableError``, so recall falls back to lexical search) carrying an
:class:`OnnxFailureKind`. Two kinds get a subclass so that generic handlers recognise
them without knowing about ONNX::

    EmbeddingUnavailableError
    └── OnnxEmbeddingError              kind: any OnnxFailureKind
        ├── OnnxEmbeddingTimeoutError   TIMEOUT, QUEUE_TIMEOUT (also EmbeddingTimeoutError)
        └── OnnxEmbeddingBusyError      QUEUE_FULL (also StoreBusyError)

    GameMemoryError
    └── ModelPreparationError           ``game-memory models prepare`` failed (a stage)

Build errors with :func:`onnx_error`, which picks the subclass for the kind.
"""

from __future__ import annotations

import enum

from game_memory.errors import (
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    GameMemoryError,
    StoreBusyError,
)

__all__ = [
    "ModelPreparationError",
    "OnnxEmbeddingBusyError",
    "OnnxEmbeddingError",
    "OnnxEmbeddingTimeoutError",
    "OnnxFailureKind",
    "onnx_error",
]


class OnnxFailureKind(enum.Enum):
    """Why an ONNX provider operation failed (the reference's order, ``NONE`` left out)."""

    #: An option is out of range, or a call's input exceeds a configured bound.
    INVALID_CONFIGURATION = "invalid_configuration"
    #: A required model file does not exist (run ``game-memory models prepare``).
    MISSING_MODEL_FILE = "missing_model_file"
    #: A model file has the wrong size or hash, or its JSON cannot be read.
    MODEL_INTEGRITY = "model_integrity"
    #: The files are intact but describe a model this provider cannot run.
    UNSUPPORTED_MODEL = "unsupported_model"
    #: Every admission ticket is taken; nothing was started. Retry later.
    QUEUE_FULL = "queue_full"
    #: The operation waited ``queue_timeout`` for an inference slot.
    QUEUE_TIMEOUT = "queue_timeout"
    #: The operation (or the model load) ran past its deadline and was terminated.
    TIMEOUT = "timeout"
    #: The provider was closed while the operation waited or ran.
    CANCELLED = "cancelled"
    #: The tokenizer could not be loaded or failed on a text.
    TOKENIZATION = "tokenization"
    #: onnxruntime failed while running the model.
    INFERENCE = "inference"
    #: The model produced a tensor of the wrong shape, or non-finite or zero vectors.
    INVALID_OUTPUT = "invalid_output"
    #: The provider was used after ``aclose()``.
    CLOSED = "closed"


class OnnxEmbeddingError(EmbeddingUnavailableError):
    """An ONNX provider failed; ``kind`` says why. Lexical recall still works.

    Args:
        message: What happened, naming the file, bound or option, and what to do.
        kind: The failure kind.
    """

    def __init__(self, message: str, *, kind: OnnxFailureKind) -> None:
        if not isinstance(kind, OnnxFailureKind):
            raise TypeError(f"kind must be an OnnxFailureKind, not {kind!r}")
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[object, ...]:
        return (onnx_error, (self.kind, str(self)))


class OnnxEmbeddingTimeoutError(OnnxEmbeddingError, EmbeddingTimeoutError):
    """The operation waited too long for a slot (``QUEUE_TIMEOUT``) or ran too long."""


class OnnxEmbeddingBusyError(OnnxEmbeddingError, StoreBusyError):
    """Every admission ticket was taken (``QUEUE_FULL``); nothing was started. Retry later."""


_TIMEOUT_KINDS = frozenset({OnnxFailureKind.TIMEOUT, OnnxFailureKind.QUEUE_TIMEOUT})


def onnx_error(kind: OnnxFailureKind, message: str) -> OnnxEmbeddingError:
    """Build the error for ``kind``, using the subclass generic handlers recognise.

    Returns:
        An ``OnnxEmbeddingTimeoutError`` for TIMEOUT and QUEUE_TIMEOUT, an
        ``OnnxEmbeddingBusyError`` for QUEUE_FULL, else a plain ``OnnxEmbeddingError``.
    """
    if kind in _TIMEOUT_KINDS:
        return OnnxEmbeddingTimeoutError(message, kind=kind)
    if kind is OnnxFailureKind.QUEUE_FULL:
        return OnnxEmbeddingBusyError(message, kind=kind)
    return OnnxEmbeddingError(message, kind=kind)


class ModelPreparationError(GameMemoryError):
    """Preparing a model folder failed; nothing was left half-written in the cache.

    Args:
        message: One line saying what failed and what to do.
        stage: The preparation stage that failed: ``download``, ``verify``, ``build``,
            ``quantize``, ``check`` or ``write``.
    """

    def __init__(self, message: str, *, stage: str) -> None:
        super().__init__(message)
        self.stage = stage

    def __reduce__(self) -> tuple[object, ...]:
        return (_preparation_error, (str(self), self.stage))


def _preparation_error(message: str, stage: str) -> ModelPreparationError:
    return ModelPreparationError(message, stage=stage)
