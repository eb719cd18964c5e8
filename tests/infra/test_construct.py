"""The Worker construct in a team's own CDK app: docs/construct.md's example, run as written, and its defaults."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra.conftest import standalone_worker

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "construct.md"
REPORT_JOB = "tests.reference:report_job"


def example() -> str:
    """The python block under docs/construct.md's "Example" heading."""
    match = re.search(r"^## Example\n.*?^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert match, "no python block under ## Example in docs/construct.md"
    return match.group(1)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The example's template: the block run as written by this Python, into a scratch cloud assembly.

    A process of its own because the CDK reads ``CDK_OUTDIR`` when its Node runtime starts. Its ``app.synth()``
    runs cdk-nag (``enable_nag``): an open finding exits non-zero and fails every test here. aws-cdk-lib's built-in
    CloudFormation validation is left off (``CDK_VALIDATION=false``), as for every test of one construct
    (tests/infra/conftest.py, ``synthesize``): it takes about 7 CPU seconds to start in a fresh process.
    """
    # The example deploys the shipped team package's report job: without it, there is nothing to run as written.
    pytest.importorskip(
        "workers.reports", reason="docs/construct.md's example runs workers.reports, not in this repository"
    )
    outdir = tmp_path_factory.mktemp("cdk.out")
    environment = {**os.environ, "CDK_OUTDIR": str(outdir), "PYTHONPATH": str(ROOT), "CDK_VALIDATION": "false"}
    done = subprocess.run(
        [sys.executable, "-c", example()], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parsed: dict[str, Any] = json.loads((outdir / "Reports.template.json").read_text())
    return parsed


def of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def only(template: dict[str, Any], resource_type: str) -> dict[str, Any]:
    (resource,) = of_type(template, resource_type).values()
    return resource


def test_example_builds_one_worker_named_by_its_construct_id(template: dict[str, Any]) -> None:
    """Queues ``<stack>-<name>-source``/``-dlq``, alarms ``<stack>-<name>-...``, logical ids starting with the name."""
    queues = of_type(template, "AWS::SQS::Queue")
    assert sorted(q["Properties"]["QueueName"] for q in queues.values()) == [
        "Reports-reports-dlq",
        "Reports-reports-source",
    ]
    assert all(logical_id.startswith("reports") for logical_id in queues)
    alarms = [a["Properties"]["AlarmName"] for a in of_type(template, "AWS::CloudWatch::Alarm").values()]
    assert alarms and all(name.startswith("Reports-reports-") for name in alarms)


def test_example_takes_its_timings_from_the_handlers_declaration(template: dict[str, Any]) -> None:
    """workers.reports declares 10 min: the queue's lease and the container's stop timeout follow from it."""
    from consumer.declaration import contract_of, load_handler

    contract = contract_of(load_handler("workers.reports:handle"))
    source = next(q for q in of_type(template, "AWS::SQS::Queue").values() if "source" in q["Properties"]["QueueName"])
    assert source["Properties"]["VisibilityTimeout"] == contract.visibility_timeout_seconds
    (container,) = only(template, "AWS::ECS::TaskDefinition")["Properties"]["ContainerDefinitions"]
    assert container["StopTimeout"] == contract.stop_timeout_seconds
    environment = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert environment["CONSUMER_HANDLER"] == "workers.reports:handle"
    assert environment["REPORTS_DRY_RUN"] == "true"


def test_defaults_are_the_documented_behaviour(template: dict[str, Any]) -> None:
    """docs/construct.md's defaults table: 1..max tasks, 0.25 vCPU / 512 MiB, logs a month, data retained, no secrets,
    IAM alone deciding who sends."""
    target = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")["Properties"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 4)  # max_tasks=4 in the example, min by default
    task = only(template, "AWS::ECS::TaskDefinition")
    assert (task["Properties"]["Cpu"], task["Properties"]["Memory"]) == ("256", "512")
    (container,) = task["Properties"]["ContainerDefinitions"]
    assert "Secrets" not in container
    logs = {container["LogConfiguration"]["Options"]["awslogs-group"]["Ref"]}
    assert [template["Resources"][k]["Properties"]["RetentionInDays"] for k in logs] == [30]
    data = [
        resource
        for resource_type in ("AWS::SQS::Queue", "AWS::DynamoDB::Table")
        for resource in of_type(template, resource_type).values()
    ] + [template["Resources"][k] for k in logs]
    # Kept through deletes and replacements, not by the rollback of the deploy that created them.
    retained = [(resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) for resource in data]
    assert retained == [("RetainExceptOnCreate", "Retain")] * 4
    (source_policy,) = [p for k, p in of_type(template, "AWS::SQS::QueuePolicy").items() if "QueuesQueuePolicy" in k]
    assert [s["Effect"] for s in source_policy["Properties"]["PolicyDocument"]["Statement"]] == ["Deny"]  # TLS only


def test_the_rest_of_the_defaults_are_the_documented_behaviour(template: dict[str, Any]) -> None:
    """docs/construct.md's defaults table, its other rows: no sources, the runbook at docs/runbook.md, Container
    Insights trusted (no running task data counts as none), no tracing sidecar."""
    subscriptions = of_type(template, "AWS::SNS::Subscription").values()
    assert [s for s in subscriptions if s["Properties"]["Protocol"] == "sqs"] == []
    assert of_type(template, "AWS::Events::Rule") == {}
    alarms = [
        *of_type(template, "AWS::CloudWatch::Alarm").values(),
        *of_type(template, "AWS::CloudWatch::CompositeAlarm").values(),
    ]
    assert alarms and all("Runbook: docs/runbook.md#" in a["Properties"]["AlarmDescription"] for a in alarms)
    (no_tasks,) = [a for k, a in of_type(template, "AWS::CloudWatch::Alarm").items() if "StalledNoRunningTasks" in k]
    assert no_tasks["Properties"]["TreatMissingData"] == "breaching"
    (task,) = of_type(template, "AWS::ECS::TaskDefinition").values()
    assert [c["Name"] for c in task["Properties"]["ContainerDefinitions"]] == ["Consumer"]


def test_the_default_target_is_a_service_not_a_function(template: dict[str, Any]) -> None:
    """docs/construct.md's settings.target row: left out, the worker runs as an ECS service, with no function or
    event source mapping."""
    services = of_type(template, "AWS::ECS::Service")
    functions = {k for k in of_type(template, "AWS::Lambda::Function") if k.startswith("reports")}
    assert (1, set(), {}) == (len(services), functions, of_type(template, "AWS::Lambda::EventSourceMapping"))


def test_example_keeps_nothing_its_failed_first_deploy_made(template: dict[str, Any]) -> None:
    """No resource of the example is plain Retain (the flow log's group included, which the CDK retains by
    default): a rolled-back first deploy deletes everything it made (docs/deploy.md, "When a deploy fails")."""
    retained = [k for k, r in template["Resources"].items() if r.get("DeletionPolicy") == "Retain"]
    assert retained == []
    kept = {r["Type"] for r in template["Resources"].values() if r.get("DeletionPolicy") == "RetainExceptOnCreate"}
    assert kept == {"AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::KMS::Key"}


def test_every_alarm_notifies_a_topic_that_admits_it(template: dict[str, Any]) -> None:
    """Each notifying alarm names one of the two topics, and that topic's policy admits the alarm by name."""
    topics = of_type(template, "AWS::SNS::Topic")
    policies = json.dumps(of_type(template, "AWS::SNS::TopicPolicy"))
    alarms = {**of_type(template, "AWS::CloudWatch::Alarm"), **of_type(template, "AWS::CloudWatch::CompositeAlarm")}
    notifying = {k: a for k, a in alarms.items() if a["Properties"].get("AlarmActions")}
    assert notifying
    for alarm in notifying.values():
        assert all(action.get("Ref") in topics for action in alarm["Properties"]["AlarmActions"])
        assert f':alarm:{alarm["Properties"]["AlarmName"]}"' in policies


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"cpu": 256, "memory_mib": 8192}, '"memory_mib" must be 512..2048 in steps of 512 for cpu 256: 8192'),
        ({"cpu": 300}, '"cpu" must be one of Fargate\'s CPU sizes [256, 512, 1024, 2048, 4096, 8192, 16384]: 300'),
        ({"min_tasks": 5, "max_tasks": 2}, '"max_tasks" must be between 5 and 100 (from min_tasks, and at least 1): 2'),
    ],
)
def test_the_construct_refuses_what_fargate_or_scaling_would(arguments: dict[str, Any], message: str) -> None:
    """Called directly (a team's app, no cdk.json), a size Fargate does not run or a max below the min is refused
    before anything is built, naming the argument, the rule and the value."""
    from consumer.errors import ContractError

    with pytest.raises(ContractError) as refused:
        standalone_worker(REPORT_JOB, **arguments)
    assert str(refused.value) == message


def test_the_construct_refuses_a_construct_id_no_worker_name_can_be() -> None:
    """A second worker's construct id is its name in every resource name: one outside the rule is refused, the
    argument named once, in quotes like every other."""
    from consumer.errors import ContractError
    from infra.worker_settings import WORKER_NAME_RULE

    with pytest.raises(ContractError) as refused:
        standalone_worker(REPORT_JOB, "Bad Id!")
    assert str(refused.value) == f"\"construct_id\" {WORKER_NAME_RULE}: 'Bad Id!'"
