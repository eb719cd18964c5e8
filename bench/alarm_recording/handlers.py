"""The handler the alarm recordings run (``python -m bench.alarm_recording``), with its fault switched on by time.

A recording needs a consumer whose behaviour changes at a known moment (the scenario's onset) without restarting
it, so the fault is read from the environment the recorder gives every consumer process and compared with the wall
clock at each message:

* ``ALARM_RECORDING_FAULT``: ``fail`` (every message raises, so the runtime retries and, at ``max_receive_count``,
  dead-letters it) or ``downstream`` (every message raises :class:`~consumer.DownstreamUnavailable`, so the circuit
  opens); unset or empty: no fault.
* ``ALARM_RECORDING_FAULT_FROM`` / ``ALARM_RECORDING_FAULT_UNTIL``: the fault's window in epoch seconds (no
  ``UNTIL``: until the process ends).

A body starting with ``poison`` is refused at its first receive (:class:`~consumer.PoisonMessage`) whatever the
fault, as a producer's malformed event would be. The declaration is small so that every path shows up within a
recording of a few minutes: a 5 s max duration (15 s lease), three receives before the DLQ, 1-4 s backoffs.
"""

from __future__ import annotations

import os
import time

from consumer import DownstreamUnavailable, Message, PoisonMessage, worker

FAULT_ENV = "ALARM_RECORDING_FAULT"
FAULT_FROM_ENV = "ALARM_RECORDING_FAULT_FROM"
FAULT_UNTIL_ENV = "ALARM_RECORDING_FAULT_UNTIL"
FAULTS = ("fail", "downstream")
POISON_PREFIX = "poison"
#: What one message costs when it succeeds: enough for the duration metric to mean something.
WORK_SECONDS = 0.05


def active_fault(now: float | None = None) -> str | None:
    """The fault in force at ``now`` (epoch seconds; default the wall clock), or None."""
    fault = os.environ.get(FAULT_ENV, "")
    if not fault:
        return None
    if fault not in FAULTS:
        raise ValueError(f"{FAULT_ENV} must be one of {', '.join(FAULTS)} or empty, got {fault!r}")
    now = time.time() if now is None else now
    since = float(os.environ.get(FAULT_FROM_ENV) or 0)
    until = os.environ.get(FAULT_UNTIL_ENV)
    return fault if since <= now and (not until or now < float(until)) else None


@worker(max_duration=5, concurrency=4, max_receive_count=3, retry_backoff_base=1, retry_backoff_max=4)
def handle(message: Message) -> None:
    """Poison bodies go to the DLQ; otherwise the fault in force (see the module), else a short piece of work."""
    if message.body.startswith(POISON_PREFIX):
        raise PoisonMessage(f"body starts with {POISON_PREFIX!r}: the producer marked it unprocessable")
    fault = active_fault()
    if fault == "fail":
        raise RuntimeError("the handler fails every message (recorded fault)")
    if fault == "downstream":
        raise DownstreamUnavailable("HTTP 503 from the downstream (recorded fault)")
    time.sleep(WORK_SECONDS)
