"""Forget, consolidate and erase driven from GDScript in the real Godot engine, against the
real sidecar: results, the NOT_FOUND code and the past-tense signals."""

from __future__ import annotations

import pytest

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_an_npc_forgets_on_game_time_consolidates_and_is_erased(
    engine: None, sidecars: SidecarStarter
) -> None:
    run = run_cases(["lifecycle"], sidecars())
    assert_clean_run(run)
    assert_case_passed(
        run,
        "lifecycle",
        {
            "remembered_rumour",
            "remembered_smoke",
            "remembered_wept",
            "remembered_ferry",
            "forget_resolves_forgotten",
            "a_forgotten_memory_is_not_recalled_after_its_moment",
            "an_earlier_save_still_recalls_it",
            "forgetting_again_changes_nothing",
            "forgetting_an_unknown_memory_is_not_found",
            "memory_forgotten_emitted_per_success",
            "consolidate_stores_a_reflection",
            "the_summary_names_its_sources",
            "after_the_summary_only_it_answers",
            "before_the_summary_the_sources_answer",
            "a_summary_of_an_unknown_memory_is_not_found",
            "memories_consolidated_emitted_once",
            "erase_owner_of_an_empty_list_erases_nothing",
            "the_npc_keeps_every_memory_after_an_empty_list",
            "erase_owner_of_listed_memories_counts_them",
            "erase_owner_erases_every_memory_of_the_npc",
            "erase_session_erases_the_rest",
            "nothing_is_recalled_after_the_session_is_erased",
            "memories_erased_emitted_per_erase",
            "retention_arguments_name_the_bound",
        },
    )
