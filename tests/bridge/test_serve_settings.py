"""``game-memory serve``'s settings are checked before anything opens, with messages that
state the bounds (no process is started: the parsed arguments are checked directly)."""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory.cli.parser import build_parser
from game_memory.cli.serve import TIMEOUT_ENVIRONMENT_VARIABLE, ServeSettings


def settings(tmp_path: Path, *extra: str) -> ServeSettings:
    arguments = ["serve", "--stdio", "--save-dir", str(tmp_path / "save"), *extra]
    return ServeSettings.from_args(build_parser().parse_args(arguments))


@pytest.mark.parametrize("given", ["86400000", "1e7", "inf"])
def test_a_request_timeout_past_the_bound_is_refused_with_the_bound_stated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.delenv(TIMEOUT_ENVIRONMENT_VARIABLE, raising=False)
    with pytest.raises(ValueError) as caught:
        settings(tmp_path, "--request-timeout", given)
    message = str(caught.value)
    assert message.startswith("--request-timeout must be a positive number of seconds")
    assert "below 10,000,000" in message


def test_the_environment_deadline_past_the_bound_is_refused_with_the_bound_stated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TIMEOUT_ENVIRONMENT_VARIABLE, "1e7")
    with pytest.raises(ValueError) as caught:
        settings(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{TIMEOUT_ENVIRONMENT_VARIABLE} must be a positive number")
    assert "below 10,000,000" in message and "'1e7'" in message


def test_a_request_timeout_just_under_the_bound_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TIMEOUT_ENVIRONMENT_VARIABLE, raising=False)
    taken = settings(tmp_path, "--request-timeout", "9999999")
    assert taken.limits.request_timeout_seconds == 9_999_999
