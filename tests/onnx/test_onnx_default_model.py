"""The real default model (all-MiniLM-L6-v2, prepared from its PyPI wheel): quality checks."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from game_memory.cli.models import run_info
from game_memory.onnx import MiniLmOnnxEmbeddingProvider, load_provider_from_directory
from game_memory.onnx.prepared_manifest import PreparedModelManifest

pytestmark = pytest.mark.model

PARAPHRASES = [
    ("The guard saw a thief near the mill.", "A watchman spotted a burglar by the mill."),
    ("The dragon burned the village.", "The village was set on fire by a dragon."),
    ("I am hungry.", "I would like something to eat."),
    ("The blacksmith sold me a sword.", "I bought a blade from the smith."),
    ("It is raining heavily tonight.", "There is a downpour this evening."),
]


async def embed(folder: Path, texts: list[str], **options: object) -> np.ndarray:
    async with await load_provider_from_directory(folder, **options) as provider:
        assert isinstance(provider, MiniLmOnnxEmbeddingProvider)
        return np.array(await provider.embed_documents(texts))


async def test_paraphrases_score_above_unrelated_sentences(prepared_default_model: Path) -> None:
    left = await embed(prepared_default_model, [a for a, _ in PARAPHRASES])
    right = await embed(prepared_default_model, [b for _, b in PARAPHRASES])
    similarity = left @ right.T
    paired = np.diag(similarity)
    unrelated = similarity[~np.eye(len(PARAPHRASES), dtype=bool)]
    assert paired.min() > unrelated.max(), similarity
    assert paired.mean() > 0.5 and unrelated.mean() < 0.2


async def test_fp32_and_int8_agree(prepared_default_model: Path) -> None:
    texts = [text for pair in PARAPHRASES for text in pair]
    fp32 = await embed(prepared_default_model, texts, precision="fp32")
    int8 = await embed(prepared_default_model, texts)
    cosines = (fp32 * int8).sum(axis=1)
    assert cosines.mean() > 0.98 and cosines.min() > 0.95, cosines


async def test_the_identity_names_the_model_and_its_hashes(prepared_default_model: Path) -> None:
    manifest = PreparedModelManifest.read(prepared_default_model)
    async with await load_provider_from_directory(prepared_default_model) as provider:
        identity = str(provider.identity)
    onnx_sha = manifest.file("onnx/model_int8.onnx").sha256[:16]
    tokenizer_sha = manifest.file("tokenizer.json").sha256[:16]
    assert identity == (
        f"onnx-in-process/sentence-transformers/all-MiniLM-L6-v2@int8-{onnx_sha}-"
        f"{tokenizer_sha}+bert-wordpiece-mean-l2-v1-max256:384"
    )


def test_models_info_reports_an_intact_model(
    prepared_default_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = prepared_default_model.parent.parent
    assert run_info(argparse.Namespace(home=str(home))) == 0
    assert "prepared and intact" in capsys.readouterr().out


async def test_loading_the_model_ends_with_a_full_collection(prepared_default_model: Path) -> None:
    """The full collection that loading onnxruntime and a model make due runs as the model
    loads, not inside the first recall (``game_memory.models``): right after the load
    no collection of the older generations is pending."""
    import gc

    from game_memory.models import load_model

    choice = await load_model(str(prepared_default_model))
    counts = gc.get_count()
    assert choice.provider is not None
    await choice.provider.aclose()
    assert counts[1:] == (0, 0), counts


@pytest.mark.parametrize("fails", [False, True])
async def test_loading_the_model_runs_one_query_and_keeps_a_model_that_fails_it(
    prepared_default_model: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    """The first run's one-time costs are paid as the model loads; a model that cannot
    embed is still returned, for the first recall to report as before."""
    from game_memory.models import load_model

    asked: list[str] = []
    real = MiniLmOnnxEmbeddingProvider.embed_query

    async def counted(self: MiniLmOnnxEmbeddingProvider, text: str) -> np.ndarray:
        asked.append(text)
        if fails:
            raise RuntimeError("the model cannot run")
        return await real(self, text)

    monkeypatch.setattr(MiniLmOnnxEmbeddingProvider, "embed_query", counted)
    choice = await load_model(str(prepared_default_model))
    assert isinstance(choice.provider, MiniLmOnnxEmbeddingProvider) and choice.notice is None
    assert asked == ["warm up"]
    await choice.provider.aclose()


async def test_a_load_cancelled_while_the_model_warms_up_closes_it(
    prepared_default_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from game_memory.models import load_model

    started = asyncio.Event()
    closed: list[bool] = []
    real_close = MiniLmOnnxEmbeddingProvider.aclose

    async def stuck(self: MiniLmOnnxEmbeddingProvider, text: str) -> np.ndarray:
        started.set()
        await asyncio.Event().wait()  # never set: the load is cancelled here
        raise AssertionError("unreachable")

    async def recorded(self: MiniLmOnnxEmbeddingProvider) -> None:
        closed.append(True)
        await real_close(self)

    monkeypatch.setattr(MiniLmOnnxEmbeddingProvider, "embed_query", stuck)
    monkeypatch.setattr(MiniLmOnnxEmbeddingProvider, "aclose", recorded)
    loading = asyncio.ensure_future(load_model(str(prepared_default_model)))
    await asyncio.wait_for(started.wait(), 30)
    loading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loading
    assert closed == [True]
