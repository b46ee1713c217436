"""The Godot demo project in the real engine, compared with the terminal demo, plus its screenshot.

One engine run (Godot 4.6 web runtime in headless Chromium, WebGL through SwiftShader) plays
``demo_project`` in its scripted mode against the real sidecar on the real default model:
it remembers every event through the ``GameMemory`` node, asks every question, rewinds, and
changes the model. The model change needs a sidecar restart: the GDScript asks the harness
(``/control/change_model``), which closes the sidecar and starts another one on the same port
and token whose model folder is the default model prepared for 128 tokens (the terminal
demo's changed model: the same embedding identity). Its ``GMDEMO`` lines must match
``game-memory demo --json`` on the same model: the same memory ids in the same order, the
same fallbacks and verdicts.

At the end the scene is captured as a PNG; with ``GAME_MEMORY_UPDATE_SCREENSHOT=1`` it is
written to ``docs/demo-screenshot.png``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from game_memory.demo import SCENARIO, scenario_json

from .conftest import DEMO_PROJECT, NOTES, REPOSITORY, link_or_copy

pytestmark = [pytest.mark.godot, pytest.mark.model, pytest.mark.usefixtures("engine")]

SCREENSHOT = REPOSITORY / "docs" / "demo-screenshot.png"
UPDATE_VARIABLE = "GAME_MEMORY_UPDATE_SCREENSHOT"
CHANGE_CONTROL = "change_model"


def changed_model_folder(home: Path, destination: Path, maximum_tokens: int) -> Path:
    """A copy of the prepared default model (hard links) whose manifest reads
    ``maximum_tokens`` tokens per text: another embedding identity, the same weights."""
    from game_memory.onnx import default_model_directory

    source = default_model_directory(home)
    shutil.copytree(source, destination, copy_function=link_or_copy)
    manifest = destination / "game-memory-model.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["default_maximum_tokens"] = maximum_tokens
    manifest.unlink()  # a hard link: never write through it into the cache
    manifest.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return destination


class SwitchingSidecar:
    """The real sidecar, restartable on the same port and token with another model."""

    def __init__(self, root: Path, home: Path, changed_model: Path) -> None:
        from godot.sidecar import SidecarProcess

        self._root = root
        self._env = {**os.environ, "GAME_MEMORY_HOME": str(home)}
        self._changed_model = changed_model
        self._token_file = root / "token"
        self._token_file.write_text("demo-" + os.urandom(16).hex(), encoding="utf-8")
        self.process: SidecarProcess = self._start("default", 0)
        self.url = self.process.url
        self.token = self.process.token
        self.changes = 0

    def _start(self, model: str, port: int) -> Any:
        from godot.sidecar import SidecarProcess

        command = [
            sys.executable,
            "-m",
            "game_memory.cli",
            "serve",
            "--websocket",
            f"127.0.0.1:{port}",
            "--save-dir",
            str(self._root / "save"),
            "--index-dir",
            str(self._root / "index"),
            "--model",
            model,
            "--token-file",
            str(self._token_file),
        ]
        log = self._root / f"sidecar{port}.log"
        return SidecarProcess.start(command, log, env=self._env)

    def change_model(self) -> str:
        """Close the sidecar and start one with the changed model on the same URL."""
        self.process.close()
        port = int(self.url.rsplit(":", 1)[1])
        self.process = self._start(str(self._changed_model), port)
        assert self.process.url == self.url
        self.changes += 1
        return "changed"

    def close(self) -> None:
        self.process.close()


@pytest.fixture(scope="module")
def godot_run(engine: None, model_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from godot.harness import run_project

    root = tmp_path_factory.mktemp("godot-demo")
    changed = changed_model_folder(
        model_home, root / "changed-model", SCENARIO.changed_model_maximum_tokens
    )
    sidecar = SwitchingSidecar(root, model_home, changed)
    try:
        run = run_project(
            [(DEMO_PROJECT, "")],
            [
                "--scripted",
                f"--ws-url={sidecar.url}",
                f"--token={sidecar.token}",
                f"--model-change-control={CHANGE_CONTROL}",
                "--screenshot",
            ],
            extra_files={"scenario.json": scenario_json().encode("utf-8")},
            controls={CHANGE_CONTROL: sidecar.change_model},
            timeout=240.0,
            headless=False,
        )
    finally:
        sidecar.close()
    run.sidecar_changes = sidecar.changes
    NOTES.append(f"demo engine run: {run.seconds:.1f} s wall (pack, Chromium, scripted play)")
    return run


def _records(run: Any, step: str) -> list[dict[str, Any]]:
    return [record for record in run.records("GMDEMO") if record.get("step") == step]


def _python_questions(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (step["id"], step["stage"]): step for step in report["steps"] if step["step"] == "question"
    }


def test_the_scripted_demo_finishes_cleanly(godot_run: Any) -> None:
    assert not godot_run.timed_out and godot_run.exit_code == 0, godot_run.describe()
    problems = [
        text
        for text in godot_run.errors()
        if "SCRIPT ERROR" in text or "Parse Error" in text or text.startswith("ERROR")
    ]
    assert not problems, f"engine errors: {problems}\n{godot_run.describe()}"
    done = _records(godot_run, "done")
    assert done and done[-1]["ok"] and done[-1]["problems"] == [], godot_run.describe()
    ready = _records(godot_run, "ready")
    assert ready[0]["mode"] == "hybrid" and "all-MiniLM-L6-v2" in ready[0]["model"]


def test_every_event_is_remembered_by_its_witnesses_in_the_engine(
    godot_run: Any, real_report: dict[str, Any]
) -> None:
    ours = {record["id"]: record["created"] for record in _records(godot_run, "event")}
    terminal = {
        step["id"]: step["created"] for step in real_report["steps"] if step["step"] == "event"
    }
    assert ours == terminal
    scenario = real_report["scenario"]
    assert sum(ours.values()) + scenario["summaries"] == scenario["memories"]


def test_the_godot_demo_answers_every_question_as_the_terminal_demo_does(
    godot_run: Any, real_report: dict[str, Any]
) -> None:
    terminal = _python_questions(real_report)
    ours = {(record["id"], record["stage"]): record for record in _records(godot_run, "question")}
    assert ours.keys() == terminal.keys(), godot_run.describe()
    for key, expected in terminal.items():
        got = ours[key]
        assert got["ok"], got
        assert got["memory_ids"] == expected["memory_ids"], key
        assert got["fallback"] == expected["fallback"], key
        assert got["correct"] == expected["correct"], key
        assert got["future_ids"] == [] and got["expired_ids"] == [], key


def test_the_godot_demo_forgets_and_consolidates_like_the_terminal_demo(
    godot_run: Any, real_report: dict[str, Any]
) -> None:
    """Tess forgets the spy rumour on game time; Mira's memories become what she makes of
    the fire; asked after, before, and on an earlier save, both demos answer alike."""
    steps = real_report["steps"]
    for kind in ("forget", "consolidate"):
        ours = _records(godot_run, kind)
        terminal = [step for step in steps if step["step"] == kind]
        assert [(r["id"], r["tick"], r["npc"]) for r in ours] == [
            (s["id"], s["tick"], s["npc"]) for s in terminal
        ]
        assert all(record["ok"] for record in ours), ours
    (forgot,) = _records(godot_run, "forget")
    assert forgot["forgotten"] is True and forgot["memory_id"] == "spy-rumour"
    (summary,) = _records(godot_run, "consolidate")
    assert summary["created"] is True and summary["consolidates"] == summary["memory_ids"]
    ours = {(r["id"], r["stage"]): r for r in _records(godot_run, "question")}
    assert ours[("spy-heard", "play")]["memory_ids"][0] == "spy-rumour"
    assert "spy-rumour" not in ours[("spy-forgotten", "play")]["memory_ids"]
    assert ours[("rewind-spy", "rewind")]["memory_ids"][0] == "spy-rumour"
    assert ours[("mira-on-the-fire", "play")]["memory_ids"][0] == "mira-fire-thoughts"
    assert "mira-fire-thoughts" not in ours[("rewind-mira-fire", "rewind")]["memory_ids"]
    assert all(record["retracted_ids"] == [] for record in ours.values())


def test_the_godot_demo_shows_the_belief_update_on_screen(godot_run: Any) -> None:
    """Asked before the flood, after it, and on the save loaded from Day 1."""
    ours = {(r["id"], r["stage"]): r for r in _records(godot_run, "question")}
    before, after = ours[("ford-before", "play")], ours[("ford-after", "play")]
    rewound = ours[("rewind-ford", "rewind")]
    assert before["memory_ids"][0] == "ford-passable" and "ford-flooded" not in before["memory_ids"]
    assert after["memory_ids"][0] == "ford-flooded" and "ford-passable" not in after["memory_ids"]
    assert rewound["memory_ids"][0] == "ford-passable"
    assert before["shown_beliefs"] == ["belief ford.willow, as of Day 1, 07:30"]
    assert after["shown_beliefs"] == ["belief ford.willow, as of Day 3, 19:00"]


def test_the_godot_demo_rewinds_and_changes_the_model_like_the_terminal_demo(
    godot_run: Any, real_report: dict[str, Any]
) -> None:
    assert godot_run.control_calls == [CHANGE_CONTROL] and godot_run.sidecar_changes == 1
    phases = [(r["phase"], r["tick"], r["skipped"]) for r in _records(godot_run, "phase")]
    steps = real_report["steps"]
    terminal_phases = [(s["phase"], s["tick"]) for s in steps if s["step"] == "phase"]
    assert [(phase, tick) for phase, tick, _ in phases] == terminal_phases
    assert not any(skipped for _, _, skipped in phases)
    change = _records(godot_run, "model_change")[0]
    terminal_change = next(s for s in steps if s["step"] == "model_change")
    assert change["ok"] and change["model"] == terminal_change["identity"]
    assert change["status"]["state"] == terminal_change["status"]["state"] == "rebuild_required"
    rebuild = _records(godot_run, "rebuild")[0]
    terminal_rebuild = [s for s in steps if s["step"] == "rebuild"][-1]
    assert rebuild["ok"]
    assert rebuild["progress"][0][0] == 0
    assert rebuild["progress"][-1] == terminal_rebuild["progress"][-1]
    assert rebuild["status"]["state"] == terminal_rebuild["status"]["state"]


def _png_rows(png: bytes) -> tuple[int, int, bytes]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    position, width, height, data = 8, 0, 0, b""
    while position < len(png):
        length, kind = struct.unpack(">I4s", png[position : position + 8])
        body = png[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            data += body
        position += 12 + length
    return width, height, zlib.decompress(data)


def test_the_village_scene_is_captured_from_the_real_engine(godot_run: Any) -> None:
    chunks = godot_run.records("GMDEMO_SCREENSHOT")
    assert chunks, godot_run.describe()
    assert [chunk["index"] for chunk in chunks] == list(range(chunks[0]["count"]))
    png = base64.b64decode("".join(chunk["data"] for chunk in chunks))
    width, height, rows = _png_rows(png)
    assert (width, height) == (1280, 720)
    # A rendered UI, not a blank frame: many distinct byte values across the picture.
    assert len(set(rows[:: max(1, len(rows) // 20_000)])) > 40
    if os.environ.get(UPDATE_VARIABLE) == "1":
        SCREENSHOT.write_bytes(png)
    assert SCREENSHOT.is_file(), f"run with {UPDATE_VARIABLE}=1 to write {SCREENSHOT}"


@pytest.fixture(scope="module")
def ui_run(engine: None, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The demo's controls driven in the engine (``--ui-check``), on a hashing sidecar."""
    from godot.harness import run_project
    from godot.sidecar import SidecarProcess, serve_command

    root = tmp_path_factory.mktemp("godot-demo-ui")
    sidecar = SidecarProcess.start(
        serve_command(root / "save", root / "index", "hashing"), root / "sidecar.log"
    )
    try:
        return run_project(
            [(DEMO_PROJECT, "")],
            ["--ui-check", f"--ws-url={sidecar.url}", f"--token={sidecar.token}"],
            extra_files={"scenario.json": scenario_json().encode("utf-8")},
            timeout=120.0,
        )
    finally:
        sidecar.close()


UI_CHECKS = {
    "backend_ready",
    "advance_button_remembers_events_in_order",
    "clock_shows_the_last_event",
    "log_names_the_witnesses",
    "villager_button_exists",
    "villager_button_selects_the_npc",
    "suggestions_are_jorys_questions",
    "a_suggestion_fills_the_question_box",
    "ask_button_recalls_and_lists_the_memories",
    "the_list_says_why_a_memory_ranked",
    "an_empty_question_is_not_sent",
    "slider_moves_the_moment_back",
    "nothing_is_recalled_before_anything_happened",
    "slider_returns_to_the_clock",
    "rebuild_button_rebuilds_the_index",
    "progress_bar_reaches_the_end",
}


@pytest.mark.parametrize("check", sorted(UI_CHECKS))
def test_the_village_controls_work_in_the_engine(ui_run: Any, check: str) -> None:
    records = {record["check"]: record for record in ui_run.records("GMDEMO_UI")}
    assert check in records, f"check {check} never ran\n{ui_run.describe()}"
    assert records[check]["ok"], f"{records[check]}\n{ui_run.describe()}"


def test_the_ui_check_finishes_cleanly(ui_run: Any) -> None:
    assert not ui_run.timed_out and ui_run.exit_code == 0, ui_run.describe()
    done = [record for record in ui_run.records("GMDEMO_UI") if record["check"] == "done"]
    assert done and done[0]["ok"] and done[0]["failures"] == 0, ui_run.describe()
