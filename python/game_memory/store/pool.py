"""The hop from an event loop into a thread pool and back, as light as it can be.

``loop.run_in_executor`` wraps the call in a ``concurrent.futures.Future`` and chains it to
an asyncio future through callbacks; on a recall's hot path that wrapping was measurable.
:func:`run_in_pool` has the worker settle the asyncio future itself, with one
``call_soon_threadsafe`` (:func:`settle`). The store object, the group commit and the front
door all hop this way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

__all__ = ["run_in_pool", "settle"]

_T = TypeVar("_T")


def settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[_T],
    result: _T | None,
    error: BaseException | None,
) -> None:
    """From a worker thread: complete ``future`` on its loop (unless it was cancelled)."""

    def complete() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(complete)


async def run_in_pool(
    executor: Executor, function: Callable[[], _T], closed: Callable[[], Exception]
) -> _T:
    """Run ``function`` in ``executor`` and await its result.

    If the awaiting task is cancelled, ``function`` still runs to completion in the
    background (its outcome is dropped). A pool already shut down raises ``closed()``.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def job() -> None:
        try:
            result = function()
        except BaseException as exc:  # handed to the awaiting task, never lost
            settle(loop, future, None, exc)
        else:
            settle(loop, future, result, None)

    try:
        executor.submit(job)
    except RuntimeError as exc:  # the pool was shut down by a concurrent close
        raise closed() from exc
    return await future
