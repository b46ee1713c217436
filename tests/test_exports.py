"""The public namespace: small, sorted, resolvable, closed over the front door, documented.

What is public is exactly what ``game_memory`` and ``game_memory.onnx`` re-export; every
other module is implementation (its ``__all__`` lists what sibling packages may use). The
user-facing surface is closed: every class a front-door call takes or returns is public.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import pytest

import game_memory

PUBLIC_PACKAGES = ["game_memory", "game_memory.onnx"]
API_DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
#: The issue's budget: about 30 names besides the errors.
NAME_BUDGET = 36


@pytest.mark.parametrize("name", PUBLIC_PACKAGES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    package = importlib.import_module(name)
    exported = list(package.__all__)
    assert exported == sorted(exported)
    for symbol in exported:
        assert hasattr(package, symbol), f"{name}.{symbol} is listed but missing"


def test_every_module_declares_all() -> None:
    for info in pkgutil.walk_packages(game_memory.__path__, "game_memory."):
        module = importlib.import_module(info.name)
        assert hasattr(module, "__all__") or info.ispkg, f"{info.name} has no __all__"


def test_public_objects_show_the_public_path() -> None:
    for name in game_memory.__all__:
        value = getattr(game_memory, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == "game_memory", name


def test_the_surface_stays_small() -> None:
    errors = {n for n in game_memory.__all__ if n.endswith("Error")}
    others = set(game_memory.__all__) - errors - {"__version__"}
    assert len(others) <= NAME_BUDGET, sorted(others)


def _classes_in(annotation: object) -> set[type]:
    found: set[type] = set()
    if inspect.isclass(annotation):
        found.add(annotation)
    for argument in typing.get_args(annotation):
        found |= _classes_in(argument)
    origin = typing.get_origin(annotation)
    if inspect.isclass(origin):
        found.add(origin)
    return found


def _signature_classes(function: typing.Any) -> set[type]:
    hints = typing.get_type_hints(function)
    classes: set[type] = set()
    for hint in hints.values():
        classes |= _classes_in(hint)
    return {c for c in classes if c.__module__.startswith("game_memory")}


def test_every_class_the_front_door_takes_or_returns_is_public() -> None:
    exported = {getattr(game_memory, name) for name in game_memory.__all__}
    front = [game_memory.open_memory, game_memory.VectorMemoryStore.__init__]
    front += [
        member
        for name, member in inspect.getmembers(game_memory.VectorMemoryStore, inspect.isfunction)
        if not name.startswith("_")
    ]
    missing = {
        f"{function.__qualname__}: {cls.__name__}"
        for function in front
        for cls in _signature_classes(function)
        if cls not in exported
    }
    assert not missing, sorted(missing)


def test_every_public_name_is_in_the_api_reference() -> None:
    text = API_DOC.read_text(encoding="utf-8")
    for name in game_memory.__all__:
        assert f"`{name}`" in text, f"docs/api.md does not describe {name}"
