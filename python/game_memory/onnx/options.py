"""Options of the in-process ONNX providers: every bound, its default and its range.

Options are validated once, at construction; a value out of range raises
``OnnxEmbeddingError(kind=INVALID_CONFIGURATION)`` naming the option. Durations are
float seconds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.limits import EngineLimits
from game_memory.onnx.metrics import MetricsSink
from game_memory.onnx.prepared_manifest import MANIFEST_NAME

__all__ = [
    "BGE_M3_REQUIRED_FILES",
    "BgeM3OnnxEmbeddingOptions",
    "OnnxProviderOptions",
    "SentenceEncoderOnnxEmbeddingOptions",
]

#: The four files of a BGE-M3 folder, in the order they are verified.
BGE_M3_REQUIRED_FILES: tuple[str, ...] = (
    "config.json",
    "tokenizer_config.json",
    "sentencepiece.bpe.model",
    "onnx/model_int8.onnx",
)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _check_label(value: str, name: str, maximum: int) -> str:
    if len(value) > maximum:
        raise ValueError(f"{name} is {len(value)} characters long; the limit is {maximum}")
    if any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in value):
        raise ValueError(f"{name} must not contain control characters")
    return value


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"]) or "options"
        problems.append(f"{location}: {error['msg']}")
    return "invalid ONNX provider options: " + "; ".join(problems)


class OnnxProviderOptions(BaseModel):
    """Options shared by every in-process ONNX provider (see the subclasses).

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` when a value is out of range.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    #: Relative paths ``expected_file_bytes`` / ``expected_sha256`` may name.
    required_files: ClassVar[tuple[str, ...]] = ()

    model_directory: Path
    provider_id: str = Field(default="onnx-in-process", min_length=1)
    model_version: str | None = None
    maximum_characters_per_text: int = Field(default=100_000, ge=1, le=1_000_000, strict=True)
    maximum_texts_per_call: int = Field(default=256, ge=1, le=4_096, strict=True)
    maximum_batch_size: int = Field(default=16, ge=1, le=256, strict=True)
    maximum_batch_tokens: int = Field(default=32_768, ge=3, le=1_048_576, strict=True)
    maximum_tensor_bytes: int = Field(
        default=268_435_456, ge=4_194_304, le=2_147_483_648, strict=True
    )
    maximum_model_bytes: int = Field(
        default=1_073_741_824, ge=1_048_576, le=4_294_967_296, strict=True
    )
    maximum_concurrent_inferences: int = Field(default=1, ge=1, le=32, strict=True)
    maximum_queued_operations: int = Field(default=16, ge=0, le=4_096, strict=True)
    queue_timeout: float = Field(default=5.0, ge=0.001, le=300.0, allow_inf_nan=False)
    inference_timeout: float = Field(default=30.0, ge=0.01, le=1_800.0, allow_inf_nan=False)
    load_timeout: float = Field(default=120.0, ge=1.0, le=1_800.0, allow_inf_nan=False)
    #: Threads inside one onnxruntime run; 0 lets onnxruntime choose (every core). The
    #: sentence encoders default to one (their options class says why).
    intra_op_threads: int = Field(default=0, ge=0, le=256, strict=True)
    inter_op_threads: int = Field(default=1, ge=1, le=256, strict=True)
    #: Batches of one call run at once, each a run of its own on the one session; 0 means
    #: two where the process may use two cores, else one. Each running batch holds its own
    #: activations (up to ``maximum_tensor_bytes``). The sentence encoders default to 0.
    batch_threads: int = Field(default=1, ge=0, le=64, strict=True)
    #: Let onnxruntime's idle worker threads spin waiting for the next run (its own
    #: default). Off: with the default model and a question every 50 ms, spinning cost
    #: 46.6 ms of CPU per question (0.83 of a core, taken from the game) against 6.1 ms,
    #: for a recall 4% faster; questions 2 ms apart are answered 0.8 ms sooner with it.
    #: ``benchmarks/onnx_spinning.py`` measures both.
    allow_spinning: bool = Field(default=False, strict=True)
    expected_file_bytes: Mapping[str, int] | None = None
    expected_sha256: Mapping[str, str] | None = None
    metrics: MetricsSink | None = None

    def __init__(self, model_directory: str | os.PathLike[str], /, **data: Any) -> None:
        try:
            super().__init__(model_directory=model_directory, **data)
        except ValidationError as exc:
            raise onnx_error(OnnxFailureKind.INVALID_CONFIGURATION, _describe(exc)) from exc

    @field_validator("provider_id")
    @classmethod
    def _provider_id(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("provider_id must not be blank")
        return _check_label(value, "provider_id", 256)

    @field_validator("model_version")
    @classmethod
    def _model_version(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError("model_version must not be blank (use None for the default)")
        return _check_label(value, "model_version", 128)

    @field_validator("expected_file_bytes")
    @classmethod
    def _expected_bytes(cls, value: Mapping[str, int] | None) -> dict[str, int] | None:
        if value is None:
            return None
        result: dict[str, int] = {}
        for key, size in value.items():
            path = cls._expected_key(key, result)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"expected size of {path!r} must be an integer >= 1")
            result[path] = size
        return result

    @field_validator("expected_sha256")
    @classmethod
    def _expected_sha256(cls, value: Mapping[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        result: dict[str, str] = {}
        for key, digest in value.items():
            path = cls._expected_key(key, result)
            if not isinstance(digest, str) or not _SHA256.match(digest.lower()):
                raise ValueError(f"expected sha256 of {path!r} must be 64 hexadecimal digits")
            result[path] = digest.lower()
        return result

    @classmethod
    def _expected_key(cls, key: str, seen: Mapping[str, object]) -> str:
        path = str(key).replace("\\", "/")
        if path not in cls.required_files:
            raise ValueError(f"{key!r} is not one of the model files {list(cls.required_files)}")
        if path in seen:
            raise ValueError(f"{key!r} is given twice")
        return path

    @model_validator(mode="after")
    def _batch_tokens_fit_one_text(self) -> OnnxProviderOptions:
        maximum_tokens = getattr(self, "maximum_tokens", None)
        if maximum_tokens is not None and self.maximum_batch_tokens < maximum_tokens:
            raise ValueError(
                f"maximum_batch_tokens ({self.maximum_batch_tokens}) must be at least "
                f"maximum_tokens ({maximum_tokens})"
            )
        return self

    def engine_limits(self, maximum_tokens: int) -> EngineLimits:
        """The bounds the shared engine enforces, with the resolved ``maximum_tokens``."""
        return EngineLimits(
            maximum_tokens=maximum_tokens,
            maximum_characters_per_text=self.maximum_characters_per_text,
            maximum_texts_per_call=self.maximum_texts_per_call,
            maximum_batch_size=self.maximum_batch_size,
            maximum_batch_tokens=self.maximum_batch_tokens,
            maximum_tensor_bytes=self.maximum_tensor_bytes,
            maximum_concurrent_inferences=self.maximum_concurrent_inferences,
            maximum_queued_operations=self.maximum_queued_operations,
            queue_timeout=self.queue_timeout,
            inference_timeout=self.inference_timeout,
            batch_threads=self.batch_threads or _usable_cores(2),
        )


def _usable_cores(most: int) -> int:
    """The cores this process may run on (its CPU affinity where the platform has one),
    at most ``most`` and at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(most, cores))


class BgeM3OnnxEmbeddingOptions(OnnxProviderOptions):
    """Options of :class:`BgeM3OnnxEmbeddingProvider` (reference design, section 8.1).

    Args:
        model_directory: A folder holding ``config.json``, ``tokenizer_config.json``,
            ``sentencepiece.bpe.model`` and ``onnx/model_int8.onnx``.
        **data: Any other option by name; see the table in ``docs/embeddings.md``.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` when a value is out of range.
    """

    required_files: ClassVar[tuple[str, ...]] = BGE_M3_REQUIRED_FILES

    maximum_tokens: int = Field(default=512, ge=3, le=8_192, strict=True)

    # Restated so type checkers see the positional model_directory (pydantic's synthesized
    # signature is keyword-only).
    def __init__(self, model_directory: str | os.PathLike[str], /, **data: Any) -> None:
        super().__init__(model_directory, **data)


class SentenceEncoderOnnxEmbeddingOptions(OnnxProviderOptions):
    """Options of :class:`SentenceEncoderOnnxEmbeddingProvider` (all-MiniLM-L6-v2, e5).

    The same bounds as BGE-M3 except ``maximum_tokens`` (default ``None``: the length the
    model was trained with, from its manifest, 256 for all-MiniLM-L6-v2 and 512 for
    multilingual-e5-small; at most the
    model's position limit and ``maximum_batch_tokens``, checked at load) and
    ``precision``: ``"int8"`` (default, ``onnx/model_int8.onnx``) or ``"fp32"``
    (``onnx/model.onnx``, about 4x larger and 2-4x slower, batch-independent vectors).

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` when a value is out of range.
    """

    required_files: ClassVar[tuple[str, ...]] = (
        MANIFEST_NAME,
        "config.json",
        "tokenizer.json",
        "sentencepiece.model",
        "normalizer.json",
        "onnx/model_int8.onnx",
        "onnx/model.onnx",
    )

    maximum_tokens: int | None = Field(default=None, ge=3, le=8_192, strict=True)
    precision: Literal["int8", "fp32"] = "int8"
    #: One thread a run: a question is a handful of tokens, and waking a second thread for
    #: each operator of these small models cost more than it saved (all-MiniLM-L6-v2, a
    #: 14-token question between pauses, 2-core machine: 2.7–2.9 ms with onnxruntime's
    #: two threads against 2.2–2.3 ms with one); a call's batches run side by side instead
    #: (``batch_threads``: 512 documents 557 → 333 ms), and a game keeps its other cores.
    #: BGE-M3's runs are long enough to share (a query 41 ms on one thread, 24 on two), so
    #: its options keep onnxruntime's choice and batches in turn.
    intra_op_threads: int = Field(default=1, ge=0, le=256, strict=True)
    batch_threads: int = Field(default=0, ge=0, le=64, strict=True)

    # Restated so type checkers see the positional model_directory (pydantic's synthesized
    # signature is keyword-only).
    def __init__(self, model_directory: str | os.PathLike[str], /, **data: Any) -> None:
        super().__init__(model_directory, **data)
