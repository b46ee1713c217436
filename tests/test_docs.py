"""The README cannot drift from the CLI and the code (sqlite-utils ``test_docs`` style).

Every ``game-memory`` subcommand has help text and appears in the README; the README's
set-up commands are the two lines CI runs; its Python example runs (on the real default model)
and its GDScript example parses; every page in ``docs/`` is linked from it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from game_memory.cli import build_parser

REPOSITORY = Path(__file__).resolve().parents[1]
README = REPOSITORY / "README.md"


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, str]:
    """Map every (nested) subcommand, e.g. ``"models prepare"``, to its help text."""
    found: dict[str, str] = {}
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, subparser in action.choices.items():
            nested = _subcommands(subparser, f"{prefix}{name} ")
            if nested:
                found.update(nested)
            else:
                found[f"{prefix}{name}"] = helps.get(name, "")
    return found


COMMANDS = _subcommands(build_parser())


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def test_the_cli_has_every_documented_command() -> None:
    assert set(COMMANDS) == {
        "demo",
        "serve",
        "status",
        "rebuild",
        "migrate",
        "search",
        "check",
        "forget",
        "erase",
        "compact",
        "bench",
        "models prepare",
        "models info",
        "bundle",
        "addon",
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_has_help_text(command: str) -> None:
    assert len(COMMANDS[command].strip()) >= 10, f"game-memory {command} has no help text"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_appears_in_the_readme(command: str, readme: str) -> None:
    assert f"`game-memory {command}" in readme, f"README.md does not document {command}"


def test_the_readme_starts_with_the_two_commands_ci_runs(readme: str) -> None:
    lines = readme.splitlines()
    assert lines[0] == "# game-memory"
    assert lines[2] == "```sh" and lines[5] == "```"
    assert lines[3].endswith(".venv/bin/game-memory demo")
    assert lines[4].endswith(".venv/bin/python -m pytest")
    ci = (REPOSITORY / ".ci" / "run").read_text(encoding="utf-8")
    assert "sed -n '/^```sh$/{n;n;p;q}' README.md" in ci


def test_every_docs_page_is_linked_from_the_readme(readme: str) -> None:
    linked = set(re.findall(r"\]\((docs/[^)#]+)\)", readme))
    pages = {f"docs/{page.name}" for page in (REPOSITORY / "docs").glob("*.md")}
    assert "docs/architecture.md" in pages
    assert pages <= linked, f"pages not linked from README.md: {sorted(pages - linked)}"
    assert "docs/demo-screenshot.png" in linked
    assert (REPOSITORY / "docs" / "demo-screenshot.png").is_file()


def test_the_readme_gdscript_example_parses(readme: str) -> None:
    from gdtoolkit.parser import parser as gd_parser  # type: ignore[import-untyped]

    examples = _blocks(readme, "gdscript")
    assert examples
    for example in examples:
        gd_parser.parse(example)


@pytest.mark.model
def test_the_readme_python_example_runs(readme: str, tmp_path: Path) -> None:
    from game_memory.onnx import prepare_default_model

    configured = os.environ.get("GAME_MEMORY_HOME", "").strip()
    home = Path(configured) if configured else REPOSITORY / ".cache" / "pytest-game-memory-home"
    prepare_default_model(home)
    (example,) = _blocks(readme, "python")
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "GAME_MEMORY_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "The thief grabbed the coin purse at the well." in result.stdout
