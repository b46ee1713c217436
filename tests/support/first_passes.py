"""Which first passes over int8 copies answered (``index/quantized.py``): a spy the tests
of the copies and of their files share."""

from __future__ import annotations

import pytest

from game_memory.index import quantized

__all__ = ["spy_first_passes"]


def spy_first_passes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for each first pass a recall's scoring asks for, whether a copy answered
    it (``True``) or the float32 product had to (``False``)."""
    answers: list[bool] = []
    real = quantized.first_pass

    def spy(*arguments: object) -> object:
        found = real(*arguments)  # type: ignore[arg-type]
        answers.append(found is not None)
        return found

    monkeypatch.setattr("game_memory.recall.vectors.first_pass", spy)
    return answers
