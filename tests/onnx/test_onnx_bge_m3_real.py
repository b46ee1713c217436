"""Smoke test with real BGE-M3 weights, when ``GAME_MEMORY_BGE_M3_DIR`` points to a folder.

The folder is a Xenova-style export (``config.json``, ``tokenizer_config.json``,
``sentencepiece.bpe.model``, ``onnx/model_int8.onnx``). No registry ships it, so the test
is skipped, with the reason printed, unless a user supplies one.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from game_memory.onnx import BgeM3OnnxEmbeddingOptions, BgeM3OnnxEmbeddingProvider

SKIP_REASON = (
    "BGE-M3 smoke test skipped: set GAME_MEMORY_BGE_M3_DIR to a folder with config.json, "
    "tokenizer_config.json, sentencepiece.bpe.model and onnx/model_int8.onnx (no package "
    "registry ships BGE-M3 weights)"
)


@pytest.fixture
def bge_m3_directory(capsys: pytest.CaptureFixture[str]) -> Path:
    configured = os.environ.get("GAME_MEMORY_BGE_M3_DIR", "").strip()
    if not configured:
        with capsys.disabled():
            print(f"\n{SKIP_REASON}")
        pytest.skip(SKIP_REASON)
    return Path(configured)


async def test_real_bge_m3_embeds_paraphrases_closer_than_unrelated_texts(
    bge_m3_directory: Path,
) -> None:
    options = BgeM3OnnxEmbeddingOptions(bge_m3_directory, maximum_tokens=128)
    async with await BgeM3OnnxEmbeddingProvider.create(options) as provider:
        assert provider.identity.dimensions == 1024
        assert str(provider.identity).startswith(
            f"onnx-in-process/{provider.identity.model_id}@int8-"
        )
        texts = [
            "The guard saw a thief near the mill.",
            "Der Wächter sah einen Dieb bei der Mühle.",
            "The dragon burned the village.",
        ]
        vectors = np.array(await provider.embed_documents(texts))
        query = await provider.embed_query(texts[0])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(query, vectors[0], atol=2e-2)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
