"""Build a prepared sentence-encoder folder from a BERT's config, tokenizer and weights.

The folder holds ``config.json``, ``tokenizer.json`` (and any extra files such as
``vocab.txt``), ``onnx/model.onnx`` (fp32, built with :func:`build_bert_graph`),
``onnx/model_int8.onnx`` (per-channel INT8) and, written last, the manifest. Both graphs
are loaded and run once before the manifest is written, so a folder with a manifest works.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from game_memory.onnx.bert_config import BertConfig
from game_memory.onnx.bert_graph import build_bert_graph
from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError
from game_memory.onnx.model_files import sha256_file
from game_memory.onnx.prepared_manifest import PreparedFile, PreparedModelManifest
from game_memory.onnx.quantize import quantize_int8
from game_memory.onnx.safetensors_reader import read_safetensors
from game_memory.onnx.session import OnnxSessionInference
from game_memory.onnx.tokens import RunControl
from game_memory.onnx.wordpiece_tokenizer import WordPieceTokenizer

__all__ = ["ProgressCallback", "build_sentence_encoder_folder"]

#: ``progress(stage, done, total)``; stages: download, verify, build, quantize, check, write.
ProgressCallback = Callable[[str, int, int], None]


def _report(progress: ProgressCallback | None, stage: str, done: int, total: int) -> None:
    if progress is not None:
        progress(stage, done, total)


def build_sentence_encoder_folder(
    destination: Path,
    *,
    model_id: str,
    config: bytes,
    tokenizer: bytes,
    weights: bytes,
    default_maximum_tokens: int,
    extra_files: Mapping[str, bytes] | None = None,
    source: Mapping[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> PreparedModelManifest:
    """Write a complete prepared folder into ``destination`` (which should be empty).

    Args:
        destination: The folder to fill (created if missing).
        model_id: The model id of the identity.
        config: ``config.json`` of a BERT model.
        tokenizer: ``tokenizer.json`` (WordPiece, with a ``[CLS] ... [SEP]`` template).
        weights: ``model.safetensors``.
        default_maximum_tokens: The sequence length the model was trained with.
        extra_files: More files to copy verbatim (e.g. ``vocab.txt``).
        source: Provenance recorded in the manifest.
        progress: Receives ``("build", layer, layers)``, ``("quantize", ...)``, ...

    Returns:
        The manifest written last into ``destination``.

    Raises:
        ModelPreparationError: Stage ``build`` (bad config, weights or tokenizer),
            ``quantize``, or ``check`` (a built graph does not load or run).
    """
    try:
        bert = BertConfig.from_document(json.loads(config.decode("utf-8")))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelPreparationError(f"config.json is unusable: {exc}", stage="build") from exc
    if default_maximum_tokens > bert.max_position_embeddings:
        raise ModelPreparationError(
            f"default_maximum_tokens {default_maximum_tokens} exceeds the position limit "
            f"{bert.max_position_embeddings}",
            stage="build",
        )
    (destination / "onnx").mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {"config.json": config, "tokenizer.json": tokenizer}
    files.update(extra_files or {})
    for name, data in files.items():
        (destination / name).write_bytes(data)

    layers = bert.num_hidden_layers
    _report(progress, "build", 0, layers)
    graph = build_bert_graph(
        read_safetensors(weights),
        bert,
        progress=lambda done, total: _report(progress, "build", done, total),
    )
    fp32 = destination / "onnx" / "model.onnx"
    fp32.write_bytes(graph.SerializeToString())
    del graph

    _report(progress, "quantize", 0, 1)
    int8 = destination / "onnx" / "model_int8.onnx"
    quantize_int8(fp32, int8)
    _report(progress, "quantize", 1, 1)

    _report(progress, "check", 0, 2)
    _check_folder(destination, bert, default_maximum_tokens, progress)

    _report(progress, "write", 0, 1)
    entries = [*files, "onnx/model.onnx", "onnx/model_int8.onnx"]
    manifest = PreparedModelManifest(
        model_id=model_id,
        hidden_size=bert.hidden_size,
        default_maximum_tokens=default_maximum_tokens,
        source=dict(source or {}),
        files=tuple(
            PreparedFile(
                path=name,
                bytes=(destination / name).stat().st_size,
                sha256=sha256_file(destination / name),
            )
            for name in entries
        ),
    )
    manifest.write(destination)
    _report(progress, "write", 1, 1)
    return manifest


def _check_folder(
    destination: Path,
    bert: BertConfig,
    maximum_tokens: int,
    progress: ProgressCallback | None,
) -> None:
    try:
        tokenizer = WordPieceTokenizer(
            destination / "tokenizer.json", maximum_tokens, bert.pad_token_id
        )
        ids = np.asarray([tokenizer.tokenize("a quick check of the prepared model").ids])
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
