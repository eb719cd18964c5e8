"""Several workers in one environment: a queue pair, a service and alarms each, one dashboard, CloudWatch's limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from consumer.stack_outputs import WORKER_METADATA_KEY
from infra.dashboard import widget_title
from infra.limits import MAX_ALARM_RULE, MAX_STACK_RESOURCES, MAX_TEMPLATE_BYTES
from infra.settings import MAX_WORKERS
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import Synthesized, synthesize_once
from tests.infra.templates import SHARED, dashboard_body, of_type

NOTIFY = {"handler": "consumer.examples.notifications:handle", "handler_environment": {"NOTIFY_DRY_RUN": "true"}}
EXPORTS = {"handler": "tests.infra.handlers:five_minutes", "max_tasks": 4, "cpu": 512, "memory_mib": 1024}
#: The test environments: one worker, two workers, and the most an environment supports.
ENVIRONMENTS = {
    "one": {**SHARED, "workers": {"exports": EXPORTS}},
    "two": {**SHARED, "workers": {"notify": NOTIFY, "exports": EXPORTS}},
    "most": {**SHARED, "workers": {f"w{i}": EXPORTS for i in range(1, MAX_WORKERS + 1)}},
}
# https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html
CFN_MAX_RESOURCES, CFN_MAX_OUTPUTS, CFN_MAX_TEMPLATE_BYTES = MAX_STACK_RESOURCES, 200, MAX_TEMPLATE_BYTES
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_limits.html (widgets per dashboard),
# the dashboard body structure (alarms per alarm status widget), PutCompositeAlarm (AlarmRule length).
CW_MAX_WIDGETS, CW_MAX_STATUS_ALARMS, CW_MAX_ALARM_RULE_CHARS = 500, 100, MAX_ALARM_RULE


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """Both environments synthesized once, cdk-nag included (an open finding fails the synth)."""
    return synthesize_once(tmp_path_factory, {CONTEXT_KEY: ENVIRONMENTS})


def test_two_workers_have_a_queue_pair_a_service_and_dlq_alarms_each(envs: dict[str, Synthesized]) -> None:
    """Each worker gets its own source and DLQ, Fargate service, table and DLQ depth alarm, named after it."""
    env = envs["two"]
    queues = sorted(q["Properties"]["QueueName"] for q in of_type(env, "AWS::SQS::Queue").values())
    assert queues == [
        "SqsWorker-two-dlq",
        "SqsWorker-two-exports-dlq",
        "SqsWorker-two-exports-source",
        "SqsWorker-two-source",
    ]
    assert len(of_type(env, "AWS::ECS::Service")) == 2
    assert len(of_type(env, "AWS::DynamoDB::Table")) == 2
    alarms = {a["Properties"]["AlarmName"] for a in of_type(env, "AWS::CloudWatch::Alarm").values()}
    assert {"SqsWorker-two-DlqDepth", "SqsWorker-two-exports-DlqDepth"} <= alarms
    inputs = {f"SqsWorker-two-{w}{i}" for w in ("", "exports-") for i in ("DlqAge", "DlqHeldLong")}
    assert inputs <= alarms
    composites = {a["Properties"]["AlarmName"] for a in of_type(env, "AWS::CloudWatch::CompositeAlarm").values()}
    assert composites == {
        "SqsWorker-two-ConsumerStalled",
        "SqsWorker-two-exports-ConsumerStalled",
        "SqsWorker-two-DlqExpiring",
        "SqsWorker-two-exports-DlqExpiring",
    }


def test_each_worker_is_timed_and_sized_from_its_own_declaration(envs: dict[str, Synthesized]) -> None:
    """notify (90 s) gets a 100 s visibility timeout, exports (5 min) 330 s; each task runs its own handler and size."""
    env = envs["two"]
    visibility = {
        q["Properties"]["QueueName"]: q["Properties"]["VisibilityTimeout"]
        for q in of_type(env, "AWS::SQS::Queue").values()
        if "RedrivePolicy" in q["Properties"]
    }
    assert visibility == {"SqsWorker-two-source": 100, "SqsWorker-two-exports-source": 330}
    tasks = {}
    for definition in of_type(env, "AWS::ECS::TaskDefinition").values():
        (container,) = definition["Properties"]["ContainerDefinitions"]
        variables = {e["Name"]: e["Value"] for e in container["Environment"]}
        tasks[variables["CONSUMER_HANDLER"]] = (definition["Properties"]["Cpu"], "NOTIFY_DRY_RUN" in variables)
    assert tasks == {
        "consumer.examples.notifications:handle": ("256", True),
        "tests.infra.handlers:five_minutes": ("512", False),
    }


def test_first_worker_keeps_the_one_worker_ids_and_the_second_is_under_its_name(envs: dict[str, Synthesized]) -> None:
    """The first worker is "Default" (hidden from logical ids); the second's ids start with its name."""
    env = envs["two"]
    first, second = env.stack.workers["notify"], env.stack.workers["exports"]
    assert env.logical_id(first.queues.queue) == "QueuesQueueD811C857"
    assert env.logical_id(first.consumer.idempotency_table) == "ConsumerIdempotencyTableBB140E0E"
    assert env.logical_id(second.queues.queue).startswith("exportsQueuesQueue")
    assert env.logical_id(second.consumer.idempotency_table).startswith("exportsConsumerIdempotencyTable")


def test_outputs_keep_the_first_workers_names_and_prefix_the_others(envs: dict[str, Synthesized]) -> None:
    """QueueUrl is the first worker's; ExportsQueueUrl and the rest name the second; shared outputs once."""
    outputs = set(envs["two"].json["Outputs"])
    first = {"QueueUrl", "DeadLetterQueueUrl", "QueueArn", "DeadLetterQueueArn", "ServiceName"}
    shared = {"PagingTopicArn", "TicketTopicArn", "DashboardName", "ClusterName", "WorkerNames"}
    assert outputs == first | shared | {f"Exports{o}" for o in first}
    # The dlq commands' --worker reads the names (and so which worker's outputs have no prefix) from here.
    assert envs["two"].json["Outputs"]["WorkerNames"]["Value"] == "notify,exports"


def test_each_task_definition_names_its_worker(envs: dict[str, Synthesized]) -> None:
    """The metadata consumer.local reads to give each worker its own environment."""
    definitions = of_type(envs["two"], "AWS::ECS::TaskDefinition").values()
    assert [d.get("Metadata", {}).get(WORKER_METADATA_KEY) for d in definitions] == ["notify", "exports"]


def test_dashboard_has_an_any_worker_paging_view_and_a_section_per_worker(envs: dict[str, Synthesized]) -> None:
    """One dashboard: every worker's notifying alarms in the first widget, then a heading per worker."""
    widgets = dashboard_body(envs["two"])["widgets"]
    assert widgets[0]["properties"]["title"] == "Alarms: any worker paging"
    assert len(widgets[0]["properties"]["alarms"]) == 12
    headings = [w["properties"]["markdown"] for w in widgets if w["type"] == "text"]
    assert headings == ["## Worker notify", "## Worker exports"]


def sections(widgets: list[dict[str, Any]]) -> dict[str | None, list[str]]:
    """Each worker's widget titles under its ``## Worker NAME`` heading (None: before any heading)."""
    titled: dict[str | None, list[str]] = {None: []}
    worker: str | None = None
    for widget in widgets:
        if widget["type"] == "text":
            worker = widget["properties"]["markdown"].removeprefix("## Worker ")
            titled[worker] = []
        elif widget["type"] == "metric":
            titled[worker].append(widget["properties"]["title"])
    return titled


def test_dashboard_titles_every_graph_with_its_worker_when_there_are_several(envs: dict[str, Synthesized]) -> None:
    """Every graph under a worker's heading is titled "[worker] ...", so no two workers' graphs share a title; each
    worker's section has the same graphs as a one-worker dashboard, whose titles carry no name."""
    one = sections(dashboard_body(envs["one"])["widgets"])[None]
    for name in ("two", "most"):
        titled = sections(dashboard_body(envs[name])["widgets"])
        workers = list(envs[name].stack.workers)
        assert list(titled) == [None, *workers] and titled[None] == []
        for worker in workers:
            assert titled[worker] == [widget_title(worker, title) for title in one]
        every = [title for worker in workers for title in titled[worker]]
        assert len(every) == len(set(every)) == len(one) * len(workers)
    assert one and all(not title.startswith("[") for title in one)


def test_topics_admit_every_workers_alarms(envs: dict[str, Synthesized]) -> None:
    """The paging topic's policy names the second worker's alarms too, so their actions can publish."""
    text = json.dumps(of_type(envs["two"], "AWS::SNS::TopicPolicy"))
    assert "alarm:SqsWorker-two-exports-ConsumerStalled" in text
    assert "alarm:SqsWorker-two-ConsumerStalled" in text


def test_most_workers_synthesize_within_cloudformation_and_cloudwatch_limits(envs: dict[str, Synthesized]) -> None:
    """MAX_WORKERS workers: nag-clean, and under the limits on resources, outputs, template size, dashboard widgets,
    alarms per status widget and composite alarm rule length."""
    env = envs["most"]
    template_bytes = (env.outdir / f"{env.stack.stack_name}.template.json").stat().st_size
    widgets = dashboard_body(env)["widgets"]
    rules = [a["Properties"]["AlarmRule"] for a in of_type(env, "AWS::CloudWatch::CompositeAlarm").values()]
    assert len(env.stack.workers) == MAX_WORKERS
    assert len(env.json["Resources"]) <= CFN_MAX_RESOURCES
    # Resources to spare, for producers, subscriptions and grants (infra/settings.py): a worker's worth less what the
    # created VPC brings, its two gateway endpoints and the three of its default security group's stripping (the
    # custom resource, the CDK's provider function and role).
    per_worker = (len(env.json["Resources"]) - len(envs["one"].json["Resources"])) // (MAX_WORKERS - 1)
    spare = CFN_MAX_RESOURCES - len(env.json["Resources"])
    assert spare >= per_worker - 2 - 3, (len(env.json["Resources"]), per_worker)
    assert len(env.json["Outputs"]) <= CFN_MAX_OUTPUTS
    assert template_bytes <= CFN_MAX_TEMPLATE_BYTES
    assert len(widgets) <= CW_MAX_WIDGETS
    status = [w["properties"] for w in widgets if w["type"] == "alarm"]
    assert [s["title"] for s in status] == ["Alarms: any worker paging (1 of 2)", "Alarms: any worker paging (2 of 2)"]
    assert max(len(s["alarms"]) for s in status) <= CW_MAX_STATUS_ALARMS
    assert sum(len(s["alarms"]) for s in status) == 6 * MAX_WORKERS
    assert len(rules) == 2 * MAX_WORKERS  # each worker's ConsumerStalled and DlqExpiring
    assert max(len(json.dumps(rule)) for rule in rules) <= CW_MAX_ALARM_RULE_CHARS
