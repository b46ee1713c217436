"""The bundled sidecar and the bundle build, where an audit found them failing: a damaged
embedding runtime, a Ctrl-C while starting, a save path that is a file, and a build killed
while it swapped bundles. No bundle is frozen here: the sidecar's entry point runs on a
stand-in bundle folder (a manifest only), and the build's freeze is replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from game_memory.bundle import build
from game_memory.bundle.layout import MANIFEST_NAME, BundledModel, BundleError, BundleManifest
from game_memory.cli import frozen_sidecar
from game_memory.cli.folders import folder_problem

_DEFAULT_MODEL = BundledModel(kind="default", folder="models/all-MiniLM-L6-v2")
_INITIALIZE = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocol_version":1}}\n'


def _bundle(folder: Path, model: BundledModel | None = None) -> Path:
    """A stand-in bundle: the manifest a build writes, and nothing else."""
    folder.mkdir(parents=True)
    BundleManifest(
        version="0.1.0",
        platform="linux-x86_64",
        executable="game-memory",
        model=model or BundledModel(kind="lexical"),
        freezer="pyinstaller 6.22.3",
        python="3.11.7",
    ).write(folder)
    return folder


def _run_sidecar(
    hook: str, root: Path, argv: list[str], stdin: str
) -> subprocess.CompletedProcess[str]:
    """Run ``frozen_sidecar.main(argv, root=root)`` in a fresh interpreter, after ``hook``
    (a meta path finder standing in for a damaged bundle or a Ctrl-C) is installed."""
    script = textwrap.dedent(hook) + textwrap.dedent(
        """
        import sys
        from pathlib import Path

        sys.argv[0] = "game-memory"  # as the bundle's executable is named
        from game_memory.cli.frozen_sidecar import main

        sys.exit(main(sys.argv[2:], root=Path(sys.argv[1])))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script, str(root), *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )


# onnxruntime's native module deleted from the bundle (a virus scanner, a partial patch).
_NO_RUNTIME = """
import sys

class NoRuntime:
    def find_spec(self, name, path=None, target=None):
        if name == "onnxruntime" or name.startswith("onnxruntime."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoRuntime())
"""

# A Ctrl-C landing while the sidecar imports the embedding runtime (its slowest import).
_INTERRUPTED_IMPORT = """
import sys

class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "game_memory.onnx":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupting())
"""


def _messages(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_a_bundle_whose_runtime_cannot_be_imported_serves_lexically_and_says_why(
    tmp_path: Path,
) -> None:
    """``--model default`` in a bundle whose onnxruntime is broken: what a bundled model
    that cannot load gives (docs/shipping.md), not a traceback and exit code 1."""
    root = _bundle(tmp_path / "game-memory", _DEFAULT_MODEL)
    argv = ["serve", "--stdio", "--save-dir", str(tmp_path / "save"), "--model", "default"]
    done = _run_sidecar(_NO_RUNTIME, root, argv, _INITIALIZE)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    messages = _messages(done.stdout)
    assert messages[0]["event"] == "ready"
    answer = next(message for message in messages if message.get("id") == 0)
    assert answer["result"]["mode"] == "lexical"
    notices = [m["params"] for m in messages if m.get("method") == "memory.diagnostic"]
    assert [notice["code"] for notice in notices] == ["embedding_model_unavailable"]
    assert notices[0]["severity"] == "warning"  # docs/protocol.md
    assert "embedding runtime cannot be imported" in notices[0]["message"]
    assert "reinstall" in notices[0]["message"]


def test_the_home_variable_the_sidecar_sets_is_the_one_the_models_read() -> None:
    from game_memory.onnx.model_home import HOME_VARIABLE

    assert frozen_sidecar._HOME_VARIABLE == HOME_VARIABLE


def test_a_ctrl_c_while_the_runtime_imports_says_interrupted_and_exits_130(
    tmp_path: Path,
) -> None:
    root = _bundle(tmp_path / "game-memory", _DEFAULT_MODEL)
    argv = ["serve", "--stdio", "--save-dir", str(tmp_path / "save"), "--model", "default"]
    done = _run_sidecar(_INTERRUPTED_IMPORT, root, argv, "")
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"
    assert done.stdout == ""


def test_a_ctrl_c_before_serve_takes_over_its_signals_says_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the memory opens, before ``serve`` handles SIGINT itself."""

    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    root = _bundle(tmp_path / "game-memory")
    monkeypatch.setattr(frozen_sidecar, "run", interrupted)
    argv = ["serve", "--stdio", "--save-dir", str(tmp_path / "save"), "--model", "lexical"]
    try:
        code = frozen_sidecar.main(argv, root=root)
    except KeyboardInterrupt:  # not let through: pytest would take it as its own
        pytest.fail("main let the KeyboardInterrupt through")
    assert code == 130
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("option", ["--save-dir", "--index-dir"])
def test_a_folder_that_is_a_file_gets_the_line_serve_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    root = _bundle(tmp_path / "game-memory")
    slot = tmp_path / "slot.sav"
    slot.write_text("a game's own save file")
    folders = {"--save-dir": str(tmp_path / "save"), "--index-dir": str(tmp_path / "index")}
    folders[option] = str(slot)
    argv = ["serve", "--stdio", "--model", "hashing"]
    for name, value in folders.items():
        argv += [name, value]
    assert frozen_sidecar.main(argv, root=root) == 1
    error = capsys.readouterr().err
    assert error == f"game-memory serve: {folder_problem(slot, option)}\n"
    assert "is a file, not a folder; give the folder that holds it" in error
    assert slot.read_text() == "a game's own save file"


def test_an_index_folder_beside_the_save_that_is_a_file_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _bundle(tmp_path / "game-memory")
    (tmp_path / "save.index").write_text("not an index")
    argv = ["serve", "--stdio", "--save-dir", str(tmp_path / "save"), "--model", "hashing"]
    assert frozen_sidecar.main(argv, root=root) == 1
    error = capsys.readouterr().err
    assert f"the index folder {tmp_path / 'save.index'} is a file, not a folder" in error
    assert "--index-dir" in error and "File exists" not in error


# The build: a swap killed between its two renames, and the scratch folders killed builds left.


def _old_bundle(output: Path) -> Path:
    bundle = _bundle(output / "game-memory")
    (bundle / "marker").write_text("the previous bundle")
    return bundle


def _failing_freeze(_scratch: Path, *, embedding: bool) -> object:
    raise BundleError("PyInstaller failed (stand-in)")


def test_the_next_build_puts_back_a_bundle_a_killed_swap_left_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state ``kill -9`` between the renames leaves: no ``game-memory``, the previous
    bundle as ``previous`` in the scratch folder. The next build (one that fails, even)
    puts it back before anything else, and deletes what killed builds left."""
    output = tmp_path / "project"
    old = _old_bundle(output)
    killed = output / ".game-memory-bundle-killed1"
    killed.mkdir()
    old.rename(killed / "previous")
    (killed / "game-memory").mkdir()  # the new bundle that never moved in
    other = output / ".game-memory-bundle-killed2"
    (other / "work").mkdir(parents=True)  # a build killed while freezing
    monkeypatch.setattr(build, "freeze_sidecar", _failing_freeze)
    with pytest.raises(BundleError, match="PyInstaller failed"):
        build.build_bundle(output, "lexical")
    assert (output / "game-memory" / "marker").read_text() == "the previous bundle"
    assert (output / "game-memory" / MANIFEST_NAME).is_file()
    assert not [path for path in output.iterdir() if path.is_dir() and path.name != "game-memory"]


def test_of_two_bundles_left_aside_the_latest_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two killed swaps (the bundle put back by hand between them): the scratch folder
    changed last holds the bundle that was in place last."""
    output = tmp_path / "project"
    for name, marker, seconds in (("b-older", "older", 1_000), ("a-newer", "newer", 2_000)):
        scratch = output / f".game-memory-bundle-{name}"
        (_bundle(scratch / "previous") / "marker").write_text(marker)
        os.utime(scratch, (seconds, seconds))
    monkeypatch.setattr(build, "freeze_sidecar", _failing_freeze)
    with pytest.raises(BundleError, match="PyInstaller failed"):
        build.build_bundle(output, "lexical")
    assert (output / "game-memory" / "marker").read_text() == "newer"
    assert sorted(path.name for path in output.iterdir()) == [
        ".game-memory-bundle.lock",
        "game-memory",
    ]


def test_a_previous_beside_a_bundle_in_place_is_deleted_not_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after its swap, before its clean-up: the new bundle is in place and stays."""
    output = tmp_path / "project"
    new = _old_bundle(output)
    (new / "marker").write_text("the new bundle")
    killed = output / ".game-memory-bundle-killed"
    _bundle(killed / "previous")
    monkeypatch.setattr(build, "freeze_sidecar", _failing_freeze)
    with pytest.raises(BundleError, match="PyInstaller failed"):
        build.build_bundle(output, "lexical")
    assert (new / "marker").read_text() == "the new bundle"
    assert not killed.exists()


def test_a_second_build_into_the_same_folder_is_refused_while_one_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running build's scratch folder is not abandoned: nothing of it is touched."""
    output = tmp_path / "project"
    _old_bundle(output)
    running = output / ".game-memory-bundle-running"
    (running / "work").mkdir(parents=True)
    monkeypatch.setattr(build, "freeze_sidecar", _failing_freeze)
    refused = pytest.raises(BundleError, match="another game-memory bundle build is writing")
    with build._building(output.resolve()), refused:
        build.build_bundle(output, "lexical")
    assert (running / "work").is_dir()
    assert (output / "game-memory" / "marker").is_file()


def test_a_failed_second_rename_puts_the_previous_bundle_back(tmp_path: Path) -> None:
    output = tmp_path / "project"
    old = _old_bundle(output)
    scratch = output / ".game-memory-bundle-x"
    scratch.mkdir()
    with pytest.raises(OSError):
        build._replace(old, scratch / "built-but-missing", scratch)
    assert (old / "marker").read_text() == "the previous bundle"
    assert not (scratch / "previous").exists()


def test_a_ctrl_c_between_the_renames_puts_the_previous_bundle_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "project"
    old = _old_bundle(output)
    scratch = output / ".game-memory-bundle-x"
    built = _bundle(scratch / "game-memory")
    rename = Path.rename

    def interrupted_moving_in(self: Path, target: Any) -> Path:
        if self == built:
            raise KeyboardInterrupt
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", interrupted_moving_in)
    with pytest.raises(KeyboardInterrupt):
        build._replace(old, built, scratch)
    assert (old / "marker").read_text() == "the previous bundle"


def test_a_swap_replaces_the_bundle_and_keeps_the_previous_aside_for_deletion(
    tmp_path: Path,
) -> None:
    output = tmp_path / "project"
    old = _old_bundle(output)
    scratch = output / ".game-memory-bundle-x"
    built = _bundle(scratch / "game-memory")
    build._replace(old, built, scratch)
    assert not (old / "marker").exists() and (old / MANIFEST_NAME).is_file()
    assert (scratch / "previous" / "marker").is_file()


def test_serve_needs_none_of_the_modules_the_bundle_leaves_out() -> None:
    """``frozen_sidecar`` imports ``game_memory.cli.serve`` when it runs it (inside its
    Ctrl-C handling), so importing the entry point no longer proves serve's imports are in
    the bundle (``test_frozen_imports.py``): this imports serve itself with them blocked."""
    from game_memory.bundle.freeze import EXCLUDED_MODULES

    probe = """
    import sys

    blocked = set(sys.argv[1:])

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name in blocked or any(name.startswith(b + ".") for b in blocked):
                raise ModuleNotFoundError(f"{name} is left out of the bundle")
            return None

    sys.meta_path.insert(0, Block())
    import game_memory.cli.frozen_sidecar
    import game_memory.cli.serve
    print("imported")
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(probe), *EXCLUDED_MODULES],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "imported\n"
