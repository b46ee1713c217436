"""The frozen sidecar's entry point, run in-process on a bundle folder without a freeze."""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory.bundle.build import build_bundle
from game_memory.bundle.layout import BundledModel, BundleError, BundleManifest
from game_memory.cli.frozen_sidecar import main, unwritable_folder_problem


def _bundle(folder: Path) -> Path:
    folder.mkdir(parents=True)
    BundleManifest(
        version="0.1.0",
        platform="linux-x86_64",
        executable="game-memory",
        model=BundledModel(kind="lexical"),
        freezer="pyinstaller 6.22.3",
        python="3.11.7",
    ).write(folder)
    return folder


def test_a_folder_without_a_manifest_exits_1_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--stdio", "--save-dir", str(tmp_path / "save")], root=tmp_path) == 1
    assert "is not a game-memory bundle" in capsys.readouterr().err


def test_other_commands_are_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _bundle(tmp_path / "game-memory")
    assert main(["models", "prepare"], root=root) == 2
    assert "runs only 'serve'" in capsys.readouterr().err


def test_bad_arguments_exit_2_like_serve(tmp_path: Path) -> None:
    root = _bundle(tmp_path / "game-memory")
    assert main(["serve", "--save-dir", str(tmp_path)], root=root) == 2  # no transport


def test_an_unusable_save_folder_exits_1_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _bundle(tmp_path / "game-memory")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(["serve", "--stdio", "--save-dir", str(blocker / "save")], root=root)
    assert code == 1
    error = capsys.readouterr().err
    assert f"the folder {blocker / 'save'} is not writable" in error


def test_a_writable_folder_is_created_and_left_clean(tmp_path: Path) -> None:
    folder = tmp_path / "new" / "save"
    assert unwritable_folder_problem(folder) is None
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_a_folder_that_is_not_a_bundle_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "game-memory").mkdir()
    (tmp_path / "game-memory" / "my-notes.txt").write_text("keep me")
    with pytest.raises(BundleError, match="is not a game-memory bundle"):
        build_bundle(tmp_path, "lexical")
    assert (tmp_path / "game-memory" / "my-notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("4", "4")])
def test_the_entry_point_keeps_blas_on_one_thread_unless_the_game_says_otherwise(
    given: str | None, expected: str
) -> None:
    """The frozen entry point sets OPENBLAS_NUM_THREADS before numpy can load (it reads it
    once, when it loads), and leaves a value the game's environment gives alone."""
    import os
    import subprocess
    import sys

    from game_memory.bundle.freeze import _ENTRY_SCRIPT

    head, call = _ENTRY_SCRIPT.split("from game_memory.cli.frozen_sidecar import main")
    assert call.strip().splitlines() == [
        "if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:",
        "    signal.signal(signal.SIGINT, signal.default_int_handler)",
        "sys.exit(main())",
    ]
    probe = head + "print(os.environ['OPENBLAS_NUM_THREADS'], 'numpy' in sys.modules)\n"
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        environment["OPENBLAS_NUM_THREADS"] = given
    printed = subprocess.run(
        [sys.executable, "-c", probe], env=environment, capture_output=True, text=True, check=True
    ).stdout.split()
    assert printed == [expected, "False"]


def test_the_entry_point_turns_onnxruntime_telemetry_off_even_when_the_player_has_it_on() -> None:
    """Set before anything imports onnxruntime, which reads it once; a player's (or a CI
    machine's) ``ORT_DISABLE_TELEMETRY=0`` does not turn the upload back on in a game."""
    import os
    import subprocess
    import sys

    from game_memory.bundle.freeze import _ENTRY_SCRIPT

    head, _call = _ENTRY_SCRIPT.split("from game_memory.cli.frozen_sidecar import main")
    probe = head + "print(os.environ['ORT_DISABLE_TELEMETRY'], 'onnxruntime' in sys.modules)\n"
    printed = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "ORT_DISABLE_TELEMETRY": "0"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert printed == ["1", "False"]


def test_the_runtime_hook_ends_a_ctrl_c_with_interrupted_and_130() -> None:
    """The hook PyInstaller runs first (before its own hooks' imports): a SIGINT until the
    entry point restores Python's handler prints "interrupted" and exits 130, no traceback.
    Run here in a plain interpreter, which then imports as PyInstaller's hooks would."""
    import subprocess
    import sys

    from game_memory.bundle.freeze import _RUNTIME_HOOK_SCRIPT

    probe = _RUNTIME_HOOK_SCRIPT + (
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nimport time\ntime.sleep(5)\n"
        "print('still running')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")
    hook_imports = {
        line.split()[1] for line in _RUNTIME_HOOK_SCRIPT.splitlines() if line.startswith("import ")
    }
    assert hook_imports == {"_signal"}  # built in: nothing to import that a SIGINT could cut


def test_a_sidecar_started_with_sigint_ignored_keeps_ignoring_it() -> None:
    """A launcher that shields its child (or ``nohup``) starts it with SIGINT ignored: the
    runtime hook and the entry point leave that alone (a Ctrl-C in the terminal is not for
    the sidecar). They replaced it, and a Ctrl-C then ended a sidecar meant to survive it."""
    import signal
    import subprocess
    import sys

    from game_memory.bundle.freeze import _ENTRY_SCRIPT, _RUNTIME_HOOK_SCRIPT

    head, _call = _ENTRY_SCRIPT.split("sys.exit(main())")
    probe = (
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        + _RUNTIME_HOOK_SCRIPT
        + head.replace("from game_memory.cli.frozen_sidecar import main", "")
        + "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # this process untouched


def test_a_bundle_is_never_built_inside_another_bundle(tmp_path: Path) -> None:
    """``--output project/game-memory`` (the bundle, not the project) would nest a second
    185 MB bundle inside the first, and the export plugin would ship both."""
    bundle = _bundle(tmp_path / "project" / "game-memory")
    with pytest.raises(BundleError, match="is itself a game-memory bundle") as raised:
        build_bundle(bundle, "lexical")
    assert f"--output {tmp_path / 'project'}" in str(raised.value)
    assert sorted(path.name for path in bundle.iterdir()) == ["game-memory-bundle.json"]


def test_the_write_check_tests_the_index_folder_serve_will_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The layout 'game-memory demo --data DIR' writes: DIR/save beside DIR/index. serve
    # uses DIR/index there; the check used to create and test an empty DIR/save.index.
    import game_memory.cli.frozen_sidecar as frozen

    root = _bundle(tmp_path / "game-memory")
    data = tmp_path / "data"
    (data / "save").mkdir(parents=True)
    (data / "index").mkdir()
    (data / "index" / ".game-memory-index").mkdir()
    served: list[object] = []
    monkeypatch.setattr(frozen, "run", lambda args: served.append(args) or 0)
    argv = ["serve", "--stdio", "--save-dir", str(data / "save"), "--model", "hashing"]
    assert main(argv, root=root) == 0 and len(served) == 1
    assert not (data / "save.index").exists()
