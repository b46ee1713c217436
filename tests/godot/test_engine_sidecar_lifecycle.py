"""A launched sidecar's life around its node, in the real Godot engine. The web runtime
launches no process, so the node launches a pretend one (``runner/fake_sidecar.gd``: only the
process operations of ``GameMemorySidecar`` are replaced) whose ready line names a real
sidecar: the node's launch, failure and shutdown code runs unchanged."""

from __future__ import annotations

import pytest

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_a_sidecar_dying_while_serving_loses_the_connection(sidecars: SidecarStarter) -> None:
    sidecar = sidecars("lexical")
    run = run_cases(["sidecar_exit"], sidecar, controls=sidecar.controls())
    assert_clean_run(run)
    assert run.control_calls == ["freeze", "thaw"]
    assert_case_passed(
        run,
        "sidecar_exit",
        {
            "the_launched_sidecar_gets_ready",
            "its_process_is_running",
            "calls_are_pending_while_it_runs",
            "every_pending_call_resolves_soon_after",
            "pending_calls_fail_with_connection_lost",
            "the_message_says_the_sidecar_exited",
            "backend_failed_fires_once_with_connection_lost",
            "backend_failed_precedes_the_failed_answers",
            "a_sidecar_that_dies_before_its_ready_line_is_sidecar_failed",
        },
    )


def test_a_sidecar_is_asked_to_finish_and_never_left_running(sidecars: SidecarStarter) -> None:
    run = run_cases(["sidecar_shutdown"], sidecars("lexical"), timeout=60.0)
    assert_clean_run(run)
    assert_case_passed(
        run,
        "sidecar_shutdown",
        {
            "freed_sidecar_gets_ready",
            "freeing_the_node_closes_the_sidecars_stdin",
            "freeing_the_node_does_not_kill_the_sidecar_at_once",
            "the_sidecar_had_its_time_to_finish",
            "the_unawaited_call_resolved_stopped",
            "the_unawaited_write_reached_the_sidecar",
            "a_node_out_of_the_tree_still_has_its_stuck_sidecar_killed",
            "it_is_killed_after_the_grace_period",
            "nothing_is_left_to_watch",
            "at_quit_a_sidecar_that_exits_is_waited_for",
            "at_quit_a_stuck_sidecar_is_killed_after_the_quit_wait",
        },
    )
