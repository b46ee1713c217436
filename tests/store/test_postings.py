"""The lexical index's term table finds every term of a read file, and only those."""

from __future__ import annotations

import numpy as np
import pytest

from game_memory.store import postings
from game_memory.store.postings import TermTable


def test_the_term_table_finds_each_term_by_its_index_and_nothing_else() -> None:
    terms = sorted(["", "a", "ab", "b", "dragon", "\u00e9t\u00e9", "\u6c34", "\U0001f409"],
                   key=lambda term: term.encode("utf-8"))  # fmt: skip
    encoded = [term.encode("utf-8") for term in terms]
    offsets = np.concatenate(([0], np.cumsum([len(term) for term in encoded]))).astype(np.int64)
    table = TermTable(b"".join(encoded), offsets)
    assert list(table) == terms
    for index, term in enumerate(terms):
        assert table.find(term) == index
    for absent in ("aa", "c", "dragons", "\u00e9", "\U0001f40a", "zz"):
        assert table.find(absent) is None
    assert TermTable(b"", np.zeros(1, np.int64)).find("a") is None


def test_kept_answers_are_the_searched_ones_and_stay_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setattr(postings, "FOUND_TERMS", 4)
    terms = [f"t{number:03}" for number in range(50)]
    encoded = [term.encode("utf-8") for term in terms]
    offsets = np.concatenate(([0], np.cumsum([len(term) for term in encoded]))).astype(np.int64)
    table = TermTable(b"".join(encoded), offsets)
    asked = [*terms, "t999", "a", *reversed(terms), "t999"]
    for term in asked * 2:  # asked again: answered from what was kept, or searched again
        assert table.find(term) == (terms.index(term) if term in terms else None)
        assert len(table._found) <= 4
