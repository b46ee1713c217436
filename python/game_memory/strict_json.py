"""Strict JSON parsing, as the reference validates payloads.

Duplicate property names (at any depth), ``NaN``/``Infinity`` and nesting deeper than a
bound are refused; Python's ``json`` accepts all three. Payloads, calendars and legacy
documents are parsed here on every read, so the decoder skips ``json.loads``' wrappers.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["nests_deeper_than", "parse_strict_json", "readable_json"]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"JSON object has a duplicate property name {key!r}")
            seen.add(key)
    return result


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether objects and arrays in ``value`` nest more than ``limit`` levels (an object or
    array is one level); stops at the first too deep, and never recurses (a value nested
    past Python's recursion limit is walked like any other)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > limit:
            return True
        pending.extend((child, level + 1) for child in children)
    return False


_STRICT_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant
)


_scan_once: Callable[[str, int], tuple[Any, int]] = _STRICT_DECODER.scan_once  # type: ignore[attr-defined]
_JSON_WHITESPACE = " \t\n\r"


def _decode_strict(text: str) -> Any:
    """``JSONDecoder.decode`` minus its Python-level wrappers (it runs on every record read)."""
    length = len(text)
    start = 0
    while start < length and text[start] in _JSON_WHITESPACE:
        start += 1
    try:
        value, end = _scan_once(text, start)
    except StopIteration as exc:
        raise json.JSONDecodeError("Expecting value", text, exc.value) from None
    while end < length and text[end] in _JSON_WHITESPACE:
        end += 1
    if end != length:
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def parse_strict_json(text: str, what: str, maximum_depth: int) -> Any:
    """Parse JSON rejecting duplicate keys, NaN/Infinity and nesting deeper than the bound."""
    try:
        value = _decode_strict(text)
    except RecursionError as exc:
        raise ValueError(f"{what} is nested too deeply") from exc
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from exc
    # Nesting deeper than the bound needs more opening brackets than the bound.
    brackets = text.count("{") + text.count("[")
    if brackets > maximum_depth and nests_deeper_than(value, maximum_depth):
        raise ValueError(f"{what} is nested deeper than {maximum_depth} levels")
    return value


#: Digits of the largest integer a 64-bit float holds (about 1.8e308).
_FLOAT_DIGITS = 309
#: What a number needs to be beyond a 64-bit float: many digits, or a 3-digit exponent.
_MAYBE_OUT_OF_RANGE = re.compile(rf"\d{{{_FLOAT_DIGITS},}}|[eE][+-]?\d{{3,}}")


class _OutOfRange(ValueError):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _range_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise _OutOfRange(literal)
    return value


def _range_int(literal: str) -> int:
    # The digits first: int() of more than 4,300 digits raises with CPython's advice to
    # raise an interpreter-wide limit, after which only the process that raised it could
    # read the save.
    digits = len(literal) - literal.startswith("-")
    if digits > _FLOAT_DIGITS or abs(value := int(literal)) > sys.float_info.max:
        raise _OutOfRange(literal)
    return value


_RANGE_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicate_keys,
    parse_constant=_reject_constant,
    parse_float=_range_float,
    parse_int=_range_int,
)


def out_of_range_number(text: str) -> str | None:
    """The first number of the JSON ``text`` beyond the range of a 64-bit float (shortened
    for a message), or ``None``. Godot, JavaScript and the bridge read such a number as
    infinity (the bridge refuses one on input), so a new memory may not hold one; what a
    store already holds is read as it is (this is not asked of it). Cheap for the usual
    text: only one with a run of 309 digits or a 3-digit exponent is parsed."""
    if not _MAYBE_OUT_OF_RANGE.search(text):
        return None
    try:
        _RANGE_DECODER.decode(text)
    except _OutOfRange as exc:
        literal = exc.literal
        return literal if len(literal) <= 24 else f"{literal[:20]}… ({len(literal):,} characters)"
    except (ValueError, RecursionError):
        return None  # not valid JSON: the strict parse names that
    return None


#: A JSON escape: a surrogate pair written as two ``\\u`` escapes (one character), another
#: ``\\u`` escape, or a backslash and one character (``\\n``, ``\\"``, ``\\\\``, ...).
_ESCAPE = re.compile(
    r"\\(?:u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|(.))",
    re.DOTALL,
)
#: What JSON's one-letter escapes stand for.
_SHORT_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}


def _unescaped(match: re.Match[str]) -> str:
    high, low, code, short = match.groups()
    if high is not None:
        return chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + int(low, 16) - 0xDC00)
    if code is not None:
        return chr(int(code, 16))  # a lone surrogate too, as ``json.loads`` reads it
    return _SHORT_ESCAPES.get(short, match.group())


def readable_json(text: str) -> str:
    """``text`` (JSON) with every escape written as the character it stands for, for search
    and embedding, and nothing else changed (numbers stay as written: ``2.50``, ``1E3``).

    Python's ``json.dumps`` escapes every non-ASCII character by default, and every JSON
    writer escapes a line break, a tab or a quote in a string: a payload written so
    (``{"item": "\\u00e9p\\u00e9e"}``, ``"Dear Mira,\\nBertram"``) would otherwise be
    searched and embedded as ``u00e9p`` and ``nbertram``, not ``épée`` and ``Bertram``. In
    JSON a backslash appears only in a string, so the escapes are replaced where they are
    (one regular expression, no parse: the text is read the same whatever else it holds);
    a string's content alone, or text that is not JSON, is read by the same rule. Text
    without a backslash is returned as it is (the usual case: one ``in`` test).
    """
    if "\\" not in text:
        return text
    return _ESCAPE.sub(_unescaped, text)
