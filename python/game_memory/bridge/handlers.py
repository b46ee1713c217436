"""The one table of bridge methods: each name with its params model and its handler.

The sans-I/O core validates a call's params against :data:`METHODS`; the server runs the
handler against the :class:`BridgeService` with :class:`MethodExecutor`. A method exists
exactly when it is in the table, so the list of methods, their params and their handlers
cannot drift apart. The rule that one rebuild of a session runs at a time is the memory's
own (``VectorMemoryStore.rebuild`` raises ``StoreBusyError``), not the bridge's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from game_memory.bridge.budget import ResponseBudget, ResponseTooLargeError
from game_memory.bridge.codes import (
    ErrorCode,
    RpcError,
    describe_validation_error,
    error_from_exception,
)
from game_memory.bridge.convert import build_memory, build_query, build_summary
from game_memory.bridge.params import (
    ConsolidateParams,
    EraseParams,
    ForgetParams,
    InitializeParams,
    MigrateParams,
    RebuildParams,
    RecallManyParams,
    RecallParams,
    RememberManyParams,
    RememberParams,
    StatusParams,
)
from game_memory.bridge.results import (
    memory_json_bound,
    memory_to_json,
    migration_to_json,
    recall_to_json,
    status_to_json,
)
from game_memory.bridge.service import BridgeService

__all__ = [
    "METHODS",
    "OFFLOAD_BYTES",
    "CallContext",
    "Method",
    "MethodExecutor",
    "Notify",
    "Offload",
    "ProgressRelay",
    "Reserve",
    "reserve_nothing",
    "run_inline",
]

logger = logging.getLogger("game_memory.bridge")

#: ``notify(method, params, force)``: send a notification to the calling connection;
#: ``force`` queues it even when the connection's queue is full.
Notify = Callable[[str, dict[str, Any], bool], None]

_T = TypeVar("_T")


class Reserve(Protocol):
    """``await reserve(upper_bound)``: take room for ``upper_bound`` more bytes of the answer
    in the calling connection's queue, waiting while there is none (the server's session
    does this; :func:`reserve_nothing` never waits). Call it before building a large part
    of an answer; the room is the call's until its answer is queued."""

    def __call__(self, upper_bound: int, /) -> Awaitable[None]: ...


async def reserve_nothing(upper_bound: int, /) -> None:
    """A :class:`Reserve` that never waits (tests, tools without a connection)."""


class Offload(Protocol):
    """``await offload(function, *args)``: run a blocking ``function`` off the event loop
    (the server passes ``asyncio.to_thread``; :func:`run_inline` runs it in place)."""

    def __call__(self, function: Callable[..., _T], /, *args: Any) -> Awaitable[_T]: ...


async def run_inline(function: Callable[..., _T], /, *args: Any) -> _T:
    """An :data:`Offload` that runs ``function`` in place (tests, tools without a loop)."""
    return function(*args)


@dataclass(frozen=True, slots=True)
class CallContext:
    """What a handler gets besides the service and its params.

    Attributes:
        notify: Sends a notification to the calling connection.
        budget: The share of the response cap the result may take; charged as it is built.
        offload: Runs blocking work (building a big result) off the event loop.
        reserve: Takes room in the connection's queue for a part of the answer before it
            is built, so that a client that does not read makes the server build (and
            hold) no more answers than its queue has room for.
    """

    notify: Notify
    budget: ResponseBudget
    offload: Offload = run_inline
    reserve: Reserve = reserve_nothing


#: Results whose charged size passes this are built and serialized in a worker thread, so a
#: big response (up to the 16 MiB cap) never stalls the other clients on the event loop.
#: Ordinary responses stay far below it and pay no thread hop.
OFFLOAD_BYTES = 1_048_576
#: What a recall's answer holds besides its memory objects (the envelope, the stages, the
#: ``ok`` of a ``recall_many`` entry), as an upper bound.
_RECALL_OVERHEAD_BYTES = 16_384


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


async def _remember(service: BridgeService, params: RememberParams, context: CallContext) -> Any:
    memory = build_memory(params)
    created = await service.append(memory)
    return {"memory_id": memory.memory_id, "created": created, "memory": memory_to_json(memory)}


async def _remember_many(
    service: BridgeService, params: RememberManyParams, context: CallContext
) -> Any:
    # One atomic batch: all stored, or (an error) none of them.
    memories = [
        build_memory(entry, "memory.remember_many", f"memories.{position}")
        for position, entry in enumerate(params.memories)
    ]
    created = await service.append_many(memories)
    results = [
        {"memory_id": memory.memory_id, "created": new}
        for memory, new in zip(memories, created, strict=True)
    ]
    return {"results": results}


async def _recall(service: BridgeService, params: RecallParams, context: CallContext) -> Any:
    result = await service.recall(build_query(params), require_semantic=params.require_semantic)
    # Each memory object is charged as it is built, so a result past the cap stops early.
    bounds = [memory_json_bound(hit.memory) for hit in result.hits]
    # Built only once the connection has room for it: a client that does not read holds
    # the search result of its running recalls, never their built answers.
    await context.reserve(sum(bounds) + _RECALL_OVERHEAD_BYTES)
    if context.budget.charged + sum(bounds) > OFFLOAD_BYTES:
        return await context.offload(recall_to_json, result, context.budget, bounds)
    return recall_to_json(result, context.budget, bounds)


#: How a query that is not an object is named in its error (JSON's names, not Python's).
_JSON_TYPE_NAMES: dict[type, str] = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "an array",
}


def _read_query(position: int, raw: Any) -> RecallParams:
    """Validate one query of a ``memory.recall_many`` (it fails in its own result entry).

    Raises:
        RpcError: ``INVALID_PARAMS`` naming the field by its dotted path in the call's
            params (``queries.2.limit``, or ``queries.2`` for a query that is not an
            object), as an error of the whole call would.
    """
    if isinstance(raw, dict):
        try:
            return RecallParams.model_validate(raw)
        except ValidationError as exc:
            text, field = describe_validation_error(exc, prefix=f"queries.{position}")
    else:
        shown = "null" if raw is None else _JSON_TYPE_NAMES.get(type(raw), "a value")
        field = f"queries.{position}"
        text = f"{field}: must be a JSON object of recall params, not {shown}"
    raise RpcError(
        ErrorCode.INVALID_PARAMS,
        f"invalid params for memory.recall_many: {text}; fix the named parameter and send "
        "the request again",
        {"kind": "ValidationError", "field": field},
    )


async def _recall_many(
    service: BridgeService, params: RecallManyParams, context: CallContext
) -> Any:
    # One query at a time: a recall_many is bounded work, never 64 parallel recalls.
    results: list[dict[str, Any]] = []
    for position, raw in enumerate(params.queries):
        try:
            entry = await _recall(service, _read_query(position, raw), context)
        except ResponseTooLargeError:
            raise  # about the whole response, not this query
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


async def _status(service: BridgeService, params: StatusParams, context: CallContext) -> Any:
    return status_to_json(await service.get_status(params.session_id))


async def _rebuild(service: BridgeService, params: RebuildParams, context: CallContext) -> Any:
    relay = ProgressRelay(params.session_id, context.notify)
    status = await service.rebuild(params.session_id, force=params.force, progress=relay)
    relay.finish(status.total_entries)
    return status_to_json(status)


async def _migrate(service: BridgeService, params: MigrateParams, context: CallContext) -> Any:
    return migration_to_json(await service.migrate())


async def _forget(service: BridgeService, params: ForgetParams, context: CallContext) -> Any:
    forgotten = await service.forget(
        params.session_id, params.owner_id, params.memory_id, params.at
    )
    return {"memory_id": params.memory_id, "forgotten": forgotten}


async def _erase(service: BridgeService, params: EraseParams, context: CallContext) -> Any:
    if params.memory_ids is not None and params.owner_id is None:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            "invalid params for memory.erase: memory_ids needs owner_id; fix the named "
            "parameter and send it again",
            {"kind": "ValidationError", "field": "owner_id"},
        )
    erased = await service.erase(params.session_id, params.owner_id, params.memory_ids)
    return {"erased": erased}


async def _consolidate(
    service: BridgeService, params: ConsolidateParams, context: CallContext
) -> Any:
    summary = build_summary(params)
    created = await service.consolidate(
        params.session_id, params.owner_id, params.memory_ids, summary
    )
    stored = summary.model_copy(update={"consolidates": tuple(dict.fromkeys(params.memory_ids))})
    return {"memory_id": summary.memory_id, "created": created, "memory": memory_to_json(stored)}


#: ``handler(service, params, context)`` returns the JSON-ready result of one call.
Handler = Callable[[BridgeService, Any, CallContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Method:
    """One bridge method: the model its params must match and what runs it.

    ``run`` is ``None`` for ``initialize``, which the protocol core answers itself.
    ``writes`` marks a method that changes the save: the store finishes such work in a
    thread even when its awaiting task is cancelled, so the server never answers it before
    it has settled (a deadline or shutdown cannot turn a stored write into an error).
    """

    params: type[BaseModel]
    run: Handler | None
    writes: bool = False


#: Every method a client may call, ``initialize`` first.
METHODS: dict[str, Method] = {
    "initialize": Method(InitializeParams, None),
    "memory.remember": Method(RememberParams, _remember, writes=True),
    "memory.remember_many": Method(RememberManyParams, _remember_many, writes=True),
    "memory.recall": Method(RecallParams, _recall),
    "memory.recall_many": Method(RecallManyParams, _recall_many),
    "memory.status": Method(StatusParams, _status),
    "memory.rebuild": Method(RebuildParams, _rebuild),
    "memory.migrate": Method(MigrateParams, _migrate, writes=True),
    "memory.forget": Method(ForgetParams, _forget, writes=True),
    "memory.erase": Method(EraseParams, _erase, writes=True),
    "memory.consolidate": Method(ConsolidateParams, _consolidate, writes=True),
}


class MethodExecutor:
    """Execute validated calls against a :class:`BridgeService`.

    Args:
        service: The memory to serve.
    """

    def __init__(self, service: BridgeService) -> None:
        self._service = service

    @staticmethod
    def writes(method: str) -> bool:
        """Whether ``method`` changes the save (its answer waits for it to settle)."""
        spec = METHODS.get(method)
        return spec is not None and spec.writes

    async def execute(self, method: str, params: BaseModel, context: CallContext) -> Any:
        """Run ``method`` with its validated ``params``; return its JSON-ready result.

        ``context.budget`` is charged with the large pieces of the result as they are built (the
        call's own, or its batch's): a result that cannot fit the response cap is refused
        before it is built in full.

        Raises:
            ResponseTooLargeError: The result would pass the response cap (-32003).
            GameMemoryError: Whatever the service raises (mapped by the error table).
            RpcError: For params the core models refuse, or a method without a handler.
        """
        spec = METHODS.get(method)
        if spec is None or spec.run is None:
            raise RpcError(
                ErrorCode.METHOD_NOT_FOUND,
                f"method {method[:64]!r} has no handler",
                {"kind": "MethodNotFound"},
            )
        return await spec.run(self._service, params, context)
