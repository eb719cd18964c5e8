"""Alarms written for the person on call: what it means, likely causes, first commands, a runbook link.

Severity routing: ``page`` alarms go to the paging topic, ``ticket`` alarms to the
ticket topic; an environment with ``pages_to_tickets`` (dev, say) sends its pages
to the ticket topic too. Every alarm sends ALARM and OK, so a drained DLQ or a
recovered consumer says so.

Missing data is ``NOT_BREACHING`` wherever missing means "nothing there": SQS
stops publishing metrics for a queue that has been empty and untouched for six
hours. It is ``BREACHING`` where silence is the failure: no deletes from a queue
with an old backlog, no running-task data for a service that must run.
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
"""

from __future__ import annotations

import math
from collections.abc import Callable

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from constructs import Construct

from consumer.contract import WorkerContract
from consumer.errors import ContractError
from consumer.stack_outputs import output_prefix
from infra.capacity_settings import WAKE_UP_SECONDS
from infra.function import function_name_of
from infra.function_alarms import function_alarms
from infra.limits import MAX_ALARM_DESCRIPTION, PUT_METRIC_ALARM_URL
from infra.metrics import DLQ_HELD_PERIOD, WorkerMetrics
from infra.shared import SharedResources
from infra.worker_settings import WorkerSettings

PAGE, TICKET = "page", "ticket"
BACKLOG_AGE_EVALUATION_MINUTES = 3
STALLED_EVALUATION_MINUTES = 5
#: Minutes DlqDepth looks back: a move the consumer counted keeps it in ALARM until the DLQ's own metrics arrive, which
#: SQS can hold back up to 15 minutes on a queue it let sleep (idle 6 hours); OK comes this long after the DLQ empties.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
DLQ_DEPTH_EVALUATION_MINUTES = 20
#: Periods in a row (each :func:`infra.metrics.circuit_period_seconds` long) with a circuit open before
#: DownstreamUnavailable pages. Three, not two: a blip opens each task's circuit once at about the same time, and
#: the flushes can stamp those opens on either side of a period boundary, two periods in a row; three need opens
#: across one whole period, longer than any pause, which only an outage that outlasts the backoff cap makes.
DOWNSTREAM_EVALUATION_PERIODS = 3
#: CloudWatch's limit on AlarmDescription.
MAX_DESCRIPTION_CHARS = MAX_ALARM_DESCRIPTION
DLQ_HELD_PERIOD_SECONDS = round(DLQ_HELD_PERIOD.to_seconds())


def alarm_name(stack_name: str, construct_id: str) -> str:
    """``<stack>-<construct id>``, the name of every alarm here (``<stack>-<worker>-<construct id>`` for a stack's
    second and later workers: ``stack_name`` is then their name prefix).

    Named, not generated, so the paging topics' and key's policies can name exactly this stack's
    alarms (``aws:SourceArn``, see :meth:`infra.paging.PagingTopic.admit_alarms`) without a reference
    to them: the key policy is part of the key, which the alarms' topics depend on.
    """
    return f"{stack_name}-{construct_id}"


def dlq_held_hours(contract: WorkerContract) -> int:
    """DlqHeldLong's evaluation periods: the hours (rounded up) of ``dlq_age_alarm_seconds``."""
    return math.ceil(contract.dlq_age_alarm_seconds / DLQ_HELD_PERIOD_SECONDS)


def dlq_expiring_inputs(
    alarm: Callable[..., cloudwatch.Alarm], metrics: WorkerMetrics, contract: WorkerContract, runbook_url: str
) -> list[cloudwatch.Alarm]:
    """DlqExpiring's two inputs, made by ``alarm`` (QueueAlarms' factory) without actions: SQS's age metric, and the
    DLQ never empty in any hour for as long, which also covers what that metric leaves out (a message received three
    or more times: an operator's third peek). A message held that long keeps the DLQ from ever being empty; fresh
    messages arriving every hour into a DLQ drained every day do not, so they never page as expiring.

    The age input keeps the construct id and name ``DlqAge``: it is the metric alarm that paged before the composite
    existed, and CloudFormation cannot change a resource's type in place (Alarm to CompositeAlarm under one logical
    id fails the update), so a deployed stack updates it (its actions removed) and adds the composite beside it."""
    dlq_name, hours = metrics.queues.dlq_name, dlq_held_hours(contract)
    oldest = alarm(
        "DlqAge",
        None,
        f"Input of DlqExpiring (no actions of its own): ApproximateAgeOfOldestMessage of {dlq_name} over"
        f" {contract.dlq_age_alarm_seconds} s. Runbook: {runbook_url}#dlq-expiring",
        metrics.dlq_age,
        contract.dlq_age_alarm_seconds,
        cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    )
    held = alarm(
        "DlqHeldLong",
        None,
        f"Input of DlqExpiring (no actions of its own): {dlq_name} was never empty in any of the last {hours} hours"
        f" (SQS's age metric leaves out messages received three or more times). Runbook: {runbook_url}#dlq-expiring",
        metrics.dlq_held_hourly,
        1,
        cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        periods=hours,
    )
    return [oldest, held]


class QueueAlarms(Construct):
    """The alarms of one environment; each description names its runbook section (``<runbook_url>#<id>``).

    ============================ ======== =================================================================
    alarm (attribute)            severity fires when
    ============================ ======== =================================================================
    ``dlq_depth``                page     any DLQ message, visible or in flight, or a move the consumer counted
                                          (latched while any is there; OK 20 minutes after it empties)
    ``dlq_new_arrivals``         page     the DLQ's held count rises while it already held messages
    ``dlq_expiring``             page     composite: the DLQ's oldest message is older than ``dlq_age_alarm_seconds``
                                          OR the DLQ was never empty for as long
    ``backlog_age``              ticket   the source's oldest message is older than ``backlog_age_alarm_seconds``
                                          (on a fair queue: the oldest outside the noisy tenants' groups)
    ``consumer_stalled``         page     composite: (oldest source message older than the acceptable
                                          latency AND nothing deleted for 5 minutes) OR no task running
    ``downstream_unavailable``   page     the circuit opened in each of 3 periods in a row (a period is the longest
                                          gap between opens while the downstream stays down)
    ``function_alarms``          page,    a lambda worker's only (infra/function_alarms.py): FunctionErrors (page),
                                 ticket   FunctionThrottles and MappingAtMaximum (tickets)
    ============================ ======== =================================================================

    A lambda worker (``metrics.function`` set) has no task to count: its ConsumerStalled is the late backlog that
    nothing deletes, which also catches an event source mapping that stopped polling (no function metric shows it).

    ``stalled_inputs`` holds ConsumerStalled's input alarms (``stalled_backlog_late`` the late-backlog one),
    ``dlq_expiring_inputs`` DlqExpiring's (no actions of their own).

    From ``shared``: the topics (``page_topic``, ``ticket_topic``), ``runbook_url``, and ``running_tasks_reliable``,
    whether Container Insights is known to be on (a cluster this stack creates); otherwise the no-task input treats
    missing data as not breaching, and the backlog branch alone catches a service scaled to zero with a growing
    backlog. From ``settings``: the worker's ``name`` and ``min_tasks``. A worker that scales to zero (``min_tasks``
    0) may wait :data:`infra.capacity_settings.WAKE_UP_SECONDS` for its first task: the latency thresholds allow for
    it, and no task running is then normal, an input of ConsumerStalled only together with a late backlog.

    ``name_prefix`` starts every alarm name (default the stack's name: the stack's unprefixed worker). A worker with
    a prefix of its own is one of several, which the dlq commands in the descriptions pick by ``--worker <name>``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: WorkerMetrics,
        contract: WorkerContract,
        settings: WorkerSettings,
        shared: SharedResources,
        name_prefix: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self).stack_name
        self.name_prefix = prefix = name_prefix or stack
        self.runbook_url = runbook_url = shared.runbook_url
        running_tasks_reliable = shared.running_tasks_reliable
        wake_up_seconds = WAKE_UP_SECONDS if settings.min_tasks == 0 else 0
        worker = None if prefix == stack else settings.name
        self.severity: dict[str, str] = {}
        topics = {PAGE: actions.SnsAction(shared.page_topic), TICKET: actions.SnsAction(shared.ticket_topic)}
        dlq_name, source_name = metrics.queues.dlq_name, metrics.queues.source_name
        queues = f"--stack {stack}" + (f" --worker {worker}" if worker else "")
        stats = f"python -m consumer dlq stats {queues}"
        peek = f"python -m consumer dlq peek {queues}"
        redrive = f"python -m consumer dlq redrive {queues} --dry-run"

        def describe(severity: str, section: str, means: str, causes: str, first: str) -> str:
            text = f"[{severity.upper()}] {means} Likely: {causes} First: {first} Runbook: {runbook_url}#{section}"
            if len(text) > MAX_DESCRIPTION_CHARS:
                raise ContractError(
                    "runbook_url",
                    f"must leave every alarm description within CloudWatch's {MAX_DESCRIPTION_CHARS} characters"
                    f" ({PUT_METRIC_ALARM_URL}): the {section} one would be {len(text)}; use a shorter address",
                    runbook_url,
                )
            return text

        def alarm(
            construct_id: str,
            severity: str | None,
            description: str,
            metric: cloudwatch.IMetric,
            threshold: float,
            comparison: cloudwatch.ComparisonOperator,
            periods: int = 1,
            missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
            datapoints: int | None = None,
        ) -> cloudwatch.Alarm:
            created = cloudwatch.Alarm(
                self,
                construct_id,
                alarm_name=alarm_name(prefix, construct_id),
                alarm_description=description,
                metric=metric,
                threshold=threshold,
                comparison_operator=comparison,
                evaluation_periods=periods,
                datapoints_to_alarm=datapoints or periods,
                treat_missing_data=missing,
            )
            if severity is not None:
                created.add_alarm_action(topics[severity])
                created.add_ok_action(topics[severity])
                self.severity[construct_id] = severity
            return created

        at_least = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        below = cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD

        self.dlq_depth = alarm(
            "DlqDepth",
            PAGE,
            describe(
                PAGE,
                "dlq-depth",
                f"Messages are waiting in {dlq_name} (or the consumer just moved one there); each carries the reason"
                f" it failed (poison, or {contract.max_receive_count} failed receives). Stays in ALARM until the DLQ is"
                f" drained (OK {DLQ_DEPTH_EVALUATION_MINUTES} minutes later).",
                "a handler bug in a recent deploy, a downstream outage, malformed input from a producer.",
                f"`{stats}`, then `{peek}` to read the reasons grouped by cause; fix the cause, then `{redrive}`.",
            ),
            metrics.dlq_depth_or_moves,
            1,
            at_least,
            periods=DLQ_DEPTH_EVALUATION_MINUTES,
            datapoints=1,
        )
        self.dlq_new_arrivals = alarm(
            "DlqNewArrivals",
            PAGE,
            describe(
                PAGE,
                "dlq-new-arrivals",
                f"New messages arrived in {dlq_name} while it already held some: the first page is still"
                " latched, this one says the failure goes on.",
                "the cause behind the first DLQ page is not fixed, or a second cause started.",
                f"`{peek}` and compare the newest reasons with the earlier ones; `{stats}`.",
            ),
            metrics.dlq_new_arrivals,
            1,
            at_least,
        )
        gap = contract.dlq_retention_seconds - contract.source_retention_seconds
        expiry_days = round((gap - contract.dlq_age_alarm_seconds) / 86_400, 1)
        self.dlq_expiring_inputs = oldest, held = dlq_expiring_inputs(alarm, metrics, contract, runbook_url)
        self.dlq_expiring = cloudwatch.CompositeAlarm(
            self,
            "DlqExpiring",
            composite_alarm_name=alarm_name(prefix, "DlqExpiring"),
            alarm_rule=cloudwatch.AlarmRule.any_of(
                cloudwatch.AlarmRule.from_alarm(oldest, cloudwatch.AlarmState.ALARM),
                cloudwatch.AlarmRule.from_alarm(held, cloudwatch.AlarmState.ALARM),
            ),
            alarm_description=describe(
                PAGE,
                "dlq-expiring",
                f"A message in {dlq_name} is older than {contract.dlq_age_alarm_seconds} s (or the DLQ was never empty"
                " that long), half the time between the source's and the DLQ's retention: it will expire (be lost)"
                f" if nobody acts, at the earliest {expiry_days:g} days from now (a message SQS's redrive moved; one"
                " the consumer moved has longer).",
                "a DLQ page acknowledged but never worked off.",
                f"`python -m consumer dlq export {queues} --out dlq-backup.jsonl`, then fix and `{redrive}`.",
            ),
        )
        self.dlq_expiring.add_alarm_action(topics[PAGE])
        self.dlq_expiring.add_ok_action(topics[PAGE])
        self.severity["DlqExpiring"] = PAGE
        # A fair queue (fair_queue declared) ages on its quiet groups: SQS serves a noisy tenant's backlog last, so
        # the whole queue's oldest message would say only that one tenant is busy; the quiet tenants' oldest says
        # whether everyone else is late. The same construct id, threshold and runbook section either way.
        fair = metrics.fair
        self.backlog_age = alarm(
            "BacklogAge",
            TICKET,
            describe(
                TICKET,
                "backlog-age",
                f"The oldest message in {source_name}"
                + (
                    " outside its noisy tenants (fair queue: ApproximateAgeOfOldestMessageInQuietGroups)"
                    if fair is not None
                    else ""
                )
                + f" has waited over {contract.backlog_age_alarm_seconds + wake_up_seconds} s"
                " (acceptable latency plus three retry cycles"
                + (f", plus {wake_up_seconds} s to wake a task from zero" if wake_up_seconds else "")
                + ") for 3 minutes: work is late.",
                "a traffic burst beyond max_tasks, slow downstream calls, many retries in backoff.",
                "the dashboard (backlog per task against its target, running tasks, failures);"
                " raise max_tasks in cdk.json if the fleet is at its maximum.",
            ),
            fair.quiet_age if fair is not None else metrics.source_age,
            contract.backlog_age_alarm_seconds + wake_up_seconds,
            above,
            periods=BACKLOG_AGE_EVALUATION_MINUTES,
        )

        # An outage held behind the circuit reaches neither the DLQ nor the age and delete alarms: each hand-back is a
        # fresh copy (the age restarts) and deletes the original. The circuit re-opens at least once a period while
        # the downstream stays down; no opens means no datapoint, which is no outage.
        period = round(metrics.circuit_opens.period.to_seconds())
        outage = DOWNSTREAM_EVALUATION_PERIODS * period
        self.downstream_unavailable = alarm(
            "DownstreamUnavailable",
            PAGE,
            describe(
                PAGE,
                "downstream-unavailable",
                f"The consumer's circuit for {source_name} opened in {DOWNSTREAM_EVALUATION_PERIODS} periods of"
                f" {period} s in a row: handlers raise DownstreamUnavailable, so messages wait (handed back, no retry"
                f" spent, no DLQ) and are late. An outage over {outage} s pages, one open does not; OK once it stays"
                " closed for a period.",
                "the downstream the handler calls is down, throttling or unreachable (network, credentials).",
                "the consumer's logs (circuit_opened: retry_after_seconds, message_id; downstream_unavailable), the"
                " downstream's status page; the dashboard's circuit row.",
            ),
            metrics.circuit_opens,
            1,
            at_least,
            periods=DOWNSTREAM_EVALUATION_PERIODS,
        )

        def stalled_input(construct_id: str, what: str, *args: object, **kwargs: object) -> cloudwatch.Alarm:
            text = f"Input of ConsumerStalled (no actions of its own): {what} Runbook: {runbook_url}#consumer-stalled"
            return alarm(construct_id, None, text, *args, **kwargs)  # type: ignore[arg-type]

        # The whole queue's age even on a fair queue: this input pages only together with "nothing deleted", and a
        # consumer that deletes nothing while a noisy tenant's backlog ages is stalled, not busy with that tenant.
        late = stalled_input(
            "StalledBacklogLate",
            f"the oldest source message is older than the acceptable latency ({contract.acceptable_latency_seconds} s"
            + (f" plus {wake_up_seconds} s to wake a task from zero" if wake_up_seconds else "")
            + ").",
            metrics.source_age,
            contract.acceptable_latency_seconds + wake_up_seconds,
            above,
            periods=BACKLOG_AGE_EVALUATION_MINUTES,
        )
        idle = stalled_input(
            "StalledNothingDeleted",
            f"no message deleted from the source for {STALLED_EVALUATION_MINUTES} minutes (no data counts as none).",
            metrics.source_deleted,
            1,
            below,
            periods=STALLED_EVALUATION_MINUTES,
            missing=cloudwatch.TreatMissingData.BREACHING,
        )
        self.stalled_backlog_late = late
        inputs = [late, idle]
        rule = cloudwatch.AlarmRule.all_of(
            cloudwatch.AlarmRule.from_alarm(late, cloudwatch.AlarmState.ALARM),
            cloudwatch.AlarmRule.from_alarm(idle, cloudwatch.AlarmState.ALARM),
        )
        no_task = _no_task_input(stalled_input, metrics, late, running_tasks_reliable, wake_up_seconds)
        if no_task is not None:
            inputs.append(no_task[0])
            rule = cloudwatch.AlarmRule.any_of(rule, no_task[1])
        self.stalled_inputs = inputs
        function = metrics.function
        stalled_text = (
            _stalled_text(source_name, wake_up_seconds, prefix, worker, stack)
            if function is None
            else _stalled_function_text(source_name, function_name_of(prefix))
        )
        self.consumer_stalled = cloudwatch.CompositeAlarm(
            self,
            "ConsumerStalled",
            composite_alarm_name=alarm_name(prefix, "ConsumerStalled"),
            alarm_rule=rule,
            alarm_description=describe(PAGE, "consumer-stalled", *stalled_text),
        )
        self.consumer_stalled.add_alarm_action(topics[PAGE])
        self.consumer_stalled.add_ok_action(topics[PAGE])
        self.severity["ConsumerStalled"] = PAGE
        #: A lambda worker's function alarms (infra/function_alarms.py); none for an ECS worker.
        self.function_alarms: list[cloudwatch.Alarm] = (
            []
            if function is None
            else function_alarms(
                alarm, describe, function, function_name=function_name_of(prefix), source_name=source_name
            )
        )

    @property
    def notifying_alarm_names(self) -> list[str]:
        """The names of every alarm with actions: the ones the topics must admit."""
        return [alarm_name(self.name_prefix, construct_id) for construct_id in self.severity]

    @property
    def paging_alarms(self) -> list[cloudwatch.IAlarm]:
        """Every alarm with actions, for the dashboard's alarm status widget."""
        return [
            self.dlq_depth,
            self.dlq_new_arrivals,
            self.dlq_expiring,
            self.backlog_age,
            self.consumer_stalled,
            self.downstream_unavailable,
            *self.function_alarms,
        ]


def _no_task_input(
    stalled_input: Callable[..., cloudwatch.Alarm],
    metrics: WorkerMetrics,
    late: cloudwatch.Alarm,
    running_tasks_reliable: bool,
    wake_up_seconds: int,
) -> tuple[cloudwatch.Alarm, cloudwatch.IAlarmRule] | None:
    """ConsumerStalled's "no consumer task running" input and its branch of the rule (None without a service: a
    lambda worker has no task to count)."""
    if metrics.running_tasks is None:
        return None
    no_tasks = stalled_input(
        "StalledNoRunningTasks",
        "no consumer task running for 3 minutes"
        + (" (no data counts as none)." if running_tasks_reliable else " (Container Insights unknown)."),
        metrics.running_tasks,
        1,
        cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        periods=3,
        missing=(
            cloudwatch.TreatMissingData.BREACHING
            if running_tasks_reliable
            else cloudwatch.TreatMissingData.NOT_BREACHING
        ),
    )
    no_task = cloudwatch.AlarmRule.from_alarm(no_tasks, cloudwatch.AlarmState.ALARM)
    if wake_up_seconds:  # at zero, no task with nothing late is the worker asleep, not stalled
        no_task = cloudwatch.AlarmRule.all_of(
            no_task, cloudwatch.AlarmRule.from_alarm(late, cloudwatch.AlarmState.ALARM)
        )
    return no_tasks, no_task


def _stalled_function_text(source_name: str, function_name: str) -> tuple[str, str, str]:
    """A lambda worker's ConsumerStalled description: no task to count, so its late backlog that nothing deletes."""
    return (
        f"Nothing is being processed: {source_name} has messages older than the acceptable latency and none was"
        " deleted for 5 minutes.",
        "the event source mapping disabled or failing (its role refused, the function deleted), every invocation"
        " failing (FunctionErrors), every message failing, the downstream down.",
        f"`aws lambda list-event-source-mappings --function-name {function_name}` (State, StateTransitionReason,"
        " LastProcessingResult), the function's logs (events function_started, handler_failed).",
    )


def _stalled_text(
    source_name: str, wake_up_seconds: int, prefix: str, worker: str | None, stack: str
) -> tuple[str, str, str]:
    """ConsumerStalled's description: what it means, its likely causes, what to look at first."""
    asleep = wake_up_seconds > 0  # min_tasks 0: no task with nothing late is the worker asleep, not stalled
    means = (
        f"Nothing is being processed: {source_name} has messages older than the acceptable latency"
        + (f" plus {wake_up_seconds} s of wake-up (min_tasks 0)" if asleep else "")
        + " and none was deleted for 5 minutes, or no consumer task is running"
        + (" while they are (at zero tasks with nothing late the worker is asleep, not stalled)." if asleep else ".")
    )
    causes = (
        "tasks crash-looping (exit 2: configuration or drift refused at start-up; exit 3: stuck handlers), the"
        " service scaled to zero"
        + (
            f" and the wake-up not starting a task (its alarm {prefix}-WakeUp, the scaling activities)"
            if asleep
            else ""
        )
        + ", every message failing, the downstream down."
    )
    first = (
        f"`aws ecs describe-services --cluster <ClusterName> --services <{output_prefix(worker)}ServiceName>` (stack"
        f" {stack} outputs), the consumer's logs (events consumer_started, startup_failed, handler_failed)."
    )
    return means, causes, first
