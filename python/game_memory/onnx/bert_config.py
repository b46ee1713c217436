"""The parts of a BERT ``config.json`` the graph builder and the provider rely on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BertConfig"]


def _integer(document: Mapping[str, Any], key: str, minimum: int = 1) -> int:
    value = document.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"config.json {key} is {value!r}; expected an integer >= {minimum}")
    return value


@dataclass(frozen=True, slots=True)
class BertConfig:
    """A BERT encoder with absolute positions and exact (erf) GELU.

    Attributes mirror ``transformers.BertConfig``.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int

    @property
    def head_size(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> BertConfig:
        """Read and check a parsed ``config.json``.

        Raises:
            ValueError: Naming the first field that is missing, wrong or unsupported.
        """
        if document.get("model_type") != "bert":
            raise ValueError(
                f"config.json model_type is {document.get('model_type')!r}, not 'bert'"
            )
        if document.get("hidden_act", "gelu") != "gelu":
            raise ValueError(
                f"config.json hidden_act is {document.get('hidden_act')!r}, not 'gelu'"
            )
        position_type = document.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(f"config.json position_embedding_type is {position_type!r}")
        epsilon = document.get("layer_norm_eps", 1e-12)
        if not isinstance(epsilon, int | float) or isinstance(epsilon, bool) or not epsilon > 0:
            raise ValueError(f"config.json layer_norm_eps is {epsilon!r}")
        config = cls(
            vocab_size=_integer(document, "vocab_size"),
            hidden_size=_integer(document, "hidden_size"),
            num_hidden_layers=_integer(document, "num_hidden_layers"),
            num_attention_heads=_integer(document, "num_attention_heads"),
            intermediate_size=_integer(document, "intermediate_size"),
            max_position_embeddings=_integer(document, "max_position_embeddings"),
            type_vocab_size=_integer(document, "type_vocab_size"),
            layer_norm_eps=float(epsilon),
            pad_token_id=_integer(document, "pad_token_id", minimum=0),
        )
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(
                f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads "
                f"{config.num_attention_heads}"
            )
        if config.pad_token_id >= config.vocab_size:
            raise ValueError(f"pad_token_id {config.pad_token_id} is outside the vocabulary")
        return config
