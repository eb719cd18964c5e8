"""A worker on AWS Lambda: the function's and its SQS event source mapping's settings, from the same contract.

Beside the ECS service, a worker can run as a Lambda function that an SQS event source mapping (ESM) invokes with
batches. :class:`LambdaTarget` derives every Lambda setting from the handler's
:class:`~consumer.contract.WorkerContract` and refuses, with one :class:`~consumer.errors.ContractError`, what Lambda
cannot honour. infra/ and the Lambda entry point both import it; standard library only, like the contract
(tests/unit/test_architecture.py).

The formulas (:data:`LAMBDA_DERIVED_FORMULAS`):

* ``rounds``: handler calls one after another in an invocation: 1 for a batch handler (one call takes the batch);
  ``ceil(batch_size / min(concurrency, batch_size))`` for a one-message handler (``async def`` too) on a standard
  queue; ``batch_size`` on a FIFO queue, whose batch may be one message group, run in order.
* ``esm_batch_size`` (BatchSize) is ``max_batch`` for a batch handler, else ``batch_size``; ``batching_window``
  (MaximumBatchingWindowInSeconds) is ``batch_window`` for a batch handler, else 0. BatchSize is at most 10,000
  (standard) or 10 (FIFO); above 10 it needs a window of at least 1 s.
  https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html
  https://docs.aws.amazon.com/lambda/latest/api/API_CreateEventSourceMapping.html
* ``rate_wait = ceil(esm_batch_size / max_rate)`` for a handler declared with ``max_rate``, else 0.
* ``function_timeout = rounds * max_duration + visibility_margin + rate_wait + 5``, the last 5 s
  (``SHUTDOWN_FLUSH_SECONDS``) kept for DLQ sends, visibility changes, completions and metrics. At most 900 s:
  Lambda stops the function there, and an ESM cannot extend a message's visibility as the ECS heartbeat does.
  https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html
* ``queue_visibility = min(43200, max(6 * function_timeout, function_timeout + batching_window))``, the source
  queue's visibility: AWS asks for six times the function timeout (room to retry a throttled batch) and refuses an
  ESM whose function timeout exceeds it. https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
* ``per_invocation_parallelism``: ``min(concurrency, esm_batch_size)`` for a one-message handler, 1 for a batch one;
  ``maximum_concurrency = max(2, ceil(max_tasks * concurrency / per_invocation_parallelism))`` (ScalingConfig,
  2..1000): the downstream sees at most the ECS fleet's handler calls at ``max_tasks``, but that a fleet of one
  single-call task is raised to AWS's minimum, 2. None with ``provisioned_pollers`` (minimum 2..200, maximum
  2..2000). https://docs.aws.amazon.com/lambda/latest/api/API_ScalingConfig.html
  https://docs.aws.amazon.com/lambda/latest/api/API_ProvisionedPollerConfig.html
* ``redrive_max_receive_count``: the contract's; ``max_receive_count`` must be at least 3, as throttled invocations
  and the batching window spend receives the function never sees (AWS recommends 5: services-sqs-configure.html).
* A declared ``max_lease`` is refused: its promise (a crashed task's messages back within the lease) cannot hold
  where the lease is the queue's visibility, at least six times the function timeout.
* ``retry_horizon = redrive_max_receive_count * queue_visibility + sum(retry_backoff(n) for n < max_receive_count)``
  must fit in the source retention, as the contract's own does.
* Memory: the worker's ``memory_mib``, 128..10,240 MiB.
  https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html

Example::

    >>> from consumer.contract import WorkerContract
    >>> contract = WorkerContract(max_duration_seconds=90, concurrency=8)
    >>> target = LambdaTarget(contract=contract, max_tasks=4, memory_mib=512)
    >>> target.rounds, target.function_timeout_seconds, target.queue_visibility_seconds, target.maximum_concurrency
    (2, 195, 1170, 4)
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

from consumer.contract import WorkerContract, check_int
from consumer.errors import ContractError
from consumer.limits import LEASE_CAP_SECONDS, SHUTDOWN_FLUSH_SECONDS, SQS_MAX_VISIBILITY_SECONDS
from consumer.queue_attributes import QueuePairAttributes

# --- Lambda's limits (links in the module docstring) ---------------------------------------------------------------
LAMBDA_MAX_TIMEOUT_SECONDS = 900
LAMBDA_MIN_MEMORY_MIB = 128
LAMBDA_MAX_MEMORY_MIB = 10_240
ESM_MIN_MAXIMUM_CONCURRENCY = 2
ESM_MAX_MAXIMUM_CONCURRENCY = 1_000
ESM_MAX_BATCH_SIZE_STANDARD = 10_000
ESM_MAX_BATCH_SIZE_FIFO = 10
ESM_MAX_WINDOW_SECONDS = 300
#: Above this BatchSize the mapping requires MaximumBatchingWindowInSeconds >= 1.
ESM_UNBATCHED_MAX_BATCH_SIZE = 10
ESM_MIN_MINIMUM_POLLERS, ESM_MAX_MINIMUM_POLLERS = 2, 200
ESM_MIN_MAXIMUM_POLLERS, ESM_MAX_MAXIMUM_POLLERS = 2, 2_000
RECOMMENDED_VISIBILITY_FACTOR = 6
# --- Policy --------------------------------------------------------------------------------------------------------
INVOCATION_FLUSH_SECONDS = SHUTDOWN_FLUSH_SECONDS
MIN_LAMBDA_MAX_RECEIVE_COUNT = 3

LAMBDA_DERIVED_FORMULAS: dict[str, str] = {
    "rounds": "1 (batch handler); ceil(batch_size / min(concurrency, batch_size)) (standard); batch_size (FIFO)",
    "esm_batch_size": "max_batch (batch handler); batch_size",
    "batching_window_seconds": "batch_window (batch handler); 0",
    "rate_wait_seconds": "ceil(esm_batch_size / max_rate) (max_rate declared); 0",
    "function_timeout_seconds": "rounds * max_duration + visibility_margin + rate_wait + 5",
    "queue_visibility_seconds": "min(43200, max(6 * function_timeout, function_timeout + batching_window))",
    "per_invocation_parallelism": "min(concurrency, esm_batch_size) (one-message handler); 1 (batch handler)",
    "maximum_concurrency": "max(2, ceil(max_tasks * concurrency / per_invocation_parallelism)); none with pollers",
    "redrive_max_receive_count": "max_receive_count + 2",
    "retry_horizon_seconds": (
        "redrive_max_receive_count * queue_visibility + sum(retry_backoff(n) for n < max_receive_count)"
    ),
}


@dataclass(frozen=True, kw_only=True)
class LambdaTarget:
    """A worker's Lambda function and SQS event source mapping, derived from its contract; validated on creation."""

    #: The handler's declaration (``contract_of(handler)``).
    contract: WorkerContract
    #: The worker's ``max_tasks`` (cdk.json): the ECS fleet whose concurrent handler calls the mapping keeps to.
    max_tasks: int
    #: The worker's ``memory_mib``: the function's memory.
    memory_mib: int
    #: ``(minimum, maximum)`` event pollers (provisioned mode); then the mapping sets no MaximumConcurrency.
    #: A list is taken as the pair it spells (cdk.json has no tuples).
    provisioned_pollers: tuple[int, int] | None = None
    #: The handler's ``max_rate`` (``max_rate_of(handler)``, beside the contract): starts per second, or None.
    max_rate: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.contract, WorkerContract):
            raise ContractError(
                "contract", "must be a WorkerContract (the handler's @worker declaration)", self.contract
            )
        _check_whole_at_least_one("max_tasks", self.max_tasks)
        check_int("memory_mib", self.memory_mib, LAMBDA_MIN_MEMORY_MIB, LAMBDA_MAX_MEMORY_MIB, " (Lambda's memory)")
        if self.max_rate is not None and (
            isinstance(self.max_rate, bool) or not isinstance(self.max_rate, int | float) or not self.max_rate > 0
        ):
            raise ContractError(
                "max_rate", "must be a positive number of handler starts per second, or None", self.max_rate
            )
        if isinstance(self.provisioned_pollers, list):
            object.__setattr__(self, "provisioned_pollers", tuple(self.provisioned_pollers))
        _check_pollers(self.provisioned_pollers)
        _check_batch(self)
        _check_receives_and_lease(self)
        _check_function_timeout(self)
        if self.retry_horizon_seconds >= self.contract.source_retention_seconds:
            raise ContractError(
                "source_retention_seconds",
                f"must exceed the Lambda target's retry horizon ({self.retry_horizon_seconds} s ="
                " redrive_max_receive_count x queue_visibility + backoffs), or a failing message could expire before"
                " it reaches the DLQ",
                self.contract.source_retention_seconds,
            )
        if self.maximum_concurrency is not None and self.maximum_concurrency > ESM_MAX_MAXIMUM_CONCURRENCY:
            raise ContractError(
                "max_tasks",
                "must keep maximum_concurrency = ceil(max_tasks x concurrency / per_invocation_parallelism) ="
                f" ceil({self.max_tasks} x {self.contract.concurrency} / {self.per_invocation_parallelism}) ="
                f" {self.maximum_concurrency} at most {ESM_MAX_MAXIMUM_CONCURRENCY}, the event source mapping's"
                " MaximumConcurrency limit",
                self.max_tasks,
            )

    # --- derived values ---------------------------------------------------
    @property
    def is_batch_handler(self) -> bool:
        return self.contract.max_batch is not None

    @property
    def rounds(self) -> int:
        return self.rounds_for(self.esm_batch_size)

    def rounds_for(self, messages: int) -> int:
        """Handler calls one after another in an invocation of ``messages`` records (``rounds`` at a full batch): 1
        for a batch handler; ``messages`` on a FIFO queue; else ``ceil(messages / min(concurrency, messages))``."""
        if self.is_batch_handler:
            return 1
        if self.contract.fifo:
            return messages
        return math.ceil(messages / min(self.contract.concurrency, messages))

    @property
    def esm_batch_size(self) -> int:
        return self.contract.max_batch or self.contract.batch_size

    @property
    def batching_window_seconds(self) -> int:
        return self.contract.batch_window_seconds if self.is_batch_handler else 0

    @property
    def rate_wait_seconds(self) -> int:
        if self.max_rate is None:
            return 0
        # From the rate as written: 9 / 0.072 is 125 s, where the float quotient (125.00000000000001) rounds up to 126.
        return math.ceil(Fraction(self.esm_batch_size) / Fraction(str(self.max_rate)))

    @property
    def function_timeout_seconds(self) -> int:
        return _function_timeout(self, self.contract.max_duration_seconds, self.contract.visibility_margin_seconds)

    @property
    def queue_visibility_seconds(self) -> int:
        timeout = self.function_timeout_seconds
        recommended = max(RECOMMENDED_VISIBILITY_FACTOR * timeout, timeout + self.batching_window_seconds)
        return min(SQS_MAX_VISIBILITY_SECONDS, recommended)

    @property
    def per_invocation_parallelism(self) -> int:
        return 1 if self.is_batch_handler else min(self.contract.concurrency, self.esm_batch_size)

    @property
    def maximum_concurrency(self) -> int | None:
        if self.provisioned_pollers is not None:
            return None
        fleet_calls = self.max_tasks * self.contract.concurrency
        return max(ESM_MIN_MAXIMUM_CONCURRENCY, math.ceil(fleet_calls / self.per_invocation_parallelism))

    @property
    def longest_max_duration_seconds(self) -> int:
        """The longest ``max_duration`` this shape (rounds, rate wait) fits in Lambda's 900 s function timeout."""
        return _longest_max_duration(self)

    @property
    def redrive_max_receive_count(self) -> int:
        return self.contract.redrive_max_receive_count

    @property
    def retry_horizon_seconds(self) -> int:
        backoffs = sum(self.contract.retry_backoff_seconds(n) for n in range(1, self.contract.max_receive_count))
        return self.redrive_max_receive_count * self.queue_visibility_seconds + backoffs

    def queue_attributes(self) -> QueuePairAttributes:
        """The contract's queue pair, with the source's visibility timeout the Lambda target's queue visibility."""
        pair = self.contract.queue_attributes()
        source = dataclasses.replace(pair.source, visibility_timeout_seconds=self.queue_visibility_seconds)
        return dataclasses.replace(pair, source=source)

    def derived(self) -> dict[str, int]:
        """Every derived value by name (the keys of :data:`LAMBDA_DERIVED_FORMULAS`); ``maximum_concurrency`` is left
        out when provisioned pollers are declared (the mapping sets none)."""
        values = {name: getattr(self, name) for name in LAMBDA_DERIVED_FORMULAS}
        return {name: value for name, value in values.items() if value is not None}


def _function_timeout(target: LambdaTarget, max_duration: int, margin: int) -> int:
    return target.rounds * max_duration + margin + target.rate_wait_seconds + INVOCATION_FLUSH_SECONDS


def _check_whole_at_least_one(parameter: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(parameter, "must be a whole number", value)
    if value < 1:
        raise ContractError(parameter, "must be at least 1", value)


def _check_pollers(pollers: object) -> None:
    if pollers is None:
        return
    if not (
        isinstance(pollers, tuple)
        and len(pollers) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in pollers)
    ):
        raise ContractError(
            "provisioned_pollers", "must be a (minimum, maximum) pair of whole numbers, or None", pollers
        )
    minimum, maximum = pollers
    if not ESM_MIN_MINIMUM_POLLERS <= minimum <= ESM_MAX_MINIMUM_POLLERS:
        rule = f"must have a minimum between {ESM_MIN_MINIMUM_POLLERS} and {ESM_MAX_MINIMUM_POLLERS} (MinimumPollers)"
        raise ContractError("provisioned_pollers", rule, pollers)
    if not ESM_MIN_MAXIMUM_POLLERS <= maximum <= ESM_MAX_MAXIMUM_POLLERS:
        rule = f"must have a maximum between {ESM_MIN_MAXIMUM_POLLERS} and {ESM_MAX_MAXIMUM_POLLERS} (MaximumPollers)"
        raise ContractError("provisioned_pollers", rule, pollers)
    if minimum > maximum:
        raise ContractError("provisioned_pollers", f"must have a minimum ({minimum}) at most its maximum", pollers)


def _check_batch(target: LambdaTarget) -> None:
    """The mapping's BatchSize within its queue type's limit, and a window for a batch above 10 messages."""
    size = target.esm_batch_size
    parameter = "max_batch" if target.is_batch_handler else "batch_size"
    limit, kind = (
        (ESM_MAX_BATCH_SIZE_FIFO, "FIFO") if target.contract.fifo else (ESM_MAX_BATCH_SIZE_STANDARD, "standard")
    )
    if size > limit:
        raise ContractError(parameter, f"must be at most {limit} for a {kind} queue's event source mapping", size)
    if size > ESM_UNBATCHED_MAX_BATCH_SIZE and target.batching_window_seconds == 0:
        raise ContractError(
            "batch_window_seconds",
            f"must be at least 1 on Lambda for a batch of more than {ESM_UNBATCHED_MAX_BATCH_SIZE} messages (max_batch"
            f" {size}): the event source mapping requires MaximumBatchingWindowInSeconds >= 1 when BatchSize >"
            f" {ESM_UNBATCHED_MAX_BATCH_SIZE}",
            target.batching_window_seconds,
        )


def _check_receives_and_lease(target: LambdaTarget) -> None:
    contract = target.contract
    if contract.max_receive_count < MIN_LAMBDA_MAX_RECEIVE_COUNT:
        raise ContractError(
            "max_receive_count",
            f"must be at least {MIN_LAMBDA_MAX_RECEIVE_COUNT} on Lambda: throttled invocations and the batching window"
            " spend receives the function never sees (AWS recommends at least 5 on a Lambda source)",
            contract.max_receive_count,
        )
    if contract.max_lease_seconds != LEASE_CAP_SECONDS:
        raise ContractError(
            "max_lease_seconds",
            f"must be left at its default ({LEASE_CAP_SECONDS}) on Lambda: its promise, a crashed task's messages back"
            f" within the lease, cannot hold where the lease is the queue's visibility ({target.queue_visibility_seconds}"
            f" s here), at least {RECOMMENDED_VISIBILITY_FACTOR} x the function timeout",
            contract.max_lease_seconds,
        )


def _check_function_timeout(target: LambdaTarget) -> None:
    """The invocation fits in Lambda's 900 s; if not, name the longest max_duration that would (or the rate)."""
    if target.function_timeout_seconds <= LAMBDA_MAX_TIMEOUT_SECONDS:
        return
    largest = _longest_max_duration(target)
    if largest < 1:
        raise ContractError(
            "max_rate",
            f"must start an invocation's batch (esm_batch_size {target.esm_batch_size}) within Lambda's"
            f" {LAMBDA_MAX_TIMEOUT_SECONDS} s function timeout, which even a 1 s max_duration exceeds:"
            f" {_timeout_for(target, 1)[1]}",
            target.max_rate,
        )
    hint = ""
    if target.rounds > 1:
        lower = "a lower batch_size" if target.contract.fifo else "a lower batch_size or a higher concurrency"
        hint = f" ({lower} means fewer rounds, and room for a longer max_duration)"
    raise ContractError(
        "max_duration_seconds",
        f"must be at most {largest} to target Lambda with this shape: its function timeout,"
        f" {_timeout_for(target, target.contract.max_duration_seconds)[1]}, is more than Lambda's"
        f" {LAMBDA_MAX_TIMEOUT_SECONDS} s; Lambda stops the function there, and an event source mapping cannot extend"
        f" a message's visibility as the ECS consumer's heartbeat does{hint}",
        target.contract.max_duration_seconds,
    )


def _longest_max_duration(target: LambdaTarget) -> int:
    """The last max_duration whose function timeout fits in Lambda's (0: not even 1 s does)."""
    fits = range(1, LAMBDA_MAX_TIMEOUT_SECONDS + 1)  # the timeout grows with max_duration: bisect for the last fit
    return bisect.bisect_right(fits, LAMBDA_MAX_TIMEOUT_SECONDS, key=lambda d: _timeout_for(target, d)[0])


def _timeout_for(target: LambdaTarget, max_duration: int) -> tuple[int, str]:
    """The function timeout ``target`` would need with ``max_duration`` (and the contract's margin for it), spelled."""
    margin = WorkerContract(max_duration_seconds=max_duration).visibility_margin_seconds
    timeout = _function_timeout(target, max_duration, margin)
    return timeout, (
        f"rounds {target.rounds} x max_duration {max_duration} + visibility_margin {margin} + rate_wait"
        f" {target.rate_wait_seconds} + flush {INVOCATION_FLUSH_SECONDS} = {timeout} s"
    )
