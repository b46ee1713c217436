"""The lexical fallback's notice is a ``warning`` whatever made the model unavailable (as
docs/protocol.md says), and a runtime that cannot be imported is said in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import game_memory
from game_memory import onnx
from game_memory.errors import EmbeddingUnavailableError
from game_memory.models import DEFAULT_MODEL_UNAVAILABLE, load_model
from game_memory.onnx.errors import OnnxFailureKind, onnx_error


@pytest.mark.parametrize("kind", list(OnnxFailureKind))
async def test_the_fallback_notice_is_a_warning_whatever_the_failure(
    monkeypatch: pytest.MonkeyPatch, kind: OnnxFailureKind
) -> None:
    """A truncated ``model_int8.onnx`` (``model_integrity``) or tokenizer, a model not
    prepared (``missing_model_file``): the game goes on lexically either way."""

    async def failing(_name: str, _home: Path | None) -> object:
        raise onnx_error(kind, f"the model failed ({kind.value})")

    monkeypatch.setattr(onnx, "load_named_provider", failing)
    choice = await load_model("default")
    assert choice.provider is None and choice.notice is not None
    assert choice.notice.code == DEFAULT_MODEL_UNAVAILABLE
    assert choice.notice.severity == "warning"
    assert choice.notice.details == {"kind": kind.value}


@pytest.fixture
def no_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """``game_memory.onnx`` cannot be imported (onnxruntime's native library is gone)."""
    monkeypatch.delattr(game_memory, "onnx", raising=False)
    monkeypatch.setitem(sys.modules, "game_memory.onnx", None)


@pytest.mark.usefixtures("no_runtime")
async def test_a_runtime_that_cannot_be_imported_falls_back_with_a_warning_to_reinstall() -> None:
    choice = await load_model("default")
    assert choice.provider is None and choice.notice is not None
    assert choice.notice.severity == "warning"
    message = choice.notice.message
    assert "embedding runtime cannot be imported" in message
    assert "reinstall game-memory" in message
    assert "models prepare" not in message  # preparing a model again would not repair it


@pytest.mark.usefixtures("no_runtime")
async def test_a_model_folder_without_a_runtime_is_an_embedding_error_naming_it(
    tmp_path: Path,
) -> None:
    """``--model PATH`` still fails (the folder was asked for), but as the error ``serve``
    reports in one line, not as an ``ImportError`` that ends it in a traceback."""
    with pytest.raises(EmbeddingUnavailableError) as raised:
        await load_model(str(tmp_path / "bge-m3"))
    assert f"cannot load the model folder {tmp_path / 'bge-m3'}" in str(raised.value)
    assert "embedding runtime cannot be imported" in str(raised.value)
