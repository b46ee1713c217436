"""Run one validated call against the memory service and shape its JSON result.

:class:`MethodExecutor` is shared by every connection of a server: it also owns the
server-wide rule that only one rebuild per session runs at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from game_memory.bridge.codes import ErrorCode, RpcError, error_from_exception
from game_memory.bridge.convert import build_memory, build_query
from game_memory.bridge.params import (
    MigrateParams,
    RebuildParams,
    RecallManyParams,
    RecallParams,
    RememberParams,
    StatusParams,
)
from game_memory.bridge.protocol import Call
from game_memory.bridge.results import (
    memory_to_json,
    migration_to_json,
    recall_to_json,
    status_to_json,
)
from game_memory.bridge.service import BridgeService
from game_memory.errors import StoreBusyError

__all__ = ["MethodExecutor", "Notify", "ProgressRelay"]

logger = logging.getLogger("game_memory.bridge")

#: ``notify(method, params, force)``: send a notification to the calling connection;
#: ``force`` queues it even when the connection's queue is full.
Notify = Callable[[str, dict[str, Any], bool], None]


class ProgressRelay:
    """Turn a store's ``progress(done, total)`` calls into ``memory.rebuild_progress``.

    Guarantees the client sees a first notification with ``done == 0`` and a last one with
    ``done == total`` (both always queued); the ones in between may be dropped when the
    client does not read.
    """

    def __init__(self, session_id: str, notify: Notify) -> None:
        self._session_id = session_id
        self._notify = notify
        self._started = False
        self._finished = False
        self._total: int | None = None

    def __call__(self, done: int, total: int) -> None:
        """Relay one progress report (called on the event loop)."""
        self._total = total
        if not self._started:
            self._send(0, total, force=True)
            self._started = True
            if done == 0:
                return
        if done >= total:
            if not self._finished:
                self._send(total, total, force=True)
                self._finished = True
            return
        self._send(done, total, force=False)

    def finish(self, total_hint: int) -> None:
        """Send whatever of the first and last notifications is still missing."""
        total = self._total if self._total is not None else total_hint
        if not self._started:
            self._send(0, total, force=True)
            self._started = True
        if not self._finished:
            self._send(total, total, force=True)
            self._finished = True

    def _send(self, done: int, total: int, *, force: bool) -> None:
        params = {"session_id": self._session_id, "done": done, "total": total}
        self._notify("memory.rebuild_progress", params, force)


class MethodExecutor:
    """Execute calls against a :class:`BridgeService`.

    Args:
        service: The memory to serve.
    """

    def __init__(self, service: BridgeService) -> None:
        self._service = service
        self._rebuilding: set[str] = set()

    async def execute(self, call: Call, notify: Notify) -> Any:
        """Run ``call`` and return its JSON-ready result.

        Raises:
            GameMemoryError: Whatever the service raises (mapped by the error table).
            RpcError: For invalid converted params.
            StoreBusyError: A rebuild of the same session is already running.
        """
        params = call.params
        if isinstance(params, RememberParams):
            return await self._remember(params)
        if isinstance(params, RecallParams):
            return await self._recall(params)
        if isinstance(params, RecallManyParams):
            return await self._recall_many(params)
        if isinstance(params, StatusParams):
            return status_to_json(await self._service.status(params.session_id))
        if isinstance(params, RebuildParams):
            return await self._rebuild(params, notify)
        if isinstance(params, MigrateParams):
            return migration_to_json(await self._service.migrate())
        raise RpcError(  # pragma: no cover - METHOD_PARAMS and this dispatch agree
            ErrorCode.METHOD_NOT_FOUND, f"method {call.method!r} has no handler"
        )

    async def _remember(self, params: RememberParams) -> dict[str, Any]:
        memory = build_memory(params)
        created = await self._service.remember(memory)
        return {"memory_id": memory.memory_id, "created": created, "memory": memory_to_json(memory)}

    async def _recall(self, params: RecallParams) -> dict[str, Any]:
        result = await self._service.recall(
            build_query(params), require_semantic=params.require_semantic
        )
        return recall_to_json(result)

    async def _recall_many(self, params: RecallManyParams) -> dict[str, Any]:
        # One query at a time: a recall_many is bounded work, never 64 parallel recalls.
        results: list[dict[str, Any]] = []
        for position, raw in enumerate(params.queries):
            try:
                query = RecallParams.model_validate(raw)
                entry = await self._recall(query)
            except ValidationError as exc:
                error = error_from_exception(exc, f"memory.recall_many queries[{position}]")
            except Exception as exc:  # one bad query must not fail the others
                error = error_from_exception(exc, "memory.recall_many")
                if error.code is ErrorCode.INTERNAL_ERROR:
                    logger.error("memory.recall_many query %d failed", position, exc_info=exc)
            else:
                results.append({"ok": True, **entry})
                continue
            failure = {"code": int(error.code), "message": error.message}
            results.append({"ok": False, "error": failure})
        return {"results": results}

    async def _rebuild(self, params: RebuildParams, notify: Notify) -> dict[str, Any]:
        session_id = params.session_id
        if session_id in self._rebuilding:
            raise StoreBusyError(
                f"a rebuild of session {session_id!r} is already running; wait for its "
                "memory.rebuild response"
            )
        self._rebuilding.add(session_id)
        try:
            relay = ProgressRelay(session_id, notify)
            status = await self._service.rebuild(session_id, force=params.force, progress=relay)
            relay.finish(status.total_entries)
            return status_to_json(status)
        finally:
            self._rebuilding.discard(session_id)
