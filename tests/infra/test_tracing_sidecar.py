"""The tracing sidecar (infra/tracing.py): present only where an environment sets ``tracing``, as specified.

The variants are this module's own (never cdk.json's): one worker tracing 5 %, two workers tracing everything,
and the same worker without ``tracing``, which must synthesize as it always did.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from consumer.contract import TRACING_ENV
from consumer.runtime.tracing import TRACING_MODES
from infra.report import nag_results
from infra.tracing import (
    COLLECTOR_CONFIG,
    COLLECTOR_CONTAINER,
    COLLECTOR_IMAGE,
    COLLECTOR_LOG_PREFIX,
    COLLECTOR_MEMORY_LIMIT_MIB,
    COLLECTOR_MEMORY_RESERVATION_MIB,
)
from infra.tracing_settings import OTLP_MODE, TRACING_VARIABLES, TracingSettings
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import Synthesized, standalone_worker, synthesize_once
from tests.infra.contexts import HANDLER, TRACING

ENVIRONMENTS = TRACING
XRAY_STATEMENT = {"Action": "xray:PutTraceSegments", "Effect": "Allow", "Resource": "*"}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """The three variants in one app, cdk-nag included (an open finding fails the synth)."""
    return synthesize_once(tmp_path_factory, {CONTEXT_KEY: ENVIRONMENTS})


def task_definitions(env: Synthesized) -> dict[str, dict[str, Any]]:
    """Each worker's task definition properties, by worker name."""
    return {
        name: env.resources("AWS::ECS::TaskDefinition")[env.logical_id(worker.consumer.task_definition)]["Properties"]
        for name, worker in env.stack.workers.items()
    }


def containers(env: Synthesized, worker: str) -> dict[str, dict[str, Any]]:
    """``worker``'s container definitions by name."""
    return {c["Name"]: c for c in task_definitions(env)[worker]["ContainerDefinitions"]}


def collector(env: Synthesized, worker: str = "default") -> dict[str, Any]:
    return containers(env, worker)[COLLECTOR_CONTAINER]


def task_role_statements(env: Synthesized, worker: str = "default") -> list[dict[str, Any]]:
    role = env.logical_id(env.stack.workers[worker].consumer.task_role)
    return [
        statement
        for policy in env.resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def traced_workers(synthesized: dict[str, Synthesized]) -> list[tuple[Synthesized, str]]:
    return [(synthesized[e], w) for e in ("traced", "traced-teams") for w in synthesized[e].stack.workers]


def test_tracing_sidecar_absent_without_the_setting(synthesized: dict[str, Synthesized]) -> None:
    """Without ``tracing``: one container, none of the tracing variables, no X-Ray action, nothing acknowledged for it."""
    env = synthesized["untraced"]
    assert list(containers(env, "default")) == ["Consumer"]
    names = {e["Name"] for e in env.container()["Environment"]}
    assert sorted(names & set(TRACING_VARIABLES)) == []
    assert "DependsOn" not in env.container()
    assert [s for s in task_role_statements(env) if "xray" in str(s["Action"])] == []
    _, acknowledged = nag_results(env.outdir, env.stack.stack_name)
    assert [rule for rule, _ in acknowledged if rule.endswith("IAM5[Resource::*]")] == [
        "AwsSolutions-IAM5[Resource::*]"
    ]


def test_tracing_sidecar_in_every_traced_worker(synthesized: dict[str, Synthesized]) -> None:
    """Each worker of a traced environment has its own collector beside its consumer, and only those two."""
    for env, worker in traced_workers(synthesized):
        assert list(containers(env, worker)) == ["Consumer", COLLECTOR_CONTAINER], worker


def test_tracing_sidecar_image_is_pinned_by_exact_tag(synthesized: dict[str, Synthesized]) -> None:
    """The ADOT collector from public ECR at an exact release tag (never latest), with its shipped X-Ray config."""
    assert re.fullmatch(r"public\.ecr\.aws/aws-observability/aws-otel-collector:v\d+\.\d+\.\d+", COLLECTOR_IMAGE)
    for env, worker in traced_workers(synthesized):
        assert collector(env, worker)["Image"] == COLLECTOR_IMAGE
        assert collector(env, worker)["Command"] == [f"--config={COLLECTOR_CONFIG}"]


def test_tracing_sidecar_is_not_essential_and_restarts(synthesized: dict[str, Synthesized]) -> None:
    """The collector may stop without stopping the task (the consumer stays essential); ECS restarts it."""
    env = synthesized["traced"]
    assert collector(env)["Essential"] is False
    assert env.container().get("Essential", True) is True
    assert collector(env)["RestartPolicy"] == {"Enabled": True, "RestartAttemptPeriod": 60}


def test_tracing_consumer_starts_after_the_collector(synthesized: dict[str, Synthesized]) -> None:
    """The consumer depends on the collector having started (so it stops first, and a drain's spans are sent)."""
    for env, worker in traced_workers(synthesized):
        consumer = containers(env, worker)["Consumer"]
        assert consumer["DependsOn"] == [{"Condition": "START", "ContainerName": COLLECTOR_CONTAINER}]
        assert "DependsOn" not in collector(env, worker)


def test_tracing_variables_are_exactly_the_sdks_and_the_runtimes(synthesized: dict[str, Synthesized]) -> None:
    """The consumer gets the runtime's otlp mode, the collector's endpoint, the worker's name and the sampler."""
    expected = {
        "traced": {"default": ("SqsWorker-traced", "0.05")},
        "traced-teams": {
            "notifications": ("SqsWorker-traced-teams", "1.0"),
            "reports": ("SqsWorker-traced-teams-reports", "1.0"),
        },
    }
    for environment, workers in expected.items():
        env = synthesized[environment]
        for worker, (service, ratio) in workers.items():
            variables = {e["Name"]: e["Value"] for e in env.container(worker)["Environment"]}
            assert {k: v for k, v in variables.items() if k in TRACING_VARIABLES} == {
                "CONSUMER_TRACING": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_SERVICE_NAME": service,
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": ratio,
            }
            assert not [k for k in variables if k.startswith("OTEL_") and k not in TRACING_VARIABLES]


def test_tracing_mode_is_one_the_runtime_accepts() -> None:
    """The mode the construct writes is the runtime's own OTLP mode, under the runtime's variable."""
    assert OTLP_MODE in TRACING_MODES and TRACING_ENV in TRACING_VARIABLES


def test_tracing_sidecar_memory_fits_beside_the_consumer(synthesized: dict[str, Synthesized]) -> None:
    """64 MiB reserved, 128 MiB at most, whatever the task's size: the rest of the task's memory is the consumer's."""
    for env, worker in traced_workers(synthesized):
        task = task_definitions(env)[worker]
        sidecar = collector(env, worker)
        assert (sidecar["MemoryReservation"], sidecar["Memory"]) == (
            COLLECTOR_MEMORY_RESERVATION_MIB,
            COLLECTOR_MEMORY_LIMIT_MIB,
        )
        assert int(task["Memory"]) - sidecar["Memory"] >= 384
        assert "Memory" not in containers(env, worker)["Consumer"]


def test_tracing_sidecar_logs_to_the_workers_log_group(synthesized: dict[str, Synthesized]) -> None:
    """The collector's log streams are in its worker's log group, under their own prefix."""
    for env, worker in traced_workers(synthesized):
        options = collector(env, worker)["LogConfiguration"]["Options"]
        consumer = containers(env, worker)["Consumer"]["LogConfiguration"]["Options"]
        assert options["awslogs-group"] == consumer["awslogs-group"]
        assert (options["awslogs-stream-prefix"], consumer["awslogs-stream-prefix"]) == (
            COLLECTOR_LOG_PREFIX,
            "consumer",
        )


def test_tracing_sidecar_is_hardened_like_the_consumer(synthesized: dict[str, Synthesized]) -> None:
    """Read-only root file system, every Linux capability dropped (the image's own non-root user)."""
    sidecar = collector(synthesized["traced"])
    assert sidecar["ReadonlyRootFilesystem"] is True
    assert sidecar["LinuxParameters"]["Capabilities"] == {"Drop": ["ALL"]}


def test_tracing_task_role_gets_exactly_put_trace_segments(synthesized: dict[str, Synthesized]) -> None:
    """One X-Ray statement per traced worker's task role: PutTraceSegments on "*", nothing else of X-Ray."""
    for env, worker in traced_workers(synthesized):
        xray = [s for s in task_role_statements(env, worker) if "xray" in str(s["Action"])]
        assert xray == [XRAY_STATEMENT], worker


def test_tracing_nag_clean_with_the_wildcard_acknowledged_on_the_task_role(
    synthesized: dict[str, Synthesized],
) -> None:
    """No open cdk-nag finding with tracing on; the X-Ray wildcard is acknowledged on each task role, with its reason."""
    for name in ("traced", "traced-teams"):
        env = synthesized[name]
        open_findings, acknowledged = nag_results(env.outdir, env.stack.stack_name)
        assert open_findings == []
        reasons = [reason for rule, reason in acknowledged if rule == "AwsSolutions-IAM5[Resource::*]"]
        xray = [r for r in reasons if "xray:PutTraceSegments" in r and "service-authorization" in r]
        assert len(xray) == len(env.stack.workers), reasons


def test_tracing_construct_refuses_a_variable_it_sets() -> None:
    """A team's own app passing handler_environment with a tracing variable is refused by the construct, naming it."""
    with pytest.raises(ValueError) as raised:
        standalone_worker(
            HANDLER,
            "Default",
            handler_environment={"OTEL_SERVICE_NAME": "mine"},
            tracing=TracingSettings(sample_ratio=0.5),
        )
    assert str(raised.value) == '"handler_environment" must not set variables the construct sets: OTEL_SERVICE_NAME'
