"""A small owner of a hybrid store: inspect, rebuild, close."""

from __future__ import annotations

from collections.abc import Callable

from game_memory.errors import InvalidArgumentError, StoreClosedError
from game_memory.memory import VectorMemoryStore
from game_memory.model.status import VectorMemoryStatus

__all__ = ["RuntimeMemoryLifecycle"]


class RuntimeMemoryLifecycle:
    """Own a :class:`VectorMemoryStore` for a game's lifetime: inspect, rebuild, close.

    Raises:
        InvalidArgumentError: ``store`` is not a ``VectorMemoryStore`` (checked here, not
            at the first ``inspect``, where it failed with a raw ``AttributeError``).
    """

    def __init__(self, store: VectorMemoryStore) -> None:
        if not isinstance(store, VectorMemoryStore):
            raise InvalidArgumentError(
                "RuntimeMemoryLifecycle takes a VectorMemoryStore (open_memory returns one), "
                f"not {type(store).__name__}"
            )
        self._store = store
        self._closed = False

    @property
    def store(self) -> VectorMemoryStore:
        """The owned store."""
        self._check()
        return self._store

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError("the memory lifecycle is closed")

    async def inspect(self, session_id: str) -> VectorMemoryStatus:
        """The session's vector status."""
        self._check()
        return await self._store.get_status(session_id)

    async def rebuild(
        self,
        session_id: str,
        *,
        force: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> VectorMemoryStatus:
        """Rebuild the session's vectors (see ``VectorMemoryStore.rebuild``)."""
        self._check()
        return await self._store.rebuild(session_id, force=force, progress=progress)

    async def aclose(self) -> None:
        """Close the store; idempotent."""
        if not self._closed:
            self._closed = True
            await self._store.aclose()
