"""The worker contract: one declaration, every timing both halves need.

A handler declares what only its author knows, next to its code::

    from datetime import timedelta
    from consumer import worker

    @worker(max_duration=timedelta(seconds=90), concurrency=8)
    def handle(message):
        ...

:class:`WorkerContract` turns that declaration into every value the queue, the
alarms, the ECS task and the consumer need (visibility timeout, heartbeat,
per-message timeout, stop timeout, redrive, retention, alarm thresholds and the
scaling target), validated once, here. The CDK stack (``infra/``) and the
consumer runtime both import this module; it uses the standard library only so
that it stays importable from either side.

``@worker`` itself, ``contract_of`` and ``load_handler`` are in :mod:`consumer.declaration`.
The formulas, SQS's limits and the contract's bounds are in :mod:`consumer.limits`, the errors in
:mod:`consumer.errors` and the queue attributes' SQS spelling in :mod:`consumer.queue_attributes`
(all standard library only); each name is imported from the module that defines it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from consumer.errors import ContractDriftError, ContractError
from consumer.limits import (
    AGE_METRIC_SKIPPED_AFTER_RECEIVES,
    DAY,
    DERIVED_FORMULAS,
    FARGATE_MAX_STOP_TIMEOUT_SECONDS,
    HEARTBEAT_MAX_INTERVAL_SECONDS,
    LEASE_CAP_SECONDS,
    MAX_ASYNC_CONCURRENCY,
    MAX_BATCH,
    MAX_BATCH_WINDOW_SECONDS,
    MAX_CONCURRENCY,
    MAX_DURATION_SECONDS,
    MAX_MESSAGES_IN_FLIGHT,
    MIN_LEASE_SECONDS,
    MIN_MAX_RECEIVE_COUNT,
    MIN_RETENTION_GAP_SECONDS,
    MIN_STOP_TIMEOUT_SECONDS,
    REDRIVE_BACKSTOP_RECEIVES,
    SHUTDOWN_FLUSH_SECONDS,
    SOURCE_MAX_MESSAGE_BYTES,
    SQS_MAX_BATCH,
    SQS_MAX_MESSAGE_BYTES,
    SQS_MAX_RECEIVE_COUNT,
    SQS_MAX_RETENTION_SECONDS,
    SQS_MAX_VISIBILITY_SECONDS,
    SQS_MIN_RETENTION_SECONDS,
    VISIBILITY_MARGIN_MAX_SECONDS,
    VISIBILITY_MARGIN_MIN_SECONDS,
    HandlerShape,
    LivenessTimings,
)
from consumer.queue_attributes import QueueAttributes, QueuePairAttributes

ENV_PREFIX = "CONSUMER_"
#: The CloudWatch namespace of the consumer's EMF metrics (dimension ``Queue``); the dashboard reads it.
METRICS_NAMESPACE = "SqsWorker"
#: The queue binding the stack writes beside :meth:`WorkerContract.to_env` (the consumer reads them).
QUEUE_URL_ENV = "QUEUE_URL"
DLQ_URL_ENV = "DLQ_URL"
HANDLER_ENV = "CONSUMER_HANDLER"
IDEMPOTENCY_TABLE_ENV = "CONSUMER_IDEMPOTENCY_TABLE"
#: The task role's RoleId: a copy the consumer requeued is trusted to carry its spent receives only when SQS
#: says a session of this role sent it (consumer.message.Message.from_sqs).
TASK_ROLE_ID_ENV = "CONSUMER_TASK_ROLE_ID"
#: A Lambda function's source queue ARN (consumer/lambda_entry.py): every record of an event must come from it. The
#: stack writes it beside the bindings for a worker with "target": "lambda" (infra/function.py); unset, the queue's
#: own is used.
QUEUE_ARN_ENV = "QUEUE_ARN"
#: How the runtime traces ("off", "otlp" or "global": consumer.runtime.tracing reads it); the stack sets it, beside
#: the OpenTelemetry SDK's own variables, where an environment's "tracing" is on (infra/tracing_settings.py).
TRACING_ENV = f"{ENV_PREFIX}TRACING"
BINDING_KEYS = frozenset({QUEUE_URL_ENV, DLQ_URL_ENV, HANDLER_ENV, IDEMPOTENCY_TABLE_ENV, TASK_ROLE_ID_ENV})
#: Fields the environment sets (cdk.json), not the handler: excluded from the declaration check.
ENVIRONMENT_FIELDS = frozenset({"source_retention_seconds", "dlq_retention_seconds"})


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def check_int(parameter: str, value: object, low: int, high: int, why: str = "") -> int:
    """Return ``value`` if it is an int within ``[low, high]``; raise :class:`ContractError` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(parameter, "must be a whole number", value)
    if not low <= value <= high:
        raise ContractError(parameter, f"must be between {low} and {high}{why}", value)
    return value


def _check_fair_queue(fair_queue: object, fifo: bool) -> None:
    _check_bool("fair_queue", fair_queue)
    if fair_queue and fifo:
        # On a FIFO queue the MessageGroupId is the order key, and SQS's fair queues are a standard-queue feature.
        raise ContractError(
            "fair_queue",
            "is only allowed on a standard queue (fifo=False): a FIFO queue's MessageGroupId is its order key",
            True,
        )


def _check_bool(parameter: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ContractError(parameter, "must be true or false", value)
    return value


@dataclass(frozen=True, kw_only=True)
class WorkerContract(HandlerShape, LivenessTimings):
    """Everything the queue, the alarms, the ECS task and the consumer must agree on.

    Declared values are fields; everything else is derived (properties), so the
    two halves cannot compute different timings from the same declaration.

    Example::

        >>> c = WorkerContract(max_duration_seconds=90, concurrency=8)
        >>> c.visibility_timeout_seconds, c.stop_timeout_seconds, c.max_receive_count
        (100, 95, 5)
    """

    #: Longest a single handler call may run; it is given up on after that.
    max_duration_seconds: int
    #: Handler calls at once in one consumer process: threads, or coroutines for an ``async def`` handler.
    concurrency: int = 1
    #: Messages asked for per ReceiveMessage call (1..10).
    batch_size: int = SQS_MAX_BATCH
    #: Receives before SQS moves a message to the DLQ (redrive policy).
    max_receive_count: int = 5
    #: FIFO queue pair (order kept per message group).
    fifo: bool = False
    #: FIFO only: deduplicate on a hash of the body.
    content_based_deduplication: bool = False
    #: Standard queue only: producers give each tenant a MessageGroupId and SQS serves quiet tenants first
    #: (SQS fair queues); infra then alarms on the quiet groups' oldest message, not the whole queue's.
    fair_queue: bool = False
    #: The handler is idempotent by itself (a second run of a message changes nothing more): no idempotency guard,
    #: so no DynamoDB table, no claim and no completion per message (docs/handlers.md, "Idempotent handlers").
    idempotent: bool = False
    #: A batch handler's largest batch (messages per call, collected from several receives); None: one message.
    max_batch: int | None = None
    #: A batch handler: how long a batch may wait to fill after its first message (0: what has arrived).
    batch_window_seconds: int = 0
    #: The handler is ``async def``: ``concurrency`` coroutines on one event loop (set by ``@worker`` from it).
    asynchronous: bool = False
    #: How long a message may wait before a handler starts on it (scaling and alarms).
    acceptable_latency_seconds: int = 60
    #: Typical handler duration; defaults to half the max duration.
    average_duration_seconds: int | None = None
    #: First retry delay; doubles per receive up to ``retry_backoff_max_seconds``.
    retry_backoff_base_seconds: int = 2
    #: Cap on the retry delay.
    retry_backoff_max_seconds: int = 300
    #: Longest visibility lease; a handler that may run longer is kept invisible by the heartbeat.
    max_lease_seconds: int = LEASE_CAP_SECONDS
    #: ECS container stop timeout; defaults to ``min(120, max_duration + 5)``.
    stop_timeout_seconds: int | None = None
    #: Source queue retention (an environment setting, not the handler's).
    source_retention_seconds: int = 4 * DAY
    #: DLQ retention; must exceed the source's by at least two days (consumer/limits.py, MIN_RETENTION_GAP_SECONDS).
    dlq_retention_seconds: int = 14 * DAY

    def __post_init__(self) -> None:
        check_int(
            "max_duration_seconds",
            self.max_duration_seconds,
            1,
            MAX_DURATION_SECONDS,
            f" (SQS's {SQS_MAX_VISIBILITY_SECONDS} s visibility limit less the"
            f" {VISIBILITY_MARGIN_MAX_SECONDS} s margin)",
        )
        _check_concurrency(self.concurrency, self.asynchronous)
        check_int("batch_size", self.batch_size, 1, SQS_MAX_BATCH, " (SQS receives at most 10 per call)")
        check_int(
            "max_receive_count",
            self.max_receive_count,
            MIN_MAX_RECEIVE_COUNT,
            SQS_MAX_RECEIVE_COUNT - REDRIVE_BACKSTOP_RECEIVES,
            " (1 would send a message to the DLQ on its first transient failure; the redrive policy adds"
            f" {REDRIVE_BACKSTOP_RECEIVES} backstop receives within SQS's limit of {SQS_MAX_RECEIVE_COUNT})",
        )
        _check_bool("fifo", self.fifo)
        _check_bool("content_based_deduplication", self.content_based_deduplication)
        if self.content_based_deduplication and not self.fifo:
            raise ContractError("content_based_deduplication", "is only allowed on a FIFO pair (fifo=True)", True)
        _check_fair_queue(self.fair_queue, self.fifo)
        _check_bool("idempotent", self.idempotent)
        check_int("acceptable_latency_seconds", self.acceptable_latency_seconds, 1, SQS_MAX_VISIBILITY_SECONDS)
        _check_batch(self)
        if self.average_duration_seconds is None:
            object.__setattr__(self, "average_duration_seconds", max(1, math.ceil(self.max_duration_seconds / 2)))
        check_int(
            "average_duration_seconds",
            self.average_duration_seconds,
            1,
            self.max_duration_seconds,
            " (it cannot exceed max_duration_seconds)",
        )
        check_int("retry_backoff_base_seconds", self.retry_backoff_base_seconds, 1, SQS_MAX_VISIBILITY_SECONDS)
        check_int(
            "retry_backoff_max_seconds",
            self.retry_backoff_max_seconds,
            self.retry_backoff_base_seconds,
            SQS_MAX_VISIBILITY_SECONDS,
            " (from retry_backoff_base_seconds to SQS's 12 h visibility limit)",
        )
        check_int(
            "max_lease_seconds",
            self.max_lease_seconds,
            MIN_LEASE_SECONDS,
            SQS_MAX_VISIBILITY_SECONDS,
            f" ({MIN_LEASE_SECONDS} s leaves the heartbeat a second chance; SQS's visibility limit is 12 h)",
        )
        if self.stop_timeout_seconds is None:
            object.__setattr__(
                self,
                "stop_timeout_seconds",
                min(FARGATE_MAX_STOP_TIMEOUT_SECONDS, self.max_duration_seconds + SHUTDOWN_FLUSH_SECONDS),
            )
        check_int(
            "stop_timeout_seconds",
            self.stop_timeout_seconds,
            MIN_STOP_TIMEOUT_SECONDS,
            FARGATE_MAX_STOP_TIMEOUT_SECONDS,
            f" (Fargate allows at most {FARGATE_MAX_STOP_TIMEOUT_SECONDS} s; the consumer needs"
            f" {SHUTDOWN_FLUSH_SECONDS} s to flush plus 1 s to drain)",
        )
        for name in ("source_retention_seconds", "dlq_retention_seconds"):
            check_int(
                name,
                getattr(self, name),
                SQS_MIN_RETENTION_SECONDS,
                SQS_MAX_RETENTION_SECONDS,
                " (SQS retention is 60 s to 14 days)",
            )
        gap = self.dlq_retention_seconds - self.source_retention_seconds
        if gap < MIN_RETENTION_GAP_SECONDS:
            raise ContractError(
                "dlq_retention_seconds",
                f"must exceed source_retention_seconds ({self.source_retention_seconds}) by at least"
                f" {MIN_RETENTION_GAP_SECONDS} s, because a standard queue's message expires from its"
                " original enqueue time and would otherwise vanish from the DLQ before anyone acts",
                self.dlq_retention_seconds,
            )
        if self.retry_horizon_seconds >= self.source_retention_seconds:
            raise ContractError(
                "source_retention_seconds",
                f"must exceed the retry horizon ({self.retry_horizon_seconds} s = redrive_max_receive_count x"
                " attempt_timeout + backoffs), or a failing message could expire before it reaches the DLQ",
                self.source_retention_seconds,
            )

    # --- derived values ---------------------------------------------------
    @property
    def visibility_margin_seconds(self) -> int:
        return _clamp(
            math.ceil(self.max_duration_seconds / 10), VISIBILITY_MARGIN_MIN_SECONDS, VISIBILITY_MARGIN_MAX_SECONDS
        )

    @property
    def attempt_timeout_seconds(self) -> int:
        return self.max_duration_seconds + self.visibility_margin_seconds

    @property
    def visibility_timeout_seconds(self) -> int:
        return min(self.receive_cycle_seconds, self.max_lease_seconds)

    @property
    def heartbeat_interval_seconds(self) -> int:
        return _clamp(self.visibility_timeout_seconds // 5, 1, HEARTBEAT_MAX_INTERVAL_SECONDS)

    @property
    def heartbeat_threshold_seconds(self) -> int:
        return 2 * self.heartbeat_interval_seconds

    @property
    def message_timeout_seconds(self) -> int:
        return self.max_duration_seconds

    @property
    def drain_timeout_seconds(self) -> int:
        assert self.stop_timeout_seconds is not None  # resolved in __post_init__
        return self.stop_timeout_seconds - SHUTDOWN_FLUSH_SECONDS

    def retry_backoff_seconds(self, receive_count: int) -> int:
        """Cap of the delay after the ``receive_count``-th failed receive (1-based)."""
        exponent = min(max(receive_count, 1) - 1, 32)  # 2**32 s already exceeds any cap
        factor: int = 2**exponent  # typeshed types int ** int as Any: a negative exponent would give a float
        return min(self.retry_backoff_max_seconds, self.retry_backoff_base_seconds * factor)

    @property
    def redrive_max_receive_count(self) -> int:
        return self.max_receive_count + REDRIVE_BACKSTOP_RECEIVES

    @property
    def retry_horizon_seconds(self) -> int:
        backoffs = sum(self.retry_backoff_seconds(n) for n in range(1, self.max_receive_count))
        return self.redrive_max_receive_count * self.receive_cycle_seconds + backoffs

    @property
    def dlq_age_alarm_seconds(self) -> int:
        return (self.dlq_retention_seconds - self.source_retention_seconds) // 2

    @property
    def backlog_age_alarm_seconds(self) -> int:
        cycles = min(AGE_METRIC_SKIPPED_AFTER_RECEIVES, self.max_receive_count)
        retries = sum(self.receive_cycle_seconds + self.retry_backoff_seconds(n) for n in range(1, cycles + 1))
        return self.acceptable_latency_seconds + retries

    @property
    def uses_heartbeat_lease(self) -> bool:
        """True when the queue's visibility is a lease shorter than a handler may run."""
        return self.attempt_timeout_seconds > self.visibility_timeout_seconds

    def queue_attributes(self) -> QueuePairAttributes:
        """What SQS must hold for this contract: the source queue's attributes and the DLQ's.

        The one derivation the CDK construct, its synth-time invariants, the consumer's drift check,
        the tests' queue pairs and the chaos suite's FIFO pair all read.

        >>> source = WorkerContract(max_duration_seconds=90).queue_attributes().source
        >>> source.to_sqs(dead_letter_target_arn="arn:aws:sqs:eu-west-1:123456789012:w-dlq")["RedrivePolicy"]
        '{"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123456789012:w-dlq", "maxReceiveCount": 7}'
        """
        fifo = {"fifo": self.fifo, "content_based_deduplication": self.content_based_deduplication}
        return QueuePairAttributes(
            source=QueueAttributes(
                visibility_timeout_seconds=self.visibility_timeout_seconds,
                message_retention_seconds=self.source_retention_seconds,
                maximum_message_bytes=SOURCE_MAX_MESSAGE_BYTES,
                redrive_max_receive_count=self.redrive_max_receive_count,
                **fifo,
            ),
            dead_letter=QueueAttributes(
                message_retention_seconds=self.dlq_retention_seconds,
                maximum_message_bytes=SQS_MAX_MESSAGE_BYTES,
                **fifo,
            ),
        )

    def derived(self) -> dict[str, int]:
        """Every derived value by name (the keys of :data:`DERIVED_FORMULAS`)."""
        return {name: getattr(self, name) for name in DERIVED_FORMULAS}

    def declared(self) -> dict[str, Any]:
        """Every declared field by name, defaults resolved."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    # --- environment round trip -------------------------------------------
    def to_env(self) -> dict[str, str]:
        """The container environment: declared fields, then derived values for the drift check.

        >>> WorkerContract(max_duration_seconds=90).to_env()["CONSUMER_VISIBILITY_TIMEOUT_SECONDS"]
        '100'
        """
        env = {
            _env_name(name): _to_env_value(value) for name, value in self.declared().items() if _written(name, value)
        }
        env.update({_env_name(name): str(value) for name, value in self.derived().items()})
        return env

    @classmethod
    def env_keys(cls) -> frozenset[str]:
        """Every variable :meth:`to_env` may write (``CONSUMER_FAIR_QUEUE`` only when declared): the reserved names."""
        names = [f.name for f in dataclasses.fields(cls)] + list(DERIVED_FORMULAS)
        return frozenset(_env_name(name) for name in names)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> WorkerContract:
        """Rebuild the contract written by :meth:`to_env`.

        Derived values present in ``environ`` must equal the ones recomputed
        here; a difference means the stack and this image derive timings
        differently (redeploy both from the same commit).
        """
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            key = _env_name(field.name)
            if key not in environ:
                if field.name == "max_duration_seconds":
                    raise ContractError(key, "must be set (the stack writes it into the task)", None)
                continue
            values[field.name] = _from_env_value(key, environ[key], field.name in _BOOL_FIELDS)
        try:
            contract = cls(**values)
        except ContractError as error:
            # The user set a variable, not a field: name the variable and the text it holds.
            key = _env_name(error.parameter)
            if error.parameter not in values or key not in environ:
                raise
            raise type(error)(key, error.rule, environ[key]) from None
        max_duration = _env_name("max_duration_seconds")
        for name, value in contract.derived().items():
            key = _env_name(name)
            if key in environ and environ[key] != str(value):
                raise ContractDriftError(
                    key,
                    f"differs from {value}, the value this image derives from {max_duration}="
                    f"{environ[max_duration]} and the other CONSUMER_ inputs: either one of those was changed"
                    " by hand (take the task's environment from the stack: cdk deploy), or the stack and the"
                    " image were built from different versions of consumer/contract.py (redeploy both)",
                    environ[key],
                )
        return contract


_BOOL_FIELDS = frozenset({"fifo", "content_based_deduplication", "fair_queue", "idempotent", "asynchronous"})
#: Fields added after stacks were deployed: written only when declared, so a worker that does not declare one keeps
#: its task definition byte for byte (no new revision, no rolling deploy); from_env reads an absent one as its
#: default (False, None, 0).
_WRITTEN_ONLY_WHEN_DECLARED = frozenset(
    {"fair_queue", "idempotent", "max_batch", "batch_window_seconds", "asynchronous"}
)


def _written(name: str, value: object) -> bool:
    """Whether :meth:`WorkerContract.to_env` writes field ``name`` holding ``value``."""
    return not (name in _WRITTEN_ONLY_WHEN_DECLARED and value in (False, None, 0))


def _check_concurrency(concurrency: object, asynchronous: object) -> None:
    """Threads for a ``def`` handler, coroutines on one event loop for an ``async def``: the bounds differ."""
    if _check_bool("asynchronous", asynchronous):
        check_int("concurrency", concurrency, 1, MAX_ASYNC_CONCURRENCY, " (coroutines of an async def handler)")
    else:
        why = f" (threads; an async def handler may run up to {MAX_ASYNC_CONCURRENCY} coroutines)"
        check_int("concurrency", concurrency, 1, MAX_CONCURRENCY, why)


def _check_batch(contract: WorkerContract) -> None:
    """A batch handler's ``max_batch`` and ``batch_window``: within bounds, on a standard queue, a window inside
    the acceptable latency and, with the attempt, inside SQS's 12 hours, and no more messages held than a process
    should."""
    if contract.max_batch is not None:
        check_int("max_batch", contract.max_batch, 1, MAX_BATCH, " (messages per call of a batch handler)")
        if contract.fifo:
            raise ContractError(
                "max_batch",
                "is only allowed on a standard queue (fifo=False): a FIFO group's order is kept one message at a time",
                contract.max_batch,
            )
        held = contract.concurrency * contract.max_batch
        if held > MAX_MESSAGES_IN_FLIGHT:
            raise ContractError(
                "max_batch",
                f"must keep concurrency x max_batch ({contract.concurrency} x {contract.max_batch} = {held}) at most"
                f" {MAX_MESSAGES_IN_FLIGHT} messages held by one process",
                contract.max_batch,
            )
    check_int("batch_window_seconds", contract.batch_window_seconds, 0, MAX_BATCH_WINDOW_SECONDS)
    if contract.batch_window_seconds and contract.max_batch is None:
        raise ContractError(
            "batch_window_seconds", "is only for a batch handler (declare max_batch too)", contract.batch_window_seconds
        )
    if contract.batch_window_seconds >= contract.acceptable_latency_seconds:
        raise ContractError(
            "batch_window_seconds",
            f"must be less than acceptable_latency ({contract.acceptable_latency_seconds} s): every message of a"
            " batch that does not fill waits the whole window",
            contract.batch_window_seconds,
        )
    if contract.max_batch is not None and contract.asynchronous:
        raise ContractError(
            "max_batch",
            "is not supported for an async def handler yet (declare a def batch handler)",
            contract.max_batch,
        )
    if contract.receive_cycle_seconds > SQS_MAX_VISIBILITY_SECONDS:
        # A batch's message waits the window before its attempt, and SQS's 12 hours count from its receive.
        window = contract.batch_window_seconds
        raise ContractError(
            "max_duration_seconds",
            f"must be at most {MAX_DURATION_SECONDS - window} with a {window} s batch window (SQS's"
            f" {SQS_MAX_VISIBILITY_SECONDS} s visibility limit from the receive, less the {VISIBILITY_MARGIN_MAX_SECONDS}"
            " s margin and the window)",
            contract.max_duration_seconds,
        )


def _env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _to_env_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _from_env_value(key: str, raw: str, is_bool: bool) -> object:
    if is_bool:
        if raw not in ("true", "false"):
            raise ContractError(key, 'must be "true" or "false"', raw)
        return raw == "true"
    try:
        return int(raw)
    except ValueError:
        raise ContractError(key, "must be a whole number", raw) from None
