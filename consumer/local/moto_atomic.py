"""moto's SQS made atomic per request, as SQS is: no message handed to two receives at once.

moto's SQS backend takes no lock. Its ``receive_message`` checks that a message is visible and then marks it
received (moto 5.2.5, ``moto/sqs/models.py``), so two receives on two server threads (or two consumer threads on
in-process moto) can both find the same message visible and both take it: one message, two holders, receive
counts 1 and 2, at once and well inside its visibility timeout. SQS does not do that: a received message stays
hidden from every other receive for its visibility timeout
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html).
Seen here: the demo's batch lane processed a message twice in one consumer, 2 s apart, with the queue's lease at
72 s; the same race raised "Set changed size during iteration" out of a receive that read a FIFO queue's
in-flight groups while another thread deleted.

:func:`serialize_moto_sqs` puts every call of moto's SQS backend under one lock. A long poll does not hold it
while it waits: it asks with no wait under the lock and waits outside it (on the queue's own condition, which a
send notifies, or 1 s at most, as moto's own loop does, for a lease that ran out), until a message or its wait
time. What each call does is moto's own; only two calls can no longer interleave. The SQS endpoints the local
tooling starts (:func:`consumer.local.stack.start_server`) and the tests' own (``tests/integration/conftest.py``)
apply it; the benchmarks' moto (``bench/endpoint.py``, the chaos suite's too), a server process of its own, keeps
the race and the chaos suite tells its effects apart (``bench/chaos_evidence.py``). Local tooling only: the image
has no moto (``.dockerignore``).
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

#: One lock for every SQS backend of the process (any account or region): a call takes it for what it does.
_LOCK = threading.RLock()
#: What moto's long poll waits between looks, at most, when nothing wakes it (a lease running out notifies nobody).
_WAIT_SECONDS = 1.0
#: The least a long poll waits between looks (a visible message it may not take, a FIFO group in flight, would
#: otherwise have it ask again at once).
_MIN_WAIT_SECONDS = 0.01
_MARK = "_sqs_worker_atomic"


def serialize_moto_sqs() -> None:
    """Make every call of moto's ``SQSBackend`` atomic (see the module docstring); idempotent."""
    from moto.sqs.models import SQSBackend

    if getattr(SQSBackend, _MARK, False):
        return
    for name, method in list(vars(SQSBackend).items()):
        if name.startswith("_") or name == "receive_message" or not inspect.isfunction(method):
            continue
        setattr(SQSBackend, name, _locked(method))
    SQSBackend.receive_message = _receive_atomically(SQSBackend.receive_message)  # type: ignore[method-assign]
    setattr(SQSBackend, _MARK, True)


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return method(*args, **kwargs)

    return call


def _receive_atomically(receive: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(receive)
    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> Any:
        polling_end = time.monotonic() + wait_seconds_timeout
        while True:
            with _LOCK:
                result = receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
                queue = self.get_queue(queue_name)
            remaining = polling_end - time.monotonic()
            if result or remaining <= 0:
                return result
            started = time.monotonic()
            queue.wait_for_messages(min(_WAIT_SECONDS, remaining))
            if time.monotonic() - started < _MIN_WAIT_SECONDS:
                time.sleep(_MIN_WAIT_SECONDS)

    return receive_message
