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


def test_a_failure_at_start_reaches_a_handler_connected_in_ready(
    engine: None, sidecars: SidecarStarter
) -> None:
    """The docs' pattern: a parent connects ``backend_failed`` in its ``_ready``, after its
    autostarted ``GameMemory`` child failed at once (nothing to launch on the web, a
    malformed URL)."""
    run = run_cases(["early_failure"], sidecars("lexical"))
    assert_clean_run(run)
    expected = {
        "a_call_made_before_the_announcement_fails_with_the_cause",
        "backend_failed_still_fires_once_for_it",
        "it_resolves_after_backend_failed_like_a_pending_call",
        "stop_before_the_announcement_resolves_the_held_call",
        "a_restart_right_after_the_failure_gets_ready",
        "the_stale_failure_is_not_announced_after_the_restart",
        "a_url_that_is_not_ws_is_named_as_such",
    }
    for label in ("launch_failure", "malformed_url"):
        expected |= {
            f"{label}_reaches_backend_failed_connected_in_ready",
            f"{label}_is_announced_once",
            f"{label}_leaves_the_node_failed",
        }
    assert_case_passed(run, "early_failure", expected)


def test_values_json_cannot_carry_are_refused_and_named(
    engine: None, sidecars: SidecarStarter
) -> None:
    run = run_cases(["unsendable"], sidecars("lexical"))
    assert_clean_run(run)
    assert_case_passed(
        run,
        "unsendable",
        {
            "a_vector_is_refused_and_named",
            "an_object_is_refused_and_named",
            "a_dictionary_that_contains_itself_is_refused_and_named",
            "an_array_that_contains_itself_is_refused_and_named",
            "a_key_that_is_not_a_string_is_refused_and_named",
            "a_nan_in_a_packed_array_is_refused_and_named",
            "nothing_was_stored",
            "json_values_are_sent_as_they_are",
            "the_connection_still_answers",
        },
    )


def test_arguments_of_the_wrong_type_are_refused_and_named(
    engine: None, sidecars: SidecarStarter
) -> None:
    run = run_cases(["bad_arguments"], sidecars("lexical"))
    assert_clean_run(run)
    refused = (
        "a_string_tick",
        "a_fractional_tick",
        "a_tick_past_64_bits",
        "a_huge_expiry_tick",
        "a_kind_given_as_an_int",
        "a_kinds_entry_given_as_an_int",
        "a_forget_moment_with_a_string_tick",
        "a_recall_many_moment_given_as_a_tick",
        "a_recall_many_owner_given_as_an_int",
        "a_remember_many_moment_given_as_a_tick",
        "a_remember_many_text_given_as_an_array",
        "an_erase_list_given_as_a_string",
        "an_erase_list_entry_given_as_an_int",
    )
    assert_case_passed(
        run,
        "bad_arguments",
        {f"{label}_is_refused_and_named" for label in refused}
        | {
            "a_whole_float_tick_is_an_int_tick",
            "a_whole_float_limit_works",
            "no_refused_call_stored_anything",
            "no_refused_forget_took_effect",
        },
    )
