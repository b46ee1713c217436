"""Belief versions driven from GDScript in the real Godot engine, against the real sidecar."""

from __future__ import annotations

import pytest

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_a_newer_belief_answers_after_its_moment_and_the_older_before(
    engine: None, sidecars: SidecarStarter
) -> None:
    run = run_cases(["beliefs"], sidecars())
    assert_clean_run(run)
    assert_case_passed(
        run,
        "beliefs",
        {
            "both_versions_are_remembered",
            "the_remembered_memory_carries_its_key",
            "before_the_update_the_old_belief_answers",
            "after_the_update_only_the_new_belief_answers",
            "recalled_memories_carry_their_key",
            "a_misspelled_option_names_belief_key",
            "recall_arguments_select_the_mode_and_name_every_option",
            "no_recall_arguments_by_default",
        },
    )
