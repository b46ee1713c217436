"""``SentenceEncoderOnnxEmbeddingProvider``: BERT-family sentence encoders, mean pooled.

It opens a folder written by ``game-memory models prepare`` (``game-memory-model.json``,
``config.json``, the tokenizer files, ``onnx/model_int8.onnx`` and ``onnx/model.onnx``),
checks every file against the manifest's sizes and SHA-256, tokenizes with the
manifest's tokenizer (WordPiece for all-MiniLM-L6-v2, XLM-R unigram for
multilingual-e5-small), puts the manifest's prefixes before queries and documents
(``query: `` and ``passage: `` for e5), runs the encoder in onnxruntime and returns the
L2-normalized mean of the real tokens' states. :class:`MiniLmOnnxEmbeddingProvider` is the
same provider for the default model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.onnx.bert_config import BertConfig
from game_memory.onnx.engine import OnnxInferenceEngine
from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.loader import load_off_loop
from game_memory.onnx.model_files import (
    ModelFileManifest,
    read_json_document,
    verify_model_files,
)
from game_memory.onnx.options import SentenceEncoderOnnxEmbeddingOptions
from game_memory.onnx.pooling import Pooling
from game_memory.onnx.prepared_manifest import (
    MANIFEST_NAME,
    TOKENIZER_FILES,
    PreparedModelManifest,
)
from game_memory.onnx.prepared_tokenizer import (
    TOKENIZER_FILE_BYTES,
    open_prepared_tokenizer,
    preprocessing_label,
)
from game_memory.onnx.provider_base import OnnxEmbeddingProviderBase
from game_memory.onnx.session import OnnxSessionInference
from game_memory.onnx.tokens import BatchInference, TextTokenizer

__all__ = [
    "MiniLmOnnxEmbeddingProvider",
    "SentenceEncoderOnnxEmbeddingProvider",
    "load_sentence_encoder",
    "resolved_maximum_tokens",
    "sentence_encoder_identity",
]

CONFIG = "config.json"
MODEL_FILES = {"int8": "onnx/model_int8.onnx", "fp32": "onnx/model.onnx"}
_JSON_BYTES = 1_048_576


def resolved_maximum_tokens(
    options: SentenceEncoderOnnxEmbeddingOptions, prepared: PreparedModelManifest
) -> int:
    """``maximum_tokens`` if set, else the length the model was trained with."""
    return options.maximum_tokens or prepared.default_maximum_tokens


def sentence_encoder_identity(
    options: SentenceEncoderOnnxEmbeddingOptions,
    manifest: ModelFileManifest,
    prepared: PreparedModelManifest,
) -> MemoryEmbeddingIdentity:
    """The identity: model id, precision, weights and tokenizer hashes, preprocessing.

    ``version`` is ``model_version`` if set, else ``<precision>-<16 hex of the ONNX
    file's SHA-256>`` and ``-<16 hex>`` of each tokenizer file; ``+<preprocessing>-max<N>``
    follows (:func:`preprocessing_label`), e.g.
    ``onnx-in-process/sentence-transformers/all-MiniLM-L6-v2@int8-<16 hex>-<16 hex of
    tokenizer.json>+bert-wordpiece-mean-l2-v1-max256:384`` and
    ``onnx-in-process/intfloat/multilingual-e5-small@int8-<16 hex>-<16 hex of
    sentencepiece.model>-<16 hex of normalizer.json>+xlmr-unigram-prefix-query-passage-
    mean-l2-v1-max512:384``.
    """
    model_file = MODEL_FILES[options.precision]
    maximum_tokens = resolved_maximum_tokens(options, prepared)
    hashes = [manifest.record(model_file).sha256[:16]]
    hashes += [manifest.record(path).sha256[:16] for path in TOKENIZER_FILES[prepared.tokenizer]]
    version = options.model_version or "-".join([options.precision, *hashes])
    return MemoryEmbeddingIdentity(
        provider_id=options.provider_id,
        model_id=prepared.model_id,
        version=f"{version}+{preprocessing_label(prepared)}-max{maximum_tokens}",
        dimensions=prepared.hidden_size,
    )


@dataclass(frozen=True, slots=True)
class _Loaded:
    manifest: ModelFileManifest
    prepared: PreparedModelManifest
    tokenizer: TextTokenizer
    inference: OnnxSessionInference


def load_sentence_encoder(
    options: SentenceEncoderOnnxEmbeddingOptions, cancelled: Callable[[], bool]
) -> _Loaded:
    """Check and open a prepared folder as the provider does (files against the manifest,
    the config, the tokenizer, onnxruntime's session); the caller owns the session
    (``inference.close()``). ``models info``'s intact check calls it too, so that "intact"
    means what this accepts, not a copy of its checks."""
    directory = options.model_directory
    host_bytes = options.expected_file_bytes or {}
    host_sha256 = options.expected_sha256 or {}
    verify_model_files(
        directory,
        [(MANIFEST_NAME, _JSON_BYTES)],
        expected_file_bytes=host_bytes,
        expected_sha256=host_sha256,
        cancelled=cancelled,
    )
    prepared = PreparedModelManifest.read(directory)
    model_file = MODEL_FILES[options.precision]
    tokenizer_files = TOKENIZER_FILES[prepared.tokenizer]
    files = [
        (CONFIG, _JSON_BYTES),
        *((path, TOKENIZER_FILE_BYTES[path]) for path in tokenizer_files),
    ]
    files.append((model_file, options.maximum_model_bytes))
    listed = {path: prepared.file(path) for path, _ in files}
    manifest = verify_model_files(
        directory,
        files,
        # The host's expectations win where given; the manifest's cover the rest.
        expected_file_bytes={
            path: host_bytes.get(path, entry.bytes) for path, entry in listed.items()
        },
        expected_sha256={
            path: host_sha256.get(path, entry.sha256) for path, entry in listed.items()
        },
        cancelled=cancelled,
    )
    try:
        config = BertConfig.from_document(
            read_json_document(manifest.absolute(CONFIG), _JSON_BYTES)
        )
    except ValueError as exc:
        raise onnx_error(
            OnnxFailureKind.UNSUPPORTED_MODEL, f"the model in {directory} is unsupported: {exc}"
        ) from exc
    if config.hidden_size != prepared.hidden_size:
        raise onnx_error(
            OnnxFailureKind.UNSUPPORTED_MODEL,
            f"config.json hidden_size {config.hidden_size} differs from the manifest's "
            f"{prepared.hidden_size}",
        )
    maximum_tokens = resolved_maximum_tokens(options, prepared)
    if maximum_tokens > config.max_position_embeddings:
        raise onnx_error(  # an option out of the model's range (docs/embeddings.md)
            OnnxFailureKind.INVALID_CONFIGURATION,
            f"maximum_tokens={maximum_tokens} exceeds the model's position limit "
            f"{config.max_position_embeddings}; lower maximum_tokens",
        )
    if maximum_tokens > options.maximum_batch_tokens:
        raise onnx_error(
            OnnxFailureKind.INVALID_CONFIGURATION,
            f"maximum_batch_tokens={options.maximum_batch_tokens} cannot hold one text of "
            f"maximum_tokens={maximum_tokens}; raise maximum_batch_tokens",
        )
    tokenizer = open_prepared_tokenizer(
        {path: manifest.absolute(path) for path in tokenizer_files},
        prepared,
        maximum_tokens,
        config.pad_token_id,
    )
    if cancelled():
        raise onnx_error(OnnxFailureKind.CANCELLED, "loading the sentence encoder was abandoned")
    inference = OnnxSessionInference(
        manifest.absolute(model_file),
        hidden_size=config.hidden_size,
        intra_op_threads=options.intra_op_threads,
        inter_op_threads=options.inter_op_threads,
        allow_spinning=options.allow_spinning,
    )
    return _Loaded(manifest, prepared, tokenizer, inference)


class SentenceEncoderOnnxEmbeddingProvider(OnnxEmbeddingProviderBase):
    """A prepared BERT-family sentence encoder, in process; an ``EmbeddingProvider``.

    ``embed_query`` puts the manifest's ``query_prefix`` before the text and
    ``embed_documents`` its ``document_prefix`` (e5: ``query: `` and ``passage: ``; the
    prefix counts toward ``maximum_tokens`` but not toward
    ``maximum_characters_per_text``). Texts longer than ``maximum_tokens`` (512 for e5,
    256 for MiniLM, special tokens included) are cut, and counted as truncated.

    Create it with ``await SentenceEncoderOnnxEmbeddingProvider.create(options)``. The
    constructor is the injection seam for tests.

    Args:
        options: The validated options.
        manifest: The verified files (their hashes make up the identity).
        prepared: The folder's manifest (model id, width).
        tokenizer: Produces the model's ids.
        inference: Produces ``last_hidden_state`` of the manifest's width.

    Raises:
        OnnxEmbeddingError: ``UNSUPPORTED_MODEL`` if ``inference`` has the wrong width.
    """

    def __init__(
        self,
        options: SentenceEncoderOnnxEmbeddingOptions,
        manifest: ModelFileManifest,
        prepared: PreparedModelManifest,
        tokenizer: TextTokenizer,
        inference: BatchInference,
    ) -> None:
        if inference.hidden_size != prepared.hidden_size:
            raise onnx_error(
                OnnxFailureKind.UNSUPPORTED_MODEL,
                f"the inference is {inference.hidden_size} wide; the manifest says "
                f"{prepared.hidden_size}",
            )
        engine = OnnxInferenceEngine(
            options.engine_limits(resolved_maximum_tokens(options, prepared)),
            tokenizer,
            inference,
            Pooling.MEAN,
            options.metrics,
        )
        super().__init__(
            sentence_encoder_identity(options, manifest, prepared),
            engine,
            query_prefix=prepared.query_prefix,
            document_prefix=prepared.document_prefix,
        )
        self._options = options
        self._manifest = manifest
        self._prepared = prepared

    @classmethod
    async def create(cls, options: SentenceEncoderOnnxEmbeddingOptions) -> Self:
        """Verify the prepared folder, load tokenizer and model off the loop.

        Emits one ``MODEL_LOAD`` metrics record.

        Raises:
            OnnxEmbeddingError: ``INVALID_CONFIGURATION`` (folder missing),
                ``MISSING_MODEL_FILE`` (not prepared: run ``game-memory models prepare``),
                ``MODEL_INTEGRITY`` (a size or hash differs from the manifest),
                ``UNSUPPORTED_MODEL``, ``TOKENIZATION``, ``TIMEOUT`` (``load_timeout``).
            asyncio.CancelledError: The caller cancelled; a late load is released.
        """
        if not isinstance(options, SentenceEncoderOnnxEmbeddingOptions):
            raise onnx_error(
                OnnxFailureKind.INVALID_CONFIGURATION,
                "create() needs a SentenceEncoderOnnxEmbeddingOptions",
            )
        loaded = await load_off_loop(
            lambda cancelled: load_sentence_encoder(options, cancelled),
            timeout=options.load_timeout,
            dispose=lambda late: late.inference.close(),
            metrics=options.metrics,
        )
        return cls(options, loaded.manifest, loaded.prepared, loaded.tokenizer, loaded.inference)

    @property
    def options(self) -> SentenceEncoderOnnxEmbeddingOptions:
        """The options this provider was created with."""
        return self._options

    @property
    def manifest(self) -> ModelFileManifest:
        """The verified files this provider loaded: relative path, size and SHA-256."""
        return self._manifest

    @property
    def prepared(self) -> PreparedModelManifest:
        """The prepared folder's manifest."""
        return self._prepared


class MiniLmOnnxEmbeddingProvider(SentenceEncoderOnnxEmbeddingProvider):
    """The default model, all-MiniLM-L6-v2 (384 wide, INT8), prepared from its PyPI wheel.

    English in practice. Load it with ``await load_default_provider()``; it is a
    :class:`SentenceEncoderOnnxEmbeddingProvider` in every other respect.
    """
