"""The GDScript sources, checked without an engine: parse, lint, docs, version, layering."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gdtoolkit.parser import parser as gd_parser  # type: ignore[import-untyped]

import game_memory

from .harness import ADDON_DIR, REPO_ROOT, TEST_PROJECT_DIR

DEMO_DIR = REPO_ROOT / "demo_project"
DOCS_PAGE = REPO_ROOT / "docs" / "godot.md"
GD_ROOTS = [REPO_ROOT / "godot_addon", DEMO_DIR, TEST_PROJECT_DIR]
_MEMBER = re.compile(r"^(?:static\s+)?(signal|func|var|const|enum)\s+([A-Za-z_]\w*)")


def _gd_files() -> list[Path]:
    files: list[Path] = []
    for root in GD_ROOTS:
        if root.is_dir():
            files.extend(path for path in sorted(root.rglob("*.gd")) if ".godot" not in path.parts)
    return files


def _tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} (gdtoolkit) is not installed; pip install 'gdtoolkit>=4.3,<5'")
    return found


def _public_members(path: Path) -> list[tuple[str, str, int]]:
    """Return (kind, name, line index) of the script's public top-level members."""
    members: list[tuple[str, str, int]] = []
    for number, line in enumerate(path.read_text().splitlines()):
        stripped = re.sub(r"^(?:@\w+(?:\([^)]*\))?\s+)+", "", line)
        match = _MEMBER.match(stripped)
        if match and line[:1] not in ("\t", " ") and not match.group(2).startswith("_"):
            members.append((match.group(1), match.group(2), number))
    return members


def test_there_are_scripts_to_check() -> None:
    names = {path.name for path in _gd_files()}
    assert {"game_memory.gd", "plugin.gd", "runner.gd"} <= names


@pytest.mark.parametrize("path", _gd_files(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_script_parses(path: Path) -> None:
    gd_parser.parse(path.read_text(encoding="utf-8"))


def test_gdparse_accepts_every_script() -> None:
    files = [str(path) for path in _gd_files()]
    result = subprocess.run(
        [_tool("gdparse"), *files], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_gdlint_passes_with_the_repository_config() -> None:
    roots = [str(root) for root in GD_ROOTS if root.is_dir()]
    result = subprocess.run(
        [_tool("gdlint"), *roots],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (REPO_ROOT / ".gdlintrc").is_file()


def test_plugin_version_matches_the_python_package() -> None:
    config = configparser.ConfigParser()
    config.read(ADDON_DIR / "plugin.cfg", encoding="utf-8")
    assert config["plugin"]["version"].strip('"') == game_memory.__version__
    assert config["plugin"]["script"].strip('"') == "plugin.gd"


@pytest.mark.parametrize(
    "path", sorted(ADDON_DIR.rglob("*.gd")), ids=lambda path: str(path.relative_to(ADDON_DIR))
)
def test_every_public_member_of_the_addon_has_a_doc_comment(path: Path) -> None:
    lines = path.read_text().splitlines()
    undocumented = [
        f"{kind} {name}"
        for kind, name, number in _public_members(path)
        if not lines[number - 1].lstrip().startswith("##")
    ]
    assert not undocumented, f"{path.name}: no ## comment directly above {undocumented}"
    assert any(line.startswith("##") for line in lines[:8]), f"{path.name} has no class doc"


def test_game_memory_has_the_documented_api() -> None:
    members = {(kind, name) for kind, name, _ in _public_members(ADDON_DIR / "game_memory.gd")}
    for name in (
        "remember",
        "remember_many",
        "recall",
        "recall_many",
        "status",
        "rebuild",
        "migrate",
    ):
        assert ("func", name) in members
    for name in (
        "backend_ready",
        "backend_failed",
        "memory_remembered",
        "memory_recalled",
        "rebuild_progressed",
        "rebuild_completed",
        "diagnostic_emitted",
    ):
        assert ("signal", name) in members
    for name in (
        "server_url",
        "token",
        "sidecar_command",
        "save_directory",
        "index_directory",
        "session_id",
        "request_timeout",
    ):
        assert ("var", name) in members


def test_signals_are_past_tense_and_typed() -> None:
    for path in ADDON_DIR.glob("*.gd"):
        for line in path.read_text().splitlines():
            if line.startswith("signal "):
                name = line.split()[1].split("(")[0]
                assert re.search(r"(ed|en|_ready)$", name), f"{path.name}: signal {name}"
                assert "(" not in line or re.search(r"\(\)|\w+: \w+", line), line


def test_the_docs_page_covers_every_public_method_and_signal() -> None:
    page = DOCS_PAGE.read_text(encoding="utf-8")
    for kind, name, _ in _public_members(ADDON_DIR / "game_memory.gd"):
        if kind in ("func", "signal"):
            assert f"`{name}" in page, f"docs/godot.md does not document {kind} {name}"


def test_the_docs_page_examples_parse() -> None:
    blocks = re.findall(r"```gdscript\n(.*?)```", DOCS_PAGE.read_text(encoding="utf-8"), re.S)
    assert blocks, "docs/godot.md has no gdscript example"
    for block in blocks:
        gd_parser.parse(block)


def test_runtime_scripts_do_not_use_editor_classes() -> None:
    """Runtime scripts (the addon's top folder) never touch Editor* classes or editor/; only
    GameMemory is @tool (for its configuration warning), and it starts nothing there."""
    for path in ADDON_DIR.glob("*.gd"):
        source = path.read_text()
        if path.name == "plugin.gd":
            assert "extends EditorPlugin" in source
            continue
        assert not re.search(r"\bEditor[A-Z]\w*", source), f"{path.name} uses an editor class"
        assert "/editor/" not in source, f"{path.name} depends on editor-only code"
        if path.name == "game_memory.gd":
            assert source.startswith("@tool\n")
            for function in ("_ready", "start", "_call"):
                body = source.split(f"func {function}(", 1)[1].split("\nfunc ", 1)[0]
                assert "Engine.is_editor_hint()" in body, f"{function} runs in the editor"
        else:
            assert not source.startswith("@tool"), f"{path.name} must not run in the editor"


def test_editor_scripts_are_in_the_editor_folder_and_the_copy_logic_is_plain() -> None:
    editor = ADDON_DIR / "editor"
    assert "extends EditorExportPlugin" in (editor / "export_plugin.gd").read_text()
    plain = (editor / "bundle_export.gd").read_text()
    assert not re.search(r"\bEditor[A-Z]\w*", plain), "the engine tests run bundle_export.gd"
    assert not plain.startswith("@tool")
    for path in editor.glob("*.gd"):
        assert "class_name" not in path.read_text(), f"{path.name} adds a global class"


def test_plugin_undoes_everything_it_registers() -> None:
    source = (ADDON_DIR / "plugin.gd").read_text()

    def body(function: str) -> str:
        return source.split(f"func {function}(", 1)[1].split("\nfunc ", 1)[0]

    assert "add_export_plugin(" in body("_enter_tree")
    assert "remove_export_plugin(" in body("_exit_tree")
    assert "add_autoload_singleton(" in body("_enable_plugin")
    assert "remove_autoload_singleton(" in body("_disable_plugin")
    assert "set_setting(setting, null)" in body("_exit_tree")
    assert not re.search(r"add_(custom_type|control|tool)", source)


def test_icon_is_an_svg_referenced_by_game_memory() -> None:
    icon = ADDON_DIR / "icons" / "game_memory.svg"
    assert icon.read_text().lstrip().startswith("<svg")
    assert (
        '@icon("res://addons/game_memory/icons/game_memory.svg")'
        in (ADDON_DIR / "game_memory.gd").read_text()
    )
    assert not list(ADDON_DIR.rglob("*.png"))


@pytest.mark.skipif(not DEMO_DIR.is_dir(), reason="demo_project/ is not in this checkout yet")
def test_the_demo_ships_an_identical_copy_of_the_addon() -> None:
    copy = DEMO_DIR / "addons" / "game_memory"
    ours = {
        path.relative_to(ADDON_DIR): path.read_bytes()
        for path in ADDON_DIR.rglob("*")
        if path.is_file()
    }
    theirs = {
        path.relative_to(copy): path.read_bytes()
        for path in copy.rglob("*")
        if path.is_file() and path.suffix != ".uid" and not path.name.endswith(".import")
    }
    assert theirs == ours


def test_the_sidecars_stderr_pipe_is_never_closed_nor_freed() -> None:
    """Godot's ``execute_with_pipe`` gives the stderr pipe descriptor 0 (the game's stdin) as
    its write end, and ``FileAccessUnixPipe`` closes both ends on ``close()`` and when freed,
    so the launcher keeps every stderr pipe referenced and never closes it."""
    source = (ADDON_DIR / "game_memory_sidecar.gd").read_text()
    assert "static var _kept_pipes: Array[FileAccess]" in source
    launch = source.split("func _start_process(", 1)[1].split("\nfunc ", 1)[0]
    assert "_kept_pipes.append(_stderr)" in launch
    assert not re.search(r"_stderr\.close\(\)", source)
    assert not re.search(r"_kept_pipes\.(clear|erase|remove_at|pop)", source)
