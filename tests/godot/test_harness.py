"""The engine harness itself, on tiny throwaway projects: output order, exit codes, user
arguments, controls, and how it ends runs that fail to parse or never quit."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import _live_group_members, run_project

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]

_SCENE = """[gd_scene load_steps=2 format=3]

[ext_resource type="Script" path="res://main.gd" id="1_main"]

[node name="Main" type="Node"]
script = ExtResource("1_main")
"""


def _project(folder: Path, script: str) -> Path:
    folder.mkdir()
    (folder / "project.godot").write_text(
        'config_version=5\n\n[application]\n\nconfig/name="harness check"\n'
        'run/main_scene="res://main.tscn"\n'
    )
    (folder / "main.tscn").write_text(_SCENE)
    (folder / "main.gd").write_text(script)
    return folder


def test_output_order_exit_code_user_args_and_controls(tmp_path: Path) -> None:
    project = _project(
        tmp_path / "ok",
        """extends Node


func _ready() -> void:
	for index: int in 300:
		print("LINE %d" % index)
	printerr("to stderr")
	print("ARGS " + JSON.stringify(OS.get_cmdline_user_args()))
	var url: String = OS.get_cmdline_user_args()[-1].trim_prefix("--harness-url=")
	for action: String in ["ping", "boom", "missing"]:
		var http: HTTPRequest = HTTPRequest.new()
		http.timeout = 5.0
		add_child(http)
		http.request("%s/control/%s" % [url, action])
		var response: Array = await http.request_completed
		print("CONTROL %s %d %s" % [action, response[1], response[3].get_string_from_utf8()])
	get_tree().quit(7)
""",
    )
    calls: list[str] = []

    def ping() -> str:
        calls.append("ping")
        return "pong"

    def boom() -> None:
        raise RuntimeError("no such sidecar")

    run = run_project(
        [(project, "")],
        ["--alpha=1", "beta two"],
        controls={"ping": ping, "boom": boom},
        timeout=30,
    )
    assert run.exit_code == 7 and not run.timed_out, run.describe()
    lines = [text for text in run.stdout() if text.startswith("LINE ")]
    assert lines == [f"LINE {index}" for index in range(300)]
    assert "to stderr" in run.errors()
    args_line = next(text for text in run.stdout() if text.startswith("ARGS "))
    assert args_line.startswith('ARGS ["--alpha=1","beta two","--harness-url=http://127.0.0.1:')
    assert calls == ["ping"]
    assert run.control_calls == ["ping", "boom"]
    controls = [text for text in run.stdout() if text.startswith("CONTROL ")]
    assert controls[0].startswith("CONTROL ping 200 ") and "pong" in controls[0]
    assert controls[1] == "CONTROL boom 500 RuntimeError: no such sidecar"
    assert controls[2] == "CONTROL missing 404 no control named 'missing'"
    assert _live_group_members(run.process_group) == []


def test_a_script_that_does_not_parse_ends_the_run_early(tmp_path: Path) -> None:
    project = _project(tmp_path / "broken", "extends Node\n\nfunc _ready() -> void\n\tpass\n")
    run = run_project([(project, "")], timeout=40)
    assert not run.timed_out, run.describe()
    assert any("Parse Error" in text for text in run.errors()), run.describe()


def test_a_project_that_never_quits_times_out_and_chromium_is_gone(tmp_path: Path) -> None:
    project = _project(
        tmp_path / "forever", 'extends Node\n\n\nfunc _ready() -> void:\n\tprint("started")\n'
    )
    run = run_project([(project, "")], timeout=6)
    assert run.timed_out and run.exit_code is None
    assert "started" in run.stdout(), run.describe()
    assert "timed out" in run.describe()
    assert run.process_group > 0 and _live_group_members(run.process_group) == []
