"""Damage from the command line, as issue 17 reproduced it (items 1, 2 and 7).

1. A log cut short (``truncate -s 4000``): ``search`` and ``status`` fail closed (exit 1,
   one line saying what to run), never exit 0 without the lost memories; ``check --fix``
   leaves no "pending append" that nothing clears, and ``--accept-loss`` ends it.
2. One flipped byte: ``check`` names damage (not "pending append"), ``check --fix`` says it
   repaired none of it, and docs/protocol.md does not promise that ``check --fix`` repairs
   a -32006.
7. A garbage ``identities.json``: ``status`` says ``degraded`` with the reason, and
   ``rebuild --force`` repairs the index by itself (no folder to delete by hand).
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.cli import main
from game_memory.durable.names import identity_hash

ROOT = Path(__file__).resolve().parents[1]


def memory(index: int) -> GameMemory:
    return GameMemory(
        memory_id=f"m{index}",
        session_id="slot",
        owner_id="mira",
        scope="village",
        kind="event",
        payload_json=json.dumps({"pad": "p" * 300}),
        moment=GameMoment(timeline_id="main", tick=index),
        searchable_text=f"the thief took coin number {index}",
    )


@pytest.fixture
def save(tmp_path: Path) -> Path:
    folder = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(folder) as store:
            for index in range(20):
                await store.append(memory(index))

    asyncio.run(seed())
    return folder


def mira_log(save: Path) -> Path:
    return save / ".game-memory" / f"s-{identity_hash('slot')}" / f"o-{identity_hash('mira')}.log"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_a_log_cut_short_fails_search_and_status_closed_and_only_accept_loss_clears_it(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mira_log(save)
    assert log.stat().st_size > 4_000
    with log.open("r+b") as file:
        file.truncate(4_000)  # truncate -s 4000
    where = ["--save-dir", str(save), "--model", "lexical", "--session", "slot"]
    for command in (["search", *where, "--text", "coin"], ["status", *where]):
        code, _out, err = run(command, capsys)
        assert code == 1, command
        assert "acknowledged memories" in err and "accept-loss" in err, err
    code, out, _err = run(["check", "--save-dir", str(save), "--fix"], capsys)
    assert code == 1 and "pending append" not in out
    code, out, _err = run(["check", "--save-dir", str(save)], capsys)
    assert code == 1 and "pending append" not in out  # the same damage, named the same way
    code, out, _err = run(["check", "--save-dir", str(save), "--fix", "--accept-loss"], capsys)
    assert code == 0
    code, _out, _err = run(["check", "--save-dir", str(save)], capsys)
    assert code == 0
    code, out, _err = run(["search", *where, "--text", "coin", "--json"], capsys)
    assert code == 0 and json.loads(out)["memories"]


def test_a_flipped_byte_is_named_as_damage_and_fix_says_it_repaired_none_of_it(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mira_log(save)
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x20
    log.write_bytes(bytes(data))
    code, out, _err = run(["check", "--save-dir", str(save)], capsys)
    assert code == 1 and "lost or unreadable" in out and "pending" not in out
    code, out, _err = run(["check", "--save-dir", str(save), "--fix"], capsys)
    assert code == 1 and "repaired none of the damage" in out and "pending" not in out


def test_the_protocol_docs_do_not_send_storage_corrupt_to_check_fix_alone() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| -32006 |")]
    assert "check --fix --accept-loss" in row
    assert "cannot repair damage" in row  # check --fix is not offered as the repair


def test_a_garbage_identities_file_is_degraded_and_rebuild_force_repairs_it_alone(
    save: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "save.index"
    where = ["--save-dir", str(save), "--index-dir", str(index)]
    where += ["--model", "hashing", "--session", "slot"]
    assert run(["rebuild", *where], capsys)[0] == 0
    (identities,) = index.rglob("identities.json")
    identities.write_bytes(b"\x00garbage{")
    code, out, err = run(["status", *where], capsys)
    assert code == 0 and "degraded" in out and "ready " not in out
    assert "identities.json is corrupt" in err and "rebuild --force" in err  # the reason
    code, out, err = run(["rebuild", *where, "--force"], capsys)
    assert code == 0 and "state ready" in out, err
    code, out, _err = run(["status", *where], capsys)
    assert "ready" in out and "degraded" not in out
    code, out, _err = run(["search", *where, "--text", "coin", "--json"], capsys)
    assert code == 0 and json.loads(out)["fallback"] is False


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_the_damage_advice_is_a_command_that_runs_as_written(
    save: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mira_log(save)
    data = bytearray(log.read_bytes())
    if damage == "cut":
        data = data[:4_000]
    else:
        data[len(data) // 2] ^= 0x20
    log.write_bytes(bytes(data))
    where = ["--save-dir", str(save), "--model", "lexical", "--session", "slot"]
    code, _out, err = run(["search", *where, "--text", "coin"], capsys)
    assert code == 1
    commands = re.findall(r"'(game-memory check [^']*)'", err)
    assert commands == [
        f"game-memory check --save-dir {save}",
        f"game-memory check --fix --accept-loss --save-dir {save}",
    ], err
    assert run(shlex.split(commands[0])[1:], capsys)[0] == 1  # names the damage
    code, out, _err = run(shlex.split(commands[1])[1:], capsys)
    assert code == 0 and "gave up" in out
    assert run(["search", *where, "--text", "coin"], capsys)[0] == 0
