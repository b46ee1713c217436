"""The frozen sidecar, run the way a player's machine runs it: no Python, no network.

Every test here uses the one bundle ``built_bundle`` makes per session (``game-memory bundle``
with the default model) and starts it with ``env -i``: a PATH holding one empty folder (so
no Python), an empty HOME (so no model cache) and nothing else.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from game_memory.bundle.layout import BundleManifest, bundle_platform
from game_memory.bundle.model_copy import FP32_GRAPH
from game_memory.onnx.build.prepare import default_model_directory, prepared_model_problems

from .conftest import BuiltBundleRun, record_figure
from .sidecars import (
    QUESTIONS,
    installed_command,
    recall_script,
    scrubbed_environment,
    started,
    stdio_rpc,
    websocket_rpc,
)

pytestmark = [pytest.mark.model, pytest.mark.timeout(1_800)]

MAXIMUM_BUNDLE_BYTES = 250 * 1_000_000


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder under the system temp folder that another user can traverse (pytest's own
    temporary folders are private to their owner)."""
    folder = Path(tempfile.mkdtemp(prefix="game-memory-unwritable-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def player(tmp_path: Path) -> dict[str, str]:
    """A scrubbed environment: an empty HOME and a PATH of one empty folder."""
    (tmp_path / "home").mkdir()
    (tmp_path / "empty-path").mkdir()
    return scrubbed_environment(tmp_path / "home", tmp_path / "empty-path")


def _env_i(environment: dict[str, str]) -> list[str]:
    """``env -i NAME=value ...``: the child starts from an empty environment."""
    program = shutil.which("env")
    assert program, "env (coreutils) is needed to start the sidecar from an empty environment"
    return [program, "-i", *(f"{name}={value}" for name, value in environment.items())]


def test_the_bundle_has_the_documented_layout(built_bundle: BuiltBundleRun) -> None:
    folder = built_bundle.folder
    assert folder.name == "game-memory"
    assert built_bundle.executable == folder / "game-memory"
    assert built_bundle.executable.stat().st_mode & stat.S_IXUSR
    assert (folder / ".gdignore").is_file()  # Godot neither imports nor packs it
    manifest = BundleManifest.read(folder)
    assert manifest.platform == bundle_platform()
    assert manifest.version == importlib.metadata.version("game-memory")
    assert manifest.model.kind == "default"
    assert manifest.model.folder == "models/all-MiniLM-L6-v2"
    assert manifest.freezer.startswith("pyinstaller ")


def test_the_bundle_holds_only_files_and_links_inside_it(built_bundle: BuiltBundleRun) -> None:
    """What the export plugin's copy (tests/godot, case shipping) relies on: regular files,
    folders, and relative symbolic links that stay inside the bundle."""
    folder = built_bundle.folder.resolve()
    for path in built_bundle.folder.rglob("*"):
        if path.is_symlink():
            target = os.readlink(path)
            assert not os.path.isabs(target), f"{path} links to an absolute path {target}"
            assert path.resolve().is_relative_to(folder), f"{path} links outside the bundle"
            assert path.resolve().exists(), f"{path} is a dangling link"
        else:
            assert path.is_file() or path.is_dir(), f"{path} is neither a file nor a folder"


def test_the_bundle_is_under_250_mb_with_the_default_model(built_bundle: BuiltBundleRun) -> None:
    summary = built_bundle.summary
    on_disk = sum(
        path.lstat().st_size
        for path in built_bundle.folder.rglob("*")
        if path.is_file() and not path.is_symlink()
    )
    assert summary["total_bytes"] == on_disk
    assert on_disk < MAXIMUM_BUNDLE_BYTES, f"the bundle is {on_disk / 1e6:.1f} MB"
    assert 10_000_000 < summary["model_bytes"] < on_disk


def test_the_bundle_leaves_out_the_postgresql_backend_it_cannot_serve(
    built_bundle: BuiltBundleRun,
) -> None:
    """The bundled sidecar refuses ``--database``; psycopg's binary build (libpq, OpenSSL,
    Kerberos, LDAP: 10 MB) installed with the ``postgres`` extra must not ride along."""
    internal = sorted(path.name for path in (built_bundle.folder / "_internal").iterdir())
    assert [name for name in internal if name.startswith(("psycopg", "pgvector", "libpq"))] == []


def test_the_bundled_model_is_intact_and_leaves_out_the_unused_fp32_graph(
    built_bundle: BuiltBundleRun,
) -> None:
    model = BundleManifest.read(built_bundle.folder).model_folder(built_bundle.folder)
    assert model is not None and model.is_relative_to(built_bundle.folder)
    assert prepared_model_problems(model) == []
    assert not (model / FP32_GRAPH).exists()
    assert (default_model_directory(built_bundle.model_home) / FP32_GRAPH).is_file()


def test_the_bundle_serves_its_own_model_in_a_scrubbed_environment(
    built_bundle: BuiltBundleRun, tmp_path: Path, player: dict[str, str]
) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}
    started = time.monotonic()
    result = subprocess.run(
        [
            *_env_i(player),
            str(built_bundle.executable),
            *["serve", "--stdio", "--save-dir", str(tmp_path / "save")],
        ],
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    record_figure("scrubbed_ready_seconds", round(time.monotonic() - started, 2))
    assert result.returncode == 0, result.stderr
    ready, initialized = (json.loads(line) for line in result.stdout.splitlines()[:2])
    assert ready == {"event": "ready", "transport": "stdio", "protocol_version": 1}
    assert initialized["result"]["mode"] == "hybrid"
    assert initialized["result"]["model"] == built_bundle.summary["model_identity"]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("transport", ["stdio", "websocket"])
async def test_a_round_trip_gives_the_same_answers_as_the_installed_package(
    built_bundle: BuiltBundleRun, tmp_path: Path, player: dict[str, str], transport: str
) -> None:
    talk = stdio_rpc if transport == "stdio" else websocket_rpc
    bundled_env = {**player, "GAME_MEMORY_HOME": str(tmp_path / "no-models-here")}
    async with talk(
        [*_env_i(bundled_env), str(built_bundle.executable)],
        tmp_path / "bundled-save",
        {},
        tmp_path / "bundled.log",
    ) as rpc:
        assert rpc.server_info["mode"] == "hybrid"
        bundled = await recall_script(rpc)
        bundled_model = rpc.server_info["model"]
    installed_env = {**os.environ, "GAME_MEMORY_HOME": str(built_bundle.model_home)}
    async with talk(
        installed_command(), tmp_path / "installed-save", installed_env, tmp_path / "inst.log"
    ) as rpc:
        installed = await recall_script(rpc)
        installed_model = rpc.server_info["model"]
    assert bundled_model == installed_model
    assert bundled == installed
    for answer, (_owner, question, _tick, expected) in zip(bundled, QUESTIONS, strict=True):
        assert answer["memories"][0]["text"] == expected, question


def test_an_unwritable_save_folder_fails_with_exit_code_1_and_no_traceback(
    built_bundle: BuiltBundleRun, shared_folder: Path, player: dict[str, str]
) -> None:
    """The save sits in a folder the player cannot write (a game's install folder, say).
    Root writes anywhere, so as root the sidecar runs as the unprivileged user nobody."""
    locked = shared_folder / "install-folder"
    locked.mkdir()
    locked.chmod(0o555)
    command = [
        *_env_i(player | {"HOME": "/nonexistent"}),
        str(built_bundle.executable),
        *["serve", "--stdio", "--save-dir", str(locked / "save"), "--model", "lexical"],
    ]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to run the sidecar as another user"
        command = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]
    result = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1, result
    assert result.stdout == ""  # no ready line: the game sees the failure at once
    assert f"the folder {locked / 'save'} is not writable" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_command_other_than_serve_is_refused_with_advice(
    built_bundle: BuiltBundleRun, player: dict[str, str], tmp_path: Path
) -> None:
    result = subprocess.run(
        [*_env_i(player), str(built_bundle.executable), "check", "--save-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "runs only 'serve'" in result.stderr and "pip install game-memory==" in result.stderr


def test_a_lexical_bundle_serves_lexical_recall_and_is_much_smaller(
    built_bundle: BuiltBundleRun,
    lexical_bundle: BuiltBundleRun,
    tmp_path: Path,
    player: dict[str, str],
) -> None:
    manifest = BundleManifest.read(lexical_bundle.folder)
    assert manifest.model.kind == "lexical" and manifest.model.folder is None
    assert not (lexical_bundle.folder / "models").exists()
    internal = {path.name for path in (lexical_bundle.folder / "_internal").iterdir()}
    assert not internal & {"onnxruntime", "onnx", "tokenizers", "sentencepiece"}
    saved = built_bundle.summary["total_bytes"] - lexical_bundle.summary["total_bytes"]
    assert saved > built_bundle.summary["model_bytes"] + 30_000_000  # model and its runtime
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}
    result = subprocess.run(
        [
            *_env_i(player),
            str(lexical_bundle.executable),
            *["serve", "--stdio", "--save-dir", str(tmp_path / "save")],
        ],
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    initialized = json.loads(result.stdout.splitlines()[1])
    assert initialized["result"]["mode"] == "lexical"
    assert "embedding_model_unavailable" not in result.stdout  # lexical by design, no notice


async def test_a_lexical_bundle_remembers_and_recalls(
    lexical_bundle: BuiltBundleRun, tmp_path: Path, player: dict[str, str]
) -> None:
    async with websocket_rpc(
        [*_env_i(player), str(lexical_bundle.executable)],
        tmp_path / "save",
        {},
        tmp_path / "lexical.log",
    ) as rpc:
        assert rpc.server_info["mode"] == "lexical"
        await rpc.result(
            "memory.remember",
            {
                "session_id": "slot",
                "owner_id": "mira",
                "text": "The forge burned down at night.",
                "moment": {"timeline_id": "main", "tick": 5},
            },
        )
        found = await rpc.result(
            "memory.recall",
            {"session_id": "slot", "owner_id": "mira", "text": "forge burned"},
        )
        assert [memory["text"] for memory in found["memories"]] == [
            "The forge burned down at night."
        ]


def test_a_lexical_bundle_refuses_a_model_folder_it_cannot_load(
    lexical_bundle: BuiltBundleRun, tmp_path: Path, player: dict[str, str]
) -> None:
    result = subprocess.run(
        [
            *_env_i(player),
            str(lexical_bundle.executable),
            *["serve", "--stdio", "--save-dir", str(tmp_path / "save")],
            *["--model", str(default_model_directory(lexical_bundle.model_home))],
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "built with --model lexical" in result.stderr and "Traceback" not in result.stderr


async def test_the_bundle_writes_nothing_into_the_players_home(
    built_bundle: BuiltBundleRun, tmp_path: Path, player: dict[str, str]
) -> None:
    """onnxruntime's official builds (1.32 on Linux) keep a telemetry device id and an event
    database under ``~/.cache/Microsoft/DeveloperTools/.onnxruntime`` and upload them; a game
    must not leave an identifier in its players' home folders (nor send it anywhere). The
    bundle saves where the game tells it and nowhere else, so HOME stays empty after a
    hybrid session that loaded the model and embedded a memory."""
    home = Path(player["HOME"])
    async with stdio_rpc(
        [*_env_i(player), str(built_bundle.executable)], tmp_path / "save", {}, tmp_path / "log"
    ) as rpc:
        assert rpc.server_info["mode"] == "hybrid"
        await recall_script(rpc)
    assert sorted(path.relative_to(home).as_posix() for path in home.rglob("*")) == []
    assert "telemetry" not in (tmp_path / "log").read_text(encoding="utf-8")


def _damage(model: Path, how: str) -> None:
    """Damage the bundled model as a player's disk might: a flipped byte in the graph (a
    bad sector, a partial patch) or a file deleted (a virus scanner's quarantine). The
    graph is replaced, never written in place: the copy shares its files with the session's
    bundle through hard links."""
    graph = model / "onnx" / "model_int8.onnx"
    if how == "flipped-byte":
        data = bytearray(graph.read_bytes())
        data[len(data) // 2] ^= 0xFF
        damaged = graph.with_name("damaged.onnx")
        damaged.write_bytes(bytes(data))
        os.replace(damaged, graph)
    else:
        (model / "tokenizer.json").unlink()


@pytest.mark.parametrize("how", ["flipped-byte", "missing-file"])
async def test_a_damaged_bundled_model_falls_back_to_lexical_recall_with_a_diagnostic(
    built_bundle: BuiltBundleRun, tmp_path: Path, player: dict[str, str], how: str
) -> None:
    """``--model default`` promises lexical recall and ``embedding_model_unavailable`` when
    the model cannot load (docs/protocol.md); in a bundle it named the model folder as a
    path, so a damaged file ended the sidecar with exit code 1 and the game had no memory."""
    bundle = tmp_path / "installed-game" / "game-memory"
    shutil.copytree(built_bundle.folder, bundle, symlinks=True, copy_function=os.link)
    model = BundleManifest.read(bundle).model_folder(bundle)
    assert model is not None
    _damage(model, how)
    log = tmp_path / "sidecar.log"
    async with started(
        [
            *_env_i(player | {"GAME_MEMORY_HOME": str(built_bundle.model_home)}),
            str(bundle / "game-memory"),
            *["serve", "--stdio", "--save-dir", str(tmp_path / "save"), "--model", "default"],
        ],
        {},
        log,
    ) as (process, _ready):
        assert process.stdin is not None and process.stdout is not None
        request = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
        process.stdin.write(json.dumps(request | {"params": {"protocol_version": 1}}).encode())
        process.stdin.write(b"\n")
        replies = [json.loads(await process.stdout.readline()) for _ in range(2)]
    initialized = next(reply for reply in replies if reply.get("id") == 1)
    assert initialized["result"]["mode"] == "lexical"
    (notice,) = [reply["params"] for reply in replies if "id" not in reply]
    assert notice["code"] == "embedding_model_unavailable"
    assert str(model) in notice["message"]  # names the damaged folder, not the player's cache
    assert "Traceback" not in log.read_text(encoding="utf-8")


#: What a Ctrl-C may still meet before any code of the frozen program runs: PyInstaller's
#: bootstrap (its archive reader and importer) and the interpreter's own start.
_BEFORE_ANY_HOOK = ("pyiboot01_bootstrap", "pyimod01_archive", "embedded python interpreter")


def test_a_ctrl_c_while_the_bundled_sidecar_starts_says_interrupted_not_a_traceback(
    lexical_bundle: BuiltBundleRun, tmp_path: Path, player: dict[str, str]
) -> None:
    """PyInstaller's own runtime hooks (``pyi_rth_inspect``, ``pyi_rth_multiprocessing``)
    import for about 0.15 s before the entry script runs: a SIGINT then was a traceback from
    inside them and exit code 1 (33 of 80 SIGINTs between 0.11 and 0.3 s after the start).
    The bundle's first runtime hook now ends it with "interrupted" and 130, as ``main``
    does. SIGINTs are spread over the whole start, up to the time the bundle took to be
    ready when it was built (by then ``serve`` may have taken over: a clean stop, code 0)."""
    ready = float(lexical_bundle.summary["ready_seconds"])
    outcomes: list[tuple[float, int | None, str]] = []
    for step in range(16):
        delay = ready * step / 16
        process = subprocess.Popen(
            [
                *_env_i(player),
                str(lexical_bundle.executable),
                *["serve", "--stdio", "--save-dir", str(tmp_path / f"save-{step}")],
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        outcomes.append((round(delay, 3), process.returncode, stderr))
    for delay, code, stderr in outcomes:
        if "Traceback" in stderr:
            assert any(place in stderr for place in _BEFORE_ANY_HOOK), (delay, code, stderr)
        elif code == 0:  # ``serve`` had taken over SIGINT: a clean stop
            assert "stopped" in stderr, (delay, stderr)
        else:
            assert code in (130, -signal.SIGINT), (delay, code, stderr)
            assert code != 130 or stderr == "interrupted\n", (delay, stderr)
    interrupted = [delay for delay, code, _ in outcomes if code == 130]
    assert len(interrupted) >= len(outcomes) // 2, outcomes
