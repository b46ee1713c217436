"""Fixtures of the engine tests: the engine (Chromium + web runtime) and real sidecars.

Engine tests are skipped, with the reason printed in the terminal summary, only when Chromium
is not installed. A missing web runtime is fetched (``fetch_runtime.sh``); when that fails the
tests error instead of skipping, because CI must not pass without running the engine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from .harness import (
    ADDON_DIR,
    TEST_PROJECT_DIR,
    ControlHandler,
    EngineRun,
    ensure_runtime,
    find_chromium,
    run_project,
)
from .sidecar import SidecarProcess, serve_command

_SKIPPED: list[str] = []


class SidecarStarter:
    """Starts real sidecars on temporary folders; closes them all at teardown."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self.started: list[SidecarProcess] = []

    def __call__(
        self,
        model: str = "hashing",
        env: Mapping[str, str] | None = None,
        arguments: Sequence[str] = (),
    ) -> SidecarProcess:
        """Start ``game-memory serve --websocket 127.0.0.1:0`` with ``model``; ``env`` adds
        environment variables, ``arguments`` more options of ``serve``."""
        folder = self._root / f"sidecar{len(self.started)}"
        folder.mkdir(parents=True)
        environment = {**os.environ, **(env or {})}
        process = SidecarProcess.start(
            serve_command(folder / "save", folder / "index", model, arguments),
            folder / "stderr.log",
            env=environment,
        )
        self.started.append(process)
        return process

    def close_all(self) -> None:
        for process in self.started:
            process.close()


@pytest.fixture(scope="session")
def engine() -> None:
    """Make sure the engine can run: skip when Chromium is missing, fetch the runtime."""
    if find_chromium() is None:
        reason = "engine tests skipped: Chromium is not installed (apt-get install -y chromium)"
        _SKIPPED.append(reason)
        pytest.skip(reason)
    ensure_runtime()


@pytest.fixture(scope="module")
def sidecars(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarStarter]:
    """Start real sidecars for one test module."""
    starter = SidecarStarter(tmp_path_factory.mktemp("sidecars"))
    try:
        yield starter
    finally:
        starter.close_all()


def run_cases(
    cases: Sequence[str],
    sidecar: SidecarProcess,
    *,
    controls: Mapping[str, ControlHandler] | None = None,
    timeout: float = 60.0,
) -> EngineRun:
    """Run the engine-test project's ``cases`` (``tests/godot/project/cases/<name>.gd``)
    against ``sidecar``, in one engine run."""
    return run_project(
        [(TEST_PROJECT_DIR, ""), (ADDON_DIR, "addons/game_memory")],
        [f"--case={','.join(cases)}", f"--ws-url={sidecar.url}", f"--token={sidecar.token}"],
        controls=controls,
        timeout=timeout,
    )


def case_records(run: EngineRun, case: str) -> list[dict[str, Any]]:
    """Return the ``GMTEST`` check records of one case."""
    return [record for record in run.records() if record.get("case") == case]


def assert_case_passed(run: EngineRun, case: str, expected: set[str]) -> None:
    """Assert that ``case`` finished, made every ``expected`` check, and failed none."""
    records = case_records(run, case)
    failed = [record for record in records if not record.get("ok")]
    assert not failed, f"{case}: failed checks {failed}\n{run.describe()}"
    missing = expected - {str(record.get("check")) for record in records}
    assert not missing, f"{case}: checks never made: {sorted(missing)}\n{run.describe()}"
    finished = [
        record
        for record in run.records("GMTEST_CASE")
        if record.get("case") == case and record.get("event") == "finished"
    ]
    assert finished, f"{case} never finished\n{run.describe()}"


def assert_clean_run(run: EngineRun) -> None:
    """Assert the engine quit by itself with 0 and printed no script or engine error."""
    assert not run.timed_out and run.exit_code == 0, run.describe()
    problems = [
        text
        for text in run.errors()
        if "SCRIPT ERROR" in text or "Parse Error" in text or text.startswith("ERROR")
    ]
    assert not problems, f"engine errors: {problems}\n{run.describe()}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print why the engine tests were skipped, so a skip is never silent."""
    for reason in dict.fromkeys(_SKIPPED):
        terminalreporter.write_line(reason, yellow=True, bold=True)
