"""A worker that declares fair_queue: SQS's quiet-group metrics on its dashboard section, its BacklogAge alarm on
the quiet groups' oldest message; a worker beside it that does not declare it keeps the whole queue's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from infra.dashboard import widget_title
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import Synthesized, synthesize_once
from tests.infra.templates import SHARED, dashboard_body

NOTIFY = {"handler": "consumer.examples.notifications:handle", "handler_environment": {"NOTIFY_DRY_RUN": "true"}}
TENANTS = {"handler": "tests.infra.handlers:tenants"}
#: SQS's fair-queue metrics (AWS/SQS, dimension QueueName), as the SQS developer guide names them.
FAIR_METRICS = {
    "ApproximateNumberOfNoisyGroups",
    "ApproximateNumberOfMessagesVisibleInQuietGroups",
    "ApproximateNumberOfMessagesNotVisibleInQuietGroups",
    "ApproximateAgeOfOldestMessageInQuietGroups",
}
RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """notify (not fair) first, tenants (fair) second, synthesized once with cdk-nag."""
    context = {CONTEXT_KEY: {"fair": {**SHARED, "workers": {"notify": NOTIFY, "tenants": TENANTS}}}}
    return synthesize_once(tmp_path_factory, context)["fair"]


def alarm(env: Synthesized, name: str) -> dict[str, Any]:
    (found,) = (
        a["Properties"]
        for a in env.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"]["AlarmName"] == name
    )
    return found


def queue_of(properties: dict[str, Any]) -> str:
    """The logical id of the queue an alarm's QueueName dimension names."""
    (dimension,) = properties["Dimensions"]
    assert dimension["Name"] == "QueueName"
    return str(dimension["Value"]["Fn::GetAtt"][0])


def test_fair_worker_backlog_age_alarms_on_the_quiet_groups(env: Synthesized) -> None:
    """tenants' BacklogAge watches ApproximateAgeOfOldestMessageInQuietGroups of its own source queue, at the
    contract's threshold: one noisy tenant's backlog does not fire it."""
    tenants = env.stack.workers["tenants"]
    backlog = alarm(env, "SqsWorker-fair-tenants-BacklogAge")
    assert (backlog["Namespace"], backlog["MetricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessageInQuietGroups")
    assert (backlog["Statistic"], backlog["Period"]) == ("Maximum", 60)
    assert backlog["Threshold"] == tenants.contract.backlog_age_alarm_seconds
    assert queue_of(backlog) == env.logical_id(tenants.queues.queue)
    assert "outside its noisy tenants" in backlog["AlarmDescription"]
    assert backlog["AlarmDescription"].endswith("Runbook: docs/runbook.md#backlog-age")


def test_undeclared_worker_beside_a_fair_one_keeps_the_whole_queue_age(env: Synthesized) -> None:
    """notify declares no fair queue: its BacklogAge still watches ApproximateAgeOfOldestMessage."""
    backlog = alarm(env, "SqsWorker-fair-BacklogAge")
    assert backlog["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert "noisy" not in backlog["AlarmDescription"]


def test_fair_worker_stalled_input_keeps_the_whole_queue_age(env: Synthesized) -> None:
    """The consumer-stalled composite's age input stays on the whole queue: with nothing deleted for 5 minutes a
    consumer is stalled whichever tenant's messages wait."""
    late = alarm(env, "SqsWorker-fair-tenants-StalledBacklogLate")
    assert late["MetricName"] == "ApproximateAgeOfOldestMessage"


def test_fair_metrics_are_drawn_only_in_the_fair_workers_section(env: Synthesized) -> None:
    """The dashboard draws the noisy/quiet group metrics once, in tenants' section (after its heading), none in
    notify's; the BacklogAge line moves to the quiet groups' age graph."""
    widgets = dashboard_body(env)["widgets"]
    headings = [i for i, w in enumerate(widgets) if w["type"] == "text"]
    tenants_from = headings[1]
    assert widgets[tenants_from]["properties"]["markdown"] == "## Worker tenants"
    drawn: dict[str, int] = {}
    for index, widget in enumerate(widgets):
        for metric in widget["properties"].get("metrics", []):
            if metric[0] == "AWS/SQS" and metric[1] in FAIR_METRICS:
                drawn[metric[1]] = index
    assert set(drawn) == FAIR_METRICS
    assert min(drawn.values()) > tenants_from
    quiet_age = widgets[drawn["ApproximateAgeOfOldestMessageInQuietGroups"]]["properties"]
    assert [{k: a[k] for k in ("value", "label")} for a in quiet_age["annotations"]["horizontal"]] == [
        {
            "value": env.stack.workers["tenants"].contract.backlog_age_alarm_seconds,
            "label": "BacklogAge alarm (quiet groups)",
        }
    ]
    lines = [
        a["label"]
        for w in widgets[tenants_from:]
        if w["properties"].get("title") == widget_title("tenants", "Source queue: oldest message age (s)")
        for a in w["properties"]["annotations"]["horizontal"]
    ]
    assert lines == ["late backlog (ConsumerStalled input)"]


def test_only_the_fair_worker_gets_consumer_fair_queue(env: Synthesized) -> None:
    """CONSUMER_FAIR_QUEUE=true reaches tenants' task; notify's task has no such variable."""
    tenants = {e["Name"]: e["Value"] for e in env.container("tenants")["Environment"]}
    notify = {e["Name"]: e["Value"] for e in env.container()["Environment"]}
    assert tenants["CONSUMER_FAIR_QUEUE"] == "true"
    assert "CONSUMER_FAIR_QUEUE" not in notify


def test_runbook_backlog_age_section_covers_fair_queues() -> None:
    """The section BacklogAge links to says what the alarm watches on a fair queue and what to look at first."""
    text = RUNBOOK.read_text()
    section = re.search(r"^## Backlog age\n(.*?)(?=^## )", text, re.S | re.M)
    assert section is not None
    assert "ApproximateAgeOfOldestMessageInQuietGroups" in section.group(1)
    assert "ApproximateNumberOfNoisyGroups" in section.group(1)
