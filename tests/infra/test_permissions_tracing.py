"""The permissions tier with tracing: the task role exports spans to X-Ray and reads nothing of it; without
``tracing`` it may not even export. Evaluated as tests/infra/test_permissions.py evaluates (identity policies
through @cloud-copilot/iam-simulate), on this module's own variants, never cdk.json's.
"""

from __future__ import annotations

import pytest

from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import synthesize_once
from tests.infra.contexts import TRACING
from tests.infra.permission_rows import EXECUTION_ROLE, bind, runtime_rows
from tests.infra.permissions import ALLOWED, DENIED, Bindings, Row, Scenario, evaluate, mismatches

ENVIRONMENTS = TRACING
TRACED = ["traced", "traced-teams/notifications", "traced-teams/reports"]
#: Each scenario with its answer, by (worker label, category).
Evaluated = dict[tuple[str, str], list[tuple[Scenario, str | None]]]

#: X-Ray actions a trace reader or an administrator has: none is the collector's.
XRAY_READS_AND_ADMIN = (
    "xray:BatchGetTraces",
    "xray:GetTraceSummaries",
    "xray:GetTraceGraph",
    "xray:GetServiceGraph",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "xray:PutEncryptionConfig",
)
#: With tracing: the collector's one call allowed, the exporter's telemetry (off) and everything else refused.
WITH_TRACING: list[Row] = [
    Row("task-role", "xray:PutTraceSegments", "*", {}, ALLOWED, "the collector sidecar exports spans"),
    Row("task-role", "xray:PutTelemetryRecords", "*", {}, DENIED, "the exporter's own telemetry is off"),
    *[
        Row("task-role", action, "*", {}, DENIED, "the collector only writes segments")
        for action in XRAY_READS_AND_ADMIN
    ],
    Row("execution-role", "xray:PutTraceSegments", "*", {}, DENIED, "the task role exports, not ECS's role"),
]
#: Without tracing: no X-Ray action at all.
WITHOUT_TRACING: list[Row] = [
    Row("task-role", "xray:PutTraceSegments", "*", {}, DENIED, "no tracing, no collector"),
    Row("task-role", "xray:PutTelemetryRecords", "*", {}, DENIED, "no tracing, no collector"),
    Row("task-role", "xray:GetTraceSummaries", "*", {}, DENIED, "no tracing, no collector"),
]


@pytest.fixture(scope="module")
def bound(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Bindings]:
    """The variants synthesized once, resolved to concrete ARNs, bound per worker."""
    synthesized = synthesize_once(tmp_path_factory, {CONTEXT_KEY: ENVIRONMENTS})
    return bind(synthesized)


@pytest.fixture(scope="module")
def evaluated(bound: dict[str, Bindings]) -> Evaluated:
    """Every row of this module for every worker, evaluated in one batch, by (worker, category)."""
    scenarios: list[Scenario] = []
    for label, bindings in bound.items():
        tracing = WITH_TRACING if label in TRACED else WITHOUT_TRACING
        scenarios += bindings.scenarios("tracing", tracing)
        # The sidecar changes nothing of what the consumer and ECS could do before.
        scenarios += bindings.scenarios("runtime", runtime_rows())
        scenarios += bindings.scenarios("execution-role", EXECUTION_ROLE)
    grouped: Evaluated = {}
    for scenario, answer in zip(scenarios, evaluate(scenarios), strict=True):
        grouped.setdefault((scenario.environment, scenario.category), []).append((scenario, answer))
    return grouped


def check(evaluated: Evaluated, worker: str, category: str) -> None:
    results = evaluated[(worker, category)]
    assert results, f"{worker}: no {category} scenario was evaluated"
    wrong = mismatches([s for s, _ in results], {s: a for s, a in results})
    assert not wrong, f"{len(wrong)} of {len(results)} {category} requests answered wrongly:\n" + "\n".join(wrong)


def test_tracing_permissions_cover_every_variant(bound: dict[str, Bindings]) -> None:
    """The tier binds each worker of each variant (a sidecar is no second consumer)."""
    assert sorted(bound) == sorted([*TRACED, "untraced"])


@pytest.mark.parametrize("worker", TRACED)
def test_tracing_task_role_puts_trace_segments_and_reads_nothing(evaluated: Evaluated, worker: str) -> None:
    """With tracing the task role may xray:PutTraceSegments on "*" and no other X-Ray action; the execution role none."""
    check(evaluated, worker, "tracing")


def test_tracing_off_task_role_has_no_xray_action(evaluated: Evaluated) -> None:
    """Without tracing the task role may not even put trace segments."""
    check(evaluated, "untraced", "tracing")


@pytest.mark.parametrize("worker", [*TRACED, "untraced"])
def test_tracing_leaves_the_runtime_and_execution_role_as_they_were(evaluated: Evaluated, worker: str) -> None:
    """Every call the runtime makes is still allowed (refused over HTTP), and the execution role still only pulls
    the image and writes its log group, sidecar or not."""
    check(evaluated, worker, "runtime")
    check(evaluated, worker, "execution-role")
