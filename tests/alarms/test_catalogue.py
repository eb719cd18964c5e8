"""The scenario catalogue on every environment's synthesized template, and the evaluator's command line.

The catalogue tests are tests of the shipped example (cdk.json as committed): each environment's outcomes must be
the intended ones and equal the tables docs/alarms.md (time to page per alarm) and docs/evidence/alarms.md (per
scenario) carry. A team that edits cdk.json regenerates those tables with ``python -m infra.alarms scenarios
--write-docs`` and reviews the change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.alarms.__main__ import (
    BEGIN,
    DOCS,
    END,
    EVIDENCE_DOCS,
    ROOT,
    RUNBOOK,
    RUNBOOK_BLOCK,
    runbook_with_times,
    synthesize,
    with_generated,
)
from infra.alarms.catalogue import Outcome, run_catalogue, skipped_scenarios
from infra.alarms.report import catalogue_markdown, skipped_markdown, time_to_page_markdown
from infra.settings import load_environments
from infra.worker_settings import CONTEXT_KEY

ENVIRONMENTS = load_environments({CONTEXT_KEY: json.loads((ROOT / "cdk.json").read_text())["context"][CONTEXT_KEY]})
#: The alarms that notify someone, each with a runbook section (tests/infra/test_runbook.py) and a time to page.
NOTIFYING = {"DlqDepth", "DlqNewArrivals", "DlqExpiring", "BacklogAge", "ConsumerStalled", "DownstreamUnavailable"}
#: What a lambda worker adds that its catalogue pages (MappingAtMaximum only where its backlog reaches the maximum).
LAMBDA_NOTIFYING = {"FunctionErrors", "FunctionThrottles"}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every environment of cdk.json synthesized once for the module."""
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="module")
def outcomes(templates: Path) -> dict[str, list[Outcome]]:
    """Every environment's catalogue on its synthesized template, run once for the tests below."""
    return {e.name: run_catalogue(templates / f"{e.stack_name}.template.json", e) for e in ENVIRONMENTS}


@pytest.mark.parametrize("environment", [e.name for e in ENVIRONMENTS])
def test_catalogue_meets_the_goals_and_matches_the_docs(
    outcomes: dict[str, list[Outcome]], templates: Path, environment: str
) -> None:
    """Every scenario's outcome is the intended one, and the same as the committed table with the line naming the
    scenarios skipped by rule (an outcome that changes fails here until docs/evidence/alarms.md is regenerated)."""
    found = outcomes[environment]
    assert [(o.scenario.name, o.problems) for o in found if not o.intended] == []
    (stack,) = [e.stack_name for e in ENVIRONMENTS if e.name == environment]
    skipped = skipped_markdown(skipped_scenarios(templates / f"{stack}.template.json"))
    assert catalogue_markdown(environment, found) + skipped in EVIDENCE_DOCS.read_text()


def test_time_to_page_per_alarm_is_the_committed_table(outcomes: dict[str, list[Outcome]]) -> None:
    """docs/alarms.md's per-alarm table comes from this run, and every notifying alarm pages in some scenario of
    every environment."""
    table = time_to_page_markdown(outcomes)
    assert table in DOCS.read_text()
    rows = {
        line.split(" | ")[0].removeprefix("| "): line
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| alarm")
    }
    lambda_workers = any(o.scenario.name.startswith("lambda-") for found in outcomes.values() for o in found)
    assert set(rows) - {"MappingAtMaximum"} == NOTIFYING | (LAMBDA_NOTIFYING if lambda_workers else set())
    assert [alarm for alarm, row in rows.items() if "never" in row] == []


def test_runbook_states_each_alarms_time_to_page_from_the_catalogue(outcomes: dict[str, list[Outcome]]) -> None:
    """Each notifying alarm's runbook section carries its time to page, exactly as the catalogue gives it now."""
    runbook = RUNBOOK.read_text()
    assert {m.group(1) for m in RUNBOOK_BLOCK.finditer(runbook)} == NOTIFYING
    assert runbook_with_times(runbook, outcomes) == runbook


def test_write_docs_rewrites_the_generated_part_of_both_pages() -> None:
    """The reference and the evidence page each carry one generated part, which --write-docs replaces in place; a
    page without the markers is refused, not appended to."""
    for page in (DOCS, EVIDENCE_DOCS):
        document = page.read_text()
        assert document.count(BEGIN) == document.count(END) == 1, page
        generated = document.partition(BEGIN + "\n")[2].partition(END)[0]
        assert with_generated(document, generated) == document
        assert with_generated(document, "new\n").count("new\n") == 1
    with pytest.raises(ValueError, match="no <!-- BEGIN"):
        with_generated("# A page\n", "new\n")


def _evaluate(
    tmp_path: Path, template: dict[str, object], series: dict[str, object]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "t.template.json").write_text(json.dumps(template))
    (tmp_path / "s.json").write_text(json.dumps(series))
    command = [
        sys.executable,
        "-m",
        "infra.alarms",
        "evaluate",
        str(tmp_path / "t.template.json"),
        str(tmp_path / "s.json"),
    ]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


TEMPLATE = {
    "Resources": {
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {}},
        "Dlq": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "orders-dlq"}},
        "Depth": {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmName": "depth",
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateNumberOfMessagesVisible",
                "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["Dlq", "QueueName"]}}],
                "Statistic": "Maximum",
                "Period": 60,
                "EvaluationPeriods": 1,
                "Threshold": 1,
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
                "TreatMissingData": "notBreaching",
                "AlarmActions": [{"Ref": "Topic"}],
                "OKActions": [{"Ref": "Topic"}],
            },
        },
        "Both": {
            "Type": "AWS::CloudWatch::CompositeAlarm",
            "Properties": {
                "AlarmName": "both",
                "AlarmRule": {"Fn::Join": ["", ['ALARM("', {"Fn::GetAtt": ["Depth", "Arn"]}, '")']]},
            },
        },
    }
}


def test_evaluate_prints_each_change_with_its_topics(tmp_path: Path) -> None:
    """A DLQ message at minute 2: the alarm is OK at creation, ALARM once the minute is whole, OK after it empties; the
    composite follows; each line names the notified topic by logical id."""
    series = {
        "metrics": [
            {
                "namespace": "AWS/SQS",
                "metric": "ApproximateNumberOfMessagesVisible",
                "dimensions": {"QueueName": "orders-dlq"},
                "points": [[120, 1], [180, 0]],
            }
        ]
    }
    result = _evaluate(tmp_path, TEMPLATE, series)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [
        {"t": 0, "alarm": "depth", "from": "INSUFFICIENT_DATA", "to": "OK", "actions": ["Topic"]},
        {"t": 0, "alarm": "both", "from": "INSUFFICIENT_DATA", "to": "OK", "actions": []},
        {"t": 180, "alarm": "depth", "from": "OK", "to": "ALARM", "actions": ["Topic"]},
        {"t": 180, "alarm": "both", "from": "OK", "to": "ALARM", "actions": []},
        {"t": 240, "alarm": "depth", "from": "ALARM", "to": "OK", "actions": ["Topic"]},
        {"t": 240, "alarm": "both", "from": "ALARM", "to": "OK", "actions": []},
    ]


def test_evaluate_refuses_what_it_does_not_implement_in_one_line(tmp_path: Path) -> None:
    template = json.loads(json.dumps(TEMPLATE))
    template["Resources"]["Depth"]["Properties"]["Statistic"] = "TM(10%:90%)"
    result = _evaluate(tmp_path, template, {"metrics": []})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: statistic TM(10%:90%) is not implemented"]


def test_evaluate_names_a_bad_series_field(tmp_path: Path) -> None:
    result = _evaluate(tmp_path, TEMPLATE, {"metrics": [{"namespace": "AWS/SQS", "metric": "M", "points": [[-1, 0]]}]})
    assert result.returncode == 2
    assert "SERIES metrics[0].points[0]: t must be >= 0" in result.stderr


@pytest.mark.parametrize(
    ("series", "message"),
    [
        ({"metrics": [], "ends": 60}, "SERIES: unknown key 'ends'"),
        (
            {"metrics": [{"namespace": "AWS/SQS", "metric": "M", "dimension": {}, "points": []}]},
            "SERIES metrics[0]: unknown key 'dimension'",
        ),
    ],
)
def test_evaluate_refuses_an_unknown_series_key(tmp_path: Path, series: dict[str, object], message: str) -> None:
    """A misspelt key would otherwise be dropped and the metric read as another (no dimensions) or the end ignored."""
    result = _evaluate(tmp_path, TEMPLATE, series)
    assert result.returncode == 2
    assert message in result.stderr


def test_evaluate_refuses_a_metric_no_alarm_reads_unless_allowed(tmp_path: Path) -> None:
    """A DLQ misspelt in SERIES would leave every alarm on missing data and print "nothing pages": refused, naming
    the metric; --allow-unread evaluates it as given."""
    typo = {"namespace": "AWS/SQS", "metric": "ApproximateNumberOfMessagesVisible", "points": [[120, 1]]}
    series = {"metrics": [{**typo, "dimensions": {"QueueName": "orders-DLQ"}}]}
    result = _evaluate(tmp_path, TEMPLATE, series)
    assert result.returncode == 2
    assert "ApproximateNumberOfMessagesVisible {QueueName=orders-DLQ} is read by no alarm" in result.stderr
    command = [sys.executable, "-m", "infra.alarms", "evaluate", "--allow-unread"]
    allowed = subprocess.run(
        [*command, str(tmp_path / "t.template.json"), str(tmp_path / "s.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert [json.loads(line)["to"] for line in allowed.stdout.splitlines()] == ["OK", "OK"]


def test_evaluate_names_the_series_file_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "t.template.json").write_text(json.dumps(TEMPLATE))
    missing = tmp_path / "nope.json"
    command = [sys.executable, "-m", "infra.alarms", "evaluate", str(tmp_path / "t.template.json"), str(missing)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: SERIES {missing}: cannot be read as JSON")
