"""A tiny XLM-R-shaped model folder for BGE-M3 provider tests, and its numpy reference.

The graph honours the BGE-M3 contract (int64 ``input_ids``/``attention_mask``, float
``last_hidden_state`` [batch, seq, 1024]) and is contextual: one masked self-attention
layer lets ``<s>`` see every real token and no padding, so CLS pooling differs per text
and padding changes nothing.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import sentencepiece
from onnx import TensorProto, helper, numpy_helper

WIDTH = 1024
STATE = 16
POSITIONS = 600

CORPUS = [
    "the guard saw the thief near the old mill at night",
    "a dragon flew over the village at dawn and burned the barn",
    "the blacksmith sold a sword to the traveller",
    "the innkeeper remembers every song the bard played",
    "wolves howled in the forest while the hunter slept",
    "the merchant lost his purse on the bridge",
    "children played by the river under the willow tree",
    "the queen's letter arrived sealed with red wax",
]


def train_sentencepiece(vocabulary_size: int = 120) -> bytes:
    """Train a small SentencePiece BPE model on ``CORPUS`` and return its bytes."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 8),
        model_writer=model,
        vocab_size=vocabulary_size,
        model_type="bpe",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


@dataclass(frozen=True)
class TinyWeights:
    """The parameters of the tiny graph."""

    embeddings: np.ndarray
    positions: np.ndarray
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    output: np.ndarray
    output_bias: np.ndarray

    @classmethod
    def random(cls, vocabulary: int, seed: int = 7, width: int = WIDTH) -> TinyWeights:
        rng = np.random.default_rng(seed)

        def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
            return (rng.standard_normal(shape) * scale).astype(np.float32)

        return cls(
            embeddings=normal(vocabulary, STATE),
            positions=normal(POSITIONS, STATE, scale=0.3),
            query=normal(STATE, STATE, scale=0.5),
            key=normal(STATE, STATE, scale=0.5),
            value=normal(STATE, STATE, scale=0.5),
            output=normal(STATE, width, scale=0.4),
            output_bias=normal(width, scale=0.1),
        )


def build_graph(
    weights: TinyWeights,
    *,
    ids_type: int = TensorProto.INT64,
    token_type_ids: bool = False,
    extra_input: str | None = None,
    output_name: str = "last_hidden_state",
    output_type: int = TensorProto.FLOAT,
    slow_iterations: int = 0,
) -> onnx.ModelProto:
    """Build the ONNX graph; the keyword arguments break the contract on purpose."""
    width = weights.output.shape[1]
    initializers = [
        numpy_helper.from_array(weights.embeddings, "E"),
        numpy_helper.from_array(weights.positions, "P"),
        numpy_helper.from_array(weights.query, "Wq"),
        numpy_helper.from_array(weights.key, "Wk"),
        numpy_helper.from_array(weights.value, "Wv"),
        numpy_helper.from_array(weights.output, "Wo"),
        numpy_helper.from_array(weights.output_bias, "bo"),
        numpy_helper.from_array(np.array([0], np.int64), "zero1d"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array(1.0, np.float32), "onef"),
        numpy_helper.from_array(np.array(-10000.0, np.float32), "minus"),
        numpy_helper.from_array(np.array(1.0 / np.sqrt(STATE), np.float32), "scale"),
    ]
    ids = "input_ids"
    nodes = []
    if ids_type != TensorProto.INT64:
        nodes.append(helper.make_node("Cast", ["input_ids"], ["ids64"], to=TensorProto.INT64))
        ids = "ids64"
    nodes += [
        helper.make_node("Gather", ["E", ids], ["tokens"]),
        helper.make_node("Shape", [ids], ["length"], start=1, end=2),
        helper.make_node("Slice", ["P", "zero1d", "length", "zero1d"], ["positions"]),
        helper.make_node("Add", ["tokens", "positions"], ["x"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["onef", "maskf"], ["inverse"]),
        helper.make_node("Mul", ["inverse", "minus"], ["bias2"]),
        helper.make_node("Unsqueeze", ["bias2", "axis1"], ["bias"]),
        helper.make_node("MatMul", ["x", "Wq"], ["q"]),
        helper.make_node("MatMul", ["x", "Wk"], ["k"]),
        helper.make_node("MatMul", ["x", "Wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["raw"]),
        helper.make_node("Mul", ["raw", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attention"], axis=-1),
        helper.make_node("MatMul", ["attention", "v"], ["context"]),
        helper.make_node("Add", ["context", "x"], ["h"]),
        helper.make_node("MatMul", ["h", "Wo"], ["projected"]),
        helper.make_node("Add", ["projected", "bo"], ["pre"]),
    ]
    final = "pre_tanh"
    nodes.append(helper.make_node("Tanh", ["pre"], [final]))
    if slow_iterations:
        final = _append_slow_loop(nodes, initializers, final, slow_iterations)
    if output_type != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", [final], [output_name], to=output_type))
    else:
        nodes.append(helper.make_node("Identity", [final], [output_name]))
    inputs = [
        helper.make_tensor_value_info("input_ids", ids_type, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ]
    if token_type_ids:
        inputs.append(
            helper.make_tensor_value_info(
                "token_type_ids", TensorProto.INT64, ["batch", "sequence"]
            )
        )
    if extra_input:
        inputs.append(helper.make_tensor_value_info(extra_input, TensorProto.INT64, ["batch"]))
    outputs = [
        helper.make_tensor_value_info(output_name, output_type, ["batch", "sequence", width])
    ]
    graph = helper.make_graph(nodes, "tiny-xlmr", inputs, outputs, initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="game-memory-tests"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _append_slow_loop(
    nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto], final: str, iterations: int
) -> str:
    """Add a long Loop whose result is multiplied by zero, to make runs slow but exact."""
    rng = np.random.default_rng(3)
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["condition_in"], ["condition_out"]),
            helper.make_node("MatMul", ["carry_in", "W_slow"], ["product"]),
            helper.make_node("Tanh", ["product"], ["carry_out"]),
        ],
        "slow-body",
        [
            helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
            helper.make_tensor_value_info("condition_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carry_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("condition_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carry_out", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array((rng.random((256, 256)) * 0.01).astype(np.float32), "W_slow")],
    )
    initializers += [
        numpy_helper.from_array(np.array(iterations, np.int64), "slow_count"),
        numpy_helper.from_array(np.array(True), "slow_condition"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zerof"),
    ]
    nodes += [
        helper.make_node("ReduceSum", ["pre_tanh"], ["seed"], keepdims=0),
        helper.make_node("Expand", ["seed", "slow_shape"], ["slow_start"]),
        helper.make_node(
            "Loop", ["slow_count", "slow_condition", "slow_start"], ["slow_end"], body=body
        ),
        helper.make_node("ReduceSum", ["slow_end"], ["slow_total"], keepdims=0),
        helper.make_node("Mul", ["slow_total", "zerof"], ["nothing"]),
        helper.make_node("Add", [final, "nothing"], ["slow_output"]),
    ]
    initializers.append(numpy_helper.from_array(np.array([64, 256], np.int64), "slow_shape"))
    return "slow_output"


def reference_hidden(weights: TinyWeights, ids: Sequence[int]) -> np.ndarray:
    """The graph's ``last_hidden_state`` for one unpadded text, in float64 numpy."""
    e = weights.embeddings.astype(np.float64)
    x = e[np.asarray(ids)] + weights.positions.astype(np.float64)[: len(ids)]
    q = x @ weights.query
    k = x @ weights.key
    v = x @ weights.value
    scores = q @ k.T / np.sqrt(STATE)
    scores -= scores.max(axis=-1, keepdims=True)
    attention = np.exp(scores)
    attention /= attention.sum(axis=-1, keepdims=True)
    h = attention @ v + x
    return np.tanh(h @ weights.output + weights.output_bias)


def reference_ids(
    processor: sentencepiece.SentencePieceProcessor, text: str, maximum: int
) -> list[int]:
    """XLM-R ids written out independently of the provider's tokenizer."""
    pieces = processor.EncodeAsIds(text)[: maximum - 2]
    return [0, *[3 if piece == 0 else piece + 1 for piece in pieces], 2]


def reference_embedding(
    weights: TinyWeights, processor: sentencepiece.SentencePieceProcessor, text: str, maximum: int
) -> np.ndarray:
    """CLS pooling and L2 normalisation of one text, alone, in float64."""
    cls = reference_hidden(weights, reference_ids(processor, text, maximum))[0]
    return cls / np.linalg.norm(cls)


CONFIG = {
    "_name_or_path": "BAAI/bge-m3",
    "model_type": "xlm-roberta",
    "hidden_size": 1024,
    "bos_token_id": 0,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "type_vocab_size": 1,
    "vocab_size": 250002,
    "max_position_embeddings": 8194,
}
TOKENIZER_CONFIG = {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": 8192}


def write_folder(
    directory: Path,
    sentencepiece_model: bytes,
    model: onnx.ModelProto,
    *,
    config: dict[str, object] | None = None,
    tokenizer_config: dict[str, object] | None = None,
) -> Path:
    """Write a Xenova-style BGE-M3 folder with the given pieces."""
    (directory / "onnx").mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config or CONFIG))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config or TOKENIZER_CONFIG)
    )
    (directory / "sentencepiece.bpe.model").write_bytes(sentencepiece_model)
    (directory / "onnx" / "model_int8.onnx").write_bytes(model.SerializeToString())
    return directory
