"""Field types and bounds shared by the records: ids, ordinal order, strict numbers.

"Ordinal" order (ids, tags) is the order of UTF-16 code units, as in the reference
implementation, so that saves sort identically whichever runtime wrote them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAXIMUM_ID_CHARACTERS",
    "MAXIMUM_METADATA_ENTRIES",
    "MAXIMUM_METADATA_KEY_CHARACTERS",
    "MAXIMUM_METADATA_VALUE_CHARACTERS",
    "MAXIMUM_PAYLOAD_CHARACTERS",
    "MAXIMUM_PAYLOAD_DEPTH",
    "MAXIMUM_QUERY_LIMIT",
    "MAXIMUM_QUERY_TEXT_CHARACTERS",
    "MAXIMUM_SEARCHABLE_TEXT_CHARACTERS",
    "MAXIMUM_SNAPSHOT_MEMORIES",
    "MAXIMUM_STAGES",
    "MAXIMUM_STAGE_COUNT",
    "MAXIMUM_STAGE_MILLISECONDS",
    "MAXIMUM_TAGS",
    "BoundedId",
    "Importance",
    "StrictFloat",
    "StrictInt",
    "assemble_validated",
    "check_bounded_id",
    "check_unicode",
    "ordinal_key",
    "strict_float",
    "strict_int",
    "string_list",
]

MAXIMUM_ID_CHARACTERS = 1_024
MAXIMUM_PAYLOAD_CHARACTERS = 10_000_000
MAXIMUM_PAYLOAD_DEPTH = 128
MAXIMUM_SEARCHABLE_TEXT_CHARACTERS = 1_000_000
MAXIMUM_TAGS = 256
MAXIMUM_METADATA_ENTRIES = 256
MAXIMUM_METADATA_KEY_CHARACTERS = 256
MAXIMUM_METADATA_VALUE_CHARACTERS = 65_536
MAXIMUM_QUERY_LIMIT = 100_000
MAXIMUM_QUERY_TEXT_CHARACTERS = 1_000_000
MAXIMUM_SNAPSHOT_MEMORIES = 1_000_000
MAXIMUM_STAGES = 64
MAXIMUM_STAGE_COUNT = 1_000_000
MAXIMUM_STAGE_MILLISECONDS = 86_400_000.0
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


_ModelT = TypeVar("_ModelT", bound=BaseModel)
_set_attribute = object.__setattr__


def assemble_validated(cls: type[_ModelT], values: dict[str, Any]) -> _ModelT:
    """Build a model from ``values`` that already satisfy every rule of ``cls``.

    What ``model_construct`` does, without its per-field bookkeeping: for bulk decoding
    whose checks are proven equal to the model's (see ``store/plain_legacy.py``). ``values``
    must hold every field, in declaration order, already in its validated form.
    """
    instance = cls.__new__(cls)
    _set_attribute(instance, "__dict__", values)
    _set_attribute(instance, "__pydantic_fields_set__", set(values))
    _set_attribute(instance, "__pydantic_extra__", None)
    _set_attribute(instance, "__pydantic_private__", None)
    return instance


def ordinal_key(text: str) -> str:
    """Sort key that orders strings by UTF-16 code units (.NET ``StringComparer.Ordinal``).

    For text inside the Basic Multilingual Plane code-point order already is UTF-16 order,
    so the text is its own key; characters beyond it are spelled as their surrogate pairs.
    """
    if text.isascii() or max(text) < "\U00010000":
        return text
    return "".join(_surrogates(char) for char in text)


def _surrogates(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return char
    code -= 0x10000
    return chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF))


def check_unicode(value: str, what: str) -> None:
    if value.isascii():  # O(1) in CPython, and ASCII text is always valid
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} contains an unpaired surrogate and is not valid Unicode") from exc


def check_bounded_id(value: str, what: str = "id", maximum: int = MAXIMUM_ID_CHARACTERS) -> str:
    """Validate an identifier: a non-blank string of at most ``maximum`` characters."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    if len(value) > maximum:
        raise ValueError(f"{what} is {len(value)} characters long; the limit is {maximum}")
    if not value.strip():
        raise ValueError(f"{what} must not be blank")
    check_unicode(value, what)
    return value


def _bounded_id(value: Any) -> str:
    return check_bounded_id(value)


BoundedId = Annotated[str, BeforeValidator(_bounded_id)]


def _field(info: ValidationInfo) -> str:
    return info.field_name or "the value"


def strict_int(value: Any, info: ValidationInfo) -> Any:
    """Refuse what pydantic's lax ``int`` takes for a number but is none of the field's.

    A bool is refused (``True`` is not the bound 1: a retention bound of ``True`` erased
    all but one memory of each owner), and so is a float with a fraction (and ``nan``,
    ``inf``); a whole float becomes its int. Anything else goes on to pydantic's own
    ``int`` check. The ``ValueError`` names the field (``info.field_name``).
    """
    if isinstance(value, bool):
        raise ValueError(f"{_field(info)} must be an integer, not a boolean")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{_field(info)} must be a whole number, not {value!r}")
        return int(value)
    return value


def strict_float(value: Any, info: ValidationInfo) -> Any:
    """Refuse a bool where a number is expected (pydantic's lax ``float`` takes ``True``
    for 1.0); anything else goes on to pydantic's own ``float`` check. The ``ValueError``
    names the field (``info.field_name``)."""
    if isinstance(value, bool):
        raise ValueError(f"{_field(info)} must be a number, not a boolean")
    return value


StrictInt = Annotated[int, BeforeValidator(strict_int)]
"""An ``int`` field that refuses a bool and a float with a fraction (:func:`strict_int`)."""

StrictFloat = Annotated[float, BeforeValidator(strict_float)]
"""A ``float`` field that refuses a bool (:func:`strict_float`)."""


def string_list(value: Any, what: str) -> Iterable[Any]:
    """``value`` if it is a list-like of items, else a ``ValueError`` naming ``what``."""
    if type(value) is list or type(value) is tuple:
        return value
    if isinstance(value, str):
        raise ValueError(f"{what} must be a list of strings, not one string")
    if isinstance(value, bytes | Mapping) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a list of strings")
    return value


def _importance(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("importance must be a number, not a boolean")
    if isinstance(value, int) and not 0 <= value <= 1:
        # Checked as an integer: a huge one cannot even be converted to a float.
        raise ValueError("importance must be between 0 and 1")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("importance must be finite")
    return value


Importance = Annotated[float, BeforeValidator(_importance), Field(ge=0.0, le=1.0)]
