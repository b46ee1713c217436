"""Write a BERT encoder as an opset-17 ONNX graph from its weights, with numpy and onnx.helper.

No torch: the graph is spelled out node by node (embeddings: three Gathers and a
LayerNormalization; per layer: Q/K/V projections, heads, scaled scores plus a mask bias,
Softmax, context, output projection, residual and LayerNormalization, then an erf-GELU
feed-forward block with its residual and LayerNormalization). Inputs are int64
``input_ids``, ``attention_mask`` and ``token_type_ids`` [batch, sequence]; the output is
float ``last_hidden_state`` [batch, sequence, hidden]. The bytes are deterministic for
given weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from game_memory.onnx.bert_config import BertConfig
from game_memory.onnx.errors import ModelPreparationError

__all__ = ["OPSET", "build_bert_graph"]

#: The ONNX operator set the graph uses (LayerNormalization needs 17).
OPSET = 17
_MASK_BIAS = -10_000.0


class _Graph:
    """Appends nodes and initializers, under deterministic names, to a graph in place.

    Building straight into the model's own graph keeps one copy of the weights in memory
    (``helper.make_graph`` and ``make_model`` would each copy them: 1.4 GB more for
    multilingual-e5-small).
    """

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph

    def constant(self, name: str, value: npt.NDArray[np.generic]) -> str:
        self.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        self.graph.node.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output


def _weights_getter(
    weights: Mapping[str, npt.NDArray[np.generic]],
) -> Callable[[str], npt.NDArray[np.float32]]:
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""

    def get(name: str) -> npt.NDArray[np.float32]:
        try:
            array = weights[prefix + name]
        except KeyError as exc:
            raise ModelPreparationError(
                f"the weights lack the tensor {prefix + name!r}", stage="build"
            ) from exc
        return np.asarray(array, dtype=np.float32)

    return get


def build_bert_graph(
    weights: Mapping[str, npt.NDArray[np.generic]],
    config: BertConfig,
    *,
    progress: Callable[[int, int], None] | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """Build the fp32 graph of a BERT encoder.

    Each tensor is read from ``weights`` once, in graph order, and copied into the model.

    Args:
        weights: Tensors named as in ``transformers``' ``BertModel`` (optionally under
            ``bert.``); linear weights are [out, in].
        config: The checked ``config.json``.
        progress: Called with ``(layers done, layers)`` as the graph grows.
        check: Run ``onnx.checker`` on the result. It serializes the model twice over
            (about 1 GB for multilingual-e5-small), so the folder builder turns it off and
            loads the saved file in onnxruntime instead.

    Returns:
        An opset-17 model that passes ``onnx.checker``.

    Raises:
        ModelPreparationError: Stage ``build``, if a tensor is missing or misshapen.
    """
    get = _weights_getter(weights)
    hidden, heads = config.hidden_size, config.num_attention_heads
    model = onnx.ModelProto()
    # IR 8 is what opset 17 shipped with; pinning it keeps the bytes independent of the
    # installed onnx version.
    model.ir_version = 8
    model.producer_name = "game-memory"
    model.producer_version = "bert-graph-1"
    model.opset_import.append(helper.make_opsetid("", OPSET))
    g = _Graph(model.graph)

    def expect(name: str, array: npt.NDArray[np.float32], shape: tuple[int, ...]) -> None:
        if array.shape != shape:
            raise ModelPreparationError(
                f"the tensor {name!r} has shape {array.shape}, not {shape}", stage="build"
            )

    def tensor(name: str, shape: tuple[int, ...]) -> npt.NDArray[np.float32]:
        array = get(name)
        expect(name, array, shape)
        return array

    def linear(x: str, name: str, inputs: int, outputs: int) -> str:
        weight = tensor(f"{name}.weight", (outputs, inputs))
        bias = tensor(f"{name}.bias", (outputs,))
        product = g.node("MatMul", [x, g.constant(f"{name}.weight_t", weight.T)], f"{name}.mm")
        return g.node("Add", [product, g.constant(f"{name}.bias", bias)], f"{name}.out")

    def layer_norm(x: str, name: str) -> str:
        scale = g.constant(f"{name}.weight", tensor(f"{name}.weight", (hidden,)))
        shift = g.constant(f"{name}.bias", tensor(f"{name}.bias", (hidden,)))
        return g.node(
            "LayerNormalization",
            [x, scale, shift],
            f"{name}.out",
            axis=-1,
            epsilon=config.layer_norm_eps,
        )

    # Shared constants.
    g.constant("const.zero_1d", np.array([0], np.int64))
    g.constant("const.one_f32", np.array(1.0, np.float32))
    g.constant("const.mask_bias", np.array(_MASK_BIAS, np.float32))
    g.constant("const.axes_1_2", np.array([1, 2], np.int64))
    g.constant("const.scale", np.array(1.0 / math.sqrt(config.head_size), np.float32))
    g.constant("const.half", np.array(0.5, np.float32))
    g.constant("const.sqrt2", np.array(math.sqrt(2.0), np.float32))
    g.constant("const.heads_shape", np.array([0, 0, heads, config.head_size], np.int64))
    g.constant("const.hidden_shape", np.array([0, 0, hidden], np.int64))

    # Embeddings: word + position + token type, then LayerNormalization.
    word = tensor("embeddings.word_embeddings.weight", (config.vocab_size, hidden))
    position = tensor(
        "embeddings.position_embeddings.weight", (config.max_position_embeddings, hidden)
    )
    token_type = tensor("embeddings.token_type_embeddings.weight", (config.type_vocab_size, hidden))
    words = g.node("Gather", [g.constant("embeddings.word", word), "input_ids"], "emb.words")
    # positions = table[0:sequence]: a Slice, not Range + Gather (whose onnxruntime fusion
    # mishandles scalar bounds).
    length = g.node("Shape", ["input_ids"], "emb.length", start=1, end=2)
    positions = g.node(
        "Slice",
        [g.constant("embeddings.position", position), "const.zero_1d", length, "const.zero_1d"],
        "emb.positions",
    )
    types = g.node(
        "Gather", [g.constant("embeddings.token_type", token_type), "token_type_ids"], "emb.types"
    )
    summed = g.node("Add", [g.node("Add", [words, positions], "emb.sum1"), types], "emb.sum")
    x = layer_norm(summed, "embeddings.LayerNorm")

    # Attention bias: 0 on real tokens, -10,000 on padding, broadcast to [b, 1, 1, s].
    mask = g.node("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    inverse = g.node("Sub", ["const.one_f32", mask], "mask.inverse")
    bias = g.node("Mul", [inverse, "const.mask_bias"], "mask.bias2d")
    bias = g.node("Unsqueeze", [bias, "const.axes_1_2"], "mask.bias")

    for index in range(config.num_hidden_layers):
        p = f"encoder.layer.{index}"

        def split_heads(projection: str, name: str, perm: list[int]) -> str:
            shaped = g.node("Reshape", [projection, "const.heads_shape"], f"{name}.heads")
            return g.node("Transpose", [shaped], f"{name}.t", perm=perm)

        query = split_heads(
            linear(x, f"{p}.attention.self.query", hidden, hidden), f"{p}.q", [0, 2, 1, 3]
        )
        key = split_heads(
            linear(x, f"{p}.attention.self.key", hidden, hidden), f"{p}.k", [0, 2, 3, 1]
        )
        value = split_heads(
            linear(x, f"{p}.attention.self.value", hidden, hidden), f"{p}.v", [0, 2, 1, 3]
        )
        scores = g.node("MatMul", [query, key], f"{p}.scores")
        scores = g.node("Mul", [scores, "const.scale"], f"{p}.scaled")
        scores = g.node("Add", [scores, bias], f"{p}.masked")
        probabilities = g.node("Softmax", [scores], f"{p}.probabilities", axis=-1)
        context = g.node("MatMul", [probabilities, value], f"{p}.context")
        context = g.node("Transpose", [context], f"{p}.context_t", perm=[0, 2, 1, 3])
        context = g.node("Reshape", [context, "const.hidden_shape"], f"{p}.context_merged")
        attended = linear(context, f"{p}.attention.output.dense", hidden, hidden)
        attended = g.node("Add", [attended, x], f"{p}.attention.residual")
        x = layer_norm(attended, f"{p}.attention.output.LayerNorm")

        inner = linear(x, f"{p}.intermediate.dense", hidden, config.intermediate_size)
        # Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))).
        erf = g.node("Erf", [g.node("Div", [inner, "const.sqrt2"], f"{p}.gelu.div")], f"{p}.erf")
        gate = g.node("Add", [erf, "const.one_f32"], f"{p}.gelu.add")
        gelu = g.node(
            "Mul", [g.node("Mul", [inner, gate], f"{p}.gelu.mul"), "const.half"], f"{p}.gelu"
        )
        out = linear(gelu, f"{p}.output.dense", config.intermediate_size, hidden)
        out = g.node("Add", [out, x], f"{p}.output.residual")
        x = layer_norm(out, f"{p}.output.LayerNorm")
        if progress is not None:
            progress(index + 1, config.num_hidden_layers)

    model.graph.node.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    sequence = ["batch", "sequence"]
    model.graph.name = "bert-encoder"
    model.graph.input.extend(
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, sequence),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, sequence),
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, sequence),
        ]
    )
    model.graph.output.append(
        helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*sequence, hidden])
    )
    if check:
        onnx.checker.check_model(model)
    return model
