"""The handlers of ``python -m bench async``: ``CONSUMER_HANDLER=bench.coroutines.handlers:async_c1024``.

Each waits 200 ms, as a call to a slow downstream does: ``thread_c256`` with ``time.sleep`` in a ``def`` (the runtime
gives it 256 threads, its most), ``async_c256`` and ``async_c1024`` with ``await asyncio.sleep`` in an ``async def``
(256 or 1,024 coroutines on one event loop). ``_idempotent`` is the same handler declared ``idempotent=True`` (no
guard, no table); without it the handler runs under the DynamoDB idempotency guard, as a stack deploys it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from consumer import Message, worker

#: What one handler waits, seconds: bench/peers/work.py's ``io200``.
SECONDS = 0.2
MAX_DURATION = timedelta(seconds=30)
#: Handler name (without ``_idempotent``) -> (async def, concurrency).
SHAPES: dict[str, tuple[bool, int]] = {
    "thread_c256": (False, 256),
    "async_c256": (True, 256),
    "async_c1024": (True, 1024),
}


def name(shape: str, *, idempotent: bool) -> str:
    return shape + ("_idempotent" if idempotent else "")


def _waits(asynchronous: bool) -> Callable[[Message], Any]:
    if asynchronous:

        async def handle_async(message: Message) -> None:
            await asyncio.sleep(SECONDS)

        return handle_async

    def handle(message: Message) -> None:
        time.sleep(SECONDS)

    return handle


def _declare() -> None:
    for shape, (asynchronous, concurrency) in SHAPES.items():
        for idempotent in (False, True):
            handle = _waits(asynchronous)
            handle.__name__ = handle.__qualname__ = name(shape, idempotent=idempotent)
            declared = worker(max_duration=MAX_DURATION, concurrency=concurrency, idempotent=idempotent)
            globals()[handle.__name__] = declared(handle)


_declare()
