"""The protocol core stays sans-I/O: none of its modules imports asyncio, socket or websockets."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import game_memory.bridge

BRIDGE = Path(game_memory.bridge.__file__).parent
CORE = [
    "batches",
    "budget",
    "codes",
    "convert",
    "framing",
    "handlers",
    "handshake",
    "limits",
    "messages",
    "params",
    "protocol",
    "results",
    "service",
]
FORBIDDEN = {"asyncio", "socket", "websockets", "selectors", "threading"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
            if node.module.startswith("game_memory.bridge."):
                roots.add(node.module)
    return roots


@pytest.mark.parametrize("module", CORE)
def test_core_modules_do_no_io(module: str) -> None:
    roots = imported_roots(BRIDGE / f"{module}.py")
    assert not roots & FORBIDDEN
    bridge_imports = {name.rsplit(".", 1)[1] for name in roots if name.startswith("game_memory.")}
    assert bridge_imports <= set(CORE), "the core imports only other core modules"
