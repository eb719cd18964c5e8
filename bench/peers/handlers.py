"""Ours' handlers for the yardstick, as a team would write them: ``CONSUMER_HANDLER=bench.peers.handlers:noop_c16``.

One module-level function per (handler, concurrency, guard) a cell runs, each declared with ``@worker`` like any
team's handler, so ``python -m consumer run`` runs them exactly as the container runs a deployed worker. Names:
``<handler>_c<concurrency>``, with ``_idempotent`` for the ``idempotent=True`` declaration (no idempotency guard).

Handlers: ``noop`` returns at once; ``io50`` and ``io200`` sleep 50 and 200 ms (a sleep releases the interpreter
lock, as a network call does); ``cpu5`` spins 5 ms of pure Python; ``slow8`` sleeps 8 s on a 5 s lease (the lease
cell); ``kill3`` sleeps 3 s (the kill cell). The work itself is :mod:`bench.peers.work`, which every Python peer runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bench.peers import work
from consumer import Message, worker

#: Handler name -> (what it does, its declared max_duration).
KINDS: dict[str, tuple[Callable[[Message], None], timedelta]] = {}
#: More ``@worker`` arguments of some kinds: ``slow8`` holds a 5 s lease (SQS's visibility on its queue) that the
#: heartbeat extends, so the lease cell runs an 8 s handler past the queue's visibility.
OPTIONS: dict[str, dict[str, Any]] = {"slow8": {"max_lease": timedelta(seconds=5)}}


def _key(message: Message) -> object:
    """The message's key in the correctness cells' record (the ``n`` of its JSON body)."""
    return json.loads(message.body)["n"]


def _work(kind: str) -> Callable[[Message], None]:
    """The same work every peer's handler does (:mod:`bench.peers.work`), recorded in the correctness cells only."""

    def handle(message: Message) -> None:
        work.do(kind, _key(message) if work.RECORDING else None)

    return handle


KINDS.update(
    noop=(_work("noop"), timedelta(seconds=30)),
    io50=(_work("io50"), timedelta(seconds=30)),
    io200=(_work("io200"), timedelta(seconds=30)),
    cpu5=(_work("cpu5"), timedelta(seconds=30)),
    slow8=(_work("slow8"), timedelta(seconds=30)),
    kill3=(_work("kill3"), timedelta(seconds=10)),
)
CONCURRENCY = (1, 4, 8, 16, 64, 256)


def name(kind: str, concurrency: int, *, idempotent: bool = False) -> str:
    return f"{kind}_c{concurrency}" + ("_idempotent" if idempotent else "")


def _declare() -> None:
    for kind, (body, max_duration) in KINDS.items():
        for concurrency in CONCURRENCY:
            for idempotent in (False, True):

                def handle(message: Message, _body: Callable[[Message], None] = body) -> None:
                    _body(message)

                handle.__name__ = handle.__qualname__ = name(kind, concurrency, idempotent=idempotent)
                declared = worker(
                    max_duration=max_duration,
                    concurrency=concurrency,
                    idempotent=idempotent,
                    **OPTIONS.get(kind, {}),
                )
                globals()[handle.__name__] = declared(handle)


_declare()
