"""What a handler receives, and how it says a message can never succeed."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from consumer.sources import EventBridgeEvent, SnsNotification, Sources

#: Message attribute a requeued copy carries: the receives its earlier copies spent (see Message.receive_count).
PRIOR_RECEIVES_ATTRIBUTE = "x-prior-receives"
#: A carried count above this is not ours (or not sane): it is ignored rather than trusted.
MAX_PRIOR_RECEIVES = 10_000


class PoisonMessage(Exception):
    """Raise from a handler when a message can never succeed (bad JSON, failed schema check...).

    The consumer moves it to the DLQ at once, with ``reason`` as an attribute,
    without spending the retry budget.

    Example::

        raise PoisonMessage("body is not JSON: Expecting value at line 1")
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class DownstreamUnavailable(Exception):
    """Raise from a handler when what it calls is down, not the message: the consumer pauses instead of retrying.

    The consumer's circuit opens: it stops receiving for ``retry_after`` (a ``timedelta`` or
    seconds; None lets the consumer choose from the contract's retry backoff), hands this
    message and every message it holds but has not started back to the queue without
    spending their retry budget, lets what is running finish, then probes with one message
    before it receives at full concurrency again (see docs/runtime.md, "The circuit").

    Example::

        if response.status == 503:
            raise DownstreamUnavailable(retry_after=float(response.headers.get("Retry-After", 30)))
    """

    def __init__(self, reason: str = "downstream unavailable", *, retry_after: timedelta | float | None = None) -> None:
        if isinstance(retry_after, timedelta):
            retry_after = retry_after.total_seconds()
        if retry_after is not None and (
            isinstance(retry_after, bool)
            or not isinstance(retry_after, (int, float))
            or not math.isfinite(retry_after)
            or retry_after < 0
        ):
            # Stdlib only (the CDK app imports this module): the shape of ContractError's message, as a ValueError.
            raise ValueError(
                f'"retry_after" must be a timedelta, a finite number of seconds >= 0, or None: {retry_after!r}'
            )
        self.reason = reason
        #: Seconds the downstream asked for, or None (the consumer derives the pause from the contract).
        self.retry_after_seconds: float | None = None if retry_after is None else float(retry_after)
        super().__init__(reason)


class StopSignal(Protocol):
    """What an attempt reads of the consumer's stop event (a ``threading.Event``, or the consumer's clock's)."""

    def is_set(self) -> bool: ...


@dataclass(kw_only=True, eq=False)
class Attempt:
    """One attempt at a message, as a handler sees it: when the consumer gives up on it, and whether it is stopping.

    ``deadline`` is an instant on ``clock``, the consumer's monotonic clock (``time.monotonic``), not a wall
    clock time: the attempt's start plus the contract's per-message timeout (``max_duration``), set by the consumer
    as the attempt starts (each receive of a message is a new :class:`Message` with its own attempt). Past it the
    heartbeat gives up on the handler (within a tick): no more lease extensions, and its result is not
    settled, so the message comes back after its lease. ``stop`` is set once the consumer began to stop
    (SIGTERM, or every slot stuck): read it, never set it. ``drain_end`` is the instant, on ``clock``, the
    consumer stops waiting for running handlers once it is stopping (``inf`` until then): what
    :attr:`Message.deadline` shortens to. A retried message is a new attempt, with its own deadline. The
    default, a message built outside a consumer (a handler's unit test): no deadline, never stopping.
    """

    deadline: float = math.inf
    stop: StopSignal = field(default_factory=threading.Event)
    clock: Callable[[], float] = time.monotonic
    drain_end: Callable[[], float] = field(default=lambda: math.inf)


@dataclass(frozen=True, kw_only=True)
class Message:
    """One SQS message as a handler sees it.

    ``attributes`` are SQS system attributes (``ApproximateReceiveCount``,
    ``SentTimestamp``, ``MessageGroupId``...); ``message_attributes`` are the
    sender's own, as boto3 returns them.

    From a declared SNS topic without raw delivery (``consumer.sources``), ``body`` and ``message_attributes`` are
    the published message and its attributes, and ``sns`` holds the envelope's own fields (:class:`SnsNotification`;
    what SQS delivered stays in :attr:`sqs_body` and :attr:`sqs_message_attributes`). From an EventBridge rule,
    ``body`` is the whole event as JSON and ``event`` the event read (:class:`EventBridgeEvent`). Neither is verified:
    who may send is the queue policy's business. ``unreadable`` is why a declared source's delivery could not be read:
    the consumer moves such a message to the DLQ with that reason and never hands it to a handler.

    ``receive_count`` counts the receives of the message across the copies the
    consumer made of it: ``ApproximateReceiveCount`` plus ``prior_receives``, the
    receives its earlier copies spent on attempts (the ``x-prior-receives``
    attribute of a requeued copy, see ``consumer.runtime.dead_letter.requeue_parameters``).
    Retries, backoff and the move to the DLQ all go by it. ``prior_receives`` is 0
    unless the consumer itself sent the copy (see :meth:`from_sqs`).

    ``deadline``, :meth:`remaining` and ``stopping`` come from ``attempt``, which the consumer sets for each
    attempt (see :class:`Attempt`): a long handler can checkpoint and return, or raise to be retried, when
    ``stopping`` turns true or ``remaining()`` runs low, instead of being abandoned.

    Example::

        for index, row in enumerate(rows):
            if message.stopping:  # SIGTERM: the drain is short
                send_the_rest(rows[index:])  # a new message carries what is left
                return  # settled as success: this message is deleted
            write(row)
    """

    body: str
    message_id: str
    receipt_handle: str = field(repr=False)
    receive_count: int = 1
    attributes: Mapping[str, str] = field(default_factory=dict)
    message_attributes: Mapping[str, Any] = field(default_factory=dict)
    prior_receives: int = 0
    attempt: Attempt = field(default_factory=Attempt, repr=False, compare=False)
    sns: SnsNotification | None = None
    event: EventBridgeEvent | None = None
    unreadable: str | None = field(default=None, repr=False)

    @property
    def sqs_body(self) -> str:
        """The body as SQS delivered it: the SNS envelope of an unwrapped message, else :attr:`body`. Hand-backs and
        DLQ moves send it (consumer/runtime/dead_letter.py), so a copy is read again the same way."""
        return self.body if self.sns is None else self.sns.envelope

    @property
    def sqs_message_attributes(self) -> Mapping[str, Any]:
        """The message attributes as SQS delivered them: an unwrapped message's own are the envelope's."""
        return self.message_attributes if self.sns is None else self.sns.sqs_message_attributes

    @property
    def deadline(self) -> float:
        """When the consumer gives up on this attempt, on ``time.monotonic()``'s clock (``inf`` outside a consumer).

        Once the consumer is stopping, the earlier of the attempt's own deadline and the drain's end (when
        shutdown stops waiting for running handlers and hands their messages back): a handler that started
        before the SIGTERM, or during the drain, sees the time it really has.
        """
        return min(self.attempt.deadline, self.attempt.drain_end())

    def remaining(self) -> float:
        """Seconds left before :attr:`deadline`, never below 0 (``inf`` outside a consumer)."""
        return max(0.0, self.deadline - self.attempt.clock())

    @property
    def stopping(self) -> bool:
        """True once the consumer began to stop (SIGTERM): finish or checkpoint soon, the drain is short."""
        return self.attempt.stop.is_set()

    @classmethod
    def from_sqs(
        cls,
        raw: Mapping[str, Any],
        *,
        own_role_id: str | None = None,
        attempt: Attempt | None = None,
        sources: Sources | None = None,
    ) -> Message:
        """Build from one entry of a boto3 ``receive_message`` response's ``Messages``; ``attempt`` is the attempt
        the consumer will make at it (its deadline set when it starts), a fresh :class:`Attempt` when None.

        ``x-prior-receives`` counts only on a copy a session of ``own_role_id``
        (the task role's RoleId) sent: any sender can set a message attribute,
        for instance to make a message go to the DLQ on its first failure. Without
        ``own_role_id`` no carried count is trusted, and a requeued copy's count
        starts again.

        ``sources``: what the worker's declared sources deliver (:meth:`consumer.sources.Sources.read`); None or
        empty reads no body (no JSON parse). The carried count is read from SQS's attributes, never an envelope's.
        """
        attributes = dict(raw.get("Attributes", {}))
        message_attributes: Mapping[str, Any] = dict(raw.get("MessageAttributes", {}))
        prior = _prior_receives(message_attributes) if sent_by_role(attributes, own_role_id) else 0
        body = raw.get("Body", "")
        read = sources.read(body, message_attributes) if sources else None
        sns, event, unreadable = None, None, None
        if read is not None:
            body, message_attributes, sns, event, unreadable = read
        message = object.__new__(cls)
        # Every field at once, as __init__ would set them: a frozen dataclass's __init__ sets each one through
        # object.__setattr__, several times slower, and this runs for every message the consumer receives.
        # tests/unit/test_runtime_parts.py checks it sets exactly the dataclass's fields.
        message.__dict__.update(
            body=body,
            message_id=raw["MessageId"],
            receipt_handle=raw["ReceiptHandle"],
            receive_count=int(attributes.get("ApproximateReceiveCount", "1")) + prior,
            attributes=attributes,
            message_attributes=message_attributes,
            prior_receives=prior,
            attempt=Attempt() if attempt is None else attempt,
            sns=sns,
            event=event,
            unreadable=unreadable,
        )
        return message


def _prior_receives(message_attributes: Mapping[str, Any]) -> int:
    """The carried count of a requeued copy; 0 when absent or not a count we could have written."""
    raw = message_attributes.get(PRIOR_RECEIVES_ATTRIBUTE, {}).get("StringValue", "")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) <= MAX_PRIOR_RECEIVES else 0


def sent_by_role(attributes: Mapping[str, str], role_id: str | None) -> bool:
    """Whether SQS says a session of the IAM role ``role_id`` sent the message.

    ``SenderId`` is a system attribute SQS sets, which no sender can choose; for a
    role it is ``<RoleId>:<session name>``, and each ECS task has its own session,
    so only the RoleId part is compared (whole, never as a prefix).
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html
    """
    return bool(role_id) and attributes.get("SenderId", "").partition(":")[0] == role_id
