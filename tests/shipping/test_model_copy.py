"""Copying a model into a bundle: from its manifest, hashed, without the unused fp32 graph."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from game_memory.bundle.layout import BundleError
from game_memory.bundle.model_copy import (
    FP32_GRAPH,
    ModelChoice,
    copy_model,
    resolve_model_choice,
)
from game_memory.onnx.build.prepare import prepared_model_problems
from game_memory.onnx.prepared_manifest import PreparedFile, PreparedModelManifest

_FILES = {
    "config.json": b'{"hidden_size": 4}',
    "tokenizer.json": b'{"model": {}}',
    "onnx/model_int8.onnx": b"int8 graph bytes",
    FP32_GRAPH: b"fp32 graph bytes, four times larger",
}


def _prepared(folder: Path) -> Path:
    entries = []
    for name, data in _FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
        entries.append(
            PreparedFile(path=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        )
    PreparedModelManifest(
        model_id="test/tiny", hidden_size=4, default_maximum_tokens=8, files=tuple(entries)
    ).write(folder)
    return folder


def test_a_prepared_model_is_copied_without_its_fp32_graph_and_stays_intact(
    tmp_path: Path,
) -> None:
    source = _prepared(tmp_path / "tiny")
    relative, size = copy_model(ModelChoice("folder", source), tmp_path / "bundle")
    copied = tmp_path / "bundle" / "models" / "tiny"
    assert relative == "models/tiny"
    assert not (copied / FP32_GRAPH).exists()
    assert (copied / "onnx" / "model_int8.onnx").read_bytes() == _FILES["onnx/model_int8.onnx"]
    assert prepared_model_problems(copied) == []  # the copied manifest lists what was copied
    assert [entry.path for entry in PreparedModelManifest.read(copied).files] == list(_FILES)[:3]
    assert size == sum(path.stat().st_size for path in copied.rglob("*") if path.is_file())


def test_a_damaged_model_file_is_named_and_never_shipped(tmp_path: Path) -> None:
    source = _prepared(tmp_path / "tiny")
    (source / "tokenizer.json").write_bytes(b'{"model": {"x"}}')
    with pytest.raises(BundleError, match=r"tokenizer\.json differs from its manifest") as raised:
        copy_model(ModelChoice("folder", source), tmp_path / "bundle")
    assert "models prepare --force" in str(raised.value)


def test_a_bge_m3_folder_is_copied_whole(tmp_path: Path) -> None:
    source = tmp_path / "bge-m3"
    (source / "onnx").mkdir(parents=True)
    for name in ("config.json", "tokenizer_config.json", "sentencepiece.bpe.model"):
        (source / name).write_text(name)
    (source / "onnx" / "model_int8.onnx").write_bytes(b"graph")
    (source / ".cache").mkdir()
    choice = resolve_model_choice(str(source))
    assert choice == ModelChoice("folder", source.resolve())
    copy_model(choice, tmp_path / "bundle")
    copied = tmp_path / "bundle" / "models" / "bge-m3"
    assert sorted(p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file()) == [
        "config.json",
        "onnx/model_int8.onnx",
        "sentencepiece.bpe.model",
        "tokenizer_config.json",
    ]


def test_lexical_bundles_no_model(tmp_path: Path) -> None:
    choice = resolve_model_choice("lexical")
    assert choice == ModelChoice("lexical", None)
    assert copy_model(choice, tmp_path) == (None, 0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("missing", "does not exist"),
        ("a-file", "is not a folder"),
        ("not-a-model", "neither a prepared model folder"),
    ],
)
def test_a_path_that_is_not_a_model_folder_is_refused(tmp_path: Path, kind: str, said: str) -> None:
    folder = tmp_path / kind
    if kind == "not-a-model":
        folder.mkdir()
        (folder / "notes.txt").write_text("hello")
    elif kind == "a-file":
        folder.write_text("not a folder")
    with pytest.raises(BundleError, match=said):
        resolve_model_choice(str(folder))


def test_a_named_model_that_cannot_be_prepared_is_a_bundle_error(tmp_path: Path) -> None:
    """Offline, or a home that cannot hold it: the bundle's own message and advice, not a
    raw error of the preparation (``ModelPreparationError`` is not an ``OnnxEmbeddingError``)."""
    home = tmp_path / "a-file"
    home.write_text("not a folder")
    with pytest.raises(BundleError, match="--model lexical"):
        resolve_model_choice("default", home)
