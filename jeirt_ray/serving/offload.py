"""Where a replica's blocking computation runs: in a worker thread, or on the event loop itself
when it is known to be cheap.

A hop to a worker thread costs a busy replica more than a small computation does: the thread
waits for the GIL while the event loop holds it (relaying another answer, counting a key's
request), and the loop waits again to take the result back. On the 2-core reference machine the
route step, 0.3 ms of work, took 1.2 ms in a thread and the hashing encoder's 0.2 ms took 1.0
(docs/benchmarks.md, "The cut"). A forward of MiniLM (15-50 ms) must not hold the loop. So each
kind of call keeps the mean CPU time of its recent calls per item, and runs on the loop while
that mean times the call's items is under a budget; the first call, and any call expected to
cost more, goes to a thread. Only for computations: CPU time is what they cost the loop, and a
call that waits on I/O would look free by it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")

INLINE_BUDGET_S = 0.0005  # a call expected to take less runs on the event loop


class Offload:
    """One kind of computation's recent CPU time per item (an exponentially weighted mean) and
    the choice it implies: `await offload.run(fn, *args, items=n)`."""

    def __init__(self, budget_s: float = INLINE_BUDGET_S, weight: float = 0.1):
        self.budget_s, self.weight = budget_s, weight
        self.per_item_s: float | None = None  # None until a call was timed

    def inline(self, items: int = 1) -> bool:
        """Whether a call of `items` items is expected to cost the loop less than the budget."""
        return self.per_item_s is not None and self.per_item_s * max(items, 1) < self.budget_s

    def timed(self, fn: Callable[..., T], *args, items: int = 1, **kwargs) -> T:
        """`fn(*args, **kwargs)` here, its CPU time (this thread's, so not the time it waited for
        the GIL) counted per item."""
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds = (time.thread_time() - start) / max(items, 1)
            mean = self.per_item_s
            self.per_item_s = seconds if mean is None else mean + self.weight * (seconds - mean)

    async def run(self, fn: Callable[..., T], *args, items: int = 1, **kwargs) -> T:
        """`fn(*args, **kwargs)` on the loop if `inline(items)`, else in a worker thread."""
        if self.inline(items):
            return self.timed(fn, *args, items=items, **kwargs)
        return await asyncio.to_thread(self.timed, fn, *args, items=items, **kwargs)
