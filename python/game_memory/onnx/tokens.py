"""The seams between the engine and a model: tokenizer, inference and run control.

The engine only sees these protocols, so tests can inject fakes (a tokenizer that fails,
an inference that blocks until terminated) and the two providers differ only in what
they plug in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["BatchInference", "RunControl", "TextTokenizer", "TokenizedText"]


@dataclass(frozen=True, slots=True)
class TokenizedText:
    """The model's token ids of one text, special tokens included, and whether it was cut."""

    ids: Sequence[int]
    truncated: bool


class TextTokenizer(Protocol):
    """Turns one text into token ids of at most the engine's ``maximum_tokens``.

    Implementations must be safe to call from several worker threads at once and raise
    ``OnnxEmbeddingError(kind=TOKENIZATION)`` on failure.
    """

    @property
    def pad_id(self) -> int:
        """The id used to right-pad shorter texts in a batch."""
        ...

    def tokenize(self, text: str) -> TokenizedText:
        """Tokenize ``text``, cutting it to the configured maximum."""
        ...


class RunControl:
    """Cancellation of one operation, shared by the event loop and the worker thread.

    ``cancel()`` is idempotent and thread-safe; hooks registered with ``on_cancel`` run
    exactly once, at cancellation, or at once if it already happened.
    """

    __slots__ = ("_cancelled", "_hooks", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._hooks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        """Whether the operation was cancelled (by its caller, a deadline or ``aclose``)."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancel the operation and run its hooks (for example, terminate onnxruntime)."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def on_cancel(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` on cancellation; returns a function that unregisters it."""
        with self._lock:
            if not self._cancelled:
                self._hooks.append(hook)

                def unregister() -> None:
                    with self._lock:
                        if hook in self._hooks:
                            self._hooks.remove(hook)

                return unregister
        hook()
        return lambda: None


class BatchInference(Protocol):
    """Runs the model on one padded batch; safe to call from several threads at once."""

    @property
    def hidden_size(self) -> int:
        """The width of ``last_hidden_state`` (the vector width)."""
        ...

    def run(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        control: RunControl,
    ) -> npt.NDArray[np.float32]:
        """Return ``last_hidden_state`` [batch, seq, hidden] for the batch.

        Must stop promptly once ``control`` is cancelled (any exception may then be
        raised; the engine reports the cancellation), and raise
        ``OnnxEmbeddingError(kind=INFERENCE)`` for other runtime failures.
        """
        ...

    def close(self) -> None:
        """Release the model; called once, after every run has ended."""
        ...
