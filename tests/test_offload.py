"""Offload: a computation on the event loop while it is known cheap, in a worker thread otherwise."""

import asyncio
import threading
import time

import pytest

from jeirt_ray.serving.offload import Offload


def spin(seconds: float) -> int:
    """CPU work for `seconds`; the thread that did it."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return threading.get_ident()


def test_cheap_calls_run_on_the_loop_and_costly_ones_in_a_thread():
    async def main():
        loop_thread = threading.get_ident()
        offload = Offload(budget_s=0.002)
        where = [await offload.run(spin, 0.0001) for _ in range(3)]
        assert where[0] != loop_thread  # nothing known yet: a thread
        assert where[1:] == [loop_thread, loop_thread]
        assert 0.0001 <= offload.per_item_s < 0.002
        # the same cost per item, but 100 items: over the budget
        assert await offload.run(lambda n: spin(0.0001 * n), 100, items=100) != loop_thread
        # one call that turned costly sends the next one to a thread, and cheap calls bring it back
        await offload.run(spin, 0.03)
        assert not offload.inline()
        assert await offload.run(spin, 0.0001) != loop_thread
        for _ in range(40):
            last = await offload.run(spin, 0.0001)
        assert last == loop_thread

    asyncio.run(main())


def test_time_waiting_for_the_gil_is_not_counted():
    """A cheap call measured in a thread while another thread holds the GIL still counts as cheap."""
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            pass

    def cheap_with_a_wait():  # as a NumPy call does, it lets go of the GIL midway and waits to take it back
        spin(0.0001)
        time.sleep(0)
        return spin(0.0001)

    hog = threading.Thread(target=busy)
    hog.start()
    try:
        offload = Offload(budget_s=0.002)
        start = time.perf_counter()
        for _ in range(5):
            offload.timed(cheap_with_a_wait)
        assert time.perf_counter() - start > 5 * 0.002  # the waits were there: each longer than the budget
        assert offload.per_item_s < 0.002
    finally:
        stop.set()
        hog.join()


def test_a_failing_call_is_timed_and_raises():
    async def main():
        offload = Offload()

        def fails():
            raise ValueError("bad query")
        with pytest.raises(ValueError, match="bad query"):
            await offload.run(fails)
        assert offload.per_item_s is not None

    asyncio.run(main())
