"""The addon in a real Godot 4.6 engine (web runtime, headless Chromium) against the real sidecar.

Each engine run packs ``tests/godot/project`` with the addon, runs the named GDScript cases and
parses their ``GMTEST`` check lines (asserts are no-ops in the release runtime, so every
expectation is an explicit, printed check). The sidecar is always the real
``game-memory serve --websocket``; faults are produced on the real process: the GDScript asks
the harness (``GET /control/<name>``) to freeze it with SIGSTOP (its requests then go
unanswered: timeouts) or to kill it with SIGKILL (its socket closes under pending requests).
"""

from __future__ import annotations

import pytest

from .conftest import (
    SidecarStarter,
    assert_case_passed,
    assert_clean_run,
    run_cases,
)
from .harness import EngineRun

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]

CORE_CASES = ("remember_recall", "recall_many", "errors", "rebuild", "shipping")


@pytest.fixture(scope="module")
def core_run(engine: None, sidecars: SidecarStarter) -> EngineRun:
    """One engine run of the cases that leave the sidecar healthy, on one sidecar."""
    return run_cases(CORE_CASES, sidecars())


def test_core_run_finishes_cleanly(core_run: EngineRun) -> None:
    assert_clean_run(core_run)
    done = core_run.records("GMTEST_DONE")
    assert done and done[-1]["ok"] and done[-1]["failures"] == 0, core_run.describe()
    finished = [
        record["case"]
        for record in core_run.records("GMTEST_CASE")
        if record.get("event") == "finished"
    ]
    assert finished == list(CORE_CASES), core_run.describe()


def test_remember_then_recall_as_of_a_game_moment(core_run: EngineRun) -> None:
    assert_case_passed(
        core_run,
        "remember_recall",
        {
            "request_made_before_ready_is_answered",
            "backend_ready_emitted_once",
            "resending_a_memory_is_idempotent",
            "recall_finds_past_memories",
            "recall_hides_memories_after_at_or_before",
            "an_earlier_moment_sees_less",
            "another_owner_remembers_nothing",
            "recalled_memories_have_the_documented_keys",
            "ticks_are_ints",
            "memory_remembered_emitted_per_memory",
            "memory_recalled_emitted_with_owner_and_memories",
            "kind_filter_returns_only_facts",
            "payload_and_tags_survive_the_round_trip",
            "status_counts_every_memory",
            "migrate_answers_with_int_counts",
        },
    )


def test_recall_many_for_several_npcs(core_run: EngineRun) -> None:
    assert_case_passed(
        core_run,
        "recall_many",
        {
            "concurrent_remembers_all_resolve",
            "each_concurrent_answer_matches_its_request",
            "recall_many_returns_one_result_per_query",
            "recall_many_result_3_belongs_to_its_npc",
            "recall_many_result_3_respects_its_moment",
            "memory_recalled_emitted_per_query_in_order",
            "one_bad_query_fails_alone",
            "concurrent_recalls_all_resolve",
            "each_concurrent_recall_gets_its_own_npc",
        },
    )


def test_errors_are_surfaced_as_ok_false(core_run: EngineRun) -> None:
    assert_case_passed(
        core_run,
        "errors",
        {
            "unknown_option_is_refused",
            "a_nan_option_is_refused_and_named",
            "a_message_over_1_mib_is_refused",
            "sidecar_refuses_an_invalid_kind",
            "sidecar_refuses_a_limit_over_100",
            "a_refused_request_does_not_break_the_connection",
            "wrong_token_fails_the_pending_request",
            "wrong_token_emits_backend_failed_once",
            "requests_after_a_failure_fail_at_once",
            "unreachable_server_fails_the_request",
            "launching_on_the_web_fails_with_advice",
            "sidecar_folders_are_absolute_paths",
            "stop_fails_pending_requests",
            "a_request_after_stop_restarts_the_backend",
            "ready_line_with_another_protocol_is_refused",
            "a_sidecar_gets_one_blas_thread_by_default",
            "a_sidecar_keeps_the_games_own_blas_setting",
        },
    )


def test_rebuild_reports_progress_and_completion(core_run: EngineRun) -> None:
    assert_case_passed(
        core_run,
        "rebuild",
        {
            "rebuild_succeeds",
            "rebuild_progress_starts_at_zero",
            "rebuild_progress_ends_at_total",
            "rebuild_progress_never_goes_back",
            "rebuild_completed_emitted_once_with_the_result",
            "rebuilt_index_is_ready",
        },
    )


def test_shipping_finds_the_sidecar_and_plans_the_export(core_run: EngineRun) -> None:
    """The locator's order and the export plugin's copy logic, as plain functions on real
    files under user:// (the web runtime has no editor and launches nothing)."""
    assert_case_passed(
        core_run,
        "shipping",
        {
            "the_bundle_beside_the_game_comes_first",
            "then_the_project_setting_a_folder_means_the_sidecar_in_it",
            "then_game_memory_on_the_path",
            "without_an_executable_path_nothing_beside_the_game_is_tried",
            "a_relative_setting_is_relative_to_the_executable",
            "a_user_setting_is_globalized",
            "windows_splits_the_path_on_semicolons",
            "windows_adds_exe_to_a_setting_without_it",
            "windows_finds_the_exe_beside_the_game",
            "macos_also_looks_in_the_app_plugins_folder",
            "the_error_names_every_place_tried",
            "a_linux_export_copies_the_bundle_beside_the_executable",
            "a_web_export_skips_the_bundle",
            "a_android_export_skips_the_bundle",
            "a_bundle_for_another_os_is_not_copied",
            "a_bundle_for_another_arch_is_not_copied",
            "no_bundle_is_an_error_with_advice",
            "a_macos_export_puts_the_bundle_in_the_app",
            "the_editor_folder_is_left_out_of_exports",
            "every_file_arrives_identical_hidden_ones_too",
            "a_symbolic_link_stays_a_link_to_the_same_target",
            "the_copy_keeps_the_permissions_the_platform_reports",
            "copying_again_replaces_the_older_bundle_whole",
            "a_folder_that_is_not_a_bundle_is_never_replaced",
            "copying_something_that_is_not_a_bundle_is_refused",
            "by_default_the_node_looks_for_the_sidecar",
            "a_save_in_the_install_folder_is_refused",
            "scratch_folder_removed",
        },
    )


def test_a_diagnostic_reaches_diagnostic_emitted(
    sidecars: SidecarStarter,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The sidecar runs ``--model default`` with an empty model home, so it starts in lexical
    mode and sends ``embedding_model_unavailable`` right after ``initialize``."""
    from game_memory.onnx.model_home import HOME_VARIABLE

    empty_home = tmp_path_factory.mktemp("no-model-home")
    sidecar = sidecars("default", env={HOME_VARIABLE: str(empty_home)})
    run = run_cases(["diagnostic"], sidecar)
    assert_clean_run(run)
    assert_case_passed(
        run,
        "diagnostic",
        {
            "diagnostic_emitted_for_the_missing_model",
            "diagnostic_is_a_warning_with_advice",
            "server_reports_lexical_mode",
            "lexical_recall_still_answers",
            "rebuild_without_a_model_fails_with_embedding_unavailable",
            "rebuild_completed_carries_the_failure",
        },
    )


def test_requests_time_out_and_late_answers_are_dropped(sidecars: SidecarStarter) -> None:
    """The GDScript freezes the real sidecar (SIGSTOP) through the harness, lets requests
    time out, then thaws it (SIGCONT) so the late answers arrive and must be ignored. The
    transport is under test, not recall, so the sidecar runs lexical-only."""
    sidecar = sidecars("lexical")
    run = run_cases(["timeout"], sidecar, controls=sidecar.controls())
    assert_clean_run(run)
    assert run.control_calls == ["freeze", "thaw"]
    assert_case_passed(
        run,
        "timeout",
        {
            "unanswered_request_times_out",
            "timeout_message_names_the_method",
            "timeout_waits_about_request_timeout",
            "concurrent_requests_each_time_out",
            "the_connection_still_works_after_timeouts",
            "timed_out_requests_resolved_exactly_once",
            "timeouts_do_not_fail_the_backend",
        },
    )
    assert sidecar.process.poll() is None, "the thawed sidecar should still be serving"


def test_the_sidecar_dying_mid_request_fails_pending_requests(sidecars: SidecarStarter) -> None:
    """The GDScript freezes the real sidecar so three requests stay pending, then has the
    harness SIGKILL it: the socket closes and every pending request must fail at once. The
    transport is under test, not recall, so the sidecar runs lexical-only."""
    sidecar = sidecars("lexical")
    run = run_cases(["sidecar_death"], sidecar, controls=sidecar.controls())
    assert_clean_run(run)
    assert run.control_calls == ["freeze", "kill"]
    assert sidecar.process.returncode is not None and sidecar.process.returncode < 0
    assert_case_passed(
        run,
        "sidecar_death",
        {
            "requests_are_pending_while_frozen",
            "every_pending_request_resolves",
            "pending_requests_fail_long_before_their_timeout",
            "pending_requests_fail_with_connection_lost",
            "backend_failed_precedes_the_failed_answers",
            "backend_failed_emitted_once",
            "requests_after_death_fail_at_once",
        },
    )
