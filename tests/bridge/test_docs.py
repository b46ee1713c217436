"""docs/protocol.md cannot drift from the bridge's tables (sqlite-utils ``test_docs`` style)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from game_memory.bridge.codes import ErrorCode
from game_memory.bridge.handlers import METHODS as METHOD_TABLE
from game_memory.bridge.limits import DEFAULT_LIMITS, PROTOCOL_VERSION
from game_memory.bridge.messages import PARSE_ERROR_KINDS
from game_memory.bridge.params import (
    MAXIMUM_RECALL_LIMIT,
    MAXIMUM_RECALL_MANY_QUERIES,
)
from game_memory.bridge.protocol import METHODS, NOTIFICATIONS, UNAUTHORIZED_CLOSE_CODE

PROTOCOL_DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


@pytest.fixture(scope="module")
def doc() -> str:
    return PROTOCOL_DOC.read_text(encoding="utf-8")


def section(doc: str, heading: str) -> str:
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^## |\Z)", doc, re.M | re.S)
    assert match, f"docs/protocol.md has no section {heading!r}"
    return match.group(1)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_has_a_section(doc: str, method: str) -> None:
    heading = "Handshake: `initialize`" if method == "initialize" else f"`{method}`"
    assert section(doc, heading).strip()


@pytest.mark.parametrize("method", [m for m in METHODS if m != "initialize"])
def test_every_param_of_every_method_is_documented(doc: str, method: str) -> None:
    text = section(doc, f"`{method}`")
    for name in METHOD_TABLE[method].params.model_fields:
        assert f"`{name}`" in text or f'"{name}"' in text, f"{method} param {name}"


@pytest.mark.parametrize("notification", NOTIFICATIONS)
def test_every_notification_is_documented(doc: str, notification: str) -> None:
    assert f"| `{notification}` |" in section(doc, "Server notifications")


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_is_in_the_error_table(doc: str, code: ErrorCode) -> None:
    assert re.search(
        rf"^\| {int(code)} \| [^|]+ \| [^|]+ \| [^|]+ \|$", section(doc, "Errors"), re.M
    )


@pytest.mark.parametrize("kind", PARSE_ERROR_KINDS)
def test_every_parse_error_kind_is_documented(doc: str, kind: str) -> None:
    assert f"`{kind}`" in section(doc, "Errors")


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(DEFAULT_LIMITS)])
def test_every_limit_is_documented_as_a_number(doc: str, field: str) -> None:
    value = getattr(DEFAULT_LIMITS, field)
    number = f"{value:,}" if isinstance(value, int) else f"{value:,g}"
    assert number in section(doc, "Limits"), f"{field} = {number}"


def test_protocol_constants_are_documented(doc: str) -> None:
    limits = section(doc, "Limits")
    assert f"| `limit` of a recall | {MAXIMUM_RECALL_LIMIT} |" in limits
    assert f"| queries of a `memory.recall_many` | {MAXIMUM_RECALL_MANY_QUERIES} |" in limits
    assert f'"protocol_version":{PROTOCOL_VERSION}' in doc
    assert f"| {UNAUTHORIZED_CLOSE_CODE} |" in section(doc, "Transports")
    assert "| 1009 |" in section(doc, "Transports")
    assert "GAME_MEMORY_REQUEST_TIMEOUT" in doc
