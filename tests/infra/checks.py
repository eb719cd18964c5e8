"""The framework's checks on one synthesized environment, for whatever valid settings it was built from.

Each check reads one :class:`~tests.infra.conftest.Synthesized` environment and what it was built from (its
``EnvironmentSettings``, each worker's settings and contract) and asserts what the framework promises of every
environment a team can write: each worker's queue pair, service, task role, scaling, alarms and dashboard section
are derived from its own declaration and settings; the topics and key admit exactly the alarms that notify; the
outputs and logical ids follow the naming rules; every alarm links a runbook section; cdk-nag has no open finding.
No expected value is a number of the shipped ``cdk.json``: every one is derived, so the checks hold on the
repository's own ``cdk.json`` (``tests/infra/test_repository.py``) and on a team's edits of it (``tests/edits``).

A check collects every problem before it fails, one line each, named ``<environment>/<worker>: ...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from consumer.contract import BINDING_KEYS, WorkerContract
from consumer.sources import EVENTBRIDGE_EVENTS_ENV, SNS_ENVELOPE_TOPICS_ENV
from consumer.stack_outputs import WORKER_METADATA_KEY, WORKER_NAMES_OUTPUT, output_prefix
from infra.alarms.scaling_template import check_step_policy
from infra.capacity_settings import WAKE_UP_SECONDS
from infra.dashboard import widget_title
from infra.function import ConsumerFunction
from infra.identities import DEFAULT_IDENTITY
from infra.limits import MAX_ALARM_DESCRIPTION
from infra.queue_alarms import DOWNSTREAM_EVALUATION_PERIODS
from infra.service import (
    CONTAINER_COMMAND,
    CONTAINER_USER,
    DEAD_LETTER_QUEUE_ACTIONS,
    HEALTH_CHECK_COMMAND,
    IDEMPOTENCY_TABLE_ACTIONS,
    SOURCE_QUEUE_ACTIONS,
    TASK_PROTECTION_ACTIONS,
)
from infra.source_settings import TopicSource
from infra.sources import EVENTS_PRINCIPAL, SNS_PRINCIPAL
from infra.tracing import XRAY_ACTIONS
from infra.worker import Worker
from infra.worker_settings import LAMBDA, WorkerSettings
from tests.infra.conftest import Synthesized
from tests.infra.function_checks import (
    check_function,
    check_function_alarms,
    check_function_role,
    function_reference_lines,
    role_grants,
    target_of,
)
from tests.infra.network_checks import check_network

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_LINK = re.compile(r"Runbook: (\S+)#([a-z0-9-]+)$")
DAY = 86_400
CLOUDWATCH = "cloudwatch.amazonaws.com"
#: The first worker's data-holding resources keep the logical ids a one-worker stack always had (tests/infra/
#: test_upgrades.py says why); a replaced queue loses its messages.
FIRST_WORKER_LOGICAL_IDS = {
    "source queue": "QueuesQueueD811C857",
    "dead-letter queue": "QueuesDeadLetterQueue82AA3FB7",
    "idempotency table": "ConsumerIdempotencyTableBB140E0E",
}
#: The findings every worker's service has, each acknowledged with its reason (infra/worker.py).
ACKNOWLEDGED_RULES = {"AwsSolutions-ECS2", "AwsSolutions-IAM5"}
MIN_REASON_CHARS = 40
MAX_DESCRIPTION_CHARS = MAX_ALARM_DESCRIPTION


def workers(env: Synthesized) -> Iterator[tuple[str, Worker, WorkerSettings, WorkerContract]]:
    """Each worker of ``env``: its label (``env/worker``), construct, settings and contract, in cdk.json's order."""
    settings = env.stack.settings
    for (name, built), worker in zip(env.stack.workers.items(), settings.workers, strict=True):
        assert name == worker.name
        yield f"{settings.name}/{name}", built, worker, built.contract


def props(env: Synthesized, construct: Any) -> dict[str, Any]:
    properties: dict[str, Any] = env.json["Resources"][env.logical_id(construct)]["Properties"]
    return properties


def get_att(env: Synthesized, construct: Any, attribute: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [env.logical_id(construct), attribute]}


def ref(env: Synthesized, construct: Any) -> dict[str, str]:
    return {"Ref": env.logical_id(construct)}


def expect(problems: list[str], label: str, what: str, found: object, expected: object) -> None:
    if found != expected:
        problems.append(f"{label}: {what} is {found!r}, expected {expected!r}")


def report(problems: list[str], check: str) -> None:
    assert not problems, f"{check}: {len(problems)} problem(s)\n" + "\n".join(problems)


# --------------------------------------------------------------------------- queues


def check_queues(env: Synthesized) -> None:
    """Each worker's pair: names, retention from the settings (the DLQ's longer), visibility, size and redrive from
    its contract, the DLQ's redrive allow policy naming only its source, SSE and TLS-only on both."""
    problems: list[str] = []
    settings = env.stack.settings
    for label, built, worker, contract in workers(env):
        queues = built.queues
        # A lambda worker's source visibility is its Lambda target's (infra/function.py); everything else the contract's.
        pair = (
            target_of(worker, contract).queue_attributes() if worker.target == LAMBDA else contract.queue_attributes()
        )
        source, dlq = props(env, queues.queue), props(env, queues.dead_letter_queue)
        suffix = ".fifo" if contract.fifo else ""
        expect(problems, label, "source name", source["QueueName"], f"{built.name_prefix}-source{suffix}")
        expect(problems, label, "DLQ name", dlq["QueueName"], f"{built.name_prefix}-dlq{suffix}")
        expect(
            problems, label, "source retention", source["MessageRetentionPeriod"], settings.source_retention_days * DAY
        )
        expect(problems, label, "DLQ retention", dlq["MessageRetentionPeriod"], settings.dlq_retention_days * DAY)
        if not dlq["MessageRetentionPeriod"] > source["MessageRetentionPeriod"]:
            problems.append(f"{label}: the DLQ does not keep messages longer than the source")
        expect(
            problems, label, "visibility timeout", source["VisibilityTimeout"], pair.source.visibility_timeout_seconds
        )
        expect(problems, label, "source maximum size", source["MaximumMessageSize"], pair.source.maximum_message_bytes)
        expect(problems, label, "DLQ maximum size", dlq["MaximumMessageSize"], pair.dead_letter.maximum_message_bytes)
        expect(
            problems,
            label,
            "redrive policy",
            source.get("RedrivePolicy"),
            {
                "deadLetterTargetArn": get_att(env, queues.dead_letter_queue, "Arn"),
                "maxReceiveCount": pair.source.redrive_max_receive_count,
            },
        )
        allow = dlq.get("RedriveAllowPolicy", {})
        arns = [_arn_tail(arn) for arn in allow.get("sourceQueueArns", [])]
        if allow.get("redrivePermission") != "byQueue" or arns != [f":{source['QueueName']}"]:
            problems.append(f"{label}: the DLQ's redrive allow policy must name its source alone: {allow!r}")
        _check_senders(env, label, built, problems)
        for queue, properties in ((queues.queue, source), (queues.dead_letter_queue, dlq)):
            expect(
                problems, label, f"{properties['QueueName']} FIFO", properties.get("FifoQueue", False), contract.fifo
            )
            expect(problems, label, f"{properties['QueueName']} SSE-SQS", properties.get("SqsManagedSseEnabled"), True)
            if not any(_denies_plain_http(statement) for statement in _queue_policy_statements(env, queue)):
                problems.append(f"{label}: {properties['QueueName']} has no TLS-only deny in its queue policy")
    report(problems, "queues")


def _check_senders(env: Synthesized, label: str, built: Worker, problems: list[str]) -> None:
    """Without producers, IAM alone decides who sends (each queue's policy holds only its TLS deny, and an allow per
    declared source, on the DLQ too where it is the source's delivery dead-letter queue: every topic, a standard
    worker's rules); with them, the source denies every sender but them, the task role and the declared sources,
    and the DLQ every sender but the task role and the sources it admits. Each source's allow is its service
    principal, SendMessage, and ``aws:SourceArn`` equal to its topic or rule, nothing broader."""
    producers = list(env.stack.settings.producers)
    task_role = get_att(env, built.role, "Arn")  # the service's task role, or the function's role
    admitted = _admitted_sources(env, built)
    # EventBridge takes a standard queue only as a target's DLQ: a FIFO worker's rules have none.
    dead_lettered = [(s, a) for s, a in admitted if s == SNS_PRINCIPAL or not built.queues.contract.fifo]
    for queue, allowed, sources in (
        (built.queues.queue, [*producers, task_role], admitted),
        (built.queues.dead_letter_queue, [task_role], dead_lettered),
    ):
        statements = [s for s in _queue_policy_statements(env, queue) if not _denies_plain_http(s)]
        allows = [
            (s["Principal"]["Service"], s["Action"], s.get("Condition"))
            for s in statements
            if s["Effect"] == "Allow" and "Service" in s.get("Principal", {})
        ]
        expected_allows = [
            (service, "sqs:SendMessage", {"ArnEquals": {"aws:SourceArn": arn}}) for service, arn in sources
        ]
        expect(problems, label, f"{queue.node.id} allows for declared sources", allows, expected_allows)
        denies = [s for s in statements if s["Effect"] == "Deny" and s["Action"] == "sqs:SendMessage"]
        if not producers:
            rest = [s for s in statements if not (s["Effect"] == "Allow" and "Service" in s.get("Principal", {}))]
            expect(problems, label, f"{queue.node.id} policy beside the TLS deny and the sources", rest, [])
            continue
        exempt = {"aws:PrincipalArn": allowed, **({"aws:SourceArn": [arn for _, arn in sources]} if sources else {})}
        if [d.get("Condition", {}).get("ArnNotEquals") for d in denies] != [exempt]:
            problems.append(f"{label}: {queue.node.id} must deny SendMessage to all but {exempt!r}: {denies!r}")


def _admitted_sources(env: Synthesized, built: Worker) -> list[tuple[str, Any]]:
    """(service principal, aws:SourceArn) of each source the worker's settings declare, in order."""
    declared = next(w for _, b, w, _ in workers(env) if b is built).sources
    if not declared:
        return []
    assert built.sources is not None, "sources are declared but the worker built none"
    return [
        (SNS_PRINCIPAL if isinstance(source, TopicSource) else EVENTS_PRINCIPAL, env.stack.resolve(arn))
        for source, arn in zip(declared, built.sources.source_arns, strict=True)
    ]


def _arn_tail(arn: object) -> str:
    """The last part of an ARN (``:<name>``), whether written out or joined from pseudo parameters."""
    if isinstance(arn, dict) and "Fn::Join" in arn:
        arn = arn["Fn::Join"][1][-1]
    return ":" + str(arn).rsplit(":", 1)[-1]


def _queue_policy_statements(env: Synthesized, queue: Any) -> list[dict[str, Any]]:
    return [
        statement
        for policy in env.resources("AWS::SQS::QueuePolicy").values()
        if ref(env, queue) in policy["Properties"]["Queues"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _denies_plain_http(statement: dict[str, Any]) -> bool:
    return (
        statement.get("Effect") == "Deny"
        and statement.get("Action") == "sqs:*"
        and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
    )


# --------------------------------------------------------------------------- the service


def check_services(env: Synthesized) -> None:
    """Each worker's task: its handler, the contract's environment and bindings, its handler_environment and
    secrets, stop timeout and health check from its contract, hardening, log retention, and scaling between its
    tasks on its contract's backlog-per-task target."""
    problems: list[str] = []
    settings = env.stack.settings
    for label, built, worker, contract in workers(env):
        if isinstance(built.consumer, ConsumerFunction):  # no task: its function (tracing is the ECS workers')
            expected = contract.to_env() | dict(worker.handler_environment) | _sourced(worker)
            check_function(env, label, built, worker, contract, expected, problems)
            continue
        container = env.container(worker.name)
        variables = {e["Name"]: e["Value"] for e in container["Environment"]}
        expected = contract.to_env() | dict(worker.handler_environment) | _traced(env, built) | _sourced(worker)
        # A handler idempotent by itself runs no guard: no table, so no CONSUMER_IDEMPOTENCY_TABLE.
        bindings = BINDING_KEYS - {"CONSUMER_IDEMPOTENCY_TABLE"} if contract.idempotent else BINDING_KEYS
        expect(problems, label, "environment keys", set(variables), set(expected) | bindings)
        for key, value in expected.items():
            expect(problems, label, key, variables.get(key), value)
        expect(problems, label, "CONSUMER_HANDLER", variables.get("CONSUMER_HANDLER"), worker.handler)
        expect(problems, label, "QUEUE_URL", variables.get("QUEUE_URL"), ref(env, built.queues.queue))
        expect(problems, label, "DLQ_URL", variables.get("DLQ_URL"), ref(env, built.queues.dead_letter_queue))
        table = built.consumer.idempotency_table
        expect(problems, label, "an idempotency table", table is None, contract.idempotent)
        expect(
            problems,
            label,
            "CONSUMER_IDEMPOTENCY_TABLE",
            variables.get("CONSUMER_IDEMPOTENCY_TABLE"),
            None if table is None else ref(env, table),
        )
        if WorkerContract.from_env(variables) != contract:
            problems.append(f"{label}: the container's environment does not read back as its contract")
        expect(problems, label, "secrets", {s["Name"] for s in container.get("Secrets", [])}, set(worker.secrets))
        expect(problems, label, "stop timeout", container["StopTimeout"], contract.stop_timeout_seconds)
        health = container["HealthCheck"]
        expect(problems, label, "health check command", health["Command"], HEALTH_CHECK_COMMAND)
        expect(problems, label, "health check interval", health["Interval"], contract.health_check_interval_seconds)
        expect(problems, label, "health check start", health["StartPeriod"], contract.health_check_start_period_seconds)
        expect(problems, label, "command", container["Command"], CONTAINER_COMMAND)
        expect(problems, label, "user", container["User"], CONTAINER_USER)
        expect(problems, label, "read-only root", container["ReadonlyRootFilesystem"], True)
        expect(problems, label, "capabilities", container["LinuxParameters"], {"Capabilities": {"Drop": ["ALL"]}})
        task = props(env, built.consumer.task_definition)
        expect(problems, label, "task size", (task["Cpu"], task["Memory"]), (str(worker.cpu), str(worker.memory_mib)))
        expect(problems, label, "worker metadata", _metadata(env, built), worker.name)
        retention = props(env, built.consumer.log_group)["RetentionInDays"]
        expect(problems, label, "log retention", retention, settings.log_retention_days)
        _check_scaling(env, label, built, worker, contract, problems)
    report(problems, "services")


def _traced(env: Synthesized, built: Worker) -> dict[str, str]:
    """The tracing variables the environment's ``tracing`` gives each worker (none without it)."""
    tracing = env.stack.settings.tracing
    return {} if tracing is None else tracing.environment(built.name_prefix)


def _sourced(worker: WorkerSettings) -> dict[str, str]:
    """What the worker's declared sources tell its consumer: the envelope topics, and whether events arrive."""
    topics = [s.topic_arn for s in worker.sources if isinstance(s, TopicSource) and not s.raw_message_delivery]
    rules = [s for s in worker.sources if not isinstance(s, TopicSource)]
    return {
        **({SNS_ENVELOPE_TOPICS_ENV: ",".join(topics)} if topics else {}),
        **({EVENTBRIDGE_EVENTS_ENV: "true"} if rules else {}),
    }


def _metadata(env: Synthesized, built: Worker) -> object:
    return (
        env.json["Resources"][env.logical_id(built.consumer.task_definition)]
        .get("Metadata", {})
        .get(WORKER_METADATA_KEY)
    )


def _check_scaling(
    env: Synthesized, label: str, built: Worker, worker: WorkerSettings, contract: WorkerContract, problems: list[str]
) -> None:
    policy = props(env, built.consumer.scaling_policy)
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    expect(problems, label, "scaling target", config["TargetValue"], contract.scaling_target_backlog_per_task)
    metrics = {m["Id"]: m for m in config["CustomizedMetricSpecification"]["Metrics"]}
    expect(
        problems, label, "scaling expression", metrics.get("backlogPerTask", {}).get("Expression"), "backlog / tasks"
    )
    backlog = metrics.get("backlog", {}).get("MetricStat", {}).get("Metric", {}).get("Dimensions")
    expect(
        problems,
        label,
        "scaling backlog queue",
        backlog,
        [{"Name": "QueueName", "Value": get_att(env, built.queues.queue, "QueueName")}],
    )
    target = env.json["Resources"][policy["ScalingTargetId"]["Ref"]]["Properties"]
    tasks = (target["MinCapacity"], target["MaxCapacity"])
    expect(problems, label, "task range", tasks, (worker.min_tasks, worker.max_tasks))


def check_task_roles(env: Synthesized) -> None:
    """Each task role holds exactly the runtime's actions, on its own worker's queues and table and on this
    cluster's tasks: nothing managed, nothing inline, nothing on another worker's resources."""
    problems: list[str] = []
    for label, built, _, _ in workers(env):
        if isinstance(built.consumer, ConsumerFunction):
            check_function_role(env, label, built, problems)
            continue
        role = built.consumer.task_role
        role_props = props(env, role)
        if "ManagedPolicyArns" in role_props or "Policies" in role_props:
            problems.append(f"{label}: the task role has managed or inline policies")
        granted = role_grants(env, role, label, problems)
        grants = [
            (built.queues.queue, SOURCE_QUEUE_ACTIONS),
            (built.queues.dead_letter_queue, DEAD_LETTER_QUEUE_ACTIONS),
        ]
        if built.consumer.idempotency_table is not None:  # none for a handler idempotent by itself
            grants.append((built.consumer.idempotency_table, IDEMPOTENCY_TABLE_ACTIONS))
        for construct, actions in grants:
            key = json.dumps(get_att(env, construct, "Arn"), sort_keys=True)
            expect(problems, label, f"actions on {construct.node.id}", granted.pop(key, None), sorted(actions))
        protection = [(resource, actions) for resource, actions in granted.items() if ":task/" in resource]
        if [actions for _, actions in protection] != [sorted(TASK_PROTECTION_ACTIONS)]:
            problems.append(f"{label}: task protection grants are {protection!r}")
        granted = {resource: actions for resource, actions in granted.items() if ":task/" not in resource}
        traced = env.stack.settings.tracing is not None  # the collector sidecar's X-Ray writes (infra/tracing.py)
        expect(problems, label, "actions on *", granted.pop('"*"', None), sorted(XRAY_ACTIONS) if traced else None)
        if granted:
            problems.append(f"{label}: the task role is granted more: {granted!r}")
    report(problems, "task roles")


# --------------------------------------------------------------------------- alarms, topics, dashboard


def _alarm_props(env: Synthesized, alarm: Any) -> dict[str, Any]:
    return props(env, alarm)


def check_alarms(env: Synthesized) -> None:
    """Each worker's alarms: thresholds from its contract, named after it, routed by severity (pages to tickets
    where the environment says so), every notifying alarm sending OK where it sends ALARM."""
    problems: list[str] = []
    settings, stack = env.stack.settings, env.stack
    page_topic = [ref(env, (stack.tickets if settings.pages_to_tickets else stack.paging).topic)]
    ticket_topic = [ref(env, stack.tickets.topic)]
    for label, built, worker, contract in workers(env):
        alarms = built.alarms
        wake = WAKE_UP_SECONDS if worker.min_tasks == 0 else 0  # the latency thresholds allow a wake-up from zero
        function_alarms = {alarm.node.id: alarm for alarm in alarms.function_alarms}
        if isinstance(built.consumer, ConsumerFunction):
            check_function_alarms(env, label, built, worker, problems)
        for construct_id, severity in alarms.severity.items():
            alarm = function_alarms.get(construct_id) or getattr(
                alarms, re.sub(r"(?<!^)(?=[A-Z])", "_", construct_id).lower()
            )
            properties = _alarm_props(env, alarm)
            name = properties.get("AlarmName") or properties.get("CompositeAlarmName")
            expect(problems, label, f"{construct_id} name", name, f"{built.name_prefix}-{construct_id}")
            expected = page_topic if severity == "page" else ticket_topic
            expect(problems, label, f"{construct_id} actions", properties.get("AlarmActions"), expected)
            expect(problems, label, f"{construct_id} OK actions", properties.get("OKActions"), expected)
        _check_dlq_alarms(env, problems, label, built, contract)
        if not contract.fair_queue:
            expect(
                problems,
                label,
                "BacklogAge threshold",
                _alarm_props(env, alarms.backlog_age)["Threshold"],
                contract.backlog_age_alarm_seconds + wake,
            )
        late = _alarm_props(env, alarms.stalled_inputs[0])
        expect(problems, label, "stalled latency", late["Threshold"], contract.acceptable_latency_seconds + wake)
        for input_alarm in [*alarms.stalled_inputs, *alarms.dlq_expiring_inputs]:
            if {"AlarmActions", "OKActions"} & set(_alarm_props(env, input_alarm)):
                problems.append(f"{label}: the composite's input {input_alarm.node.id} notifies on its own")
    report(problems, "alarms")


#: DlqDepth: any DLQ message (visible or in flight) or a move the consumer counted, in any of 20 minutes.
DLQ_DEPTH_EXPRESSION = "FILL(visible, 0) + FILL(hidden, 0) + FILL(moved, 0)"
DLQ_DEPTH_PERIODS = 20
#: DlqHeldLong counts hours, at most CloudWatch's 7 days of evaluation for periods of an hour or more.
HOUR, MAX_HOURLY_PERIODS = 3_600, 7 * 24


def metric_stats(properties: dict[str, Any]) -> dict[str, tuple[str, str, Any, int, str]]:
    """A metric-math alarm's metrics by id: (namespace, name, dimensions, period, statistic)."""
    return {
        m["Id"]: (
            m["MetricStat"]["Metric"]["Namespace"],
            m["MetricStat"]["Metric"]["MetricName"],
            m["MetricStat"]["Metric"]["Dimensions"],
            m["MetricStat"]["Period"],
            m["MetricStat"]["Stat"],
        )
        for m in properties["Metrics"]
        if "MetricStat" in m
    }


def _check_dlq_alarms(
    env: Synthesized, problems: list[str], label: str, built: Worker, contract: WorkerContract
) -> None:
    """DlqDepth over the worker's own DLQ and consumer count; DlqExpiring any of its two inputs, thresholds derived."""
    alarms = built.alarms
    dlq = [{"Name": "QueueName", "Value": get_att(env, built.queues.dead_letter_queue, "QueueName")}]
    source = [{"Name": "Queue", "Value": get_att(env, built.queues.queue, "QueueName")}]
    depth = _alarm_props(env, alarms.dlq_depth)
    (expression,) = [m["Expression"] for m in depth["Metrics"] if m.get("ReturnData", True)]
    expect(problems, label, "DlqDepth expression", expression, DLQ_DEPTH_EXPRESSION)
    expect(
        problems,
        label,
        "DlqDepth metrics",
        metric_stats(depth),
        {
            "visible": ("AWS/SQS", "ApproximateNumberOfMessagesVisible", dlq, 60, "Maximum"),
            "hidden": ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", dlq, 60, "Maximum"),
            "moved": ("SqsWorker", "dead_lettered", source, 60, "Sum"),
        },
    )
    found = (depth["Threshold"], depth["EvaluationPeriods"], depth["DatapointsToAlarm"])
    expect(problems, label, "DlqDepth threshold, periods, datapoints", found, (1, DLQ_DEPTH_PERIODS, 1))
    oldest, held = (_alarm_props(env, alarm) for alarm in alarms.dlq_expiring_inputs)
    found = (oldest["Threshold"], oldest["Dimensions"])
    expect(problems, label, "DlqAge threshold and queue", found, (contract.dlq_age_alarm_seconds, dlq))
    hours = -(-contract.dlq_age_alarm_seconds // HOUR)
    expect(problems, label, "DlqHeldLong periods", (held["EvaluationPeriods"], held["DatapointsToAlarm"]), (hours,) * 2)
    if hours > MAX_HOURLY_PERIODS:
        problems.append(f"{label}: DlqHeldLong evaluates {hours} hours, over CloudWatch's {MAX_HOURLY_PERIODS}")
    expect(problems, label, "DlqHeldLong queue", {m[2] == dlq for m in metric_stats(held).values()}, {True})
    rule = [
        '(ALARM("',
        get_att(env, alarms.dlq_expiring_inputs[0], "Arn"),
        '") OR ALARM("',
        get_att(env, alarms.dlq_expiring_inputs[1], "Arn"),
        '"))',
    ]
    expect(
        problems,
        label,
        "DlqExpiring rule",
        _alarm_props(env, alarms.dlq_expiring)["AlarmRule"],
        {"Fn::Join": ["", rule]},
    )


def wake_up_alarms(env: Synthesized) -> set[str]:
    """The logical ids of the wake-up alarms (a min_tasks 0 worker's, infra/scaling.py): the alarm acting on each
    StepScaling policy of the template, as the alarm evaluator finds it (``check_step_policy`` refuses any other
    shape). They scale; they notify nobody."""
    resources = env.json["Resources"]
    return {
        check_step_policy(env.json, logical_id).alarm
        for logical_id, r in resources.items()
        if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy" and r["Properties"]["PolicyType"] == "StepScaling"
    }


def notifying_alarm_names(env: Synthesized) -> list[str]:
    """Every alarm of the template with actions, by name, sorted; a wake-up alarm's action scales (not a topic)."""
    wake_ups = wake_up_alarms(env)
    return sorted(
        resource["Properties"].get("AlarmName") or resource["Properties"]["CompositeAlarmName"]
        for logical_id, resource in env.json["Resources"].items()
        if resource["Type"] in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
        and resource["Properties"].get("AlarmActions")
        and logical_id not in wake_ups
    )


def check_topics_admit_exactly_the_notifying_alarms(env: Synthesized) -> None:
    """Both topic policies and the key policy let CloudWatch publish for exactly the alarms with actions (every
    worker's), by name: an alarm left out cannot page, one too many is someone else's."""
    problems: list[str] = []
    notifying = notifying_alarm_names(env)
    names = sorted(name for w in env.stack.workers.values() for name in w.alarms.notifying_alarm_names)
    expect(problems, env.stack.settings.name, "notifying alarms", notifying, names)
    policies = [p["Properties"]["PolicyDocument"] for p in env.resources("AWS::SNS::TopicPolicy").values()]
    policies.append(props(env, env.stack.paging.key)["KeyPolicy"])
    for number, policy in enumerate(policies):
        statements = [s for s in policy["Statement"] if s.get("Principal") == {"Service": CLOUDWATCH}]
        if len(statements) != 1:
            problems.append(f"{env.stack.settings.name}: policy {number} has {len(statements)} CloudWatch statements")
            continue
        arns = statements[0]["Condition"]["ArnEquals"]["aws:SourceArn"]
        admitted = sorted(arn["Fn::Join"][1][-1].removeprefix(":alarm:") for arn in arns)
        expect(problems, env.stack.settings.name, f"alarms policy {number} admits", admitted, notifying)
    report(problems, "topics")


def dashboard_body(env: Synthesized) -> dict[str, Any]:
    """The dashboard's body with every reference replaced by ``<logical id[.attribute]>``, parsed."""
    body = props(env, env.stack.dashboard.dashboard)["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    text = []
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        elif "Fn::GetAtt" in part:
            text.append("<" + ".".join(part["Fn::GetAtt"]) + ">")
        else:
            text.append("<" + part["Ref"] + ">")
    parsed: dict[str, Any] = json.loads("".join(text))
    return parsed


def check_dashboard(env: Synthesized) -> None:
    """The alarm status widgets list every worker's notifying alarms once, in order; each worker's graphs name its
    own queues and draw each alarm's reference line at the threshold that alarm compares (the template's)."""
    problems: list[str] = []
    widgets = dashboard_body(env)["widgets"]
    listed = [alarm for w in widgets if w["type"] == "alarm" for alarm in w["properties"]["alarms"]]
    expected = [f"<{env.logical_id(a)}.Arn>" for w in env.stack.workers.values() for a in w.alarms.paging_alarms]
    expect(problems, env.stack.settings.name, "alarm status widgets", listed, expected)
    text = json.dumps(widgets)
    for label, built, _, _ in workers(env):
        for queue in (built.queues.queue, built.queues.dead_letter_queue):
            if f"<{env.logical_id(queue)}.QueueName>" not in text:
                problems.append(f"{label}: no dashboard graph draws {queue.node.path}")
        prefix = widget_title(built.name if len(env.stack.workers) > 1 else None, "")
        drawn = {
            (w["properties"]["title"].removeprefix(prefix), line["label"]): line["value"]
            for w in widgets
            if w["type"] == "metric" and w["properties"]["title"].startswith(prefix)
            for line in w["properties"].get("annotations", {}).get("horizontal", [])
        }
        expect(problems, label, "dashboard reference lines", drawn, reference_lines(env, built))
    report(problems, "dashboard")


def reference_lines(env: Synthesized, built: Worker) -> dict[tuple[str, str], float]:
    """Every horizontal line a worker's graphs must draw, by (title, label): each alarm's at the Threshold its
    template resource compares, the scaling target and max_duration from the contract."""
    alarms, contract = built.alarms, built.contract

    def threshold(alarm: Any) -> float:
        value: float = _alarm_props(env, alarm)["Threshold"]
        return value

    age, fair = "Source queue: oldest message age (s)", built.metrics.fair is not None
    lines = {
        (age, "late backlog (ConsumerStalled input)"): threshold(alarms.stalled_backlog_late),
        ("DLQ: oldest message age (s)", "DlqAge (DlqExpiring input)"): threshold(alarms.dlq_expiring_inputs[0]),
        ("Consumer: handler duration (ms)", "max_duration"): contract.max_duration_seconds * 1000,
        (
            "Downstream circuit: opens per alarm period",
            f"DownstreamUnavailable alarm ({DOWNSTREAM_EVALUATION_PERIODS} periods in a row)",
        ): threshold(alarms.downstream_unavailable),
        **(
            {("Service: backlog per task", "scaling target"): contract.scaling_target_backlog_per_task}
            if built.target is None
            else function_reference_lines(env, built)
        ),
    }
    if fair:
        lines[
            ("Fair queue: oldest message age, quiet groups and whole queue (s)", "BacklogAge alarm (quiet groups)")
        ] = threshold(alarms.backlog_age)
    else:
        lines[(age, "BacklogAge alarm")] = threshold(alarms.backlog_age)
    return lines


# --------------------------------------------------------------------------- outputs, ids, runbook, nag


def check_outputs(env: Synthesized) -> None:
    """The outputs of the worker holding identity "default" keep their names, every other's start with its
    PascalCase name; WorkerNames lists them, that one first (python -m consumer dlq --stack --worker reads them)."""
    problems: list[str] = []
    outputs = env.json["Outputs"]
    names = list(env.stack.workers)
    expect(
        problems, env.stack.settings.name, WORKER_NAMES_OUTPUT, outputs[WORKER_NAMES_OUTPUT]["Value"], ",".join(names)
    )
    for label, built, worker, _ in workers(env):
        prefix = "" if worker.identity == DEFAULT_IDENTITY else output_prefix(built.name)
        for output, construct in (
            ("QueueUrl", built.queues.queue),
            ("DeadLetterQueueUrl", built.queues.dead_letter_queue),
        ):
            expect(
                problems,
                label,
                f"{prefix}{output}",
                outputs.get(f"{prefix}{output}", {}).get("Value"),
                ref(env, construct),
            )
        runs = "ServiceName" if worker.target != LAMBDA else "FunctionName"  # what runs the worker's consumer
        if f"{prefix}{runs}" not in outputs:
            problems.append(f"{label}: no {prefix}{runs} output")
    for shared in ("PagingTopicArn", "TicketTopicArn", "DashboardName", "ClusterName"):
        if shared not in outputs:
            problems.append(f"{env.stack.settings.name}: no {shared} output")
    report(problems, "outputs")


def check_logical_ids(env: Synthesized) -> None:
    """The worker holding identity "default" keeps a one-worker stack's logical ids (a replaced queue loses its
    messages); every other worker's start with its identity (infra/identities.py), whatever its place."""
    problems: list[str] = []
    for label, built, worker, _ in workers(env):
        found = {
            "source queue": env.logical_id(built.queues.queue),
            "dead-letter queue": env.logical_id(built.queues.dead_letter_queue),
        }
        if built.consumer.idempotency_table is not None:  # none for a handler idempotent by itself
            found["idempotency table"] = env.logical_id(built.consumer.idempotency_table)
        if worker.identity == DEFAULT_IDENTITY:
            kept = {what: i for what, i in FIRST_WORKER_LOGICAL_IDS.items() if what in found}
            expect(problems, label, "logical ids", found, kept)
        else:
            # The CDK keeps only letters and digits of a construct id in a logical id ("order-emails": "orderemails").
            prefix = re.sub(r"[^A-Za-z0-9]", "", worker.identity or worker.name)
            problems += [
                f"{label}: {what} is {i}, not under {prefix}" for what, i in found.items() if not i.startswith(prefix)
            ]
    report(problems, "logical ids")


def runbook_anchors() -> set[str]:
    """The anchors GitHub gives docs/runbook.md's second-level headings."""
    return {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("## ")
    }


def check_alarm_descriptions(env: Synthesized) -> None:
    """Every alarm's description ends with a link to an existing section of docs/runbook.md (or the environment's
    runbook_url) and fits CloudWatch's 1,024 characters."""
    problems: list[str] = []
    anchors = runbook_anchors()
    for logical_id, resource in env.json["Resources"].items():
        if resource["Type"] not in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm"):
            continue
        text = resource["Properties"]["AlarmDescription"]
        link = RUNBOOK_LINK.search(text)
        if len(text) > MAX_DESCRIPTION_CHARS:
            problems.append(f"{logical_id}: description of {len(text)} characters")
        if link is None or link.group(1) != env.stack.settings.runbook_url:
            problems.append(f"{logical_id}: no link to {env.stack.settings.runbook_url}: {text!r}")
        elif link.group(1) == "docs/runbook.md" and link.group(2) not in anchors:
            problems.append(f"{logical_id}: links #{link.group(2)}, not a heading of docs/runbook.md")
    report(problems, "alarm descriptions")


def check_nag(env: Synthesized) -> None:
    """cdk-nag's AwsSolutions pack ran (an open finding fails the synth before this) and left no open finding;
    every acknowledgement is one of the per-worker rules, with a real reason."""
    from infra.report import nag_results

    problems: list[str] = []
    open_findings, acknowledged = nag_results(env.outdir, env.stack.stack_name)
    if open_findings:
        problems.append(f"{env.stack.settings.name}: open findings {open_findings}")
    for rule, reason in acknowledged:
        if rule.split("[")[0] not in ACKNOWLEDGED_RULES or len(reason) < MIN_REASON_CHARS:
            problems.append(f"{env.stack.settings.name}: acknowledged {rule} with {reason!r}")
    report(problems, "cdk-nag")


#: The resource types that hold an environment's data: messages, idempotency records, logs, the topics' key.
DATA_TYPES = frozenset({"AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::KMS::Key"})
#: (DeletionPolicy, UpdateReplacePolicy) where cdk.json's retain_queues is true, and where it is false.
RETAINED = ("RetainExceptOnCreate", "Retain")
DISPOSABLE = ("Delete", "Delete")


def removal_policies(resource: dict[str, Any]) -> tuple[str, str]:
    """A resource's (DeletionPolicy, UpdateReplacePolicy), CloudFormation's default Delete where absent."""
    return resource.get("DeletionPolicy", "Delete"), resource.get("UpdateReplacePolicy", "Delete")


def check_data_retention(env: Synthesized) -> None:
    """A failed first deploy leaves nothing behind and a later delete keeps the data: every queue, table, log group
    and key is RetainExceptOnCreate + UpdateReplacePolicy Retain where the environment retains its data, Delete
    where it does not; nothing else outlives the stack, and nothing is plain Retain (kept even when the create that
    made it rolls back: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html)."""
    problems: list[str] = []
    name = env.stack.settings.name
    expected = RETAINED if env.stack.settings.retain_queues else DISPOSABLE
    resources = env.json["Resources"]
    data = {k: r for k, r in resources.items() if r["Type"] in DATA_TYPES}
    # Each worker's pair, table and log group, and the topics' key, at least (a vanished type would pass vacuously).
    if len(data) < 4 * len(env.stack.workers) + 1:
        problems.append(f"{name}: only {len(data)} data resources for {len(env.stack.workers)} workers")
    problems += [
        f"{name}: {k} ({r['Type']}) has {removal_policies(r)}, expected {expected}"
        for k, r in data.items()
        if removal_policies(r) != expected
    ]
    problems += [
        f"{name}: {k} ({r['Type']}) outlives the stack ({removal_policies(r)}) but holds no data"
        for k, r in resources.items()
        if r["Type"] not in DATA_TYPES and removal_policies(r) != DISPOSABLE
    ]
    problems += [f"{name}: {k} is plain Retain" for k, r in resources.items() if r.get("DeletionPolicy") == "Retain"]
    report(problems, "data retention")


#: Every check, by name: tests/infra/test_repository.py and tests/edits run each on every environment.
TEMPLATE_CHECKS: dict[str, Callable[[Synthesized], None]] = {
    "queues": check_queues,
    "services": check_services,
    "task roles": check_task_roles,
    "alarms": check_alarms,
    "topics": check_topics_admit_exactly_the_notifying_alarms,
    "dashboard": check_dashboard,
    "outputs": check_outputs,
    "logical ids": check_logical_ids,
    "alarm descriptions": check_alarm_descriptions,
    "data retention": check_data_retention,
    "network": check_network,
    "cdk-nag": check_nag,
}
