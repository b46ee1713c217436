"""The node's ``maximum_entries`` setting, in the real Godot engine: it reaches the sidecar the
node launches as ``--maximum-entries N`` (the web runtime launches no process, so the node
launches a pretend one that records its arguments and names a real sidecar started with the
same option), and that sidecar refuses the memory past the bound."""

from __future__ import annotations

import pytest

from .conftest import SidecarStarter, assert_case_passed, assert_clean_run, run_cases

pytestmark = [pytest.mark.godot, pytest.mark.usefixtures("engine")]


def test_the_node_launches_its_sidecar_with_the_save_bound(sidecars: SidecarStarter) -> None:
    run = run_cases(["sidecar_capacity"], sidecars("lexical", arguments=["--maximum-entries", "2"]))
    assert_clean_run(run)
    assert_case_passed(
        run,
        "sidecar_capacity",
        {
            "the_bounded_sidecar_gets_ready",
            "it_is_launched_with_the_bound",
            "remembered_1",
            "remembered_2",
            "a_memory_past_the_bound_is_capacity_exceeded",
            "the_message_names_the_node_setting",
            "the_default_sidecar_gets_ready",
            "at_0_it_is_launched_without_a_bound",
            "capacity_arguments_name_the_bound",
        },
    )
