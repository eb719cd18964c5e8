"""docs/targets.md's tables, ECS or Lambda for each worker of one synthesized environment:
``python -m consumer local targets --environment prod`` (after ``python -m infra.report`` or ``make run`` wrote
``cdk.out``).

For each worker: what a month at rest costs on each target, what a million messages cost at steady rates (the
month at that rate over its messages: the tasks, pollers and idle polls the rate keeps, spread over its messages), the
crossover (:func:`consumer.local.targets.crossover`), then the limits: the longest ``max_duration``, latency,
scaling, how soon a crashed attempt's messages return, and what each target cannot do. Nothing here is measured: a
busy queue's SQS requests are modeled (:class:`Modeled`), as no demo run measured them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from consumer.lambda_target import (
    ESM_MAX_BATCH_SIZE_FIFO,
    ESM_MAX_MAXIMUM_CONCURRENCY,
    LAMBDA_MAX_TIMEOUT_SECONDS,
    MIN_LAMBDA_MAX_RECEIVE_COUNT,
)
from consumer.limits import MAX_DURATION_SECONDS, SQS_MAX_BATCH
from consumer.local.bill import DEFAULT_MESSAGE_BYTES, MILLION, Usage, estimate, load_environments
from consumer.local.lambda_bill import POLLER_CONCURRENT_INVOKES, LambdaCost, NotOnLambda
from consumer.local.prices import PRICES, PriceTable
from consumer.local.targets import SECONDS_PER_MONTH, EcsCurve, LambdaCurve, TargetComparison, compare

#: The rates the cost table prices, messages a second.
RATES = (1, 10, 100, 1000)
#: On-demand polling adds up to this many concurrent invocations a minute (services-sqs-scaling.html).
ON_DEMAND_SCALING_PER_MINUTE = 300
#: Provisioned pollers scale concurrency by up to this many a minute (services-sqs-scaling.html).
PROVISIONED_SCALING_PER_MINUTE = 1000


@dataclass(frozen=True)
class Modeled:
    """A busy queue's SQS side where no run measured it: a receive of 10 and a DeleteMessageBatch of 10 per 10
    messages, a 1 KiB body (the demo measures the consumers' own: ``make run``'s report)."""

    def usage(self, handler: str) -> Usage:
        return Usage(2 / SQS_MAX_BATCH, "modeled", DEFAULT_MESSAGE_BYTES, "default")


def markdown(cdk_out: Path, environment: str, prices: PriceTable = PRICES) -> str:
    """Both tables for each worker of ``environment``'s stack in ``cdk_out``."""
    plans = [plan for plan in load_environments(cdk_out) if plan.environment == environment]
    if not plans:
        raise ValueError(f'"environment" must name a stack in {cdk_out}: {environment}')
    bill = estimate(plans, prices, Modeled())
    return "\n".join(costs_table(c, prices) + "\n" + limits_table(c) for c in compare(bill))


def costs_table(comparison: TargetComparison, prices: PriceTable, rates: Sequence[int] = RATES) -> str:
    """A month at rest, a million messages at each of ``rates`` and the crossover, on each target."""
    cost, on_lambda = comparison.ecs, comparison.on_lambda
    plan = cost.plan
    title = (
        f"**{cost.environment} / {plan.worker}** (`{plan.handler}`): {plan.cpu / 1024:g} vCPU and {plan.memory_mib} MiB"
        f" on {plan.architecture}, {plan.min_tasks}..{plan.max_tasks} tasks"
    )
    if isinstance(on_lambda, NotOnLambda):
        return f"{title}: not on Lambda: {on_lambda.reason}\n"
    ecs = EcsCurve(cost, prices)
    curves = [LambdaCurve(on_lambda, invocations, prices) for invocations in (on_lambda.full, on_lambda.single)]
    limit = _concurrency_limit(on_lambda)
    rows = [
        ["", "ECS (Fargate)", *(f"Lambda, {_per_invocation(curve)}" for curve in curves)],
        ["---"] * 4,
        [
            "a month at rest",
            f"${ecs.month(0):,.2f} ({_tasks(plan.min_tasks)})",
            *(f"${curve.month(0):,.2f} ({on_lambda.idle_pollers} pollers' long polls)" for curve in curves),
        ],
    ]
    for rate in rates:
        messages = rate * SECONDS_PER_MONTH / MILLION
        tasks = ecs.units(rate)
        rows.append(
            [
                f"a million messages at {rate:,} msg/s",
                f"${ecs.month(rate) / messages:,.2f} ({_tasks(tasks)}{' over max_tasks' if tasks > plan.max_tasks else ''})",
                *(
                    f"${curve.month(rate) / messages:,.2f} ({curve.concurrency(rate):,.1f} at once"
                    f"{' over the limit' if curve.concurrency(rate) > limit else ''})"
                    for curve in curves
                ),
            ]
        )
    rows += [
        [
            "capacity",
            f"{ecs.capacity:,.2f} msg/s (max_tasks {plan.max_tasks})",
            *(
                f"{limit * curve.invocations.messages / curve.invocations.seconds:,.2f} msg/s ({limit:g} at once)"
                for curve in curves
            ),
        ],
        ["cheaper", "", str(comparison.full), str(comparison.single)],
    ]
    return f"{title}\n\n" + "\n".join(_row(row) for row in rows) + "\n"


def limits_table(comparison: TargetComparison) -> str:
    """What bounds each target for this worker: handler duration, latency, scaling, crashed attempts, and refusals."""
    contract = comparison.ecs.plan.contract
    on_lambda = comparison.on_lambda
    wake = " (at min_tasks 0, plus the wake-up's first task)" if comparison.ecs.plan.min_tasks == 0 else ""
    ecs = [
        f"{MAX_DURATION_SECONDS:,} s (the heartbeat extends the lease)",
        f"a running task's long poll returns it; it starts in a free handler slot{wake}",
        f"target tracking at {contract.scaling_target_backlog_per_task} messages of backlog per task,"
        f" to max_tasks {comparison.ecs.plan.max_tasks}",
        f"{contract.visibility_timeout_seconds:,} s (the lease the heartbeat keeps extending)",
        "cost less at rest than its min_tasks tasks; start a first task without the wake-up's wait",
    ]
    if isinstance(on_lambda, NotOnLambda):
        lambda_cells = ["not on Lambda with this declaration (above)"] * len(ecs)
    else:
        target = on_lambda.target
        window = (
            f", plus up to {target.batching_window_seconds} s of batching window"
            if target.batching_window_seconds
            else ""
        )
        scaling = (
            f"pollers up to {on_lambda.plan.provisioned_pollers[1]}, {PROVISIONED_SCALING_PER_MINUTE:,} more"
            " concurrent invocations a minute"
            if on_lambda.plan.provisioned_pollers
            else f"{ON_DEMAND_SCALING_PER_MINUTE} more concurrent invocations a minute, to MaximumConcurrency"
            f" {target.maximum_concurrency}"
        )
        lambda_cells = [
            f"{target.longest_max_duration_seconds:,} s with this shape ({target.rounds} round(s) an invocation in"
            f" Lambda's {LAMBDA_MAX_TIMEOUT_SECONDS} s)",
            f"a poller's long poll returns it, and a cold start where no execution environment is free{window}",
            scaling,
            f"{target.queue_visibility_seconds:,} s (the queue's visibility, 6 x the {target.function_timeout_seconds} s"
            " function timeout)",
            f"run past {LAMBDA_MAX_TIMEOUT_SECONDS} s; extend a lease (max_lease); max_receive_count under"
            f" {MIN_LAMBDA_MAX_RECEIVE_COUNT}; a FIFO batch over {ESM_MAX_BATCH_SIZE_FIFO}; over"
            f" {ESM_MAX_MAXIMUM_CONCURRENCY:,} concurrent invocations per mapping",
        ]
    labels = [
        "longest max_duration",
        "latency, a message arriving",
        "scaling out",
        "a crashed attempt's messages return after",
        "cannot",
    ]
    rows = [["", "ECS (Fargate)", "Lambda"], ["---"] * 3]
    rows += [[label, e, lam] for label, e, lam in zip(labels, ecs, lambda_cells, strict=True)]
    return "\n".join(_row(row) for row in rows) + "\n"


def _tasks(count: int) -> str:
    return f"{count} task" if count == 1 else f"{count} tasks"


def _per_invocation(curve: LambdaCurve) -> str:
    messages = curve.invocations.messages
    return "1 message an invocation" if messages == 1 else f"full batches of {messages}"


def _concurrency_limit(on_lambda: LambdaCost) -> float:
    """The mapping's MaximumConcurrency, or what its maximum provisioned pollers invoke at once."""
    concurrency = on_lambda.target.maximum_concurrency
    if concurrency is not None:
        return concurrency
    pollers = on_lambda.plan.provisioned_pollers
    assert pollers is not None  # a mapping sets no MaximumConcurrency only with provisioned pollers
    return pollers[1] * POLLER_CONCURRENT_INVOKES


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
