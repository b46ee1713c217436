"""``store/upkeep.py``: the stamps a load hands off run soon, in order, once, and never get
lost, not even when the thread that should run them takes no more work."""

from __future__ import annotations

import threading
from collections.abc import Callable

from game_memory.store.upkeep import Upkeep


def test_jobs_run_in_order_once_each_where_the_thread_drains_them() -> None:
    submitted: list[Callable[[], None]] = []
    upkeep = Upkeep(submitted.append)
    ran: list[int] = []
    for number in range(3):
        upkeep(lambda number=number: ran.append(number))
    assert ran == [] and len(upkeep) == 3 and len(submitted) == 3
    submitted[0]()  # the first drain runs every job queued by then
    assert ran == [0, 1, 2] and len(upkeep) == 0
    for drain in submitted[1:]:
        drain()
    assert ran == [0, 1, 2]


def test_a_thread_that_takes_no_more_work_leaves_the_jobs_to_drain() -> None:
    def closed(job: Callable[[], None]) -> None:
        raise RuntimeError("cannot schedule new futures after shutdown")

    upkeep = Upkeep(closed)
    ran: list[str] = []
    upkeep(lambda: ran.append("stamp"))  # never raises
    assert ran == [] and len(upkeep) == 1
    upkeep.drain()
    assert ran == ["stamp"]


def test_two_threads_draining_at_once_run_each_job_once() -> None:
    upkeep = Upkeep(lambda job: None)
    ran: list[int] = []
    lock = threading.Lock()

    def job(number: int) -> Callable[[], None]:
        def run() -> None:
            with lock:
                ran.append(number)

        return run

    for number in range(2_000):
        upkeep(job(number))
    threads = [threading.Thread(target=upkeep.drain) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ran) == list(range(2_000))
