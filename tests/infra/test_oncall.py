"""On-call readiness: alarm rules and routing, the stalled composite, the dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from consumer.contract import WorkerContract
from infra.capacity_settings import WAKE_UP_SECONDS
from infra.queue_alarms import dlq_held_hours
from infra.worker_settings import CONTEXT_KEY
from tests.infra.checks import check_dashboard, dashboard_body
from tests.infra.conftest import Synthesized, synthesize


def props(env: Synthesized, construct: Any) -> dict[str, Any]:
    return env.json["Resources"][env.logical_id(construct)]["Properties"]


def ref(env: Synthesized, construct: Any) -> dict[str, str]:
    return {"Ref": env.logical_id(construct)}


def arn(env: Synthesized, construct: Any) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [env.logical_id(construct), "Arn"]}


def dlq_dimensions(env: Synthesized) -> list[dict[str, Any]]:
    return [
        {
            "Name": "QueueName",
            "Value": {"Fn::GetAtt": [env.logical_id(env.stack.queues.dead_letter_queue), "QueueName"]},
        }
    ]


def metric_stats(alarm: dict[str, Any]) -> dict[str, tuple[str, str, Any, int, str]]:
    """A metric-math alarm's metrics by id: namespace, name, dimensions, period, statistic (each ReturnData false)."""
    stats = {}
    for m in alarm["Metrics"]:
        if "MetricStat" in m:
            assert m["ReturnData"] is False, m["Id"]
            metric = m["MetricStat"]["Metric"]
            stats[m["Id"]] = (
                metric["Namespace"],
                metric["MetricName"],
                metric["Dimensions"],
                m["MetricStat"]["Period"],
                m["MetricStat"]["Stat"],
            )
    return stats


def test_dlq_new_arrivals_alarm_fires_when_a_non_empty_dlq_grows(prod: Synthesized) -> None:
    """Metric math on what the DLQ holds (visible + in flight, so a peek's hidden messages coming back are no
    arrival): the rise, counted only when the DLQ already held messages."""
    alarm = props(prod, prod.stack.alarms.dlq_new_arrivals)
    expressions = {m["Id"]: m for m in alarm["Metrics"] if "Expression" in m}
    (returned,) = [m for m in expressions.values() if m["ReturnData"]]
    assert returned["Expression"] == "IF(DIFF(dlq) > 0 AND (dlq - DIFF(dlq)) > 0, DIFF(dlq), 0)"
    assert (expressions["dlq"]["Expression"], expressions["dlq"]["ReturnData"]) == ("visible + hidden", False)
    dlq = dlq_dimensions(prod)
    assert metric_stats(alarm) == {
        "visible": ("AWS/SQS", "ApproximateNumberOfMessagesVisible", dlq, 60, "Maximum"),
        "hidden": ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", dlq, 60, "Maximum"),
    }
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")
    topic = [ref(prod, prod.stack.paging.topic)]
    assert (alarm["AlarmActions"], alarm["OKActions"]) == (topic, topic)


def test_dlq_depth_alarm_counts_held_messages_and_the_consumers_moves(prod: Synthesized) -> None:
    """FILL(visible) + FILL(hidden) + FILL(moved) >= 1 in any of 20 minutes: the DLQ's own counts, or the consumer's
    dead_lettered (EMF, per source queue) while a sleeping DLQ's metrics are late; latched 20 minutes after it
    empties, missing data not breaching."""
    alarm = props(prod, prod.stack.alarms.dlq_depth)
    (returned,) = [m for m in alarm["Metrics"] if m.get("ReturnData", True)]
    assert returned["Expression"] == "FILL(visible, 0) + FILL(hidden, 0) + FILL(moved, 0)"
    dlq = dlq_dimensions(prod)
    source = [{"Name": "Queue", "Value": {"Fn::GetAtt": [prod.logical_id(prod.stack.queues.queue), "QueueName"]}}]
    assert metric_stats(alarm) == {
        "visible": ("AWS/SQS", "ApproximateNumberOfMessagesVisible", dlq, 60, "Maximum"),
        "hidden": ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", dlq, 60, "Maximum"),
        "moved": ("SqsWorker", "dead_lettered", source, 60, "Sum"),
    }
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (20, 1)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmDescription"].endswith("Runbook: docs/runbook.md#dlq-depth")
    topic = [ref(prod, prod.stack.paging.topic)]
    assert (alarm["AlarmActions"], alarm["OKActions"]) == (topic, topic)


def test_dlq_age_is_any_of_its_two_inputs_which_notify_nobody(prod: Synthesized) -> None:
    """DlqExpiring pages on ALARM(DlqAge) OR ALARM(DlqHeldLong): the oldest DLQ message past half the retention gap,
    or the DLQ never empty in any hour for as long (the hour's least visible + most in flight); the inputs have no
    actions."""
    alarms = prod.stack.alarms
    oldest_alarm, held_alarm = alarms.dlq_expiring_inputs
    composite = props(prod, alarms.dlq_expiring)
    assert composite["AlarmName"] == "SqsWorker-prod-DlqExpiring"
    assert composite["AlarmRule"] == {
        "Fn::Join": ["", ['(ALARM("', arn(prod, oldest_alarm), '") OR ALARM("', arn(prod, held_alarm), '"))']]
    }
    topic = [ref(prod, prod.stack.paging.topic)]
    assert (composite["AlarmActions"], composite["OKActions"]) == (topic, topic)
    assert composite["AlarmDescription"].endswith("Runbook: docs/runbook.md#dlq-expiring")
    seconds = prod.stack.contract.dlq_age_alarm_seconds
    assert seconds == 5 * 86_400  # prod: (14 - 4) days / 2
    oldest, held = props(prod, oldest_alarm), props(prod, held_alarm)
    assert (oldest["AlarmName"], held["AlarmName"]) == ("SqsWorker-prod-DlqAge", "SqsWorker-prod-DlqHeldLong")
    dlq = dlq_dimensions(prod)
    assert (oldest["Namespace"], oldest["MetricName"], oldest["Dimensions"]) == (
        "AWS/SQS",
        "ApproximateAgeOfOldestMessage",
        dlq,
    )
    assert (oldest["Statistic"], oldest["Period"], oldest["Threshold"]) == ("Maximum", 60, seconds)
    assert (oldest["ComparisonOperator"], oldest["EvaluationPeriods"]) == ("GreaterThanThreshold", 1)
    (returned,) = [m for m in held["Metrics"] if m.get("ReturnData", True)]
    assert returned["Expression"] == "FILL(visible, 0) + FILL(hidden, 0)"
    assert metric_stats(held) == {
        "visible": ("AWS/SQS", "ApproximateNumberOfMessagesVisible", dlq, 3_600, "Minimum"),
        "hidden": ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", dlq, 3_600, "Maximum"),
    }
    assert (held["Threshold"], held["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (held["EvaluationPeriods"], held["DatapointsToAlarm"]) == (120, 120)  # 5 days in hours
    for inputs in (oldest, held):
        assert inputs["TreatMissingData"] == "notBreaching"
        assert "AlarmActions" not in inputs and "OKActions" not in inputs
        assert inputs["AlarmDescription"].endswith("Runbook: docs/runbook.md#dlq-expiring")
    assert "DlqAge" not in alarms.severity and "DlqHeldLong" not in alarms.severity


@pytest.mark.parametrize(
    ("source_days", "dlq_days", "hours"),
    [(None, 14, 168), (1, 3, 24), (4, 14, 120)],
    ids=["widest", "narrowest", "4-14"],
)
def test_dlq_held_long_fits_cloudwatchs_evaluation_range_at_the_contracts_bounds(
    source_days: int | None, dlq_days: int, hours: int
) -> None:
    """DlqHeldLong's hourly periods cover dlq_age_alarm_seconds, rounded up, and stay within the 7 days PutMetricAlarm
    allows for periods of an hour or more, from the widest retention gap a contract accepts (60 s to 14 days) to the
    narrowest (2 days)."""
    contract = WorkerContract(
        max_duration_seconds=1,
        max_receive_count=2,
        source_retention_seconds=60 if source_days is None else source_days * 86_400,
        dlq_retention_seconds=dlq_days * 86_400,
    )
    assert dlq_held_hours(contract) == hours
    assert (hours - 1) * 3_600 < contract.dlq_age_alarm_seconds <= hours * 3_600 <= 7 * 86_400


def test_dlq_depth_alarm_sends_ok_when_the_dlq_is_drained(reference: dict[str, Synthesized]) -> None:
    """Every alarm with actions sends OK to the same topic as ALARM, so a drained DLQ says so."""
    for env in reference.values():
        for alarm in env.stack.alarms.paging_alarms:
            properties = props(env, alarm)
            assert properties["OKActions"] == properties["AlarmActions"], alarm.node.path
            assert len(properties["AlarmActions"]) == 1


def test_consumer_stalled_rule_is_late_and_idle_or_no_tasks(prod: Synthesized) -> None:
    """(oldest message past the acceptable latency AND nothing deleted) OR no running task."""
    alarms = prod.stack.alarms
    late, idle, no_tasks = alarms.stalled_inputs
    rule = props(prod, alarms.consumer_stalled)["AlarmRule"]
    assert rule == {
        "Fn::Join": [
            "",
            [
                '((ALARM("',
                arn(prod, late),
                '") AND ALARM("',
                arn(prod, idle),
                '")) OR ALARM("',
                arn(prod, no_tasks),
                '"))',
            ],
        ]
    }
    topic = [ref(prod, prod.stack.paging.topic)]
    composite = props(prod, alarms.consumer_stalled)
    assert (composite["AlarmActions"], composite["OKActions"]) == (topic, topic)


def test_consumer_stalled_inputs_catch_a_service_scaled_to_zero(prod: Synthesized) -> None:
    """Zero tasks: no deletes (missing data breaches) and no RunningTaskCount (breaches) both fire."""
    late, idle, no_tasks = (props(prod, a) for a in prod.stack.alarms.stalled_inputs)
    assert (late["MetricName"], late["Threshold"], late["ComparisonOperator"]) == (
        "ApproximateAgeOfOldestMessage",
        prod.stack.contract.acceptable_latency_seconds,
        "GreaterThanThreshold",
    )
    assert (idle["MetricName"], idle["Statistic"], idle["Threshold"], idle["ComparisonOperator"]) == (
        "NumberOfMessagesDeleted",
        "Sum",
        1,
        "LessThanThreshold",
    )
    assert (idle["EvaluationPeriods"], idle["TreatMissingData"]) == (5, "breaching")
    assert (no_tasks["Namespace"], no_tasks["MetricName"], no_tasks["Threshold"]) == (
        "ECS/ContainerInsights",
        "RunningTaskCount",
        1,
    )
    assert (no_tasks["ComparisonOperator"], no_tasks["TreatMissingData"]) == ("LessThanThreshold", "breaching")
    assert {d["Name"] for d in no_tasks["Dimensions"]} == {"ClusterName", "ServiceName"}
    for inputs in (late, idle, no_tasks):
        assert "AlarmActions" not in inputs and "OKActions" not in inputs


def test_consumer_stalled_with_an_existing_cluster_does_not_page_on_missing_task_data(tmp_path: Path) -> None:
    """An existing cluster may lack Container Insights: its no-task input treats missing data as not breaching."""
    existing = {
        "handler": "consumer.examples.notifications:handle",
        "vpc": {"vpc_id": "vpc-0abc", "availability_zones": ["eu-west-1a"], "private_subnet_ids": ["subnet-1"]},
        "cluster_name": "shared",
    }
    env = synthesize(tmp_path, {CONTEXT_KEY: {"byo": existing}})["byo"]
    no_tasks = props(env, env.stack.alarms.stalled_inputs[2])
    assert (no_tasks["MetricName"], no_tasks["TreatMissingData"]) == ("RunningTaskCount", "notBreaching")


@pytest.mark.parametrize(
    ("name", "page_to"),
    [("dev", "tickets"), ("demo", "tickets"), ("staging", "paging"), ("prod", "paging")],
)
def test_severity_routing_per_environment(reference: dict[str, Synthesized], name: str, page_to: str) -> None:
    """Pages go to the paging topic unless the environment sends them to tickets; tickets always to tickets."""
    env = reference[name]
    alarms, stack = env.stack.alarms, env.stack
    page_topic = [ref(env, getattr(stack, page_to).topic)]
    ticket_topic = [ref(env, stack.tickets.topic)]
    for construct_id, severity in alarms.severity.items():
        alarm = getattr(alarms, re.sub(r"(?<!^)(?=[A-Z])", "_", construct_id).lower())
        expected = page_topic if severity == "page" else ticket_topic
        assert props(env, alarm)["AlarmActions"] == expected, construct_id
    assert alarms.severity == {
        "DlqDepth": "page",
        "DlqNewArrivals": "page",
        "DlqExpiring": "page",
        "BacklogAge": "ticket",
        "ConsumerStalled": "page",
        "DownstreamUnavailable": "page",
    }


def test_ticket_topic_shares_the_paging_key(prod: Synthesized) -> None:
    """One KMS key (already admitting CloudWatch) encrypts both topics: no second key to pay for."""
    key = arn(prod, prod.stack.paging.key)
    assert props(prod, prod.stack.tickets.topic)["KmsMasterKeyId"] == key
    assert props(prod, prod.stack.paging.topic)["KmsMasterKeyId"] == key
    assert len(prod.resources("AWS::KMS::Key")) == 1


def _dashboard(env: Synthesized) -> str:
    """The dashboard body with every reference replaced by its logical id, as one string."""
    return json.dumps(dashboard_body(env), separators=(",", ":"))


def test_dashboard_graphs_both_queues_by_their_own_names(dev: Synthesized) -> None:
    """Source and DLQ widgets name the queues of this stack, by reference, with the alarms' statistics."""
    body = dashboard_body(dev)
    source = f"<{dev.logical_id(dev.stack.queues.queue)}.QueueName>"
    dlq = f"<{dev.logical_id(dev.stack.queues.dead_letter_queue)}.QueueName>"
    graphs = {w["properties"]["title"]: w["properties"] for w in body["widgets"] if w["type"] == "metric"}
    assert graphs["Source queue: depth"]["metrics"] == [
        ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", source, {"period": 60, "stat": "Maximum"}],
        ["AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "QueueName", source, {"period": 60, "stat": "Maximum"}],
    ]
    assert graphs["DLQ: oldest message age (s)"]["metrics"] == [
        ["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", dlq, {"period": 60, "stat": "Maximum"}]
    ]
    assert graphs["DLQ: oldest message age (s)"]["annotations"]["horizontal"][0]["value"] == (
        dev.stack.contract.dlq_age_alarm_seconds
    )


def test_dashboard_shows_the_consumers_own_metrics_and_the_scaling_target(dev: Synthesized) -> None:
    """processed/failed/poisoned, duration p50/p90/p99, extensions, requests per message, tasks, backlog per task."""
    body = _dashboard(dev)
    for metric in ("processed", "failed", "poisoned", "visibility_extensions", "sqs_requests", "duration"):
        assert f'"SqsWorker","{metric}","Queue","<{dev.logical_id(dev.stack.queues.queue)}.QueueName>"' in body
    for stat in ("p50", "p90", "p99"):
        assert f'"stat":"{stat}"' in body
    assert '"expression":"requests / processed"' in body
    assert '"expression":"backlog / tasks"' in body
    assert '"ECS/ContainerInsights","RunningTaskCount"' in body
    target = dev.stack.contract.scaling_target_backlog_per_task
    assert f'{{"value":{target},"label":"scaling target","yAxis":"left"}}' in body


def test_dashboard_alarm_widget_lists_every_alarm_with_actions(dev: Synthesized) -> None:
    """The status row shows exactly the alarms that notify someone."""
    body = dashboard_body(dev)
    (status,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    expected = [f"<{dev.logical_id(a)}.Arn>" for a in dev.stack.alarms.paging_alarms]
    assert status["properties"]["alarms"] == expected


@pytest.mark.parametrize(
    ("attribute", "metric", "threshold", "periods", "comparison", "section"),
    [
        ("dlq_new_arrivals", None, 1, 1, "GreaterThanOrEqualToThreshold", "dlq-new-arrivals"),
        (
            "backlog_age",
            "ApproximateAgeOfOldestMessage",
            "backlog_age_alarm_seconds",
            3,
            "GreaterThanThreshold",
            "backlog-age",
        ),
        ("downstream_unavailable", "circuit_opens", 1, 3, "GreaterThanOrEqualToThreshold", "downstream-unavailable"),
    ],
)
def test_each_metric_alarm_rule_and_runbook_section(
    prod: Synthesized, attribute: str, metric: str | None, threshold: Any, periods: int, comparison: str, section: str
) -> None:
    """Metric, threshold (from the contract), periods, comparison, missing data and the runbook section named."""
    alarm = props(prod, getattr(prod.stack.alarms, attribute))
    expected = threshold if isinstance(threshold, int) else getattr(prod.stack.contract, threshold)
    assert alarm.get("MetricName") == metric
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (expected, comparison)
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (periods, periods)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmDescription"].endswith(f"Runbook: docs/runbook.md#{section}")


def test_downstream_unavailable_counts_the_consumers_circuit_opens_per_derived_period(prod: Synthesized) -> None:
    """Sum of the consumer's circuit_opens (EMF: SqsWorker, Queue = the source), one period of the longest gap between
    opens in an outage (prod: 300 s cap + 20 s poll + 90 s handler + 61 s flush, up to 480 s), paging."""
    alarm = props(prod, prod.stack.alarms.downstream_unavailable)
    source = {"Fn::GetAtt": [prod.logical_id(prod.stack.queues.queue), "QueueName"]}
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Dimensions"]) == (
        "SqsWorker",
        "circuit_opens",
        [{"Name": "Queue", "Value": source}],
    )
    assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 480)
    assert alarm["AlarmName"] == "SqsWorker-prod-DownstreamUnavailable"
    topic = [ref(prod, prod.stack.paging.topic)]
    assert (alarm["AlarmActions"], alarm["OKActions"]) == (topic, topic)


def test_dashboard_draws_the_circuit_with_the_alarms_threshold(prod: Synthesized) -> None:
    """The circuit row: opens at the alarm's period with its threshold, and the longest time open."""
    body = dashboard_body(prod)
    graphs = {w["properties"]["title"]: w["properties"] for w in body["widgets"] if w["type"] == "metric"}
    source = f"<{prod.logical_id(prod.stack.queues.queue)}.QueueName>"
    opens = graphs["Downstream circuit: opens per alarm period"]
    assert opens["metrics"] == [["SqsWorker", "circuit_opens", "Queue", source, {"period": 480, "stat": "Sum"}]]
    assert opens["annotations"]["horizontal"] == [
        {"value": 1, "label": "DownstreamUnavailable alarm (3 periods in a row)", "yAxis": "left"}
    ]
    assert graphs["Downstream circuit: longest time open (ms)"]["metrics"] == [
        [
            "SqsWorker",
            "circuit_open",
            "Queue",
            source,
            {"label": "circuit open, longest per close (ms)", "period": 60, "stat": "Maximum"},
        ]
    ]


def test_dashboard_lines_are_the_thresholds_their_alarms_compare_in_every_environment(
    reference: dict[str, Synthesized],
) -> None:
    """Each reference line of each worker's graphs sits at the Threshold of the alarm it names, in every reference
    environment (a worker at zero tasks, one at two, two workers on one dashboard): checks.check_dashboard."""
    for env in reference.values():
        check_dashboard(env)


def test_dashboard_draws_the_wake_up_allowance_the_latency_alarms_compare(dev: Synthesized) -> None:
    """dev scales to zero: its late-backlog and BacklogAge lines carry WAKE_UP_SECONDS, as their alarms do (without
    it they would sit at 60 s and 374 s while the alarms fire past 1,200 s and 1,514 s)."""
    contract = dev.stack.contract
    body = dashboard_body(dev)
    (age,) = [w for w in body["widgets"] if w["properties"].get("title") == "Source queue: oldest message age (s)"]
    lines = {line["label"]: line["value"] for line in age["properties"]["annotations"]["horizontal"]}
    assert lines == {
        "late backlog (ConsumerStalled input)": contract.acceptable_latency_seconds + WAKE_UP_SECONDS,
        "BacklogAge alarm": contract.backlog_age_alarm_seconds + WAKE_UP_SECONDS,
    }
