"""Model names become providers in one place (``game_memory.models``), typed on failure kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory import HashingEmbeddingProvider
from game_memory.models import DEFAULT_MODEL_UNAVAILABLE, NAMED_MODELS, load_model
from game_memory.onnx import MODEL_NAMES


def test_every_named_onnx_model_is_a_model_name() -> None:
    assert set(MODEL_NAMES) <= set(NAMED_MODELS)
    assert {"lexical", "hashing"} <= set(NAMED_MODELS)


async def test_lexical_and_hashing_need_no_runtime() -> None:
    assert (await load_model("lexical")).provider is None
    hashing = (await load_model("hashing")).provider
    assert isinstance(hashing, HashingEmbeddingProvider)


@pytest.mark.parametrize("name", MODEL_NAMES)
async def test_an_unprepared_named_model_falls_back_with_advice_for_that_model(
    tmp_path: Path, name: str
) -> None:
    choice = await load_model(name, tmp_path / "no-models")
    assert choice.provider is None and choice.notice is not None
    notice = choice.notice
    assert notice.code == DEFAULT_MODEL_UNAVAILABLE
    assert notice.details == {"kind": "missing_model_file"}
    assert notice.severity == "warning"
    command = "game-memory models prepare" + ("" if name == "default" else f" {name}")
    assert command in notice.message
    # The same notice reaches a command line (search, status) and a Python caller: "restart
    # the server" alone told them to restart something they do not run.
    assert "or run the command, or open the save, again" in notice.message


async def test_a_model_folder_that_cannot_load_is_an_error(tmp_path: Path) -> None:
    from game_memory.errors import EmbeddingUnavailableError

    with pytest.raises(EmbeddingUnavailableError, match="does not exist"):
        await load_model(str(tmp_path / "nothing-here"))


@pytest.mark.model
async def test_the_multilingual_name_loads_multilingual_e5(tmp_path: Path) -> None:
    import os

    from game_memory import open_memory
    from game_memory.onnx import prepare_named_model

    configured = os.environ.get("GAME_MEMORY_HOME", "").strip()
    home = (
        Path(configured)
        if configured
        else Path(__file__).resolve().parents[1] / ".cache" / "pytest-game-memory-home"
    )
    prepare_named_model("multilingual", home)
    async with await open_memory(tmp_path / "save", model="multilingual", home=home) as memory:
        assert memory.mode == "hybrid" and memory.notice is None
        assert "multilingual-e5-small" in str(memory.active_identity)
