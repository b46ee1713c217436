"""What game code sees when it misuses the addon, in the real Godot engine against the real
sidecar: calls on a node outside the scene tree, failures at start-up, values JSON cannot
carry and arguments of the wrong type. Each resolves with a clear, typed failure; none hangs."""

from __future__ import annotations

import pytest

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_calls_outside_the_scene_tree_fail_at_once(engine: None, sidecars: SidecarStarter) -> None:
    run = run_cases(["outside_tree"], sidecars("lexical"))
    assert_clean_run(run)
    assert_case_passed(
        run,
        "outside_tree",
        {
            "a_pending_call_fails_when_the_node_leaves_the_tree",
            "a_call_after_the_node_left_the_tree_resolves_at_once",
            "it_fails_with_stopped_and_says_why",
            "a_refused_call_starts_nothing",
            "a_node_never_added_to_the_tree_refuses_calls_at_once",
            "back_in_the_tree_it_answers_again",
            "a_pending_call_fails_when_the_node_is_freed",
        },
    )
