"""The maintenance commands of the CLI, run in-process on real folders."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.cli import main
from game_memory.cli.parser import build_parser
from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_legacy_document

ROOT = Path(__file__).resolve().parents[1]


def _memory(index: int, text: str, tick: int) -> GameMemory:
    return GameMemory(
        memory_id=f"m{index}",
        session_id="slot",
        owner_id="mira",
        scope="village",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=tick),
        searchable_text=text,
    )


@pytest.fixture
def save(tmp_path: Path) -> Path:
    folder = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(folder) as store:
            await store.append(_memory(1, "the thief grabbed the coin purse", 10))
            await store.append(_memory(2, "a fire broke out at the smithy", 20))

    asyncio.run(seed())
    return folder


def test_search_prints_json_hits_as_of_a_game_moment(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "search",
            "--save-dir",
            str(save),
            "--model",
            "lexical",
            "--session",
            "slot",
            "--text",
            "fire smithy thief",
            "--timeline",
            "main",
            "--tick",
            "15",
            "--json",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert [row["memory"]["memory_id"] for row in result["memories"]] == ["m1"]
    assert result["memories"][0]["age_ticks"] == 5


def test_search_refuses_a_tick_without_a_timeline(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bad argument (exit 2, the usage line), not an unusable save (exit 1).
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "search",
                "--save-dir",
                str(save),
                "--model",
                "lexical",
                "--session",
                "slot",
                "--tick",
                "3",
            ]
        )
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--timeline" in err and err.startswith("usage: game-memory search")


def test_search_reports_invalid_input_in_one_line(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A blank id is a usage error of its option (exit 2), before the save is opened.
    with pytest.raises(SystemExit) as exit_:
        main(["search", "--save-dir", str(save), "--model", "lexical", "--session", " "])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "argument --session: id must not be blank" in err and "errors.pydantic.dev" not in err


def test_rebuild_then_status_is_ready_with_the_hashing_model(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--save-dir", str(save), "--model", "hashing", "--session", "slot"]) == 0
    assert "degraded" in capsys.readouterr().out
    assert (
        main(["rebuild", "--save-dir", str(save), "--model", "hashing", "--session", "slot"]) == 0
    )
    assert "state ready: 2 ready" in capsys.readouterr().out.replace("\n", " ")
    assert (save.parent / "save.index").is_dir()


def test_migrate_moves_legacy_documents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "legacy"
    folder.mkdir()
    memory = _memory(7, "an old memory", 1)
    name = identity_hash(f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}")
    (folder / f"{name}.memory.json").write_bytes(encode_legacy_document(memory))
    assert main(["migrate", "--save-dir", str(folder), "--model", "lexical"]) == 0
    assert "migrated 1 legacy memories (1 in the save)" in capsys.readouterr().out
    assert not list(folder.glob("*.memory.json"))


def test_check_reports_a_consistent_save_and_fails_on_a_corrupt_one(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--save-dir", str(save)]) == 0
    assert "consistent" in capsys.readouterr().out
    log = next(save.glob(".game-memory/s-*/o-*.log"))
    data = bytearray(log.read_bytes())
    data[20] ^= 0xFF
    log.write_bytes(bytes(data))
    assert main(["check", "--save-dir", str(save)]) == 1
    assert "corrupt" in capsys.readouterr().out


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (
        ["demo"],
        ["serve"],
        ["status"],
        ["rebuild"],
        ["migrate"],
        ["search"],
        ["check"],
        ["bench"],
        ["models", "prepare"],
        ["models", "info"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--help"])
        assert exit_.value.code == 0
        assert "usage: game-memory" in capsys.readouterr().out


def test_the_bench_choices_are_the_registered_scripts() -> None:
    from game_memory.cli.maintenance import _BENCHMARKS
    from game_memory.cli.parser import build_parser

    bench = build_parser()._subparsers._group_actions[0].choices["bench"]  # type: ignore[union-attr]
    (name,) = [a for a in bench._actions if a.dest == "name"]
    assert list(name.choices or []) == list(_BENCHMARKS)


@pytest.mark.parametrize(
    "name",
    [
        *("store", "hybrid", "embedding", "retrieval", "multilingual", "npc"),
        *("crossval", "beliefs", "promises", "sidecar"),
    ],
)
def test_every_benchmark_starts_from_the_cli(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # --help imports the script and its sibling modules, then exits before any work.
    # hybrid_scale re-executes itself with single-threaded BLAS unless a BLAS variable is
    # set; here that would replace the test process.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    path_before = list(sys.path)
    assert main(["bench", name, "--", "--help"]) == 0
    assert "usage:" in capsys.readouterr().out
    assert sys.path == path_before


def test_the_readme_names_the_commands_that_take_model_and_index_dir() -> None:
    """The README said every command that opens a save takes both; check, forget and
    compact take neither, and erase only --index-dir."""
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    options = {name: set(sub._option_string_actions) for name, sub in commands.items()}
    opening = {name for name, given in options.items() if "--save-dir" in given}
    both = {name for name in opening if {"--model", "--index-dir"} <= options[name]}
    index_only = {name for name in opening if "--index-dir" in options[name]} - both
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    (sentence,) = re.findall(r"((?:`\w+`(?:, | and ))+`\w+`) take `--model", readme)
    assert set(re.findall(r"`(\w+)`", sentence)) == both
    (alone,) = re.findall(r"((?:`\w+`(?:, | and ))+`\w+`) work on the save alone", readme)
    assert set(re.findall(r"`(\w+)`", alone)) == opening - both - index_only
    assert index_only == {"erase"} and "`erase` takes `--index-dir` only" in readme
