"""How the addon uses the wire, in the real Godot engine against the real sidecar: flow
control (the in-flight limit, timed-out requests, the outbound buffer, when the answer clock
starts) and exact values (control characters in text, ticks past 2^53, integer codes)."""

from __future__ import annotations

import pytest

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_the_node_never_overfills_the_sidecar_or_the_socket(sidecars: SidecarStarter) -> None:
    """Two ~700 KB messages in one frame, a burst of 64 right after 64 timeouts, and a
    request that waits for a slot and then for a frozen sidecar. Lexical-only: the transport
    is under test."""
    sidecar = sidecars("lexical")
    run = run_cases(["flow_control"], sidecar, controls=sidecar.controls(), timeout=90.0)
    assert_clean_run(run)
    assert_case_passed(
        run,
        "flow_control",
        {
            "two_big_messages_sent_in_one_frame_are_both_stored",
            "a_full_burst_times_out_while_frozen",
            "the_next_burst_is_answered_not_refused_as_busy",
            "the_full_slots_were_answered",
            "a_request_that_waited_for_a_slot_gets_its_whole_timeout_once_sent",
            "the_backend_never_failed",
        },
    )
    assert sidecar.process.poll() is None, "the sidecar should still be serving"


def test_values_come_back_exactly(sidecars: SidecarStarter) -> None:
    sidecar = sidecars("lexical", arguments=["--maximum-memories-per-owner", "6"])
    run = run_cases(["exact_values"], sidecar)
    assert_clean_run(run)
    assert_case_passed(
        run,
        "exact_values",
        {
            "stringify_escapes_every_control_character",
            "stringify_round_trips_every_text",
            "parse_keeps_long_ticks_exact",
            "parse_leaves_text_and_other_numbers_alone",
            "text_with_control_characters_is_stored",
            "it_comes_back_unchanged",
            "it_is_recalled_unchanged",
            "remember_echoes_every_tick_exactly",
            "echoed_ticks_are_ints",
            "expiry_ticks_come_back_exact",
            "recalled_ticks_are_exact",
            "age_ticks_are_exact",
            "an_age_beyond_64_bits_stays_a_float",
            "a_failed_recall_many_entry_has_an_int_code",
            "a_null_owner_is_reported_as_empty",
            "diagnostic_detail_counts_become_ints",
            "an_eviction_diagnostic_has_int_counts",
        },
    )


def test_timed_out_requests_keep_their_slot_for_the_sidecars_own_deadline(
    sidecars: SidecarStarter,
) -> None:
    """The deadline comes from the sidecar's ``initialize`` (here 1 s, set by
    ``--request-timeout``), not the addon's default of 120 s."""
    sidecar = sidecars("lexical", arguments=["--request-timeout", "1"])
    run = run_cases(["sidecar_deadlines"], sidecar, controls=sidecar.controls(), timeout=60.0)
    assert_clean_run(run)
    assert_case_passed(
        run,
        "sidecar_deadlines",
        {
            "backend_ready",
            "the_sidecars_deadline_is_taken_from_initialize",
            "frozen",
            "the_requests_timed_out_here",
            "their_slots_are_kept_while_the_sidecar_may_run_them",
            "their_slots_are_given_back_after_the_sidecars_own_deadline",
            "thawed",
            "the_next_request_is_answered",
        },
    )
