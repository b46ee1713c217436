"""Bad arguments exit 2 with the command's usage line and one line naming the argument.

``game-memory --help`` promises exit code 2 for bad arguments ("the usage line says which")
and 1 for a save, index, model or path that cannot be used. The checks argparse cannot make
itself (options that go together, a value the query or the options refuse, an empty path)
used to exit 1 with no usage line, like an unusable save; ``demo --data ''`` even ran the
demo in a temporary folder. Each is now refused before anything is opened or created.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory.bundle.layout import BundledModel, BundleManifest
from game_memory.cli import frozen_sidecar, main

SAVE = "{save}"
URL = "postgresql://game@127.0.0.1:1/none"
LEXICAL = ["--model", "lexical", "--session", "slot"]

#: (argv, the text the error line holds); ``{save}`` is a save of one memory.
CASES: list[tuple[list[str], str]] = [
    (["search", "--save-dir", SAVE, *LEXICAL, "--tick", "5"], "--tick and --timeline go together"),
    (["search", "--save-dir", SAVE, *LEXICAL, "--timeline", "main"], "go together"),
    (["search", "--save-dir", SAVE, *LEXICAL, "--limit", "-1"], "argument --limit: "),
    (["search", "--save-dir", SAVE, *LEXICAL, "--limit", "100001"], "argument --limit: "),
    (
        ["search", "--save-dir", SAVE, *LEXICAL, "--timeline", "main", "--tick", str(2**63)],
        "argument --tick: Input should be less than or equal to 9223372036854775807",
    ),
    (["search", "--save-dir", SAVE, *LEXICAL, "--text", "x" * 1_000_001], "argument --text: "),
    (
        ["search", "--save-dir", SAVE, *LEXICAL, "--fusion-option", "bogus=1"],
        "argument --fusion-option: bogus: Extra inputs are not permitted",
    ),
    (
        ["search", "--save-dir", SAVE, *LEXICAL, "--reranker-option", "recency_weight"],
        "argument --reranker-option: takes NAME=VALUE",
    ),
    (
        [
            "search",
            "--save-dir",
            SAVE,
            *LEXICAL,
            "--fusion",
            "rrf",
            "--fusion-option",
            "mode=convex",
        ],
        "--fusion rrf and --fusion-option mode=convex disagree",
    ),
    (["search", "--save-dir", "", *LEXICAL], "argument --save-dir: must not be empty"),
    (["search", "--save-dir", SAVE, "--session", "slot", "--model", ""], "argument --model: "),
    (["status", "--save-dir", SAVE, *LEXICAL, "--index-dir", " "], "argument --index-dir: "),
    (
        ["erase", "--save-dir", SAVE, "--session", "slot", "--memory", "m1"],
        "--memory needs --owner",
    ),
    (
        ["erase", "--save-dir", SAVE, "--session", "slot", "--owner", "mira", "--memory", ""],
        "argument --memory: id must not be blank",
    ),
    (
        [
            *("forget", "--save-dir", SAVE, "--session", "slot", "--owner", "mira"),
            *("--memory", "m1", "--timeline", "main", "--tick", str(-(2**63) - 1)),
        ],
        "argument --tick: Input should be greater than or equal to",
    ),
    (
        [
            *("forget", "--save-dir", SAVE, "--session", "slot", "--owner", "mira"),
            *("--memory", " ", "--timeline", "main", "--tick", "1"),
        ],
        "argument --memory: id must not be blank",
    ),
    (["check", "--save-dir", SAVE, "--accept-loss"], "--accept-loss salvages with --fix only"),
    (["check", "--database", URL, "--ids"], "--accept-loss and --ids apply to a save folder"),
    (["migrate", "--database", URL, "--to-database", URL], "--to-database copies the save of"),
    (["demo", "--model", "lexical", "--data", ""], "argument --data: must not be empty"),
    (["models", "info", "--home", ""], "argument --home: must not be empty"),
    (["addon", "--output", ""], "argument --output: must not be empty"),
    (["addon", "--output", "out", "--source", " "], "argument --source: must not be empty"),
    (["bundle", "--output", "", "--model", "nope"], "argument --output: must not be empty"),
    (["bundle", "--output", "out", "--model", ""], "argument --model: must not be empty"),
    (["serve", "--stdio", "--save-dir", SAVE, "--token-file", ""], "argument --token-file: "),
    (
        ["serve", "--stdio", "--save-dir", SAVE, "--token-file", "token"],
        "--token-file applies to --websocket only",
    ),
    (["serve", "--websocket", "127.0.0.1", "--save-dir", SAVE], "--websocket needs HOST:PORT"),
    (
        ["serve", "--stdio", "--save-dir", SAVE, "--maximum-memories-per-owner", "0"],
        "argument --maximum-memories-per-owner: ",
    ),
    (
        ["serve", "--stdio", "--save-dir", SAVE, "--request-timeout", "nan"],
        "--request-timeout must be a positive number of seconds",
    ),
]


def _files(root: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in root.rglob("*") if path.is_file()}


@pytest.mark.parametrize(("argv", "named"), CASES, ids=lambda value: str(value)[:60])
def test_a_bad_argument_exits_2_with_the_usage_line_and_names_it(
    argv: list[str],
    named: str,
    save: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # what a command writes by default lands here, not in the checkout
    (tmp_path / "token").write_text("secret")
    before = _files(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main([part.format(save=save) for part in argv])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, err
    command = " ".join(argv[:2]) if argv[0] == "models" else argv[0]
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"usage: game-memory {command} "), err
    assert lines[-1].startswith(f"game-memory {command}: error: ") and named in lines[-1], err
    assert "Traceback" not in err and out == ""
    assert _files(tmp_path) == before  # refused before anything was opened or written


def test_the_bundled_sidecar_prints_the_usage_line_for_a_bad_argument_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "game-memory"
    root.mkdir()
    BundleManifest(
        version="0.1.0",
        platform="linux-x86_64",
        executable="game-memory",
        model=BundledModel(kind="lexical"),
        freezer="pyinstaller 6.22.3",
        python="3.11.7",
    ).write(root)
    argv = ["serve", "--websocket", "127.0.0.1:0", "--save-dir", str(tmp_path / "save")]
    code = frozen_sidecar.main([*argv, "--request-timeout", "0"], root=root)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("usage: game-memory serve ")
    assert "game-memory serve: error: --request-timeout must be a positive number" in err


def test_an_unusable_save_still_exits_1_without_a_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing here"
    assert main(["search", "--save-dir", str(missing), *LEXICAL, "--limit", "3"]) == 1
    err = capsys.readouterr().err
    assert "there is no save at" in err and "usage:" not in err
