"""A pause of Python's cyclic garbage collector around the modeled scenarios' bulk allocations.

The SQS model (:mod:`infra.alarms.sqs_model`) and the fleets' scripts (:mod:`infra.alarms.fleet`) allocate millions
of small objects that form no reference cycle (events, messages, heap entries, datapoints): reference counting frees
them. The cyclic collector, triggered by the count of allocations, traverses them again as they survive each of its
generations and finds nothing to free; in a wake-up scenario that was about a third of the CPU. Paused for such a
call, it runs as usual after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block (a decorator: for the call), back on after it if it was on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
