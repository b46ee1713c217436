"""Fake tokenizer and inference for engine tests: deterministic, observable, controllable."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from game_memory.onnx.tokens import RunControl, TokenizedText


class WordTokenizer:
    """One id per word (3 + word length), between ``<s>`` (0) and ``</s>`` (2); pad is 1."""

    pad_id = 1

    def __init__(self, maximum_tokens: int = 512, fail_on: str | None = None) -> None:
        self.maximum_tokens = maximum_tokens
        self.fail_on = fail_on

    def tokenize(self, text: str) -> TokenizedText:
        if self.fail_on is not None and self.fail_on in text:
            raise RuntimeError("the tokenizer broke")
        words = [4 + len(word) for word in text.split()]
        limit = self.maximum_tokens - 2
        return TokenizedText(ids=[0, *words[:limit], 2], truncated=len(words) > limit)


class GatedInference:
    """Hidden states from ids; runs can be held open, observed and made to misbehave.

    Attributes:
        gate: Runs block until it is set (it starts set).
        cooperative: Whether a held run stops when its control is cancelled.
        output: Replaces the output (``lambda hidden: ...``) to simulate broken models.
    """

    def __init__(self, hidden_size: int = 8) -> None:
        self.hidden_size = hidden_size
        self.gate = threading.Event()
        self.gate.set()
        self.cooperative = True
        self.started = threading.Event()
        self.terminated = threading.Event()
        self.ended = threading.Event()
        self.batch_sizes: list[int] = []
        self.threads: set[int] = set()
        self.active = 0
        self.most_active = 0
        self.closed = 0
        self.fail: Exception | None = None
        #: Seconds each run takes (a float, or a function drawing one per run).
        self.delay: float | Callable[[], float] = 0.0
        self.output: Callable[[npt.NDArray[np.float32]], object] | None = None
        self._lock = threading.Lock()

    def run(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        control: RunControl,
    ) -> npt.NDArray[np.float32]:
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.batch_sizes.append(len(input_ids))
            self.threads.add(threading.get_ident())
        self.started.set()
        stop = threading.Event()
        unregister = control.on_cancel(stop.set)
        try:
            while not self.gate.wait(0.002):
                if self.cooperative and stop.is_set():
                    self.terminated.set()
                    raise RuntimeError("terminated")
            delay = self.delay() if callable(self.delay) else self.delay
            if delay and stop.wait(delay) and self.cooperative:
                self.terminated.set()
                raise RuntimeError("terminated")
            if self.fail is not None:
                raise self.fail
            steps = np.arange(1, self.hidden_size + 1, dtype=np.float32)
            hidden = np.sin(input_ids[:, :, None].astype(np.float32) * steps) + 0.01 * steps
            hidden = hidden.astype(np.float32)
            if self.output is not None:
                return self.output(hidden)  # type: ignore[return-value]
            return hidden
        finally:
            unregister()
            with self._lock:
                self.active -= 1
            self.ended.set()

    def close(self) -> None:
        self.closed += 1
