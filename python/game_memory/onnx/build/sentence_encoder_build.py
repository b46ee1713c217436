"""Build a prepared sentence-encoder folder from a BERT's config, weights and tokenizer files.

The folder holds ``config.json``, the tokenizer files (``tokenizer.json`` for WordPiece;
``sentencepiece.model`` and ``normalizer.json`` for the XLM-R unigram tokenizer), any extra
files such as ``vocab.txt``, ``onnx/model.onnx`` (fp32, built with :func:`build_bert_graph`),
``onnx/model_int8.onnx`` (per-channel INT8) and, written last, the manifest. Both graphs
are loaded and run once, through the tokenizer the provider will use, before the manifest
is written, so a folder with a manifest works.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from game_memory.onnx.bert_config import BertConfig
from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError
from game_memory.onnx.model_files import sha256_file
from game_memory.onnx.prepared_manifest import (
    TOKENIZER_FILES,
    PreparedFile,
    PreparedModelManifest,
    TokenizerKind,
)
from game_memory.onnx.prepared_tokenizer import open_prepared_tokenizer
from game_memory.onnx.session import OnnxSessionInference
from game_memory.onnx.tokens import RunControl

__all__ = ["ProgressCallback", "build_sentence_encoder_folder"]

#: ``progress(stage, done, total)``; stages: download, verify, build, quantize, check, write.
ProgressCallback = Callable[[str, int, int], None]

_CHECK_TEXT = "a quick check of the prepared model"


def _report(progress: ProgressCallback | None, stage: str, done: int, total: int) -> None:
    if progress is not None:
        progress(stage, done, total)


def build_sentence_encoder_folder(
    destination: Path,
    *,
    model_id: str,
    config: bytes,
    weights: Mapping[str, npt.NDArray[np.generic]],
    tokenizer_files: Mapping[str, bytes],
    default_maximum_tokens: int,
    tokenizer: TokenizerKind = "wordpiece",
    query_prefix: str = "",
    document_prefix: str = "",
    extra_files: Mapping[str, bytes] | None = None,
    source: Mapping[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> PreparedModelManifest:
    """Write a complete prepared folder into ``destination`` (which should be empty).

    Args:
        destination: The folder to fill (created if missing).
        model_id: The model id of the identity.
        config: ``config.json`` of a BERT model.
        weights: Tensors named as ``transformers``' ``BertModel``'s; read once each, in
            graph order (a lazy mapping keeps only one dequantized tensor alive).
        tokenizer_files: The files of ``tokenizer`` (``TOKENIZER_FILES``), by name.
        default_maximum_tokens: The sequence length the model was trained with.
        tokenizer: Which tokenizer the files make up.
        query_prefix: Put before queries (``"query: "`` for e5).
        document_prefix: Put before documents (``"passage: "`` for e5).
        extra_files: More files to copy verbatim (e.g. ``vocab.txt``).
        source: Provenance recorded in the manifest.
        progress: Receives ``("build", layer, layers)``, ``("quantize", ...)``, ...

    Returns:
        The manifest written last into ``destination``.

    Raises:
        ModelPreparationError: Stage ``build`` (bad config, weights, tokenizer files or
            prefixes), ``quantize``, or ``check`` (a built graph does not load or run).
    """
    try:
        bert = BertConfig.from_document(json.loads(config.decode("utf-8")))
        draft = PreparedModelManifest(
            model_id=model_id,
            tokenizer=tokenizer,
            query_prefix=query_prefix,
            document_prefix=document_prefix,
            hidden_size=bert.hidden_size,
            default_maximum_tokens=default_maximum_tokens,
            source=dict(source or {}),
            files=(),
        )
    except (UnicodeDecodeError, ValueError) as exc:  # ValidationError is a ValueError
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise ModelPreparationError(
            f"the model description is unusable: {reason}", stage="build"
        ) from exc
    if default_maximum_tokens > bert.max_position_embeddings:
        raise ModelPreparationError(
            f"default_maximum_tokens {default_maximum_tokens} exceeds the position limit "
            f"{bert.max_position_embeddings}",
            stage="build",
        )
    if set(tokenizer_files) != set(TOKENIZER_FILES[tokenizer]):
        raise ModelPreparationError(
            f"a {tokenizer} tokenizer needs the files {list(TOKENIZER_FILES[tokenizer])}, not "
            f"{sorted(tokenizer_files)}",
            stage="build",
        )
    (destination / "onnx").mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {"config.json": config, **tokenizer_files, **(extra_files or {})}
    for name, data in files.items():
        (destination / name).write_bytes(data)

    # Imported here: they bring the onnx library (~14 MB resident), which only preparing a
    # model needs; the sidecar imports this package to open one (docs/performance.md).
    from game_memory.onnx.build.bert_graph import build_bert_graph
    from game_memory.onnx.build.quantize import quantize_int8

    layers = bert.num_hidden_layers
    _report(progress, "build", 0, layers)
    graph = build_bert_graph(
        weights,
        bert,
        progress=lambda done, total: _report(progress, "build", done, total),
        check=False,  # the check stage loads and runs the saved file in onnxruntime
    )
    fp32 = destination / "onnx" / "model.onnx"
    fp32.write_bytes(graph.SerializeToString())
    del graph

    _report(progress, "quantize", 0, 1)
    int8 = destination / "onnx" / "model_int8.onnx"
    quantize_int8(fp32, int8)
    _report(progress, "quantize", 1, 1)

    entries = [*files, "onnx/model.onnx", "onnx/model_int8.onnx"]
    manifest = draft.model_copy(
        update={
            "files": tuple(
                PreparedFile(
                    path=name,
                    bytes=(destination / name).stat().st_size,
                    sha256=sha256_file(destination / name),
                )
                for name in entries
            )
        }
    )
    _report(progress, "check", 0, 2)
    _check_folder(destination, manifest, bert, progress)

    _report(progress, "write", 0, 1)
    manifest.write(destination)
    _report(progress, "write", 1, 1)
    return manifest


def _check_folder(
    destination: Path,
    manifest: PreparedModelManifest,
    bert: BertConfig,
    progress: ProgressCallback | None,
) -> None:
    try:
        tokenizer = open_prepared_tokenizer(
            {name: destination / name for name in TOKENIZER_FILES[manifest.tokenizer]},
            manifest,
            manifest.default_maximum_tokens,
            bert.pad_token_id,
        )
        ids = np.asarray([tokenizer.tokenize(manifest.document_prefix + _CHECK_TEXT).ids])
        for done, name in enumerate(("model.onnx", "model_int8.onnx"), start=1):
            inference = OnnxSessionInference(
                destination / "onnx" / name, hidden_size=bert.hidden_size
            )
            hidden = inference.run(ids, np.ones_like(ids), RunControl())
            inference.close()
            if hidden.shape != (1, ids.shape[1], bert.hidden_size) or not np.isfinite(hidden).all():
                raise ModelPreparationError(
                    f"the built {name} produced an invalid output of shape {hidden.shape}",
                    stage="check",
                )
            _report(progress, "check", done, 2)
    except OnnxEmbeddingError as exc:
        raise ModelPreparationError(
            f"the built model folder does not work: {exc}", stage="check"
        ) from exc
