"""MemoryEmbeddingIdentity: the reference's bounds, string form and equality."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from game_memory import HashingEmbeddingProvider, MemoryEmbeddingIdentity


def identity(**fields: object) -> MemoryEmbeddingIdentity:
    values: dict[str, object] = {
        "provider_id": "onnx",
        "model_id": "BAAI/bge-m3",
        "version": "2024-01",
        "dimensions": 1024,
    }
    values.update(fields)
    return MemoryEmbeddingIdentity(**values)  # type: ignore[arg-type]


def test_string_form_is_provider_slash_model_at_version_colon_dimensions() -> None:
    assert str(identity()) == "onnx/BAAI/bge-m3@2024-01:1024"


def test_identities_are_equal_only_when_all_four_fields_are() -> None:
    assert identity() == identity()
    assert hash(identity()) == hash(identity())
    assert identity(version="2024-02") != identity()
    assert identity(dimensions=1023) != identity()
    assert identity(provider_id="other") != identity()
    assert identity(model_id="BAAI/bge-m3-int8") != identity()


@pytest.mark.parametrize(
    ("field", "limit"), [("provider_id", 256), ("model_id", 512), ("version", 256)]
)
def test_labels_accept_their_limit_and_refuse_one_character_more(field: str, limit: int) -> None:
    assert len(getattr(identity(**{field: "x" * limit}), field)) == limit
    with pytest.raises(ValidationError, match="limit"):
        identity(**{field: "x" * (limit + 1)})


@pytest.mark.parametrize("field", ["provider_id", "model_id", "version"])
@pytest.mark.parametrize("value", ["", "   ", "tab\there", "nul\x00", "del\x7f", "c1\x85"])
def test_labels_refuse_blank_text_and_control_characters(field: str, value: str) -> None:
    with pytest.raises(ValidationError):
        identity(**{field: value})


@pytest.mark.parametrize("dimensions", [1, 65_536])
def test_dimensions_accept_the_reference_bounds(dimensions: int) -> None:
    assert identity(dimensions=dimensions).dimensions == dimensions


@pytest.mark.parametrize("dimensions", [0, -1, 65_537, True, 3.0, "8"])
def test_dimensions_refuse_values_outside_1_to_65536_and_non_integers(dimensions: object) -> None:
    with pytest.raises(ValidationError):
        identity(dimensions=dimensions)


def test_identity_is_immutable_and_refuses_unknown_fields() -> None:
    value = identity()
    with pytest.raises(ValidationError):
        value.version = "changed"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        identity(extra="field")


def test_hashing_provider_version_is_part_of_its_identity() -> None:
    first = HashingEmbeddingProvider(32).identity
    second = HashingEmbeddingProvider(32, version="v2").identity
    assert str(first) == "hashing/feature-hashing-words@v1:32"
    assert first != second
