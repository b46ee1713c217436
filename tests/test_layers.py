"""The import direction of DESIGN.md, enforced by parsing every module's imports.

``bridge``, ``cli``, ``commands``, ``composition`` and ``demo`` sit on top; below them
``vector`` → ``store`` → ``model``/``errors`` (with ``strict_json`` under ``model``, and
``memory_ids`` beside it); ``onnx`` may use only the provider protocol,
the identity and the errors. A module importing upward (or sideways into ``onnx``) fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "game_memory"
TOP = {"bridge", "cli", "commands", "composition", "demo"}
BASE = {"model", "errors", "strict_json"}
ALLOWED: dict[str, set[str]] = {
    "strict_json": {"strict_json"},
    "model": BASE,
    "memory_ids": BASE | {"memory_ids"},
    "errors": {"errors"},
    "store": BASE | {"store"},
    "vector": BASE | {"vector", "store"},
    "onnx": {"onnx", "errors", "vector.provider", "vector.identity"},
}


def _layer(module: Path) -> str:
    relative = module.relative_to(PACKAGE).with_suffix("")
    return relative.parts[0]


def _imports(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("game_memory")
        ):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("game_memory"))
    return names


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_downward(module: Path) -> None:
    layer = _layer(module)
    if layer in TOP or (module.name == "__init__.py" and module.parent == PACKAGE):
        return
    allowed = ALLOWED[layer]
    for name in _imports(module):
        target = name.removeprefix("game_memory.").removeprefix("game_memory")
        assert target, f"{module} imports the top-level package"
        assert any(target == a or target.startswith(a + ".") for a in allowed), (
            f"{module.relative_to(PACKAGE)} ({layer}) imports {name}, above its layer"
        )


def test_every_layer_is_known() -> None:
    layers = {_layer(module) for module in MODULES}
    assert layers <= TOP | set(ALLOWED) | {"__init__.py", "py.typed"}
