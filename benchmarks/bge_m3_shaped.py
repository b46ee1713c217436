"""A BGE-M3-shaped model folder with random weights, to measure the BGE-M3 provider.

No registry ships BGE-M3's weights, but the cost of a run does not depend on the values
of the weights: it depends on the graph's shape. This module writes a folder the
``BgeM3OnnxEmbeddingProvider`` accepts (BGE-M3's ``config.json`` and
``tokenizer_config.json``, a SentencePiece BPE model trained on the benchmark texts, and
``onnx/model_int8.onnx``) whose graph has XLM-RoBERTa-large's shape: 24 layers,
hidden 1,024, 16 heads, feed-forward 4,096, erf-GELU, LayerNormalization epsilon 1e-5,
8,194 positions. It is built with the project's own BERT graph builder from seeded
random weights and quantized to INT8 per channel like the default model.

One difference, stated in the benchmark's output: the word-embedding table holds only the
trained tokenizer's pieces, not 250,002 rows. A Gather costs the same whatever the size
of its table, and the full table would push the fp32 graph past protobuf's 2 GiB limit.

Building takes about a minute and 5 GB of memory; the folder is cached (about 300 MB).

Usage: ``python benchmarks/bge_m3_shaped.py FOLDER`` builds the folder (if needed) and
prints its path.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import sentencepiece

from game_memory.onnx.bert_config import BertConfig
from game_memory.onnx.build.bert_graph import build_bert_graph
from game_memory.onnx.build.quantize import quantize_int8

__all__ = ["SHAPE", "ensure_bge_m3_shaped_folder"]

#: Bump when the folder's contents change, so a cached folder is rebuilt.
_VERSION = 1
_MARKER = "bge-m3-shaped.json"

#: XLM-RoBERTa-large, which BGE-M3 is (the vocabulary aside; see the module docstring).
SHAPE: dict[str, int] = {
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "max_position_embeddings": 8194,
    "type_vocab_size": 1,
}
_LAYER_NORM_EPS = 1e-5

_CONFIG = {
    "_name_or_path": "BAAI/bge-m3 (shape only, random weights)",
    "model_type": "xlm-roberta",
    "bos_token_id": 0,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "vocab_size": 250_002,
    "layer_norm_eps": _LAYER_NORM_EPS,
    **SHAPE,
}
_TOKENIZER_CONFIG = {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": 8192}


def _train_sentencepiece(texts: Sequence[str]) -> bytes:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(list(texts) * 4),
        model_writer=model,
        vocab_size=1000,
        model_type="bpe",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


def _random_weights(rows: int, seed: int = 3) -> dict[str, npt.NDArray[np.float32]]:
    """BertModel tensors named as ``transformers`` names them, scaled like its init."""
    rng = np.random.default_rng(seed)
    hidden, inner = SHAPE["hidden_size"], SHAPE["intermediate_size"]

    def normal(*shape: int, scale: float = 0.02) -> npt.NDArray[np.float32]:
        array = rng.standard_normal(shape, dtype=np.float32)
        array *= scale
        return array

    weights = {
        "embeddings.word_embeddings.weight": normal(rows, hidden),
        "embeddings.position_embeddings.weight": normal(SHAPE["max_position_embeddings"], hidden),
        "embeddings.token_type_embeddings.weight": normal(1, hidden),
        "embeddings.LayerNorm.weight": 1 + normal(hidden),
        "embeddings.LayerNorm.bias": normal(hidden),
    }
    for layer in range(SHAPE["num_hidden_layers"]):
        prefix = f"encoder.layer.{layer}"
        for name, (out, inp) in {
            "attention.self.query": (hidden, hidden),
            "attention.self.key": (hidden, hidden),
            "attention.self.value": (hidden, hidden),
            "attention.output.dense": (hidden, hidden),
            "intermediate.dense": (inner, hidden),
            "output.dense": (hidden, inner),
        }.items():
            weights[f"{prefix}.{name}.weight"] = normal(out, inp)
            weights[f"{prefix}.{name}.bias"] = normal(out)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{prefix}.{norm}.weight"] = 1 + normal(hidden)
            weights[f"{prefix}.{norm}.bias"] = normal(hidden)
    return weights


def ensure_bge_m3_shaped_folder(
    folder: Path, texts: Sequence[str], say: Callable[[str], None] = print
) -> dict[str, object]:
    """Build ``folder`` unless a complete one of this version is there; describe it.

    Returns:
        What the benchmark reports about the stand-in model (shape, table rows, seed).
    """
    marker = folder / _MARKER
    if marker.is_file():
        described: dict[str, object] = json.loads(marker.read_text())
        if described.get("version") == _VERSION:
            return described
    started = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "onnx").mkdir(parents=True)
    tokenizer = _train_sentencepiece(texts)
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer)
    rows = int(processor.GetPieceSize()) + 1  # fairseq ids run to pieces + 1
    say(f"building a BGE-M3-shaped graph ({rows} embedding rows, 24 layers) ...")
    config = BertConfig(
        vocab_size=rows,
        pad_token_id=1,
        hidden_size=SHAPE["hidden_size"],
        num_hidden_layers=SHAPE["num_hidden_layers"],
        num_attention_heads=SHAPE["num_attention_heads"],
        intermediate_size=SHAPE["intermediate_size"],
        max_position_embeddings=SHAPE["max_position_embeddings"],
        type_vocab_size=SHAPE["type_vocab_size"],
        layer_norm_eps=_LAYER_NORM_EPS,
    )
    fp32 = folder / "onnx" / "model_fp32.onnx"
    model = build_bert_graph(_random_weights(rows), config)
    onnx.save(model, str(fp32))
    del model
    say("quantizing it to INT8 per channel ...")
    quantize_int8(fp32, folder / "onnx" / "model_int8.onnx")
    fp32.unlink()
    (folder / "sentencepiece.bpe.model").write_bytes(tokenizer)
    (folder / "config.json").write_text(json.dumps(_CONFIG, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps(_TOKENIZER_CONFIG, indent=2))
    described = {
        "version": _VERSION,
        "shape": {**SHAPE, "layer_norm_eps": _LAYER_NORM_EPS},
        "word_embedding_rows": rows,
        "weights": "seeded random normal (seed 3, scale 0.02); run time does not depend on them",
        "build_seconds": round(time.perf_counter() - started, 1),
    }
    marker.write_text(json.dumps(described, indent=2))  # last: marks the folder complete
    return described


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    from embedding import DOCUMENTS, QUERY  # the benchmark's own texts

    ensure_bge_m3_shaped_folder(args.folder, [QUERY, *DOCUMENTS])
    print(args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
