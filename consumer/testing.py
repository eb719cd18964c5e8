"""Helpers for testing a handler, and the consumer itself, against an SQS double such as moto.

In the spirit of ``structlog.testing``: what this project's own tests and benchmarks use, shipped
so that a team can test its handler the same way. Standard library only at import (the image
carries this module and has neither moto nor pytest); the SQS client is passed in, so the same
helpers work in-process under moto's ``mock_aws``, against moto's server or ministack, and on AWS.

Example (the README's "Testing a handler" runs it)::

    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="orders")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody='{"order": 1}')
        consumer = Consumer(sqs, queue_url=url, dlq_url=None, contract=contract_of(handle), handler=handle)
        with running(consumer) as run:
            wait_until(lambda: depth(sqs, url).total == 0, timeout=10, what="the order handled and deleted")
        assert run.exit_code == 0

A handler's declared samples (``@worker(samples=...)``) go to a queue with :func:`send_samples`, so a test can
check that each valid one is processed and each ``poison=True`` one ends in the DLQ.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from consumer.contract import SQS_MAX_BATCH
from consumer.declaration import samples_of

if TYPE_CHECKING:
    from consumer.declaration import Sample

__all__ = [
    "QueueDepth",
    "Run",
    "WaitTimeoutError",
    "depth",
    "drain",
    "poll_until",
    "receive_visible",
    "running",
    "send_samples",
    "wait_until",
]

_DEPTH_ATTRIBUTES = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


class WaitTimeoutError(AssertionError):
    """A condition did not hold in time. An AssertionError, so a test runner reports it as a failure."""


class Runnable(Protocol):
    """What :func:`running` runs: :class:`consumer.runtime.consumer.Consumer`, or anything shaped like it."""

    def run(self) -> int: ...

    def stop(self) -> None: ...


@dataclass
class Run:
    """A consumer running in a thread; ``exit_code`` is what ``run()`` returned, None until it has."""

    exit_code: int | None = None


@contextmanager
def running(consumer: Runnable, *, stop_timeout: float = 30.0) -> Iterator[Run]:
    """Run ``consumer`` in a thread for the ``with`` block; on leaving, stop it and wait for its exit code.

    Raises :class:`WaitTimeoutError` if it has not stopped within ``stop_timeout`` seconds (a
    consumer that ignores ``stop()`` must fail the test, not hang it). The thread is a daemon so a
    stuck consumer cannot keep the test process alive either.
    """
    run = Run()

    def target() -> None:
        run.exit_code = consumer.run()

    thread = threading.Thread(target=target, name="consumer.testing.running", daemon=True)
    thread.start()
    try:
        yield run
    finally:
        consumer.stop()
        thread.join(stop_timeout)
        if thread.is_alive():
            raise WaitTimeoutError(f"consumer did not stop within {stop_timeout:g} s of stop()")


def poll_until(condition: Callable[[], Any], timeout: float, *, interval: float = 0.1) -> bool:
    """Call ``condition`` every ``interval`` seconds until it is truthy or ``timeout`` seconds have passed.

    Returns whether it held. It is called at least once, and once more at the deadline, so a
    condition that becomes true during the last sleep is not reported as a timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def wait_until(
    condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition", *, interval: float = 0.1
) -> None:
    """Wait until ``condition()`` is truthy; raise :class:`WaitTimeoutError` naming ``what`` if not within ``timeout`` s."""
    if not poll_until(condition, timeout, interval=interval):
        raise WaitTimeoutError(f"not within {timeout:g} s: {what}")


class QueueDepth(NamedTuple):
    """A queue's approximate depth: messages ``visible`` (ready to receive) and ``in_flight`` (received, not deleted)."""

    visible: int
    in_flight: int

    @property
    def total(self) -> int:
        """Visible and in flight together: what is still in the queue (delayed messages not counted)."""
        return self.visible + self.in_flight


def depth(sqs: Any, queue_url: str) -> QueueDepth:
    """The queue's approximate depth as SQS reports it (``GetQueueAttributes``); compares equal to a tuple."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=_DEPTH_ATTRIBUTES)["Attributes"]
    return QueueDepth(int(attributes[_DEPTH_ATTRIBUTES[0]]), int(attributes[_DEPTH_ATTRIBUTES[1]]))


def receive_visible(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """One ReceiveMessage without waiting: up to 10 messages with every attribute, left in flight (not deleted)."""
    return _receive(sqs, queue_url, WaitTimeSeconds=0)


def drain(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Receive and delete every message in the queue, in the order received; returns them with every attribute.

    Stops at the first empty receive, so messages in flight or delayed stay where they are. A
    delete that fails for an entry raises: a message the test believes gone must be gone.
    """
    messages: list[dict[str, Any]] = []
    while batch := _receive(sqs, queue_url):
        messages.extend(batch)
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
        failed = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed", [])
        if failed:
            raise AssertionError(f"drain of {queue_url}: delete_message_batch failed for {failed}")
    return messages


def _receive(sqs: Any, queue_url: str, **options: int) -> list[dict[str, Any]]:
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=SQS_MAX_BATCH,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
        **options,
    )
    messages: list[dict[str, Any]] = response.get("Messages", [])
    return messages


def send_samples(
    sqs: Any, queue_url: str, handler: Callable[..., Any], *, poison: bool | None = None
) -> dict[str, Sample]:
    """Send the samples ``handler`` declared (``@worker(samples=...)``) to ``queue_url``, each once, each with a new
    ``idempotency-key`` (through :func:`consumer.producer.send`); returns idempotency key -> :class:`Sample`.

    ``poison``: None sends every sample, True only those marked ``poison=True``, False only the others. Raises
    ``AssertionError`` when there is nothing to send (a test that sends nothing would pass for nothing) or when SQS
    refused a message after the producer's retries.

    Example (a test of a handler's samples, with ``dlq_url`` its DLQ)::

        sent = send_samples(sqs, url, handle)
        ... run the consumer until depth(sqs, url).total == 0 ...
        dead = {m["MessageAttributes"]["idempotency-key"]["StringValue"] for m in drain(sqs, dlq_url)}
        assert dead == {key for key, sample in sent.items() if sample.poison}
    """
    import uuid

    from consumer.producer import Outgoing, send  # botocore's exceptions: imported when used, not with this module

    chosen = [s for s in samples_of(handler) if poison is None or s.poison is poison]
    if not chosen:
        which = "samples" if poison is None else "poison samples" if poison else "samples that are not poison"
        name = getattr(handler, "__qualname__", repr(handler))
        raise AssertionError(f"{name} declares no {which} (@worker(samples=...))")
    run = uuid.uuid4().hex[:8]
    keyed = {f"sample-{run}-{index:03d}": sample for index, sample in enumerate(chosen)}
    result = send(sqs, queue_url, [Outgoing(body=s.body, idempotency_key=key) for key, s in keyed.items()])
    if result.failed:
        failures = [f"{f.message.idempotency_key}: {f.code} {f.error}" for f in result.failed]
        raise AssertionError(f"send_samples to {queue_url}: SQS refused {', '.join(failures)}")
    return keyed
