"""The public namespace: sorted ``__all__``, every name resolves, nothing public is missing."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import game_memory

PUBLIC_PACKAGES = ["game_memory", "game_memory.onnx"]


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


def test_public_classes_of_the_core_layers_are_exported() -> None:
    """Every public class of the store and vector layers is reachable from game_memory."""
    exported = {getattr(game_memory, name) for name in game_memory.__all__}
    internal = {
        "IndexEngine",
        "IndexPartition",
        "StoreEngine",
        "PartitionCache",
        "PartitionState",
        "PartitionView",
        "PredicateColumns",
        "LexicalIndex",
        "Ledger",
        "LedgerEntry",
        "ProcessLock",
        "ScanResult",
        "RecordCorruption",
        "PackIndex",
        "EntryRecord",
        "EntryState",
        "MemoryDigests",
        "JoinCache",
        "PartitionJoin",
        "EmbeddingGate",
        "DiagnosticDispatcher",
        "FusedCandidate",
        "LexicalHit",
        "LexicalSearchResult",
        "DocumentError",
        "PackPart",
        "PartitionReplacedError",
        "RowBuffer",
        "Segment",
    }
    missing = []
    for prefix in ("game_memory.store", "game_memory.vector"):
        package = importlib.import_module(prefix)
        for info in pkgutil.walk_packages(package.__path__, prefix + "."):
            module = importlib.import_module(info.name)
            for name in getattr(module, "__all__", ()):
                value = getattr(module, name)
                if inspect.isclass(value) and name not in internal and value not in exported:
                    missing.append(f"{info.name}.{name}")
    assert not missing, f"public classes not exported from game_memory: {missing}"
