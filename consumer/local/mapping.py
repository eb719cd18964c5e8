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
import threading
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


def serve(environ: Mapping[str, str], stop: threading.Event) -> int:
    """``python -m consumer local function``: run the worker ``environ`` describes (the env file ``local up`` wrote)
    as Lambda would, until ``stop``: this loop plays the event source mapping on ``QUEUE_URL`` and invokes
    ``consumer.lambda_entry.handler`` in this process, one invocation at a time, with the batch size, window and
    function timeout :class:`~consumer.lambda_target.LambdaTarget` derives. Returns how many invocations it made."""
    import boto3

    from consumer import lambda_entry
    from consumer.contract import ENV_PREFIX, HANDLER_ENV, QUEUE_URL_ENV, WorkerContract
    from consumer.declaration import contract_of, load_handler, max_rate_of
    from consumer.errors import ContractError
    from consumer.lambda_target import LAMBDA_MIN_MEMORY_MIB, LambdaTarget

    queue_url, spec = environ.get(QUEUE_URL_ENV), environ.get(HANDLER_ENV)
    if not queue_url or not spec:
        missing = QUEUE_URL_ENV if not queue_url else HANDLER_ENV
        rule = "must be set (load the env file `local up` wrote: set -a; . ./.local.env; set +a)"
        raise ContractError(missing, rule, environ.get(missing))
    handler = load_handler(spec, parameter=HANDLER_ENV)
    from_stack = f"{ENV_PREFIX}MAX_DURATION_SECONDS" in environ
    contract = WorkerContract.from_env(environ) if from_stack else contract_of(handler, HANDLER_ENV)
    target = LambdaTarget(
        contract=contract, max_tasks=1, memory_mib=LAMBDA_MIN_MEMORY_MIB, max_rate=max_rate_of(handler)
    )
    client = boto3.client("sqs")
    attributes = client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn", "VisibilityTimeout"])
    queue_arn = attributes["Attributes"]["QueueArn"]
    if int(attributes["Attributes"]["VisibilityTimeout"]) != target.queue_visibility_seconds:
        # A queue the stack shaped for the ECS target: give it the visibility a Lambda worker's stack gives it (the
        # function checks it at its cold start, as the container checks its own at start).
        visibility = str(target.queue_visibility_seconds)
        client.set_queue_attributes(QueueUrl=queue_url, Attributes={"VisibilityTimeout": visibility})
        log.warning("queue_visibility_set", extra={"queue_url": queue_url, "visibility_timeout_seconds": visibility})
    mapping = EventSourceMapping(
        client=client,
        queue_url=queue_url,
        queue_arn=queue_arn,
        region=client.meta.region_name,
        function=lambda_entry.handler,
        batch_size=target.esm_batch_size,
        window_seconds=target.batching_window_seconds,
        timeout_seconds=target.function_timeout_seconds,
        wait_seconds=1,  # a short long poll, so a stop is seen within a second
    )
    log.info(
        "mapping_started",
        extra={"queue_url": queue_url, "batch_size": mapping.batch_size, "timeout_seconds": mapping.timeout_seconds},
    )
    invocations = 0
    while not stop.is_set():
        invoked = mapping.poll()
        if invoked is None:
            continue
        invocations += 1
        log.info(
            "mapping_invoked",
            extra={
                "records": len(invoked.message_ids),
                "deleted": len(invoked.deleted),
                "failed_whole": invoked.failed_whole,
            },
        )
    return invocations
