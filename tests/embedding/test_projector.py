"""MemoryTextProjector: the text an embedding model sees for a memory or a query."""

from __future__ import annotations

import pytest

from game_memory import InvalidArgumentError, MemoryTextProjector
from support.vectors import MemoryFactory, query


def test_document_is_searchable_text_payload_and_tags_on_separate_lines(
    make_memory: MemoryFactory,
) -> None:
    memory = make_memory(text="The smith", payload_json='{"a":1}', tags=("forge", "anvil"))
    assert MemoryTextProjector().project_document(memory) == 'The smith\n{"a":1}\nanvil forge'


def test_document_without_searchable_text_or_tags_is_the_payload_alone(
    make_memory: MemoryFactory,
) -> None:
    assert MemoryTextProjector().project_document(make_memory(text="   ")) == "{}"
    assert MemoryTextProjector().project_document(make_memory(text=None)) == "{}"


def test_texts_are_cut_to_the_configured_number_of_characters(make_memory: MemoryFactory) -> None:
    projector = MemoryTextProjector(maximum_characters=5)
    assert projector.project_document(make_memory(text="abcdefgh")) == "abcde"
    assert projector.project_query(query("0123456789")) == "01234"


def test_query_text_is_its_text_or_empty() -> None:
    assert MemoryTextProjector().project_query(query("where is the cat")) == "where is the cat"
    assert MemoryTextProjector().project_query(query(None)) == ""


@pytest.mark.parametrize("maximum", [0, 1_000_001])
def test_maximum_characters_outside_1_to_1000000_is_refused(maximum: int) -> None:
    with pytest.raises(InvalidArgumentError):
        MemoryTextProjector(maximum_characters=maximum)
