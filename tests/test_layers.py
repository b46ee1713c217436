"""The import direction of DESIGN.md, enforced by parsing every module's imports.

Every import counts: at module level, under ``TYPE_CHECKING`` and inside functions (a circle
hidden behind ``TYPE_CHECKING`` is still a circle). Floors, from the top::

    cli, bridge, demo            the ways in (bridge and demo never import cli)
    bundle                       shipping: the sidecar bundle and the addon zip (under cli)
    opening, memory, rebuild,    the front door, what builds it, and its upkeep
    catch_up, models, lifecycle,
    forgetting, ingest,
    write_guards
    recall                       the pipeline over explicit collaborators
    postgres                     the save and the index on PostgreSQL (optional extra)
    index, store, embedding      the derived index, the save, the model seam
    durable                      file primitives shared by save and index
    model, errors, strict_json   the plain records

A module may import its own package and any floor below its own; ``index`` may also read
the save's snapshot types (``store``), never the reverse. ``onnx`` may use only the
embedding protocol, the identity record, the errors and strict JSON. On top of the
direction, no circle may exist anywhere in the module graph, inside packages too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "game_memory"

BASE = {"model", "errors", "strict_json", "_version"}
LOW = BASE | {"durable"}
SEAMS = LOW | {"store", "embedding"}
ALLOWED: dict[str, set[str]] = {
    "_version": {"_version"},
    "_startup": {"_startup"},  # the command's start (game_memory/__init__.py and cli only)
    "strict_json": {"strict_json"},
    "errors": {"errors"},
    "model": {"model", "strict_json", "errors"},
    "durable": BASE | {"durable"},
    "embedding": BASE | {"embedding"},
    "store": LOW | {"store"},
    "index": SEAMS | {"index"},
    "recall": SEAMS | {"index", "recall"},
    "memory": SEAMS
    | {"index", "recall", "memory", "rebuild", "forgetting", "ingest", "models", "lifecycle"}
    | {"write_guards", "catch_up"},
    "ingest": SEAMS | {"index", "recall", "forgetting", "ingest", "write_guards"},
    "rebuild": SEAMS | {"index", "recall", "rebuild"},
    "catch_up": SEAMS | {"index", "recall", "rebuild", "catch_up", "write_guards"},
    "forgetting": SEAMS | {"index", "recall", "forgetting", "write_guards"},
    "write_guards": BASE | {"write_guards"},
    "models": SEAMS | {"index", "recall", "memory", "rebuild", "models", "onnx"},
    "lifecycle": SEAMS | {"index", "recall", "memory", "lifecycle"},
    "opening": SEAMS | {"index", "recall", "memory", "rebuild", "models", "opening"},
    "onnx": {"onnx", "errors", "strict_json", "model.identity", "embedding.provider"},
    "postgres": SEAMS | {"index", "postgres"},
}
# Only the front door and the CLI open PostgreSQL (inside functions: the extra is optional).
ALLOWED["opening"] |= {"postgres"}
_FRONT = SEAMS | {
    *("index", "recall", "memory", "rebuild", "forgetting", "models", "lifecycle", "opening"),
    "ingest",
    "onnx",
}
ALLOWED["bridge"] = _FRONT | {"bridge"}
ALLOWED["demo"] = _FRONT | {"demo"}
ALLOWED["bundle"] = _FRONT | {"bundle"}
ALLOWED["cli"] = _FRONT | {"bridge", "demo", "bundle", "cli", "postgres", "_startup"}


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


MODULES = {
    _module_name(path): path
    for path in sorted(PACKAGE.rglob("*.py"))
    if "__pycache__" not in path.parts
}


def _imports(name: str, path: Path) -> set[str]:
    """Every game_memory module ``path`` imports (a ``from`` of a submodule names it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("game_memory"))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            if not module.startswith("game_memory"):
                continue
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.add(submodule if submodule in MODULES else module)
    found.discard(name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _floor(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "game_memory"))
def test_module_imports_only_downward(name: str) -> None:
    floor = _floor(name)
    assert floor in ALLOWED, f"{name} is in no floor of tests/test_layers.py"
    allowed = ALLOWED[floor]
    for target in GRAPH[name]:
        relative = target.removeprefix("game_memory").removeprefix(".")
        assert relative, f"{name} imports the top-level package game_memory (a circle)"
        assert any(relative == a or relative.startswith(a + ".") for a in allowed), (
            f"{name} ({floor}) imports {target}, which is not below it"
        )


def test_no_import_circle_anywhere() -> None:
    """Depth-first search over every edge; report the first circle found, as a path."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(GRAPH.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (circle := visit(target)) is not None:
                return circle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state and (circle := visit(node)) is not None:
            pytest.fail("import circle: " + " -> ".join(circle))


def test_the_circle_check_sees_type_checking_and_function_imports(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from game_memory.memory import VectorMemoryStore\n"
        "def later():\n    from game_memory.rebuild import rebuild_session\n",
        encoding="utf-8",
    )
    assert _imports("game_memory.sample", module) == {"game_memory.memory", "game_memory.rebuild"}
