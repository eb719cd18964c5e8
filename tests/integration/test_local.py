"""Local provisioning from the synthesized template (the consumer running against it as a user starts it:
tests/integration/test_local_run.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.sqs.models import DEFAULT_SENDER_ID

from consumer.contract import BINDING_KEYS, WorkerContract
from consumer.local.stack import (
    LOCAL_SKIPPED_TYPES,
    LocalProvisioningError,
    LocalStack,
    _resolve,
    provision,
    start_server,
)


@pytest.fixture(scope="module")
def dev_template(cdk_out: Path) -> Path:
    """The dev stack's template, synthesized by the real entry point."""
    return cdk_out / "SqsWorker-dev.template.json"


@pytest.fixture(scope="module")
def local(dev_template: Path) -> Iterator[LocalStack]:
    """A fresh moto server with the dev stack provisioned from its template."""
    server, endpoint = start_server()
    try:
        yield provision(endpoint, dev_template)
    finally:
        server.stop()


def client(local: LocalStack, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=local.endpoint,
        region_name="eu-west-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_local_queues_carry_the_contracts_timings(local: LocalStack) -> None:
    """The template's queues exist locally with the dev contract's visibility, retention and redrive."""
    contract = WorkerContract.from_env(local.task_environment)
    sqs = client(local, "sqs")
    source = sqs.get_queue_attributes(QueueUrl=local.task_environment["QUEUE_URL"], AttributeNames=["All"])[
        "Attributes"
    ]
    dlq = sqs.get_queue_attributes(QueueUrl=local.task_environment["DLQ_URL"], AttributeNames=["All"])["Attributes"]
    assert int(source["VisibilityTimeout"]) == contract.visibility_timeout_seconds == 100
    assert int(source["MessageRetentionPeriod"]) == contract.source_retention_seconds == 86_400
    assert int(dlq["MessageRetentionPeriod"]) == contract.dlq_retention_seconds == 604_800
    redrive = json.loads(source["RedrivePolicy"])
    assert (redrive["maxReceiveCount"], redrive["deadLetterTargetArn"]) == (7, dlq["QueueArn"])


def test_local_task_environment_is_the_templates_resolved(local: LocalStack) -> None:
    """Every key the task would get (dev's declared dry run too), queue URLs on the local endpoint, a real local table."""
    environment = local.task_environment
    # CONSUMER_FAIR_QUEUE, CONSUMER_IDEMPOTENT and the batch and async shapes' fields are written only when a worker
    # declares them (dev's does not).
    assert set(environment) == WorkerContract.env_keys() - {
        "CONSUMER_FAIR_QUEUE",
        "CONSUMER_IDEMPOTENT",
        "CONSUMER_MAX_BATCH",
        "CONSUMER_BATCH_WINDOW_SECONDS",
        "CONSUMER_ASYNCHRONOUS",
    } | BINDING_KEYS | {"NOTIFY_DRY_RUN"}
    assert environment["QUEUE_URL"] == f"{local.endpoint}/123456789012/SqsWorker-dev-source"
    tables = client(local, "dynamodb").list_tables()["TableNames"]
    assert environment["CONSUMER_IDEMPOTENCY_TABLE"] in tables
    # moto gives every message one SenderId, whoever sent it: locally that is the task role's copies' sender.
    assert environment["CONSUMER_TASK_ROLE_ID"] == DEFAULT_SENDER_ID


def test_local_alarms_come_from_the_template(local: LocalStack, dev_template: Path) -> None:
    """Every metric and metric-math alarm moto's CloudFormation skips is created from the template itself."""
    resources = json.loads(dev_template.read_text())["Resources"]
    metric_alarms = {k for k, v in resources.items() if v["Type"] == "AWS::CloudWatch::Alarm"}
    alarms = {a["AlarmName"]: a for a in client(local, "cloudwatch").describe_alarms()["MetricAlarms"]}
    assert set(alarms) == {f"{local.stack_name}-{logical_id}" for logical_id in metric_alarms}
    assert len(alarms) == 10  # with DownstreamUnavailable, DlqExpiring's two inputs, and the wake-up (dev is at zero)
    contract = WorkerContract.from_env(local.task_environment)
    dlq = [{"Name": "QueueName", "Value": "SqsWorker-dev-dlq"}]

    def alarm(construct_id: str) -> dict[str, Any]:
        (found,) = [a for k, a in alarms.items() if k.startswith(f"{local.stack_name}-Alarms{construct_id}")]
        return found

    def metrics(found: dict[str, Any]) -> tuple[list[str], dict[str, tuple[str, Any, int]]]:
        expressions = [m["Expression"] for m in found["Metrics"] if "Expression" in m]
        stats = {
            m["Id"]: (
                m["MetricStat"]["Metric"]["MetricName"],
                m["MetricStat"]["Metric"]["Dimensions"],
                m["MetricStat"]["Period"],
            )
            for m in found["Metrics"]
            if "MetricStat" in m
        }
        return expressions, stats

    oldest, held = alarm("DlqAge"), alarm("DlqHeldLong")
    assert (oldest["MetricName"], oldest["Threshold"]) == (
        "ApproximateAgeOfOldestMessage",
        contract.dlq_age_alarm_seconds,
    )
    assert oldest["Dimensions"] == dlq
    assert held["EvaluationPeriods"] * 3_600 == contract.dlq_age_alarm_seconds  # dev: (7 - 1) days / 2, in hours
    assert metrics(held) == (
        ["FILL(visible, 0) + FILL(hidden, 0)"],
        {
            "visible": ("ApproximateNumberOfMessagesVisible", dlq, 3_600),
            "hidden": ("ApproximateNumberOfMessagesNotVisible", dlq, 3_600),
        },
    )
    for inputs in (oldest, held):  # DlqExpiring's inputs notify nobody; the composite (skipped locally) does
        assert (inputs["AlarmActions"], inputs["OKActions"]) == ([], [])
    depth = alarm("DlqDepth")
    # dev sends its pages to the ticket topic (pages_to_tickets in cdk.json).
    assert depth["AlarmActions"] == [local.outputs["TicketTopicArn"]]
    assert (depth["EvaluationPeriods"], depth["DatapointsToAlarm"]) == (20, 1)
    expressions, stats = metrics(depth)
    assert expressions == ["FILL(visible, 0) + FILL(hidden, 0) + FILL(moved, 0)"]
    assert stats == {
        "visible": ("ApproximateNumberOfMessagesVisible", dlq, 60),
        "hidden": ("ApproximateNumberOfMessagesNotVisible", dlq, 60),
        "moved": ("dead_lettered", [{"Name": "Queue", "Value": "SqsWorker-dev-source"}], 60),
    }
    expressions, stats = metrics(alarm("DlqNewArrivals"))
    assert expressions == ["IF(DIFF(dlq) > 0 AND (dlq - DIFF(dlq)) > 0, DIFF(dlq), 0)", "visible + hidden"]
    assert stats == {
        "visible": ("ApproximateNumberOfMessagesVisible", dlq, 60),
        "hidden": ("ApproximateNumberOfMessagesNotVisible", dlq, 60),
    }
    skipped = [k for k, v in resources.items() if v["Type"] in LOCAL_SKIPPED_TYPES]
    # The two composite alarms (ConsumerStalled, DlqExpiring), the dashboard, the default security group's stripping
    # and its provider's function.
    assert len(skipped) == 5
    # dev scales to zero: its wake-up alarm is created without its step policy action (the harness runs the tasks).
    (wake_up,) = [k for k, v in resources.items() if v["Properties"].get("PolicyType") == "StepScaling"]
    assert [s.split(" ")[0] for s in local.skipped] == [*skipped, wake_up]
    assert alarm_named(alarms, "ConsumerWakeUpAlarm")["AlarmActions"] == []


def test_local_provision_without_a_template_says_how_to_make_one(tmp_path: Path) -> None:
    """A missing cdk.out gives the command that creates it."""
    with pytest.raises(LocalProvisioningError, match=r"synthesize first \(python app.py or make run\)"):
        provision("http://127.0.0.1:9", tmp_path / "SqsWorker-dev.template.json")


def test_local_reference_to_an_unknown_resource_is_a_clear_error() -> None:
    """A Ref the local stack cannot resolve names itself instead of failing on a missing value."""
    with pytest.raises(LocalProvisioningError, match="Nowhere"):
        _resolve({"Ref": "Nowhere"}, {}, "http://127.0.0.1:1")


def alarm_named(alarms: dict[str, Any], construct_path: str) -> dict[str, Any]:
    """The one alarm whose name (``<stack>-<logical id>``) holds ``construct_path``."""
    (found,) = [a for name, a in alarms.items() if construct_path in name]
    return found
