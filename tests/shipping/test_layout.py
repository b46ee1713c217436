"""The bundle's manifest and names: what the builder writes and the frozen sidecar reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from game_memory.bundle.layout import (
    MANIFEST_NAME,
    BundledModel,
    BundleError,
    BundleManifest,
    bundle_platform,
    executable_name,
)


def _manifest(folder: str | None = "models/all-MiniLM-L6-v2") -> BundleManifest:
    return BundleManifest(
        version="0.1.0",
        platform="linux-x86_64",
        executable="game-memory",
        model=BundledModel(kind="default" if folder else "lexical", folder=folder),
        freezer="pyinstaller 6.22.3",
        python="3.11.7",
    )


def test_the_manifest_round_trips_and_resolves_the_model_inside_the_bundle(
    tmp_path: Path,
) -> None:
    _manifest().write(tmp_path)
    read = BundleManifest.read(tmp_path)
    assert read == _manifest()
    assert read.model_folder(tmp_path) == (tmp_path / "models" / "all-MiniLM-L6-v2").resolve()


def test_a_lexical_bundle_has_no_model_folder(tmp_path: Path) -> None:
    assert _manifest(None).model_folder(tmp_path) is None


@pytest.mark.parametrize("folder", ["../models/x", "/models/x", "models\\x", ""])
def test_a_model_folder_outside_the_bundle_is_refused(folder: str) -> None:
    with pytest.raises(ValueError, match="relative path inside"):
        BundledModel(kind="folder", folder=folder)


def test_a_folder_without_a_manifest_is_named_as_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="is not a game-memory bundle") as raised:
        BundleManifest.read(tmp_path)
    assert "game-memory bundle --output" in str(raised.value)


def test_a_damaged_manifest_names_the_file_and_the_field(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_text('{"format": "game-memory-bundle"}', encoding="utf-8")
    with pytest.raises(BundleError, match="not a valid bundle manifest") as raised:
        BundleManifest.read(tmp_path)
    assert MANIFEST_NAME in str(raised.value) and "version" in str(raised.value)


def test_an_oversized_manifest_is_not_read_whole(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(b" " * 70_000)
    with pytest.raises(BundleError, match="over 65536 bytes"):
        BundleManifest.read(tmp_path)


def test_names_follow_the_platform_and_godot_feature_tags() -> None:
    assert executable_name("win32") == "game-memory.exe"
    assert executable_name("linux") == executable_name("darwin") == "game-memory"
    assert re.fullmatch(r"(linux|windows|macos)-(x86_64|arm64|x86_32|arm32)", bundle_platform())
