"""What a lambda worker's alarms add to its queues' (infra/queue_alarms.py): the function's own failures.

Severity follows the queue alarms' rule: a page where nothing, or a whole batch, is being processed and someone must
act now; a ticket where work is late but moving (docs/alarms.md, docs/operations.md):

* ``FunctionErrors`` (page): an invocation ended in an error of the function itself. The entry raises only for its own
  faults (a configuration it cannot start with, a record from another queue; Lambda adds timeouts and crashes): a
  handler's failure is settled per message, never an invocation error. So any is a fault worth a page, and its batch
  returns after the visibility timeout, spending a receive of every message in it.
* ``FunctionThrottles`` (ticket): Lambda refused invocations for lack of concurrency three minutes in a row. The
  function reserves none (it would throttle the mapping: aws-cdk#24180), so only the account's concurrency, shared by
  every function of the region, runs out; the throttled batches wait and spend receives.
* ``MappingAtMaximum`` (ticket): the function ran at its mapping's MaximumConcurrency for 15 minutes, as an ECS service
  at ``max_tasks``: the worker's fleet is at its maximum. Not with provisioned pollers (the mapping sets none).

Missing data is not breaching for all three: Lambda publishes nothing for a function nobody invokes.
https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
"""

from __future__ import annotations

from collections.abc import Callable

from aws_cdk import aws_cloudwatch as cloudwatch

from infra.metrics import FunctionMetrics

PAGE, TICKET = "page", "ticket"
THROTTLES_EVALUATION_MINUTES = 3
AT_MAXIMUM_EVALUATION_MINUTES = 15

#: What :class:`infra.queue_alarms.QueueAlarms` gives: its alarm factory (id, severity, description, metric,
#: threshold, comparison, periods) and its description writer (severity, runbook section, means, causes, first).
AlarmFactory = Callable[..., cloudwatch.Alarm]
Describe = Callable[[str, str, str, str, str], str]


def function_alarms(
    alarm: AlarmFactory, describe: Describe, metrics: FunctionMetrics, *, function_name: str, source_name: str
) -> list[cloudwatch.Alarm]:
    """The function's alarms, made by ``alarm`` with ``describe``'s text: FunctionErrors, FunctionThrottles and, where
    the mapping has a MaximumConcurrency, MappingAtMaximum."""
    at_least = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
    logs = (
        f"the function's logs (`aws lambda get-function-configuration --function-name {function_name} --query"
        " LoggingConfig.LogGroup` names the group)"
    )
    created = [
        alarm(
            "FunctionErrors",
            PAGE,
            describe(
                PAGE,
                "function-errors",
                f"Function {function_name} ended an invocation in an error of its own: its whole batch returns to"
                f" {source_name} after the visibility timeout and spends a receive of each message. The entry raises"
                " only for its own faults; a handler's failure never makes one.",
                "a configuration the function cannot start with (a variable, the handler's import), the function out"
                " of memory or past its timeout, a record from another queue.",
                f"{logs}: the error and its traceback, `Task timed out`, `Runtime exited`.",
            ),
            metrics.errors,
            1,
            at_least,
        ),
        alarm(
            "FunctionThrottles",
            TICKET,
            describe(
                TICKET,
                "function-throttles",
                f"Lambda refused invocations of {function_name} for lack of concurrency in each of the last"
                f" {THROTTLES_EVALUATION_MINUTES} minutes: the account's concurrency, shared by every function of the"
                f" region, is spent. {source_name}'s batches wait and spend receives.",
                "other functions of the account using its concurrency, a Regional quota below the mappings' maximums.",
                "`aws lambda get-account-settings` (ConcurrentExecutions, UnreservedConcurrentExecutions); raise the"
                " quota, or lower the busiest workers' max_tasks.",
            ),
            metrics.throttles,
            1,
            at_least,
            periods=THROTTLES_EVALUATION_MINUTES,
        ),
    ]
    if metrics.maximum_concurrency is not None:
        created.append(
            alarm(
                "MappingAtMaximum",
                TICKET,
                describe(
                    TICKET,
                    "mapping-at-maximum",
                    f"Function {function_name} ran at its event source mapping's MaximumConcurrency"
                    f" ({metrics.maximum_concurrency}, from max_tasks) for {AT_MAXIMUM_EVALUATION_MINUTES} minutes:"
                    " the worker is at its fleet's maximum, as a service at max_tasks.",
                    "a traffic burst beyond max_tasks, slower downstream calls.",
                    "the dashboard (function concurrency, source age); raise max_tasks in cdk.json if the backlog"
                    " grows.",
                ),
                metrics.concurrent_executions,
                metrics.maximum_concurrency,
                at_least,
                periods=AT_MAXIMUM_EVALUATION_MINUTES,
            )
        )
    return created
