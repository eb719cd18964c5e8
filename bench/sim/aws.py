"""SQS and DynamoDB for the simulated world: moto's own backends, on the simulation's clock, behind a transport.

The runtime's boto3 clients are real: botocore serializes, signs, retries (its standard mode, with its own backoff
and retry quota) and parses as it does against AWS. Only the HTTP session is the world's (:class:`Transport`): each
request takes seeded latency on the virtual clock, may meet a fault, and is answered by moto's backend in this
process. What the backends do is moto's; the world changes six things, each to what AWS documents:

- **time**: moto's SQS reads the virtual clock (visibility, delays, retention, FIFO deduplication's 5 minutes), and
  so does the Date header of every answer (moto's is this machine's clock);
- **the long poll** waits on the virtual clock and "returns as soon as a message is available"
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html):
  moto's own loop waits in real time;
- **ReceiveRequestAttemptId**: a FIFO receive retried with its id gets the same messages (:meth:`Aws.receive_again`);
  moto ignores the id;
- **FIFO order**: a message whose lease ran out leaves the in-flight set before a receive picks a group's next
  message (:meth:`Aws.expire_leases`): moto delivered the second message of a group before the first;
- **the 12-hour visibility limit** counts from the message's receive, as ChangeMessageVisibility documents ("you can
  continue to call ChangeMessageVisibility to extend the visibility timeout to the maximum allowed time ... 12 hours
  from the receive", https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html);
  moto counts from the send, which would refuse an extension SQS accepts for a message that waited in the queue;
- **a superseded receipt handle** (one from a receive before the message's latest) changes nothing: a visibility
  change with it fails ("The receipt handle has expired", as SQS answers), and a delete with it "will still succeed,
  but the message might not be deleted"
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html): here it is not.
  moto accepts any handle the message ever had, so a holder whose lease ran out could still move the message under
  its next receiver. In ChangeMessageVisibilityBatch either refusal fails its own entry only, as a batch reports
  "a combination of successful and unsuccessful actions"
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibilityBatch.html);
  moto's batch would fail whole on them.

Faults (:class:`Faults`), drawn per request: a throttle or a 5xx before the backend sees the request (nothing done),
or a lost answer after it (done, then botocore retries: the case where a conditional write meets its own record), an
exception no caller expects (a crash of the thread that called), and brownouts: windows of time in which every call
to a service is throttled. tests/sim/test_aws_contract.py runs
the same SQS and DynamoDB checks here and on plain moto, and they agree.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import boto3
import botocore.endpoint
import botocore.retries.standard
from botocore import UNSIGNED
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError

from bench.sim.scheduler import SimThread, Simulation

REGION = "us-east-1"
ACCOUNT = "123456789012"
#: SQS's limit on a message's total visibility, from its receive.
MAX_VISIBILITY_MS = 43_200_000


@dataclass(frozen=True)
class Brownout:
    """Every call to ``service`` from ``start`` to ``end`` (virtual seconds) is throttled."""

    service: str
    start: float
    end: float


class SimulatedCrash(RuntimeError):
    """What a ``crash`` fault raises out of a call: no part of the runtime catches it, so its thread ends."""


@dataclass(frozen=True)
class Faults:
    """Per-request fault rates of the runtime's calls (the world's own producer meets none), and brownouts.

    ``operations``: the rates apply to these operations only (``PutItem``, ``ReceiveMessage``...); empty: to all.
    """

    throttle: float = 0.0
    error_before: float = 0.0
    lost_answer: float = 0.0
    crash: float = 0.0  # a call raises what no caller expects (a library's bug): the thread that made it dies
    brownouts: tuple[Brownout, ...] = ()
    operations: tuple[str, ...] = ()


@dataclass
class Call:
    """One HTTP request the transport answered (botocore's retries are requests of their own)."""

    at: float
    caller: str
    service: str
    operation: str
    fault: str | None
    body: dict[str, Any]
    answer: dict[str, Any] | None = None
    refusal: dict[str, Any] | None = None  # an error's body (a failed condition's ALL_OLD item comes with it)


@dataclass
class Ledger:
    """Every request of the run, in order, and the faults met."""

    calls: list[Call] = field(default_factory=list)

    def count(self, caller: str, service: str) -> Counter[str]:
        return Counter(c.operation for c in self.calls if c.caller == caller and c.service == service)


def _throttle(service: str) -> tuple[int, dict[str, str], bytes]:
    if service == "sqs":
        body = {"__type": "com.amazonaws.sqs#RequestThrottled", "message": "Rate exceeded (simulated)"}
        headers = {"x-amzn-query-error": "RequestThrottled;Sender", "Content-Type": "application/x-amz-json-1.0"}
    else:
        body = {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": "Throughput exceeds the current capacity (simulated)",
        }
        headers = {"Content-Type": "application/x-amz-json-1.0"}
    return 400, headers, json.dumps(body).encode()


def _not_implemented() -> tuple[int, dict[str, str], bytes]:
    """An action moto lacks (SQS's message move tasks), answered as moto's server answers it: its NotImplementedError
    becomes werkzeug's HTTP 500 page, which botocore reports as a ClientError with code "500". In process, moto would
    raise the exception out of the caller's call instead, which no client of an HTTP endpoint ever meets."""
    page = b"<!doctype html>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n"
    return 500, {"Content-Type": "text/html; charset=utf-8"}, page


def _server_error(service: str) -> tuple[int, dict[str, str], bytes]:
    code = "InternalError" if service == "sqs" else "InternalServerError"
    body = {"__type": code, "message": "We encountered an internal error (simulated)"}
    return 500, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(body).encode()


class Aws:
    """moto's SQS and DynamoDB on ``sim``'s clock for one run; :meth:`client` makes the clients that reach them.

    ``rng`` draws latencies and faults (its own stream, so a change of fault rates leaves the scheduler's alone).
    """

    def __init__(
        self,
        sim: Simulation,
        rng: random.Random,
        faults: Faults,
        *,
        latency_ms: tuple[float, float],
        slow: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        self.sim = sim
        self.rng = rng
        self.faults = faults
        self.latency_ms = latency_ms
        self.slow = slow or {}  # a service's own latency (a throttled table's), in place of latency_ms
        self.ledger = Ledger()
        self.pollers: dict[str, list[SimThread]] = {}  # queue name -> long polls waiting on it
        #: Called with each receive's messages as moto hands them out (the world checks who still holds them).
        self.on_receive: Callable[[list[dict[str, Any]]], None] = lambda _messages: None
        self.receive_attempts: dict[tuple[str, str], ReceiveAttempt] = {}
        self._patches: contextlib.ExitStack | None = None

    # --- moto on the virtual clock ------------------------------------------------------------------------------------
    def __enter__(self) -> Aws:
        import moto.core.responses as moto_responses
        import moto.sqs.models as sqs_models
        from moto.backends import get_backend
        from moto.moto_api._internal import mock_random

        self._patches = stack = contextlib.ExitStack()
        stack.enter_context(_patched(sqs_models, "unix_time", self.sim.time))
        stack.enter_context(_patched(sqs_models, "unix_time_millis", lambda: self.sim.time() * 1000))
        stack.enter_context(_patched(sqs_models.Message, "mark_received", _marking_receive(sqs_models)))
        stack.enter_context(
            _patched(sqs_models.SQSBackend, "change_message_visibility", _visibility_from_receive(sqs_models))
        )
        stack.enter_context(
            _patched(sqs_models.SQSBackend, "change_message_visibility_batch", _visibility_per_entry(sqs_models))
        )
        stack.enter_context(_patched(sqs_models.Queue, "delete_message", _deleting_the_latest(sqs_models)))
        # botocore's retry backoff and its jitter: on the virtual clock, from the run's seed.
        stack.enter_context(_patched(botocore.endpoint, "time", _SleepOn(self.sim)))
        stack.enter_context(
            _patched(botocore.retries.standard.ExponentialBackoff, "__init__", _seeded_backoff(self.rng))
        )
        # moto's own costs per request, which are most of a run's time: it converts every name anew and lists a
        # response class's methods anew (each once here, pure functions); its receive reads a queue's every attribute
        # for each message only to know the retention (read directly here).
        camel = functools.cache(moto_responses.camelcase_to_underscores)
        stack.enter_context(_patched(moto_responses, "camelcase_to_underscores", camel))
        stack.enter_context(_patched(sqs_models, "camelcase_to_underscores", camel))
        methods = functools.cache(moto_responses.method_names_from_class)
        stack.enter_context(_patched(moto_responses, "method_names_from_class", methods))
        stack.enter_context(
            _patched(sqs_models.SQSBackend, "is_message_valid_based_on_retention_period", _retained(sqs_models))
        )
        for service in ("sqs", "dynamodb"):
            get_backend(service).reset()
        mock_random.seed(self.rng.getrandbits(32))
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._patches is not None
        self._patches.close()

    def client(self, service: str, *, caller: str, config: Config | None = None, faults: bool = True) -> Any:
        """A boto3 client whose requests go through this world's transport, labelled ``caller`` in the ledger.

        ``config``: botocore's (the consumer's own, consumer/runtime/clients.py; the world's: three attempts). Requests
        are not signed (moto does not check, and signing is a tenth of a call's CPU). ``faults``: whether the fault
        rates apply (the world's own clients meet none)."""
        base = config or Config(retries={"mode": "standard", "total_max_attempts": 3})
        merged = base.merge(Config(signature_version=UNSIGNED))
        client = _session().client(service, config=merged, endpoint_url=f"https://{service}.{REGION}.amazonaws.com")
        client._endpoint.http_session = Transport(self, caller, service, faults)
        return client

    # --- what the transport asks ---------------------------------------------------------------------------------------
    def latency(self, service: str = "") -> float:
        """One way of a request: the service's own latency where the plan slows it, else the world's."""
        low, high = self.slow.get(service, self.latency_ms)
        return self.rng.uniform(low, high) / 1000

    def fault(self, service: str, operation: str) -> str | None:
        now = self.sim.now
        if any(b.service == service and b.start <= now < b.end for b in self.faults.brownouts):
            return "throttle"
        if self.faults.operations and operation not in self.faults.operations:
            return None
        draw = self.rng.random()
        for kind, rate in (
            ("throttle", self.faults.throttle),
            ("error_before", self.faults.error_before),
            ("lost_answer", self.faults.lost_answer),
            ("crash", self.faults.crash),
        ):
            if draw < rate:
                return kind
            draw -= rate
        return None

    def sqs_queue(self, url: str) -> Any:
        from moto.backends import get_backend

        return get_backend("sqs")[ACCOUNT][REGION].get_queue(url.rsplit("/", 1)[-1])

    def next_visible(self, url: str) -> float | None:
        """When the next message of the queue at ``url`` becomes receivable (virtual seconds), if any will."""
        now_ms = self.sim.time() * 1000
        times = [max(m.visible_at, m.delayed_until) for m in self.sqs_queue(url)._messages]
        future = [t for t in times if t >= now_ms]
        if not future:
            return None
        return (min(future) + 1) / 1000 - self.sim.WALL_START  # moto's visible is strictly after visible_at

    def remember_receive(self, url: str, attempt: str, answer: tuple[int, dict[str, str], bytes]) -> None:
        handles = tuple(m["ReceiptHandle"] for m in json.loads(answer[2]).get("Messages", []))
        self.receive_attempts[(url, attempt)] = ReceiveAttempt(self.sim.now, answer, handles)

    def receive_again(self, url: str, attempt: str) -> tuple[int, dict[str, str], bytes] | None:
        """A FIFO receive retried with its ReceiveRequestAttemptId: "during a visibility timeout, subsequent calls
        with the same ReceiveRequestAttemptId return the same messages and receipt handles", within 5 minutes and if
        none of them was deleted or had its visibility changed, and the retry "resets the visibility timeout"
        (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html). moto ignores
        the parameter: a retry there finds the group in flight and gets nothing."""
        kept = self.receive_attempts.get((url, attempt))
        if kept is None or kept.changed or self.sim.now - kept.at > RECEIVE_ATTEMPT_SECONDS:
            return None
        queue = self.sqs_queue(url)
        current = {m.receipt_handle: m for m in queue._messages}
        messages = [current.get(handle) for handle in kept.handles]
        if any(m is None for m in messages):
            return None  # deleted, or received again since: its handle is no longer the message's
        for message in messages:
            message.change_visibility(int(queue.visibility_timeout))
        return kept.answer

    def changed(self, handles: set[str]) -> None:
        """Messages were deleted or had their visibility changed: a receive that gave them cannot be given again."""
        for kept in self.receive_attempts.values():
            if not kept.changed and handles.intersection(kept.handles):
                kept.changed = True

    def expire_leases(self, url: str) -> None:
        """A message whose visibility timeout has passed is no longer in flight: on FIFO its group may be received
        again, from its first message ("messages that belong to the same message group are processed in order",
        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-understanding-logic.html).
        moto drops such a message from its in-flight set only when its receive reaches it, after it computed which
        groups are in flight: the group's next message, in flight too until then, makes it skip the first, then is
        delivered before it."""
        from moto.sqs.exceptions import QueueDoesNotExist

        try:
            queue = self.sqs_queue(url)
        except QueueDoesNotExist:
            return  # no such queue: the receive itself answers so, as SQS does
        for message in [m for m in queue.pending_messages if m.visible]:
            queue.pending_messages.discard(message)

    def notify(self, url: str) -> None:
        """Something changed on the queue at ``url``: long polls waiting on it look again."""
        for poller in self.pollers.pop(url.rsplit("/", 1)[-1], []):
            self.sim.wake(poller, "notify")


@functools.cache
def _session() -> boto3.Session:
    """One session for every client of the process: it loads each service's model once (a new one costs 0.1 s)."""
    return boto3.Session(aws_access_key_id="sim", aws_secret_access_key="sim", region_name=REGION)


#: What changes a received message: a receive's answer can no longer be given again after one (ReceiveRequestAttemptId).
_CHANGES = {"DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch"}
#: How long a ReceiveRequestAttemptId can be used after its receive.
RECEIVE_ATTEMPT_SECONDS = 300


def _handles(body: dict[str, Any]) -> set[str]:
    handles = {body["ReceiptHandle"]} if "ReceiptHandle" in body else set()
    return handles | {entry["ReceiptHandle"] for entry in body.get("Entries", [])}


@dataclass
class ReceiveAttempt:
    """A FIFO receive's answer, kept for a retry with its ReceiveRequestAttemptId."""

    at: float
    answer: tuple[int, dict[str, str], bytes]
    handles: tuple[str, ...]
    changed: bool = False


class Transport:
    """botocore's HTTP session for one client: latency, faults, the long poll, then moto's answer."""

    def __init__(self, aws: Aws, caller: str, service: str, faults: bool) -> None:
        self.aws = aws
        self.caller = caller
        self.service = service
        self.faults = faults

    def send(self, request: AWSPreparedRequest) -> AWSResponse:
        from moto.core.botocore_stubber import MockRawResponse
        from moto.core.models import botocore_stubber

        aws, sim = self.aws, self.aws.sim
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else target).rpartition(".")[2]
        body = json.loads(request.body or b"{}")
        sim.sleep(aws.latency(self.service))  # on its way
        fault = aws.fault(self.service, operation) if self.faults else None
        call = Call(sim.now, self.caller, self.service, operation, fault, body)
        aws.ledger.calls.append(call)
        if fault == "crash":
            raise SimulatedCrash(f"{operation}: an exception no caller expects (simulated)")
        if fault == "throttle":
            status, headers, raw = _throttle(self.service)
        elif fault == "error_before":
            status, headers, raw = _server_error(self.service)
        elif operation == "ReceiveMessage":
            status, headers, raw = self._receive(request, body)
        else:
            try:
                status, headers, raw = botocore_stubber.process_request(request)  # type: ignore[misc]
            except NotImplementedError:
                status, headers, raw = _not_implemented()
            else:
                self._after(operation, body)
        with contextlib.suppress(ValueError):
            if status < 300:
                call.answer = json.loads(raw or b"{}")
            else:
                call.refusal = json.loads(raw or b"{}")
        # Every answer of SQS carries HTTP's Date header, the server's clock when it answered, to the second (an origin
        # server "MUST send a Date header field" in its responses, https://www.rfc-editor.org/rfc/rfc9110#name-date),
        # and the DLQ tool reads SQS's clock from it. moto's is this machine's clock; here it is the virtual one.
        headers = {name: value for name, value in headers.items() if name.lower() != "date"}
        headers["Date"] = formatdate(sim.time(), usegmt=True)
        sim.sleep(aws.latency(self.service))  # the answer on its way back
        if fault == "lost_answer":
            # Done, and the answer lost: botocore retries the same request.
            raise ReadTimeoutError(endpoint_url=request.url)
        return AWSResponse(request.url, status, headers, MockRawResponse(raw))

    def _receive(self, request: AWSPreparedRequest, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        """A receive, long-polling on the virtual clock: moto is asked without a wait, again each time something
        changes on the queue or a message becomes visible, until the wait time is over."""
        from moto.core.models import botocore_stubber

        aws, sim = self.aws, self.aws.sim
        url = body["QueueUrl"]
        attempt = body.get("ReceiveRequestAttemptId") if url.endswith(".fifo") else None
        again = aws.receive_again(url, attempt) if attempt else None
        if again is not None:
            return again
        end = sim.now + int(body.get("WaitTimeSeconds") or 0)
        request.body = json.dumps({**body, "WaitTimeSeconds": 0}).encode()
        while True:
            aws.expire_leases(url)
            status, headers, raw = botocore_stubber.process_request(request)  # type: ignore[misc]
            messages = json.loads(raw or b"{}").get("Messages") if status < 300 else None
            if messages:
                aws.on_receive(messages)
                if attempt:
                    aws.remember_receive(url, attempt, (status, dict(headers), raw))
                return status, headers, raw
            if status >= 300 or sim.now >= end:
                return status, headers, raw
            soonest = aws.next_visible(url)
            deadline = end if soonest is None else min(end, max(soonest, sim.now))
            waiters = aws.pollers.setdefault(url.rsplit("/", 1)[-1], [])
            sim.block(None, deadline, "long poll", waiters=waiters)

    def _after(self, operation: str, body: dict[str, Any]) -> None:
        if self.service == "sqs" and operation in _CHANGES:
            self.aws.changed(_handles(body))
        if self.service == "sqs" and operation in {
            "SendMessage",
            "SendMessageBatch",
            "DeleteMessage",
            "DeleteMessageBatch",
            "ChangeMessageVisibility",
            "ChangeMessageVisibilityBatch",
        }:
            self.aws.notify(body["QueueUrl"])

    def close(self) -> None:
        pass


class _SleepOn:
    """``botocore.endpoint``'s ``time`` module, its retry sleep on the virtual clock."""

    def __init__(self, sim: Simulation) -> None:
        self._sim = sim

    def sleep(self, seconds: float) -> None:
        self._sim.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        import time

        return getattr(time, name)


def _seeded_backoff(rng: random.Random) -> Any:
    original = botocore.retries.standard.ExponentialBackoff.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._random = rng.random

    return __init__


def _marking_receive(sqs_models: Any) -> Any:
    original = sqs_models.Message.mark_received

    def mark_received(self: Any, visibility_timeout: int | None = None) -> None:
        self.sim_received_at = sqs_models.unix_time_millis()
        original(self, visibility_timeout)

    return mark_received


def _retained(sqs_models: Any) -> Any:
    """moto's retention check (a message is gone once its queue's retention has passed since its send), without
    computing every attribute of the queue to read one."""

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        retention = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention + message.sent_timestamp / 1000 > sqs_models.unix_time())

    return is_message_valid_based_on_retention_period


def _deleting_the_latest(sqs_models: Any) -> Any:
    """moto's delete, which ignores a superseded receipt handle (module docstring): the request succeeds and the
    message stays."""
    original = sqs_models.Queue.delete_message

    def delete_message(self: Any, receipt_handle: str) -> None:
        if any(m.had_receipt_handle(receipt_handle) and m.receipt_handle != receipt_handle for m in self._messages):
            return
        original(self, receipt_handle)

    return delete_message


def _visibility_per_entry(sqs_models: Any) -> Any:
    """moto's ChangeMessageVisibilityBatch, each entry's refusal its own failure (module docstring)."""

    def change_message_visibility_batch(
        self: Any, queue_name: str, entries: list[dict[str, Any]]
    ) -> tuple[list[str], list[dict[str, Any]]]:
        success: list[str] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:
            try:
                seconds = int(entry["VisibilityTimeout"])
                if not 0 <= seconds <= MAX_VISIBILITY_MS // 1000:
                    raise sqs_models.InvalidParameterValue("Visibility timeout invalid")
                self.change_message_visibility(
                    queue_name=queue_name, receipt_handle=entry["ReceiptHandle"], visibility_timeout=seconds
                )
            except (sqs_models.InvalidParameterValue, sqs_models.ReceiptHandleIsInvalid) as error:
                code = "ReceiptHandleIsInvalid" if isinstance(error, sqs_models.ReceiptHandleIsInvalid) else error.code
                failed.append({"Id": entry["Id"], "SenderFault": True, "Code": code, "Message": error.message})
            else:
                success.append(entry["Id"])
        return success, failed

    return change_message_visibility_batch


def _visibility_from_receive(sqs_models: Any) -> Any:
    """moto's ChangeMessageVisibility, with the 12-hour limit counted from the receive and a superseded receipt handle
    refused (module docstring)."""

    def change_message_visibility(self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
        queue = self.get_queue(queue_name)
        for message in queue._messages:
            if message.had_receipt_handle(receipt_handle) and message.receipt_handle != receipt_handle:
                raise sqs_models.InvalidParameterValue(
                    f"Value {receipt_handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has"
                    " expired."
                )
            if message.had_receipt_handle(receipt_handle):
                received_at = getattr(message, "sim_received_at", message.sent_timestamp)
                if sqs_models.unix_time_millis() + int(visibility_timeout) * 1000 - received_at > MAX_VISIBILITY_MS:
                    raise sqs_models.InvalidParameterValue(
                        f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                        "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
                    )
                message.change_visibility(visibility_timeout)
                if message.visible and message in queue.pending_messages:
                    queue.pending_messages.remove(message)
                return
        raise sqs_models.ReceiptHandleIsInvalid

    return change_message_visibility


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    saved = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)
