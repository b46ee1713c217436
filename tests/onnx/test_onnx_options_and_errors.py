"""Options bounds and the error classes generic handlers rely on."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from game_memory.errors import (
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    GameMemoryError,
    StoreBusyError,
)
from game_memory.onnx import (
    BgeM3OnnxEmbeddingOptions,
    ModelPreparationError,
    OnnxEmbeddingError,
    OnnxFailureKind,
    SentenceEncoderOnnxEmbeddingOptions,
)
from game_memory.onnx.batching import estimate_tensor_bytes, pad_batch, plan_batches
from game_memory.onnx.errors import OnnxEmbeddingTimeoutError, onnx_error
from game_memory.onnx.pooling import Pooling, pool


def test_the_defaults_are_the_reference_defaults(tmp_path: Path) -> None:
    options = BgeM3OnnxEmbeddingOptions(tmp_path)
    assert options.model_directory == tmp_path
    assert (options.maximum_tokens, options.maximum_batch_size) == (512, 16)
    assert (options.maximum_concurrent_inferences, options.maximum_queued_operations) == (1, 16)
    assert (options.queue_timeout, options.inference_timeout, options.load_timeout) == (
        5.0,
        30.0,
        120.0,
    )
    assert options.maximum_batch_tokens == 32_768
    assert options.maximum_tensor_bytes == 268_435_456
    assert options.expected_sha256 is None and options.metrics is None
    encoder = SentenceEncoderOnnxEmbeddingOptions(tmp_path)
    assert (encoder.maximum_tokens, encoder.precision) == (None, "int8")


@pytest.mark.parametrize(
    ("name", "bad", "good"),
    [
        ("maximum_tokens", 2, 3),
        ("maximum_tokens", 8_193, 8_192),
        ("maximum_characters_per_text", 0, 1_000_000),
        ("maximum_texts_per_call", 4_097, 4_096),
        ("maximum_batch_size", 0, 256),
        ("maximum_batch_size", 257, 1),
        ("maximum_batch_tokens", 1_048_577, 1_048_576),
        ("maximum_tensor_bytes", 4_194_303, 4_194_304),
        ("maximum_tensor_bytes", 2_147_483_649, 2_147_483_648),
        ("maximum_model_bytes", 1_048_575, 4_294_967_296),
        ("maximum_concurrent_inferences", 33, 32),
        ("maximum_queued_operations", -1, 0),
        ("queue_timeout", 0.0009, 0.001),
        ("queue_timeout", 300.1, 300.0),
        ("inference_timeout", 0.009, 1_800.0),
        ("load_timeout", 0.5, 1.0),
        ("intra_op_threads", 257, 0),
        ("batch_threads", 65, 64),
        ("batch_threads", -1, 0),
        ("inter_op_threads", 0, 1),
        ("provider_id", " ", "x" * 256),
        ("provider_id", "x" * 257, "game"),
        ("provider_id", "tab\there", "ok"),
        ("model_version", "v" * 129, "v" * 128),
        ("queue_timeout", float("nan"), 1.0),
    ],
)
def test_each_bound_is_enforced(tmp_path: Path, name: str, bad: object, good: object) -> None:
    with pytest.raises(OnnxEmbeddingError) as caught:
        BgeM3OnnxEmbeddingOptions(tmp_path, **{name: bad})
    assert caught.value.kind is OnnxFailureKind.INVALID_CONFIGURATION
    assert name in str(caught.value)
    assert getattr(BgeM3OnnxEmbeddingOptions(tmp_path, **{name: good}), name) == good


def test_batch_tokens_must_hold_one_full_text(tmp_path: Path) -> None:
    with pytest.raises(OnnxEmbeddingError) as caught:
        BgeM3OnnxEmbeddingOptions(tmp_path, maximum_tokens=600, maximum_batch_tokens=599)
    assert "maximum_batch_tokens" in str(caught.value)


@pytest.mark.parametrize(
    "expected",
    [
        {"sentencepiece.bpe.model": "z" * 64},
        {"other.bin": "a" * 64},
        {"config.json": "a" * 64, "config.json ": "a" * 64},
        {"onnx/model_int8.onnx": "a" * 64, "onnx\\model_int8.onnx": "b" * 64},
    ],
)
def test_expected_hashes_name_known_files_once(tmp_path: Path, expected: dict[str, str]) -> None:
    with pytest.raises(OnnxEmbeddingError):
        BgeM3OnnxEmbeddingOptions(tmp_path, expected_sha256=expected)


def test_expected_sizes_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(OnnxEmbeddingError):
        BgeM3OnnxEmbeddingOptions(tmp_path, expected_file_bytes={"config.json": 0})
    options = BgeM3OnnxEmbeddingOptions(tmp_path, expected_file_bytes={"config.json": 7})
    assert options.expected_file_bytes == {"config.json": 7}


def test_unknown_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(OnnxEmbeddingError):
        BgeM3OnnxEmbeddingOptions(tmp_path, maximum_tokenz=5)


def test_timeouts_are_embedding_timeouts_and_a_full_queue_is_busy() -> None:
    for kind in OnnxFailureKind:
        error = onnx_error(kind, "message")
        assert isinstance(error, EmbeddingUnavailableError)
        assert error.kind is kind
        timeout = kind in (OnnxFailureKind.TIMEOUT, OnnxFailureKind.QUEUE_TIMEOUT)
        assert isinstance(error, EmbeddingTimeoutError) is timeout
        assert isinstance(error, OnnxEmbeddingTimeoutError) is timeout
        assert isinstance(error, StoreBusyError) is (kind is OnnxFailureKind.QUEUE_FULL)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and copy.kind is kind and str(copy) == "message"


def test_an_error_needs_a_kind() -> None:
    with pytest.raises(TypeError):
        OnnxEmbeddingError("no kind", kind=None)  # type: ignore[arg-type]


def test_preparation_errors_name_their_stage() -> None:
    error = ModelPreparationError("offline", stage="download")
    assert isinstance(error, GameMemoryError) and error.stage == "download"
    assert pickle.loads(pickle.dumps(error)).stage == "download"


def test_reference_batching_example() -> None:
    assert plan_batches([3, 3, 5], 2, 12) == [range(0, 2), range(2, 3)]
    assert plan_batches([20, 1], 4, 12) == [range(0, 1), range(1, 2)]


@given(
    lengths=st.lists(st.integers(1, 50), max_size=40),
    size=st.integers(1, 8),
    tokens=st.integers(1, 120),
)
def test_batches_cover_every_text_in_order_within_bounds(
    lengths: list[int], size: int, tokens: int
) -> None:
    batches = plan_batches(lengths, size, tokens)
    assert [i for batch in batches for i in batch] == list(range(len(lengths)))
    for batch in batches:
        assert 1 <= len(batch) <= size
        assert len(batch) == 1 or sum(lengths[i] for i in batch) <= tokens


def test_padding_is_right_sided_with_a_mask() -> None:
    ids, mask = pad_batch([[0, 5, 2], [0, 2]], pad_id=1)
    assert ids.tolist() == [[0, 5, 2], [0, 2, 1]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert estimate_tensor_bytes(2, 3, 1024) == 2 * 3 * (24 + 4096)


def test_equal_lengths_need_no_padding() -> None:
    ids, mask = pad_batch([[0, 5, 2], [0, 7, 2]], pad_id=1)
    assert ids.dtype == mask.dtype == np.int64
    assert ids.tolist() == [[0, 5, 2], [0, 7, 2]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 1]]


@pytest.mark.parametrize("method", [Pooling.MEAN, Pooling.CLS])
def test_pooling_matches_a_plain_masked_mean_with_and_without_padding(method: Pooling) -> None:
    rng = np.random.default_rng(7)
    hidden = rng.normal(size=(3, 5, 8)).astype(np.float32)
    for lengths in ([5, 5, 5], [5, 2, 4]):
        mask = np.array([[1] * n + [0] * (5 - n) for n in lengths], dtype=np.int64)
        vectors = pool(hidden, mask, method)
        assert vectors.dtype == np.float32
        for row, n in enumerate(lengths):
            states = hidden[row, :n].astype(np.float64)
            expected = states.mean(axis=0) if method is Pooling.MEAN else states[0]
            expected /= np.linalg.norm(expected)
            np.testing.assert_allclose(vectors[row], expected, atol=1e-6)
