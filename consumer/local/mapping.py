"""An SQS event source mapping's loop, on a local SQS (dev only; never in the image): what Lambda does around a
function fed by a queue, so the function's real entry point runs here as it runs on AWS.

No emulator of Lambda's mapping can run on this machine (moto's invokes functions in docker), so this models what
AWS documents, and only that (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html,
.../with-sqs.html, .../services-sqs-errorhandling.html):

- it long-polls for up to ``batch_size`` messages with every attribute, gathering receives for up to the batching
  window (0: what one receive brings, at most 10), and invokes the function with the records of what it received;
- the function has ``timeout_seconds`` (its context's remaining time at the start); an invocation that raises, or
  answers past its timeout, deletes nothing: every message returns after the queue's visibility;
- with ``ReportBatchItemFailures``, it deletes every record the answer does not list in ``batchItemFailures``; an
  answer that lists an empty id or one not in the batch fails the whole batch (nothing deleted); an empty or absent
  list is a full success.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from consumer.lambda_event import event_of
from consumer.limits import SQS_MAX_BATCH, SQS_MAX_WAIT_SECONDS

log = logging.getLogger("consumer.local.mapping")


@dataclass
class RemainingTime:
    """A Lambda context's ``get_remaining_time_in_millis``, on ``clock``."""

    deadline: float
    clock: Callable[[], float]

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - self.clock()) * 1000))


@dataclass
class Invoked:
    """One invocation: the message ids it carried, those the mapping deleted, and why it failed whole (None: not)."""

    message_ids: list[str]
    deleted: list[str] = field(default_factory=list)
    failed_whole: str | None = None


@dataclass(kw_only=True)
class EventSourceMapping:
    """The mapping of one queue to one function (``function(event, context)``).

    ``client``: the SQS client it receives and deletes with; ``queue_url``, ``queue_arn``, ``region``: the source, as
    the records name it. ``clock``: monotonic time (the simulated world's, or the machine's).
    """

    client: Any
    queue_url: str
    queue_arn: str
    region: str
    function: Callable[[Mapping[str, Any], Any], Any]
    batch_size: int = SQS_MAX_BATCH
    window_seconds: int = 0
    timeout_seconds: float = 60.0
    clock: Callable[[], float] = time.monotonic
    wait_seconds: int = SQS_MAX_WAIT_SECONDS

    def poll(self) -> Invoked | None:
        """One batch: receive (for up to the window), invoke, delete what succeeded; None when nothing came."""
        messages = self._receive()
        if not messages:
            return None
        return self.invoke(messages)

    def invoke(self, messages: list[dict[str, Any]]) -> Invoked:
        """Invoke the function with ``messages`` (received with every attribute) and act on its answer."""
        invoked = Invoked([m["MessageId"] for m in messages])
        event = event_of(messages, queue_arn=self.queue_arn, region=self.region)
        started = self.clock()
        context = RemainingTime(started + self.timeout_seconds, self.clock)
        try:
            answer = self.function(event, context)
        except Exception as error:  # noqa: BLE001 (the function failed: Lambda retries the batch after its visibility)
            invoked.failed_whole = f"function error: {type(error).__name__}: {error}"
            return invoked
        if self.clock() - started > self.timeout_seconds:
            invoked.failed_whole = "timed out"
            return invoked
        failed, why = _listed(answer, set(invoked.message_ids))
        if why is not None:
            invoked.failed_whole = why
            return invoked
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), SQS_MAX_BATCH):
            batch = done[start : start + SQS_MAX_BATCH]
            response = self.client.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
            )
            invoked.deleted += [batch[int(entry["Id"])]["MessageId"] for entry in response.get("Successful", [])]
        return invoked

    def _receive(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        window_end = self.clock() + self.window_seconds
        while len(messages) < self.batch_size:
            wait = self.wait_seconds if not messages else max(0, min(self.wait_seconds, int(window_end - self.clock())))
            response = self.client.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(SQS_MAX_BATCH, self.batch_size - len(messages)),
                WaitTimeSeconds=wait,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages += response.get("Messages", [])
            if not messages or self.window_seconds <= 0 or self.clock() >= window_end:
                break
        return messages


def _listed(answer: object, batch: set[str]) -> tuple[set[str], str | None]:
    """The ids an answer lists failed, and why the whole batch failed instead (None: it did not)."""
    if answer is None:
        return set(), None
    if not isinstance(answer, Mapping):
        return set(), None  # not a partial-batch answer: a full success (the documented reading)
    entries = answer.get("batchItemFailures")
    if not entries:
        return set(), None
    listed = set()
    for entry in entries:
        identifier = entry.get("itemIdentifier") if isinstance(entry, Mapping) else None
        if not identifier or identifier not in batch:
            return batch, f"invalid batch item failure: {identifier!r}"
        listed.add(identifier)
    return listed, None
