"""What text of a memory (or query) the embedding model sees."""

from __future__ import annotations

from game_memory.errors import InvalidArgumentError
from game_memory.model import GameMemory, GameMemoryQuery
from game_memory.strict_json import readable_json

__all__ = ["MemoryTextProjector"]


class MemoryTextProjector:
    """Project memories and queries to embedding text (the reference's default projector).

    A document is its searchable text (when not blank), a newline, the payload JSON and,
    when it has tags, a newline and the tags joined by spaces; a query is its text. Both
    are cut to ``maximum_characters``, and a NUL character in either becomes a space: a
    memory may hold one (the save keeps any text), but tokenizers that pass C strings
    cannot, and the ONNX providers refuse such a text, which failed the whole batch it was
    in (a rebuild of a session with one such memory never finished).

    Raises:
        InvalidArgumentError: ``maximum_characters`` is not an integer from 1 to
            1,000,000 (a bool or a string included).
    """

    def __init__(self, maximum_characters: int = 100_000) -> None:
        if (
            isinstance(maximum_characters, bool)
            or not isinstance(maximum_characters, int)
            or not 1 <= maximum_characters <= 1_000_000
        ):
            raise InvalidArgumentError(
                f"maximum_characters must be an integer from 1 to 1,000,000, not "
                f"{maximum_characters!r}"
            )
        self.maximum_characters = maximum_characters

    def project_document(self, memory: GameMemory) -> str:
        """The text embedded for ``memory``.

        Raises:
            InvalidArgumentError: ``memory`` is not a ``GameMemory``.
        """
        if not isinstance(memory, GameMemory):
            raise InvalidArgumentError(
                f"project_document takes a GameMemory, not {type(memory).__name__}"
            )
        parts: list[str] = []
        if memory.searchable_text and memory.searchable_text.strip():
            parts.append(memory.searchable_text)
        parts.append(readable_json(memory.payload_json))  # "épée", not "\\u00e9p\\u00e9e"
        if memory.tags:
            parts.append(" ".join(memory.tags))
        return _without_nul("\n".join(parts)[: self.maximum_characters])

    def project_query(self, query: GameMemoryQuery) -> str:
        """The text embedded for ``query`` (empty without text).

        Raises:
            InvalidArgumentError: ``query`` is not a ``GameMemoryQuery``.
        """
        if not isinstance(query, GameMemoryQuery):
            raise InvalidArgumentError(
                f"project_query takes a GameMemoryQuery, not {type(query).__name__}"
            )
        return _without_nul((query.text or "")[: self.maximum_characters])


def _without_nul(text: str) -> str:
    return text.replace("\0", " ") if "\0" in text else text
