"""The numbers the worker contract is made of: AWS's limits, the contract's own bounds and its formulas.

:class:`consumer.contract.WorkerContract` checks a declaration against these bounds and derives every
timing with these formulas. Both halves import every name here from this module; standard library only, like the
contract (tests/unit/test_architecture.py).

The formulas (also in the README's configuration table, generated from
:data:`DERIVED_FORMULAS`):

* ``visibility_margin = clamp(ceil(max_duration / 10), 10, 300)``: room for the
  receive-to-start delay, the batched delete's flush interval and clock skew.
* ``attempt_timeout = max_duration + visibility_margin``: the longest one
  receive may hold a message; the heartbeat never extends past it.
* ``messages_per_call = max_batch`` for a batch handler (``@worker(max_batch=...)``), 1 otherwise; a batch
  handler's ``max_duration`` and ``average_duration`` are one call's, for the whole batch.
* ``visibility_timeout = min(attempt_timeout + batch_window, max_lease)`` with ``max_lease``
  900 s unless declared: short handlers are covered by the queue's visibility
  alone, so a heartbeat failure cannot cause a duplicate; longer handlers get a
  lease (15 min by default) that the heartbeat extends, so a crashed task's
  messages come back within the lease, not hours later. Declaring a shorter
  ``max_lease`` trades that heartbeat independence for a faster return of a
  crashed task's messages. A batch handler's message may wait up to ``batch_window`` (0 unless declared) in
  its batch before the call starts, so the lease covers that wait too.
* ``heartbeat_interval = clamp(visibility_timeout // 5, 1, 60)``; a message is
  extended when its lease has at most ``2 * heartbeat_interval`` left, so one
  failed heartbeat call still leaves a second chance before expiry.
* ``message_timeout = max_duration``.
* ``stop_timeout = min(120, max_duration + 5)`` unless declared; the consumer
  drains in-flight work for ``stop_timeout - 5`` s and uses the last 5 s to
  flush deletes and hand back what did not finish.
* ``retry_backoff(n) = min(retry_backoff_max, retry_backoff_base * 2 ** (n - 1))``
  after the n-th failed receive (the consumer adds jitter below this cap).
* ``redrive_max_receive_count = max_receive_count + 2``: the queue's redrive
  policy. The consumer itself moves a message that fails on its
  ``max_receive_count``-th receive to the DLQ, with the reason; SQS's silent
  redrive is only the backstop for receives the consumer never saw (a receive
  response lost on the network and retried, a process killed in a long poll),
  so up to two of those cannot dead-letter a message unseen and unexplained.
* ``retry_horizon = redrive_max_receive_count * (attempt_timeout + batch_window) +
  sum(retry_backoff(n) for n < max_receive_count)``: the longest a failing message can take to reach
  the DLQ; it must fit in the source retention or messages could expire
  instead of reaching the DLQ.
* ``dlq_age_alarm = (dlq_retention - source_retention) // 2``: for standard
  queues a message's expiry counts from its original enqueue time, but the DLQ's
  ``ApproximateAgeOfOldestMessage`` counts from the move, so a message can sit
  in the DLQ for as little as the retention gap; the alarm fires with at least
  half of that gap left, and the gap is at least two days, so the page comes at
  least a day before any DLQ message can expire (docs/alarms.md, the catalogue's
  backstop-move scenario).
  https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html
* ``backlog_age_alarm = acceptable_latency + sum(attempt_timeout + batch_window +
  retry_backoff(n) for n in 1..min(3, max_receive_count))``: SQS's age metric
  skips messages received three times or more, so a message being retried
  legitimately ages by at most three attempt cycles before it stops counting.
* ``scaling_target = max(1, acceptable_latency * concurrency * messages_per_call // average_duration)``
  messages of backlog per task (AWS's "acceptable backlog per task"): a batch handler clears ``max_batch``
  messages per call under a backlog.
* ``pollers = min(ceil(concurrency * messages_per_call / batch_size), MAX_POLLERS)`` receive loops per process:
  one per receive's worth of messages held, at most four. Four receive loops keep 256 slots of 200 ms handlers fed (1,280 messages a second, more
  than one process handles); more only add threads contending for the interpreter lock, and one loop per 10 slots
  (26 for 256) made a 256-slot consumer slower than a minimal loop of four receivers (docs/evidence/BENCHMARKS.md,
  peers).
* ``call_worst(client) = max_attempts * (connect_timeout + read_timeout) + sum(min(2 ** (n - 1), 20) + 5
  for n < max_attempts)``: the longest one call of a client the runtime builds can take (every attempt
  times out, and botocore's standard retry mode waits at most ``min(2 ** (n - 1), 20)`` s after the n-th,
  5 s more when the answer asks to retry after). The runtime builds its clients from :data:`SQS_CLIENT`
  and :data:`DYNAMODB_CLIENT` only (consumer/runtime/clients.py), so these bounds are the clients' own.
  https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html
* ``poll_stall = call_worst(sqs) + 10`` and ``heartbeat_stall = heartbeat_interval + 4 * agent_timeout + 10``:
  the liveness check (``python -m consumer health``) fails when a poller has not returned from a receive (or
  waited on purpose) for longer than a receive can take under the client's timeouts and retries (its read timeout
  covers the 20 s long poll), or the heartbeat has not progressed for longer than its interval plus the calls it
  waits on between two beats: the ECS agent's task protection (two calls a tick, each possibly waiting for another
  thread's call). Its lease extensions go through the acknowledger's queue and its idempotency lease renewals
  through threads of their own (``RENEWAL_THREADS``): it waits on neither, so a slow SQS or DynamoDB answer is
  never a stall; only a loop that stopped is.
* ``health_check_interval = clamp(min(poll_stall, heartbeat_stall) // 2, 5, 300)``: ECS runs the
  check this often (timeout 5 s, 3 retries), so a stalled loop is replaced within about
  ``stall + 3 * interval``.
* ``health_check_start_period = 60``: start-up (imports, configuration, the queue check) happens
  before the loops record anything; ECS ignores failed checks for this long.
  https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_HealthCheck.html
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# --- AWS limits (the one home of SQS's numbers; every other module imports them) --------------
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
SQS_MAX_VISIBILITY_SECONDS = 43_200  # 12 h, counted from the receive
SQS_MIN_RETENTION_SECONDS = 60
SQS_MAX_RETENTION_SECONDS = 1_209_600  # 14 days
#: Messages per ReceiveMessage, entries per SendMessageBatch / DeleteMessageBatch / ChangeMessageVisibilityBatch.
SQS_MAX_BATCH = 10
SQS_MAX_RECEIVE_COUNT = 1_000
SQS_MAX_MESSAGE_BYTES = 1_048_576  # body + attributes (1 MiB since August 2025)
SQS_MAX_MESSAGE_ATTRIBUTES = 10
SQS_MAX_BATCH_BYTES = 1_048_576  # SendMessageBatch: every entry's body and attributes together
SQS_MAX_DELAY_SECONDS = 900  # DelaySeconds: 15 min
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html
SQS_MAX_QUEUE_NAME_CHARS = 80  # ".fifo" included
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDefinition.html (stopTimeout)
FARGATE_MAX_STOP_TIMEOUT_SECONDS = 120
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html (WaitTimeSeconds)
SQS_MAX_WAIT_SECONDS = 20
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_HealthCheck.html (the CDK checks the same bounds)
ECS_HEALTH_CHECK_MIN_INTERVAL_SECONDS = 5
ECS_HEALTH_CHECK_MAX_INTERVAL_SECONDS = 300
ECS_HEALTH_CHECK_MAX_START_PERIOD_SECONDS = 300

# --- Policy constants (documented in the module docstring) ------------------
VISIBILITY_MARGIN_MIN_SECONDS = 10
VISIBILITY_MARGIN_MAX_SECONDS = 300
LEASE_CAP_SECONDS = 900
#: The smallest lease: twice the smallest extension threshold (2 x 1 s heartbeat), so an
#: extension sent at the threshold still has a second chance before the lease runs out.
MIN_LEASE_SECONDS = 4
HEARTBEAT_MAX_INTERVAL_SECONDS = 60
SHUTDOWN_FLUSH_SECONDS = 5
MIN_STOP_TIMEOUT_SECONDS = SHUTDOWN_FLUSH_SECONDS + 1
MIN_MAX_RECEIVE_COUNT = 2
MAX_CONCURRENCY = 256
#: An ``async def`` handler's concurrency is coroutines on one event loop, not threads: far more fit in a process.
MAX_ASYNC_CONCURRENCY = 4_096
#: A batch handler's largest batch (``max_batch``), and its longest window to fill one (``batch_window``), as
#: Lambda's SQS event source bounds the window (MaximumBatchingWindowInSeconds, 0..300 s).
#: https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html
MAX_BATCH = 1_000
MAX_BATCH_WINDOW_SECONDS = 300
#: Messages one process may hold at once (concurrency x max_batch): each is a message body in memory.
MAX_MESSAGES_IN_FLIGHT = 10_000
#: An event loop (``async def`` handlers) that has not run its beat for this long is blocked by a synchronous call
#: inside a coroutine: ``python -m consumer health`` fails and ECS replaces the task. A coroutine never holds the loop
#: for a second on purpose; 30 s is far past a garbage collection or a slow import, and well inside a page.
EVENT_LOOP_STALL_SECONDS = 30
#: Threads an async handler's event loop hands blocking calls to (idempotency claims, settlement: SQS and DynamoDB
#: calls of a few milliseconds), so a coroutine never waits on the network inside the loop.
ASYNC_EXECUTOR_THREADS = 32
#: Threads renewing idempotency leases at once (consumer/runtime/heartbeat.py, ``Renewals``): the heartbeat waits on
#: none of them, and a beat's renewals overlap their round trips.
RENEWAL_THREADS = 4
MAX_POLLERS = 4
#: Twice the day of warning the DLQ age page gives before the earliest expiry (the page comes half the gap after
#: a move; a message the redrive backstop moved can expire the gap after it).
MIN_RETENTION_GAP_SECONDS = 2 * 86_400
MAX_DURATION_SECONDS = SQS_MAX_VISIBILITY_SECONDS - VISIBILITY_MARGIN_MAX_SECONDS
AGE_METRIC_SKIPPED_AFTER_RECEIVES = 3
#: Room the source queue keeps below SQS's size limit for the reason attribute a move to the DLQ adds:
#: a message at the source's limit can then always be moved with its reason (the DLQ takes the full
#: limit). consumer.runtime.dead_letter keeps the reason attribute within it.
DLQ_REASON_HEADROOM_BYTES = 8_192
SOURCE_MAX_MESSAGE_BYTES = SQS_MAX_MESSAGE_BYTES - DLQ_REASON_HEADROOM_BYTES
#: Receives the queue's redrive policy allows beyond max_receive_count (see redrive_max_receive_count).
REDRIVE_BACKSTOP_RECEIVES = 2
#: Liveness (see poll_stall / heartbeat_stall above): room beyond a loop's own period before it counts as stalled.
LIVENESS_SLACK_SECONDS = 10
#: botocore's standard retry mode: the n-th retry waits at most min(2 ** (n - 1), 20) s (throttling's base 1 s;
#: other errors wait less), raised by at most 5 s by an x-amz-retry-after header (botocore/retries/standard.py).
BOTOCORE_MAX_BACKOFF_SECONDS = 20
BOTOCORE_RETRY_AFTER_EXTRA_SECONDS = 5
#: The ECS agent's task protection endpoint: each call's timeout (consumer.runtime.protection), and the calls a
#: heartbeat tick can wait on (busy/idle and refresh, each possibly behind another thread's call on its lock).
ECS_AGENT_TIMEOUT_SECONDS = 2
HEARTBEAT_AGENT_CALLS = 4


@dataclass(frozen=True, kw_only=True)
class ClientTimeouts:
    """One AWS client's timeouts and attempts: consumer/runtime/clients.py builds the client from it, and the
    liveness allowances are derived from :meth:`worst_case_seconds`, so the two cannot drift apart."""

    connect_seconds: int
    read_seconds: int
    max_attempts: int

    def worst_case_seconds(self) -> int:
        """The longest one call can take: every attempt times out, every retry waits its longest backoff."""
        backoff = sum(
            min(1 << (n - 1), BOTOCORE_MAX_BACKOFF_SECONDS) + BOTOCORE_RETRY_AFTER_EXTRA_SECONDS
            for n in range(1, self.max_attempts)
        )
        return self.max_attempts * (self.connect_seconds + self.read_seconds) + backoff


#: SQS: the read timeout is the longest long poll + 10 s, so a long poll never times out on our side.
SQS_CLIENT = ClientTimeouts(connect_seconds=5, read_seconds=SQS_MAX_WAIT_SECONDS + 10, max_attempts=3)
#: DynamoDB (the idempotency store): single-item calls answer in milliseconds; 10 s is a slow answer, not a long one.
DYNAMODB_CLIENT = ClientTimeouts(connect_seconds=5, read_seconds=10, max_attempts=3)
#: ECS runs ``python -m consumer health`` with this timeout (it starts in well under a second) and calls the
#: container unhealthy after this many failures in a row (ECS's bounds: 2..120 s, 1..10).
HEALTH_CHECK_TIMEOUT_SECONDS = 5
HEALTH_CHECK_RETRIES = 3
#: Start-up before the loops record progress: imports, configuration and the queue check (whose calls retry).
HEALTH_CHECK_START_PERIOD_SECONDS = 60

DAY = 86_400

DERIVED_FORMULAS: dict[str, str] = {
    "visibility_margin_seconds": "clamp(ceil(max_duration / 10), 10, 300)",
    "attempt_timeout_seconds": "max_duration + visibility_margin",
    "visibility_timeout_seconds": "min(attempt_timeout + batch_window, max_lease)",
    "heartbeat_interval_seconds": "clamp(visibility_timeout // 5, 1, 60)",
    "heartbeat_threshold_seconds": "2 * heartbeat_interval",
    "message_timeout_seconds": "max_duration",
    "drain_timeout_seconds": "stop_timeout - 5",
    "redrive_max_receive_count": "max_receive_count + 2",
    "retry_horizon_seconds": (
        "redrive_max_receive_count * (attempt_timeout + batch_window) + sum(retry_backoff(n) for n < max_receive_count)"
    ),
    "dlq_age_alarm_seconds": "(dlq_retention - source_retention) // 2",
    "backlog_age_alarm_seconds": (
        "acceptable_latency + sum(attempt_timeout + batch_window + retry_backoff(n)"
        " for n in 1..min(3, max_receive_count))"
    ),
    "scaling_target_backlog_per_task": (
        "max(1, acceptable_latency * concurrency * messages_per_call // average_duration)"
    ),
    "pollers": f"min(ceil(concurrency * messages_per_call / batch_size), {MAX_POLLERS})",
    "poll_stall_seconds": "call_worst(sqs) + 10 (call_worst: see consumer/limits.py)",
    "heartbeat_stall_seconds": "heartbeat_interval + 4 * agent_timeout + 10",
    "health_check_interval_seconds": "clamp(min(poll_stall, heartbeat_stall) // 2, 5, 300)",
    "health_check_start_period_seconds": "60 (start-up, before the loops record progress)",
}


class LivenessTimings:
    """The liveness allowances and the ECS health check's timing (``WorkerContract`` inherits them).

    Here rather than in the contract's class body, which stays under the architecture test's size limit;
    the formulas are :data:`DERIVED_FORMULAS`' ``poll_stall_seconds`` to ``health_check_start_period_seconds``.
    """

    @property
    def heartbeat_interval_seconds(self) -> int:
        raise NotImplementedError  # WorkerContract's

    @property
    def poll_stall_seconds(self) -> int:
        return SQS_CLIENT.worst_case_seconds() + LIVENESS_SLACK_SECONDS

    @property
    def heartbeat_stall_seconds(self) -> int:
        agent = HEARTBEAT_AGENT_CALLS * ECS_AGENT_TIMEOUT_SECONDS
        return self.heartbeat_interval_seconds + agent + LIVENESS_SLACK_SECONDS

    @property
    def health_check_interval_seconds(self) -> int:
        half = min(self.poll_stall_seconds, self.heartbeat_stall_seconds) // 2
        return max(ECS_HEALTH_CHECK_MIN_INTERVAL_SECONDS, min(half, ECS_HEALTH_CHECK_MAX_INTERVAL_SECONDS))

    @property
    def health_check_start_period_seconds(self) -> int:
        return min(HEALTH_CHECK_START_PERIOD_SECONDS, ECS_HEALTH_CHECK_MAX_START_PERIOD_SECONDS)


class HandlerShape:
    """What the handler's shape derives (``WorkerContract`` inherits them): messages per call and in flight, how long
    a receive holds a message, the pollers and the scaling target (:data:`DERIVED_FORMULAS`). Here rather than in the
    contract's class body, which stays under the architecture test's size limit."""

    concurrency: int
    batch_size: int
    max_batch: int | None
    batch_window_seconds: int
    acceptable_latency_seconds: int
    average_duration_seconds: int | None

    @property
    def attempt_timeout_seconds(self) -> int:
        raise NotImplementedError  # WorkerContract's

    @property
    def messages_per_call(self) -> int:
        """Messages one handler call takes: ``max_batch`` for a batch handler, else 1."""
        return self.max_batch or 1

    @property
    def messages_in_flight(self) -> int:
        """Messages one process holds at most (not counting the lookahead): ``concurrency * messages_per_call``."""
        return self.concurrency * self.messages_per_call

    @property
    def receive_cycle_seconds(self) -> int:
        """The longest one receive holds a message: its wait in a filling batch, then its attempt."""
        return self.attempt_timeout_seconds + self.batch_window_seconds

    @property
    def scaling_target_backlog_per_task(self) -> int:
        assert self.average_duration_seconds is not None  # resolved in WorkerContract.__post_init__
        return max(1, self.acceptable_latency_seconds * self.messages_in_flight // self.average_duration_seconds)

    @property
    def pollers(self) -> int:
        return min(math.ceil(self.messages_in_flight / self.batch_size), MAX_POLLERS)
