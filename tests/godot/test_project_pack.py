"""Packing project folders: the generated class and uid caches, mounts, and the CLI."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from .harness import ADDON_DIR, TEST_PROJECT_DIR
from .pck import PackFormatError, read_pack
from .project_pack import (
    CLASS_CACHE_PATH,
    UID_CACHE_PATH,
    ScriptClass,
    build_project_pack,
    collect_files,
    global_class_cache,
    main,
    scan_script_classes,
    scan_uids,
    uid_cache,
    uid_id_to_text,
    uid_text_to_id,
)


def _scripts(**sources: str) -> dict[str, bytes]:
    return {f"{name}.gd": text.encode() for name, text in sources.items()}


def test_class_name_extends_icon_and_tool_are_read() -> None:
    classes = scan_script_classes(
        _scripts(
            a='@tool\n@icon("res://icons/a.svg")\nclass_name Alpha\nextends Node2D\n',
            b="class_name Beta extends RefCounted\n",
            c="extends Node\n## no class name here\n",
        )
    )
    assert classes == [
        ScriptClass("Alpha", "Node2D", "res://a.gd", "res://icons/a.svg", True, False),
        ScriptClass("Beta", "RefCounted", "res://b.gd", "", False, False),
    ]


def test_extends_by_path_resolves_to_the_parent_class() -> None:
    classes = scan_script_classes(
        {
            "base/parent.gd": b"class_name Parent\nextends Node\n",
            "base/plain.gd": b'extends "parent.gd"\n',
            "child.gd": b'class_name Child\nextends "res://base/plain.gd"\n',
            "icon_rel.gd": b'@icon("icons/x.svg")\nclass_name Rel\nextends Parent\n',
        }
    )
    by_name = {item.name: item for item in classes}
    assert by_name["Child"].base == "Parent"
    assert by_name["Rel"].base == "Parent"
    assert by_name["Rel"].icon == "res://icons/x.svg"


def test_indented_and_commented_class_names_are_not_global_classes() -> None:
    classes = scan_script_classes(
        _scripts(
            a="extends Node\n\nclass Inner:\n\tclass_name_is_not = 1\n# class_name Fake\n",
        )
    )
    assert classes == []


def test_abstract_classes_are_flagged() -> None:
    classes = scan_script_classes(_scripts(a="@abstract\nclass_name Shape\nextends Resource\n"))
    assert classes[0].is_abstract


def test_class_cache_is_the_config_file_the_engine_reads() -> None:
    text = global_class_cache(
        [ScriptClass("GameMemory", "Node", "res://g.gd", "res://i.svg", False, False)]
    ).decode()
    assert text.startswith("list=[{")
    assert '"class": &"GameMemory"' in text
    assert '"base": &"Node"' in text
    assert '"language": &"GDScript"' in text
    assert '"path": "res://g.gd"' in text
    assert '"is_tool": false' in text
    assert global_class_cache([]) == b"list=[]\n"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("uid://a", 0),
        ("uid://b", 1),
        ("uid://y", 24),
        ("uid://0", 25),
        ("uid://8", 33),
        ("uid://ba", 34),
        ("uid://bqj8x7k3m4n5o", None),
    ],
)
def test_uid_texts_decode_in_base_34_and_encode_back(text: str, value: int | None) -> None:
    decoded = uid_text_to_id(text)
    if value is not None:
        assert decoded == value
    assert 0 <= decoded < 2**63
    assert uid_id_to_text(decoded) == text


def test_uid_decoding_wraps_like_the_engine() -> None:
    # 'z' and '0' both mean 25 in ResourceUID::text_to_id; long texts wrap at 64 bits, then
    # the sign bit is masked off.
    assert uid_text_to_id("uid://z") == uid_text_to_id("uid://0")
    long_text = "uid://" + "9" * 20
    expected = 0
    for _ in range(20):
        expected = (expected * 34 + 34) % 2**64
    assert uid_text_to_id(long_text) == expected & (2**63 - 1)


@pytest.mark.parametrize("text", ["res://x", "uid://", "uid://ABC", "uid://a-b"])
def test_bad_uid_texts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="uid"):
        uid_text_to_id(text)


def test_uids_come_from_uid_files_scene_headers_and_import_files() -> None:
    found = scan_uids(
        {
            "main.tscn": b'[gd_scene load_steps=2 format=3 uid="uid://bqj8x7k3m4n5o"]\n',
            "theme.tres": b'[gd_resource type="Theme" format=3 uid="uid://ba"]\n',
            "player.gd.uid": b"uid://b\n",
            "icon.png.import": b'[remap]\n\nimporter="texture"\nuid="uid://y"\n',
            "other.tscn": b'[gd_scene format=3]\n[ext_resource uid="uid://a" path="x"]\n',
        }
    )
    assert found == {
        uid_text_to_id("uid://bqj8x7k3m4n5o"): "res://main.tscn",
        34: "res://theme.tres",
        1: "res://player.gd",
        24: "res://icon.png",
    }


def test_uid_cache_layout() -> None:
    blob = uid_cache({34: "res://a.tscn", 1: "res://b.gd"})
    assert struct.unpack_from("<I", blob)[0] == 2
    assert blob[4:] == (
        struct.pack("<qI", 1, 10) + b"res://b.gd" + struct.pack("<qI", 34, 12) + b"res://a.tscn"
    )


def test_collect_skips_hidden_python_and_editor_files(tmp_path: Path) -> None:
    for name in (
        "project.godot",
        "a.gd",
        ".godot/x.cfg",
        "sub/.hidden",
        "t.py",
        "__pycache__/m.pyc",
        "sub/b.tscn",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert sorted(collect_files(tmp_path)) == ["a.gd", "project.godot", "sub/b.tscn"]
    assert sorted(collect_files(tmp_path / "sub", "addons/z/")) == ["addons/z/b.tscn"]


def test_the_engine_test_project_packs_with_the_addon(tmp_path: Path) -> None:
    pack = tmp_path / "game.pck"
    build_project_pack(pack, [(TEST_PROJECT_DIR, ""), (ADDON_DIR, "addons/game_memory")])
    _, contents = read_pack(pack)
    assert "project.godot" in contents
    assert "addons/game_memory/game_memory.gd" in contents
    assert "addons/game_memory/plugin.cfg" in contents
    assert not any(path.endswith(".py") for path in contents)
    cache = contents[CLASS_CACHE_PATH].decode()
    for name in ("GameMemory", "GameMemoryConnection", "GameMemoryRequest", "EngineTest"):
        assert f'"class": &"{name}"' in cache
    assert '"icon": "res://addons/game_memory/icons/game_memory.svg"' in cache
    assert UID_CACHE_PATH in contents


def test_clashing_mounts_and_a_missing_project_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PackFormatError, match="two folders provide"):
        build_project_pack(tmp_path / "a.pck", [(TEST_PROJECT_DIR, ""), (TEST_PROJECT_DIR, "")])
    with pytest.raises(PackFormatError, match=r"no project\.godot"):
        build_project_pack(tmp_path / "b.pck", [(ADDON_DIR, "addons/game_memory")])
    with pytest.raises(PackFormatError, match="not a folder"):
        build_project_pack(tmp_path / "c.pck", [(tmp_path / "missing", "")])


def test_extra_files_may_replace_a_mounted_file(tmp_path: Path) -> None:
    build_project_pack(
        tmp_path / "game.pck",
        [(TEST_PROJECT_DIR, "")],
        {"project.godot": b"config_version=5\n", "override.cfg": b"[a]\n"},
    )
    _, contents = read_pack(tmp_path / "game.pck")
    assert contents["project.godot"] == b"config_version=5\n"
    assert contents["override.cfg"] == b"[a]\n"


def test_command_line_packs_and_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "game.pck"
    assert main(["pack", str(pack), str(TEST_PROJECT_DIR), f"{ADDON_DIR}=addons/game_memory"]) == 0
    packed = capsys.readouterr().out
    assert main(["list", str(pack)]) == 0
    listed = capsys.readouterr().out
    assert packed == listed
    assert "res://addons/game_memory/game_memory.gd" in listed
    assert main(["list", str(tmp_path / "missing.pck")]) == 1
    assert "project_pack:" in capsys.readouterr().err
