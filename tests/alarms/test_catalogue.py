"""The scenario catalogue on every environment's synthesized template, and the evaluator's command line.

The catalogue tests are tests of the shipped example (cdk.json as committed): each environment's outcomes must be
the intended ones and equal the table docs/alarms.md carries. A team that edits cdk.json regenerates that table with
``python -m infra.alarms scenarios --write-docs`` and reviews the change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.alarms.__main__ import DOCS, ROOT, synthesize
from infra.alarms.catalogue import run_catalogue
from infra.alarms.report import catalogue_markdown
from infra.settings import CONTEXT_KEY, load_environments

ENVIRONMENTS = load_environments({CONTEXT_KEY: json.loads((ROOT / "cdk.json").read_text())["context"][CONTEXT_KEY]})


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.mark.slow(40)
@pytest.mark.parametrize("environment", ENVIRONMENTS, ids=lambda e: e.name)
def test_catalogue_meets_the_goals_and_matches_the_docs(templates: Path, environment: object) -> None:
    """Every scenario's outcome is the intended one, and the same as the committed table (an outcome that changes
    fails here until docs/alarms.md is regenerated)."""
    outcomes = run_catalogue(templates / f"{environment.stack_name}.template.json", environment)  # type: ignore[attr-defined]
    assert [(o.scenario.name, o.problems) for o in outcomes if not o.intended] == []
    assert catalogue_markdown(environment.name, outcomes) in DOCS.read_text()  # type: ignore[attr-defined]


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
