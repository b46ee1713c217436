"""``BgeM3OnnxEmbeddingProvider``: BGE-M3's dense vectors, in process, from a local folder.

The folder is a Xenova-style export: ``config.json``, ``tokenizer_config.json``,
``sentencepiece.bpe.model`` and ``onnx/model_int8.onnx``. Nothing is ever downloaded.
Text is tokenized with SentencePiece and the XLM-R fairseq id mapping, the model runs in
onnxruntime, and the vector is the L2-normalized state of ``<s>`` (CLS pooling).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.onnx.bge_m3_config import BGE_M3_HIDDEN_SIZE, validate_bge_m3_config
from game_memory.onnx.engine import OnnxInferenceEngine
from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.loader import load_off_loop
from game_memory.onnx.model_files import (
    ModelFileManifest,
    model_id_problem,
    read_json_document,
    verify_model_files,
)
from game_memory.onnx.options import BGE_M3_REQUIRED_FILES, BgeM3OnnxEmbeddingOptions
from game_memory.onnx.pooling import Pooling
from game_memory.onnx.provider_base import OnnxEmbeddingProviderBase
from game_memory.onnx.session import OnnxSessionInference
from game_memory.onnx.tokens import BatchInference, TextTokenizer
from game_memory.onnx.xlmr_tokenizer import XLMR_PREPROCESSING, XlmRobertaTokenizer

__all__ = ["BgeM3OnnxEmbeddingProvider", "bge_m3_identity"]

_JSON_BYTES = 1_048_576
_SENTENCEPIECE_BYTES = 67_108_864
CONFIG, TOKENIZER_CONFIG, SENTENCEPIECE, MODEL = BGE_M3_REQUIRED_FILES


def bge_m3_identity(
    options: BgeM3OnnxEmbeddingOptions, manifest: ModelFileManifest, model_id: str
) -> MemoryEmbeddingIdentity:
    """The identity of the vectors: weights, tokenizer, preprocessing and maximum tokens.

    ``version`` is ``model_version`` if set, else ``int8-<16 hex of the ONNX file's
    SHA-256>-<16 hex of the SentencePiece model's>``; ``+<preprocessing>-max<N>`` follows.
    Changing any of them makes the vector store report ``REBUILD_REQUIRED``.
    """
    version = options.model_version or (
        f"int8-{manifest.record(MODEL).sha256[:16]}-{manifest.record(SENTENCEPIECE).sha256[:16]}"
    )
    return MemoryEmbeddingIdentity(
        provider_id=options.provider_id,
        model_id=model_id,
        version=f"{version}+{XLMR_PREPROCESSING}-max{options.maximum_tokens}",
        dimensions=BGE_M3_HIDDEN_SIZE,
    )


@dataclass(frozen=True, slots=True)
class _Loaded:
    manifest: ModelFileManifest
    model_id: str
    tokenizer: XlmRobertaTokenizer
    inference: OnnxSessionInference


def _load(options: BgeM3OnnxEmbeddingOptions, cancelled: Callable[[], bool]) -> _Loaded:
    manifest = verify_model_files(
        options.model_directory,
        [
            (CONFIG, _JSON_BYTES),
            (TOKENIZER_CONFIG, _JSON_BYTES),
            (SENTENCEPIECE, _SENTENCEPIECE_BYTES),
            (MODEL, options.maximum_model_bytes),
        ],
        expected_file_bytes=options.expected_file_bytes,
        expected_sha256=options.expected_sha256,
        cancelled=cancelled,
    )
    model_id = validate_bge_m3_config(
        read_json_document(manifest.absolute(CONFIG), _JSON_BYTES),
        read_json_document(manifest.absolute(TOKENIZER_CONFIG), _JSON_BYTES),
        options.maximum_tokens,
    )
    tokenizer = XlmRobertaTokenizer(manifest.absolute(SENTENCEPIECE), options.maximum_tokens)
    if cancelled():
        raise onnx_error(OnnxFailureKind.CANCELLED, "loading BGE-M3 was abandoned")
    inference = OnnxSessionInference(
        manifest.absolute(MODEL),
        hidden_size=BGE_M3_HIDDEN_SIZE,
        intra_op_threads=options.intra_op_threads,
        inter_op_threads=options.inter_op_threads,
        allow_spinning=options.allow_spinning,
    )
    return _Loaded(manifest, model_id, tokenizer, inference)


class BgeM3OnnxEmbeddingProvider(OnnxEmbeddingProviderBase):
    """BGE-M3 dense embeddings (1,024 wide) in process; an ``EmbeddingProvider``.

    Create it with ``await BgeM3OnnxEmbeddingProvider.create(options)``. The constructor
    is the injection seam the tests use: it takes an already verified manifest and any
    tokenizer and inference honouring the engine's protocols.

    Args:
        options: The validated options.
        manifest: The verified files (their hashes make up the identity).
        tokenizer: Produces XLM-R ids.
        inference: Produces ``last_hidden_state`` 1,024 wide.
        model_id: The model id of the identity (``_name_or_path``).

    Raises:
        OnnxEmbeddingError: ``UNSUPPORTED_MODEL`` if ``inference`` is not 1,024 wide, or
            ``model_id`` cannot be an identity's model id (blank, over 512 characters, a
            control character).
    """

    def __init__(
        self,
        options: BgeM3OnnxEmbeddingOptions,
        manifest: ModelFileManifest,
        tokenizer: TextTokenizer,
        inference: BatchInference,
        *,
        model_id: str = "BAAI/bge-m3",
    ) -> None:
        if inference.hidden_size != BGE_M3_HIDDEN_SIZE:
            raise onnx_error(
                OnnxFailureKind.UNSUPPORTED_MODEL,
                f"BGE-M3 inference must be {BGE_M3_HIDDEN_SIZE} wide, not {inference.hidden_size}",
            )
        problem = model_id_problem(model_id)
        if problem is not None:
            raise onnx_error(OnnxFailureKind.UNSUPPORTED_MODEL, f"the BGE-M3 model id {problem}")
        engine = OnnxInferenceEngine(
            options.engine_limits(options.maximum_tokens),
            tokenizer,
            inference,
            Pooling.CLS,
            options.metrics,
        )
        super().__init__(bge_m3_identity(options, manifest, model_id), engine)
        self._options = options
        self._manifest = manifest

    @classmethod
    async def create(cls, options: BgeM3OnnxEmbeddingOptions) -> Self:
        """Verify the folder, load tokenizer and model off the loop, and return a provider.

        Emits one ``MODEL_LOAD`` metrics record. A failure after the model is loaded closes
        its session before raising: nothing is left open.

        Raises:
            OnnxEmbeddingError: ``INVALID_CONFIGURATION`` (folder missing, a file outside
                it), ``MISSING_MODEL_FILE``, ``MODEL_INTEGRITY`` (size, hash, JSON),
                ``UNSUPPORTED_MODEL`` (config or model contract), ``TOKENIZATION``
                (SentencePiece model), ``TIMEOUT`` (``load_timeout``).
            asyncio.CancelledError: The caller cancelled; a late load is released.
        """
        if not isinstance(options, BgeM3OnnxEmbeddingOptions):
            raise onnx_error(
                OnnxFailureKind.INVALID_CONFIGURATION,
                "create() needs a BgeM3OnnxEmbeddingOptions",
            )
        loaded = await load_off_loop(
            lambda cancelled: _load(options, cancelled),
            timeout=options.load_timeout,
            dispose=lambda late: late.inference.close(),
            metrics=options.metrics,
        )
        try:
            return cls(
                options,
                loaded.manifest,
                loaded.tokenizer,
                loaded.inference,
                model_id=loaded.model_id,
            )
        except BaseException:
            loaded.inference.close()  # nobody else holds the session: release it now
            raise

    @property
    def options(self) -> BgeM3OnnxEmbeddingOptions:
        """The options this provider was created with."""
        return self._options

    @property
    def manifest(self) -> ModelFileManifest:
        """The verified model files: relative path, size and SHA-256 of each."""
        return self._manifest
