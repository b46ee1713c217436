"""Check that a folder's ``config.json`` and ``tokenizer_config.json`` describe BGE-M3."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.model_files import model_id_problem

__all__ = ["BGE_M3_HIDDEN_SIZE", "validate_bge_m3_config"]

#: Width of BGE-M3's dense vectors.
BGE_M3_HIDDEN_SIZE = 1024

_REQUIRED_CONFIG: dict[str, object] = {
    "model_type": "xlm-roberta",
    "hidden_size": BGE_M3_HIDDEN_SIZE,
    "bos_token_id": 0,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "type_vocab_size": 1,
    "vocab_size": 250_002,
}


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_bge_m3_config(
    config: Mapping[str, Any], tokenizer_config: Mapping[str, Any], maximum_tokens: int
) -> str:
    """Validate both documents against BGE-M3 and ``maximum_tokens``.

    It runs before the model is loaded, so everything the identity will be built from is
    checked here: ``_name_or_path`` must be what an identity's model id may be (non-blank,
    at most 512 characters, no control characters).

    Returns:
        The model id (``_name_or_path``, for example ``BAAI/bge-m3``).

    Raises:
        OnnxEmbeddingError: ``UNSUPPORTED_MODEL`` naming the first field that is missing
            or wrong.
    """

    def unsupported(reason: str) -> Exception:
        return onnx_error(
            OnnxFailureKind.UNSUPPORTED_MODEL, f"the model folder is not BGE-M3: {reason}"
        )

    model_id = config.get("_name_or_path")
    if model_id is None:
        raise unsupported("config.json has no _name_or_path")
    problem = model_id_problem(model_id)
    if problem is not None:
        raise unsupported(f"config.json _name_or_path {problem}")
    assert isinstance(model_id, str)  # model_id_problem refuses anything else
    for key, wanted in _REQUIRED_CONFIG.items():
        value = config.get(key)
        if isinstance(wanted, int) and not _integer(value):
            raise unsupported(f"config.json {key} is {value!r}, not {wanted!r}")
        if value != wanted:
            raise unsupported(f"config.json {key} is {value!r}, not {wanted!r}")
    positions = config.get("max_position_embeddings")
    if not _integer(positions) or positions < maximum_tokens + 2:
        raise unsupported(
            f"config.json max_position_embeddings is {positions!r}; maximum_tokens="
            f"{maximum_tokens} needs at least {maximum_tokens + 2}"
        )
    tokenizer_class = tokenizer_config.get("tokenizer_class")
    if tokenizer_class != "XLMRobertaTokenizer":
        raise unsupported(
            f"tokenizer_config.json tokenizer_class is {tokenizer_class!r}, not "
            "'XLMRobertaTokenizer'"
        )
    model_max_length = tokenizer_config.get("model_max_length")
    if not _integer(model_max_length) or not maximum_tokens <= model_max_length < 2**63:
        raise unsupported(
            f"tokenizer_config.json model_max_length is {model_max_length!r}; it must be at "
            f"least maximum_tokens={maximum_tokens}"
        )
    return model_id
