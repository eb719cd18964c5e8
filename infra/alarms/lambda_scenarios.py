"""The scenario catalogue of a lambda worker (``"target": "lambda"``): its event source mapping and function as
scripts of calls, invocations and throttles, with the goals its alarms must meet (as :mod:`infra.alarms.scenarios`
states the container's).

The mapping, as AWS documents it (:mod:`infra.alarms.lambda_model` holds the rules): it receives a batch of up to
``esm_batch_size`` messages and invokes the function with it, at most ``maximum_concurrency`` invocations at once; it
deletes the batch's messages the function does not list in its batchItemFailures; an invocation that ends in a
function error returns the whole batch after the visibility timeout, and SQS's redrive policy moves a message after
``redrive_max_receive_count`` receives. The function runs the container's runtime: a failing message is backed off
by a visibility change and listed, and moved to the DLQ by the worker itself on its ``max_receive_count``-th receive,
so a handler's failure is never a function error. Modelling choice: a long poll answers as soon as a message is
there, so at the usual rate each message is its own batch; a backlog fills whole batches.
"""

from __future__ import annotations

import heapq
import math

from consumer.lambda_target import LambdaTarget
from infra.alarms.events import scripted_event
from infra.alarms.lambda_model import Invocation
from infra.alarms.scenarios import IDLE_DLQ_PAGE_MINUTES, LATE_EVALUATION_MINUTES, USUAL_PER_MINUTE, Scenario
from infra.alarms.world import DAY, HOUR, MINUTE, PICKUP_SECONDS, Timeline, WorkerFacts, World

#: Seconds between a throttled invocation request and the mapping's retry of it (the docs say it backs off, not by
#: how much: reading), and how long a scenario's throttling lasts.
THROTTLE_RETRY_SECONDS = 20
THROTTLED_SECONDS = 15 * MINUTE
#: An invocation that fails at start (the function cannot load its configuration): seconds until Lambda reports it.
INIT_ERROR_SECONDS = 1.0
#: Times the usual rate of the backlog that holds the mapping at its MaximumConcurrency (for 30 minutes).
BACKLOG_FACTOR = 50
BACKLOG_MINUTES = 30
#: The mapping's long poll: an empty receive returns after this many seconds (SQS's longest wait).
LONG_POLL_SECONDS = 20
#: StalledNothingDeleted's evaluation: 5 one-minute periods (infra/queue_alarms.py STALLED_EVALUATION_MINUTES; not
#: imported, that module loads the CDK: tests/alarms/test_lambda_catalogue.py keeps them equal).
NOTHING_DELETED_MINUTES = 5


def _target(world: World) -> LambdaTarget:
    target = world.facts.target
    if target is None:
        raise ValueError(f"lambda scenario on {world.facts.source}: the worker is not on Lambda")
    return target


def _arrivals(start: float, end: float, per_minute: float) -> list[float]:
    step = 60.0 / per_minute
    return [start + index * step for index in range(math.ceil((end - start) / step))]


def mapping_runs(world: World, arrivals: list[float], *, outcome: str = "processed", after: float = 0.0) -> None:
    """The mapping over messages sent at ``arrivals``: each invocation takes the batch waiting when a slot of its
    ``maximum_concurrency`` frees (up to ``esm_batch_size``), runs ``rounds`` handler calls one after another, and
    ends with the mapping's delete of what succeeded (``processed``) or the worker's backoff of every message
    (``failing``: each message's path continues as a failing one). No receive before ``after`` (a mapping throttled
    until then)."""
    target = _target(world)
    facts = world.facts
    slots = [0.0] * (target.maximum_concurrency or target.max_tasks)
    heapq.heapify(slots)
    waiting = [(sent, world.send(sent)) for sent in sorted(arrivals)]
    index = 0
    while index < len(waiting):
        free = heapq.heappop(slots)
        at = max(free, waiting[index][0] + PICKUP_SECONDS, after)
        batch: list[str] = []
        while index < len(waiting) and waiting[index][0] + PICKUP_SECONDS <= at and len(batch) < target.esm_batch_size:
            batch.append(waiting[index][1])
            index += 1
        seconds = target.rounds_for(len(batch)) * facts.duration
        invoke(world, at, batch, seconds, outcome=outcome)
        heapq.heappush(slots, at + seconds)


def invoke(world: World, at: float, batch: list[str], seconds: float, *, outcome: str = "processed") -> None:
    """One invocation of ``batch`` received at ``at``: the receives, the invocation, then each message settled at its
    end as ``outcome`` says (``processed``: deleted by the mapping; ``failing``: backed off and listed, moved by the
    worker on its last allowed receive; ``poisoned``: moved by the worker at once, then deleted by the mapping)."""
    end = at + seconds
    for message_id in batch:
        _receive(world, at, message_id)
    world.invocations.append(Invocation(at, seconds))
    world.count(end, "received", len(batch))
    for message_id in batch:
        if outcome == "processed":
            world.delete(end, message_id)
            world.count(end, "processed")
        elif outcome == "poisoned":
            world.dead_letter(end, message_id)
            world.count(end, "poisoned")
        else:
            _failing_after(world, end, message_id)


def _receive(world: World, at: float, message_id: str) -> None:
    """The mapping's receive of a source message (the worker counts it at the invocation's end, not here)."""
    facts = world.facts
    world.events.append(scripted_event(at, facts.source, "receive", message_id, facts.visibility_seconds))


def lambda_skipped(scenario: Scenario, facts: WorkerFacts) -> str | None:
    """Why a lambda scenario does not run on this worker (None: it runs)."""
    if scenario.name == "lambda-at-maximum" and facts.target is not None:
        target = facts.target
        if target.maximum_concurrency is None:
            return "provisioned pollers: the mapping sets no MaximumConcurrency, so there is no MappingAtMaximum"
        capacity = target.maximum_concurrency * target.esm_batch_size * 60 / (target.rounds * facts.duration)
        if USUAL_PER_MINUTE * BACKLOG_FACTOR <= capacity:
            return (
                f"its mapping clears {capacity:,.0f} messages a minute at its maximum, more than the scenario's backlog"
                f" of {USUAL_PER_MINUTE * BACKLOG_FACTOR:,.0f}: the mapping never reaches its maximum there"
            )
    return None


def _failing_after(world: World, end: float, message_id: str) -> None:
    """A message the handler fails on every receive, its first invocation ended at ``end``: the worker backs it off
    and lists it; each later receive is an invocation of its own; on the last allowed one the worker moves it."""
    contract = world.facts.contract
    at = end
    for receive_count in range(1, contract.max_receive_count + 1):
        world.count(at, "failed")
        if receive_count == contract.max_receive_count:
            world.dead_letter(at, message_id)
            return
        world.release(at, message_id, contract.retry_backoff_seconds(receive_count))
        at += contract.retry_backoff_seconds(receive_count)
        _receive(world, at, message_id)
        world.invocations.append(Invocation(at, world.facts.duration))
        world.count(at + world.facts.duration, "received")
        at += world.facts.duration


def lambda_steady(world: World) -> Timeline:
    mapping_runs(world, _arrivals(0, 2 * HOUR, USUAL_PER_MINUTE))
    return Timeline(onset=0, end=2 * HOUR)


def lambda_idle(world: World) -> Timeline:
    """Nothing sent for three hours, the DLQ idle for eight before: no invocation, so no Lambda datapoint. The
    mapping's pollers keep long-polling the source (an empty receive is an action that keeps a queue active, so SQS
    publishes its zeros: rule ``sqs-idle``)."""
    facts = world.facts
    at = 0.0
    while at < 3 * HOUR:
        world.call(at)
        at += LONG_POLL_SECONDS
    return Timeline(onset=0, end=3 * HOUR, idle_since={facts.dlq: -8 * HOUR})


def lambda_fails_all(world: World) -> Timeline:
    facts = world.facts
    onset = 30 * MINUTE
    end = onset + facts.contract.retry_horizon_seconds + HOUR
    mapping_runs(world, _arrivals(0, onset, USUAL_PER_MINUTE))
    mapping_runs(world, _arrivals(onset, end - 30 * MINUTE, USUAL_PER_MINUTE), outcome="failing")
    return Timeline(onset=onset, end=end, idle_since={facts.dlq: -DAY})


def _fails_all_bound(facts: WorkerFacts) -> float:
    """lambda-fails-all's bound, minutes: the worker's first move to the DLQ (every backoff and receive of the first
    failing message), then the 2 minutes a poison message into an active DLQ is allowed."""
    contract = facts.contract
    backoffs = sum(contract.retry_backoff_seconds(n) for n in range(1, contract.max_receive_count))
    return (PICKUP_SECONDS + backoffs + contract.max_receive_count * facts.duration) / 60 + 2


def lambda_poison_burst(world: World) -> Timeline:
    """Twenty poison messages in a minute into a DLQ idle for days: the worker moves each at once."""
    facts = world.facts
    onset = 30 * MINUTE
    mapping_runs(world, _arrivals(0, 2 * HOUR, USUAL_PER_MINUTE))
    mapping_runs(world, _arrivals(onset, onset + MINUTE, 20), outcome="poisoned")
    return Timeline(onset=onset, end=2 * HOUR, idle_since={facts.dlq: -3 * DAY})


def lambda_function_errors(world: World) -> Timeline:
    """A deploy leaves the function unable to start (a variable it needs, its handler's import): from the onset every
    invocation ends in a function error at once; each batch returns after the visibility timeout and is received
    again, until SQS's redrive policy moves it to the DLQ."""
    facts = world.facts
    target = _target(world)
    onset = 30 * MINUTE
    end = onset + HOUR
    mapping_runs(world, _arrivals(0, onset, USUAL_PER_MINUTE))
    for sent in _arrivals(onset, end, USUAL_PER_MINUTE):
        message_id = world.send(sent)
        at = sent + PICKUP_SECONDS
        for _ in range(target.redrive_max_receive_count):
            if at >= end:
                break
            _receive(world, at, message_id)  # the function fails before its runtime counts anything
            world.invocations.append(Invocation(at, INIT_ERROR_SECONDS, error=True))
            at += facts.visibility_seconds + PICKUP_SECONDS  # visible again, then the mapping's next poll
        else:
            world.send(at, facts.dlq, by="redrive", enqueued=sent)
    return Timeline(onset=onset, end=end)


def lambda_throttled(world: World) -> Timeline:
    """The account's concurrency is spent for 15 minutes from the onset: every invocation request of the mapping is
    throttled and retried until it runs (the messages wait, received, within their visibility timeout)."""
    onset = 30 * MINUTE
    back = onset + THROTTLED_SECONDS
    mapping_runs(world, _arrivals(0, onset, USUAL_PER_MINUTE))
    held = _arrivals(onset, back, USUAL_PER_MINUTE)
    for sent in held:
        at = sent + PICKUP_SECONDS
        while at < back:
            world.throttles.append(at)
            at += THROTTLE_RETRY_SECONDS
    mapping_runs(world, held, after=back)
    mapping_runs(world, _arrivals(back, back + HOUR, USUAL_PER_MINUTE))
    return Timeline(onset=onset, end=back + HOUR)


def lambda_at_maximum(world: World) -> Timeline:
    """A backlog: fifty times the usual rate for 30 minutes, more than the mapping's MaximumConcurrency processes."""
    onset = 30 * MINUTE
    end = onset + 3 * HOUR
    arrivals = _arrivals(0, onset, USUAL_PER_MINUTE)
    arrivals += _arrivals(onset, onset + BACKLOG_MINUTES * MINUTE, USUAL_PER_MINUTE * BACKLOG_FACTOR)
    arrivals += _arrivals(onset + BACKLOG_MINUTES * MINUTE, end, USUAL_PER_MINUTE)
    mapping_runs(world, arrivals)
    return Timeline(onset=onset, end=end)


def lambda_mapping_stopped(world: World) -> Timeline:
    """The mapping stops polling at the onset (disabled, or its role refused ReceiveMessage): messages wait, nothing
    is invoked, so the function publishes nothing."""
    onset = 30 * MINUTE
    mapping_runs(world, _arrivals(0, onset, USUAL_PER_MINUTE))
    for sent in _arrivals(onset, onset + HOUR, USUAL_PER_MINUTE):
        world.send(sent)
    return Timeline(onset=onset, end=onset + HOUR)


def _stalled_bound(facts: WorkerFacts) -> float:
    """ConsumerStalled's bound on a lambda worker, minutes: the later of its two inputs (the acceptable latency and
    the late backlog's evaluation minutes; nothing deleted for its evaluation minutes), and a minute for the
    datapoint's own minute (no task input to page sooner)."""
    late = facts.contract.acceptable_latency_seconds / 60 + LATE_EVALUATION_MINUTES
    return max(late, NOTHING_DELETED_MINUTES) + 1


STALLED_MAY = ("ConsumerStalled", "BacklogAge")
#: A function that cannot start fails each batch whole: once a message's receives reach the redrive policy's maximum,
#: SQS moves it to the DLQ itself, and the DLQ's alarms are right to page then (within the hour on a worker with a
#: short visibility, never on one whose receives outlast the scenario).
REDRIVEN_MAY = (*STALLED_MAY, "DlqDepth", "DlqNewArrivals")

LAMBDA_CATALOGUE: tuple[Scenario, ...] = (
    Scenario("lambda-steady", "steady traffic through the mapping, nothing wrong (2 h)", "modeled", False, lambda_steady),
    Scenario(
        "lambda-idle", "nothing sent for 3 h, the mapping polling an empty source, the DLQ idle", "modeled", False, lambda_idle,
    ),
    Scenario(
        "lambda-fails-all", "the handler fails every message (each listed in batchItemFailures)", "modeled", True,
        lambda_fails_all, ("DlqDepth",), None, ("DlqNewArrivals", *STALLED_MAY), bound=_fails_all_bound,
        tickets=("MappingAtMaximum",),
    ),
    Scenario(
        "lambda-poison-burst", "twenty poison messages in a minute into a DLQ idle for days", "modeled", True,
        lambda_poison_burst, ("DlqDepth",), IDLE_DLQ_PAGE_MINUTES, ("DlqNewArrivals",),
    ),
    Scenario(
        "lambda-function-errors", "every invocation ends in a function error (a deploy the function cannot start)",
        "modeled", True, lambda_function_errors, ("FunctionErrors",), 2, REDRIVEN_MAY,
    ),
    Scenario(
        "lambda-throttled", "the account's concurrency spent for 15 minutes: every invocation throttled", "modeled",
        True, lambda_throttled, ("FunctionThrottles",), 4, STALLED_MAY,
    ),
    Scenario(
        "lambda-at-maximum", "a backlog of fifty times the usual rate for 30 minutes", "modeled", True,
        lambda_at_maximum, ("MappingAtMaximum",), 17, ("BacklogAge",),
    ),
    Scenario(
        "lambda-mapping-stopped", "the mapping stops polling (disabled, or its role refused)", "modeled", True,
        lambda_mapping_stopped, ("ConsumerStalled",), None, ("BacklogAge",), bound=_stalled_bound,
    ),
)  # fmt: skip
