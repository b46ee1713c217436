"""The identity of an embedding model: which vectors can be compared with which."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = ["MemoryEmbeddingIdentity"]


def _label(maximum: int) -> Any:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError("must be a non-blank string")
        if len(value) > maximum:
            raise ValueError(f"is {len(value)} characters long; the limit is {maximum}")
        if any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in value):
            raise ValueError("must not contain control characters")
        return value

    return BeforeValidator(check)


class MemoryEmbeddingIdentity(BaseModel):
    """Provider, model, version and width of the vectors a provider produces.

    Vectors are comparable only under an equal identity. A provider must change its
    ``version`` whenever weights, tokenizer, preprocessing, pooling or truncation change;
    the vector store then reports ``REBUILD_REQUIRED`` instead of mixing models.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_id: Annotated[str, _label(256)]
    model_id: Annotated[str, _label(512)]
    version: Annotated[str, _label(256)]
    dimensions: Annotated[int, Field(ge=1, le=65_536, strict=True)]

    def __str__(self) -> str:
        return f"{self.provider_id}/{self.model_id}@{self.version}:{self.dimensions}"
