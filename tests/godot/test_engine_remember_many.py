"""``remember_many`` driven from GDScript in the real Godot engine, against the real sidecar."""

from __future__ import annotations

import pytest

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_a_batch_is_remembered_atomically_and_recalled(
    engine: None, sidecars: SidecarStarter
) -> None:
    run = run_cases(["remember_many"], sidecars())
    assert_clean_run(run)
    assert_case_passed(
        run,
        "remember_many",
        {
            "backend_ready",
            "remember_many_succeeds",
            "the_main_loop_kept_running_while_waiting",
            "one_result_per_entry_in_order",
            "a_repeat_in_the_batch_is_not_created",
            "memories_remembered_emitted_once_with_the_results",
            "the_batch_is_recalled_as_of_a_moment",
            "a_conflict_fails_the_whole_batch",
            "nothing_of_a_failed_batch_is_stored",
            "an_empty_batch_is_refused",
            "an_unknown_option_names_its_entry",
        },
    )
