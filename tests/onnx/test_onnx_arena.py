"""The idle arena shrinker: the session's arena growth goes back only once it is idle."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import tiny_bert_model as bert

from game_memory.onnx.arena import IdleArenaShrinker
from game_memory.onnx.bert_config import BertConfig
from game_memory.onnx.build.bert_graph import build_bert_graph
from game_memory.onnx.session import OnnxSessionInference
from game_memory.onnx.tokens import RunControl


def wait_until(condition: threading.Event, seconds: float) -> bool:
    return condition.wait(seconds)


def test_a_burst_of_runs_is_shrunk_once_after_it_ends() -> None:
    calls: list[float] = []
    shrunk = threading.Event()

    def shrink() -> None:
        calls.append(time.monotonic())
        shrunk.set()

    idle = 1.0  # long against the burst's gaps, so a loaded machine cannot split the burst
    shrinker = IdleArenaShrinker(shrink, idle_seconds=idle)
    try:
        last = 0.0
        for _ in range(5):  # a burst: each run long before the idle time has passed
            last = time.monotonic()
            shrinker.ran()
            time.sleep(0.01)
        assert wait_until(shrunk, 30)
        assert len(calls) == 1
        assert calls[0] - last >= idle * 0.99  # never during the burst
        time.sleep(2 * idle)
        assert len(calls) == 1  # once per burst, not again while nothing runs
        shrunk.clear()
        shrinker.ran()
        assert wait_until(shrunk, 30)
        assert len(calls) == 2
    finally:
        shrinker.close()


def test_a_closed_shrinker_never_shrinks_and_a_failing_shrink_is_ignored() -> None:
    calls: list[int] = []
    failed = threading.Event()

    def shrink() -> None:
        calls.append(1)
        failed.set()
        raise RuntimeError("onnxruntime said no")

    shrinker = IdleArenaShrinker(shrink, idle_seconds=0.05)
    shrinker.ran()
    assert wait_until(failed, 5)
    failed.clear()
    shrinker.ran()  # the thread survived the failure
    assert wait_until(failed, 30)
    assert len(calls) == 2
    shrinker.close()
    shrinker.close()  # idempotent
    shrinker.ran()
    time.sleep(0.2)
    assert len(calls) == 2


def test_a_real_session_shrinks_its_arena_and_still_answers_the_same(
    tmp_path: Path, tiny_bert_weights: dict[str, np.ndarray]
) -> None:
    model = build_bert_graph(tiny_bert_weights, BertConfig.from_document(bert.config()))
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    inference = OnnxSessionInference(path, hidden_size=bert.config()["hidden_size"])
    shrunk = threading.Event()
    original = inference._shrink_arena

    def observed() -> None:
        original()  # the real shrinking run (one token, the shrink option, a heap trim)
        shrunk.set()

    inference._shrinker = IdleArenaShrinker(observed, idle_seconds=0.05)
    ids = np.array([[2, 5, 6, 3]], dtype=np.int64)
    mask = np.ones_like(ids)
    try:
        before = inference.run(ids, mask, RunControl())
        assert wait_until(shrunk, 5)
        after = inference.run(ids, mask, RunControl())
        np.testing.assert_array_equal(before, after)
    finally:
        inference.close()
    inference._shrink_arena()  # after close: nothing to shrink, no error
