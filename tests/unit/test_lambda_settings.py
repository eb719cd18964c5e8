"""Unit tests for a worker's ``target`` and its Lambda settings in cdk.json (infra/worker_settings.py,
infra/settings.py): every refusal is one line naming the setting's path, the rule and the value, through the parser
as synth runs it; what the Lambda target cannot honour names the worker's own setting, the environment's, or its
``target``."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.lambda_target import (
    ESM_MAX_MINIMUM_POLLERS,
    ESM_MIN_MINIMUM_POLLERS,
    LAMBDA_MAX_MEMORY_MIB,
    LAMBDA_MIN_MEMORY_MIB,
)
from infra.settings import parse_environment
from infra.worker_settings import (
    CONTEXT_KEY,
    ECS,
    ECS_ONLY_KEYS,
    LAMBDA,
    LAMBDA_SECRETS_RULE,
    TARGET_RULE,
)
from tests.unit.support import refusal

HANDLER = "consumer.examples.notifications:handle"
#: A handler whose invocation cannot fit Lambda's 900 s: five minutes a message, three rounds of four.
FIVE_MINUTES = "tests.infra.handlers:five_minutes"
#: A batch handler at concurrency 16: MaximumConcurrency is max_tasks x 16.
WIDE_BATCH = "tests.infra.handlers:wide_batch"
AT = f"{CONTEXT_KEY}.qa"
POLLERS_RAW = {"minimum": 2, "maximum": 6}


def lambda_worker(**overrides: Any) -> dict[str, Any]:
    return {"handler": HANDLER, "target": LAMBDA, **overrides}


def test_lambda_settings_target_defaults_to_ecs() -> None:
    """A worker that declares no target runs on ECS, without pollers."""
    (worker,) = parse_environment("qa", {"handler": HANDLER}).workers
    assert (ECS, None) == (worker.target, worker.provisioned_pollers)


def test_lambda_settings_lambda_worker_keeps_memory_tasks_architecture_and_pollers() -> None:
    """memory_mib (Lambda's range, not Fargate's pairs), max_tasks, architecture and provisioned_pollers are kept."""
    raw = lambda_worker(
        memory_mib=1769, max_tasks=5, architecture="arm64", provisioned_pollers={"minimum": 2, "maximum": 9}
    )
    (worker,) = parse_environment("qa", raw).workers
    assert (LAMBDA, 1769, 5, "arm64", (2, 9)) == (
        worker.target,
        worker.memory_mib,
        worker.max_tasks,
        worker.architecture,
        worker.provisioned_pollers,
    )


def test_lambda_settings_environment_gives_the_lambda_target() -> None:
    """The environment derives a lambda worker's LambdaTarget from its settings; an ECS worker has none."""
    environment = parse_environment("qa", {"workers": {"fn": lambda_worker(max_tasks=3), "svc": {"handler": HANDLER}}})
    fn, svc = environment.workers
    target = environment.lambda_target(fn)
    assert target is not None and (3, 512) == (target.max_tasks, target.memory_mib)
    assert environment.lambda_target(svc) is None


@pytest.mark.parametrize("memory", [LAMBDA_MIN_MEMORY_MIB, LAMBDA_MAX_MEMORY_MIB])
def test_lambda_settings_memory_edges_are_accepted(memory: int) -> None:
    """Lambda's least and greatest memory are a lambda worker's memory_mib."""
    (worker,) = parse_environment("qa", lambda_worker(memory_mib=memory)).workers
    assert memory == worker.memory_mib


def test_lambda_settings_environment_tracing_and_cluster_do_not_refuse_a_lambda_worker() -> None:
    """tracing and an existing cluster are the ECS workers' settings: a lambda worker beside them parses."""
    raw = {
        "tracing": {"sample_ratio": 0.1},
        "vpc": {
            "vpc_id": "vpc-0123456789abcdef0",
            "availability_zones": ["eu-west-1a"],
            "private_subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa"],
        },
        "cluster_name": "platform",
        "workers": {"fn": lambda_worker(), "svc": {"handler": HANDLER}},
    }
    assert [LAMBDA, ECS] == [w.target for w in parse_environment("qa", raw).workers]


def test_lambda_settings_pollers_minimum_edge_is_accepted() -> None:
    """The event source mapping's least and greatest MinimumPollers are accepted."""
    for minimum in (ESM_MIN_MINIMUM_POLLERS, ESM_MAX_MINIMUM_POLLERS):
        raw = lambda_worker(provisioned_pollers={"minimum": minimum, "maximum": ESM_MAX_MINIMUM_POLLERS})
        (worker,) = parse_environment("qa", raw).workers
        assert (minimum, ESM_MAX_MINIMUM_POLLERS) == worker.provisioned_pollers


ECS_ONLY_REFUSALS = [
    pytest.param(
        key,
        value,
        f'"{AT}.{key}" is an ECS setting, refused on a lambda worker: {ECS_ONLY_KEYS[key]}: {value!r}',
        id=key,
    )
    for key, value in (("min_tasks", 0), ("cpu", 512), ("spot", {"on_demand_base": 1}))
]


@pytest.mark.parametrize(("key", "value", "message"), ECS_ONLY_REFUSALS)
def test_lambda_settings_ecs_only_setting_on_a_lambda_worker_is_refused(key: str, value: object, message: str) -> None:
    """min_tasks, cpu and spot declared on a lambda worker are refused, never dropped."""
    assert message == refusal(lambda_worker(**{key: value}))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            {"handler": HANDLER, "target": "fargate"}, f"\"{AT}.target\" {TARGET_RULE}: 'fargate'", id="target"
        ),
        pytest.param(
            lambda_worker(secrets={"NOTIFY_WEBHOOK_URL": "ssm:/team/hook"}),
            f"\"{AT}.secrets\" {LAMBDA_SECRETS_RULE}: ['NOTIFY_WEBHOOK_URL']",
            id="secrets",
        ),
        pytest.param(
            {"handler": HANDLER, "provisioned_pollers": {"minimum": 2, "maximum": 4}},
            f"\"{AT}.provisioned_pollers\" is a lambda worker's setting (its event source mapping's pollers): needs"
            " \"target\": \"lambda\": {'minimum': 2, 'maximum': 4}",
            id="pollers-on-ecs",
        ),
        pytest.param(
            lambda_worker(provisioned_pollers=[2, 4]),
            f'"{AT}.provisioned_pollers" must be an object {{"minimum": N, "maximum": M}} of event pollers: [2, 4]',
            id="pollers-shape",
        ),
        pytest.param(
            lambda_worker(provisioned_pollers={"minimum": 2, "maximum": 4.5}),
            f'"{AT}.provisioned_pollers.maximum" must be a whole number of event pollers: 4.5',
            id="pollers-whole",
        ),
        pytest.param(
            lambda_worker(provisioned_pollers={"minimum": ESM_MIN_MINIMUM_POLLERS - 1, "maximum": 4}),
            f'"{AT}.provisioned_pollers" must have a minimum between {ESM_MIN_MINIMUM_POLLERS} and'
            f" {ESM_MAX_MINIMUM_POLLERS} (MinimumPollers): {{'minimum': 1, 'maximum': 4}}",
            id="pollers-minimum",
        ),
        *[
            pytest.param(
                lambda_worker(memory_mib=memory),
                f'"{AT}.memory_mib" must be between {LAMBDA_MIN_MEMORY_MIB} and {LAMBDA_MAX_MEMORY_MIB} (Lambda\'s'
                f" function memory): {memory}",
                id=f"memory-{memory}",
            )
            for memory in (LAMBDA_MIN_MEMORY_MIB - 1, LAMBDA_MAX_MEMORY_MIB + 1)
        ],
        pytest.param(
            lambda_worker(handler_environment={"AWS_REGION": "eu-west-1"}),
            f'"{AT}.handler_environment" must not set a variable Lambda sets itself (reserved on a lambda worker):'
            " 'AWS_REGION'",
            id="reserved-variable",
        ),
        pytest.param(
            lambda_worker(handler_environment={"AWS_LAMBDA_EXEC_WRAPPER": "/x"}),
            f'"{AT}.handler_environment" must not set a variable Lambda sets itself (reserved on a lambda worker):'
            " 'AWS_LAMBDA_EXEC_WRAPPER'",
            id="reserved-prefix",
        ),
        pytest.param(
            lambda_worker(handler_environment={"_DEBUG": "1"}),
            f'"{AT}.handler_environment" must name variables starting with a letter on a lambda worker (Lambda\'s'
            " rule): '_DEBUG'",
            id="leading-underscore",
        ),
    ],
)
def test_lambda_settings_refusal_is_one_line(raw: dict[str, Any], message: str) -> None:
    """Each broken rule of a lambda worker's settings fails synth with the setting's path, the rule and the value."""
    assert message == refusal(raw)


def test_lambda_settings_fleet_beyond_the_mappings_concurrency_names_max_tasks() -> None:
    """A MaximumConcurrency over the mapping's 1,000 is refused on the worker's max_tasks."""
    message = refusal(lambda_worker(handler=WIDE_BATCH, max_tasks=63))
    assert message.startswith(f'"{AT}.max_tasks" must keep maximum_concurrency = ceil(max_tasks x concurrency /')
    assert message.endswith(": 63")


def test_lambda_settings_fleet_at_the_mappings_concurrency_is_accepted() -> None:
    """The largest max_tasks whose MaximumConcurrency is 1,000 or less parses (62 x 16 = 992)."""
    environment = parse_environment("qa", lambda_worker(handler=WIDE_BATCH, max_tasks=62))
    target = environment.lambda_target(environment.workers[0])
    assert target is not None and 992 == target.maximum_concurrency


def test_lambda_settings_handler_too_long_for_lambda_names_the_target() -> None:
    """A declaration Lambda cannot run in 900 s is refused on the worker's target, with the declared value."""
    message = refusal(lambda_worker(handler=FIVE_MINUTES))
    assert message.startswith(
        f'"{AT}.target" cannot be "lambda" for {FIVE_MINUTES}: its @worker declaration\'s max_duration_seconds must be'
        " at most 288 to target Lambda with this shape"
    )
    assert message.endswith(": 300")


def test_lambda_settings_retry_horizon_past_retention_names_source_retention_days() -> None:
    """A source that would expire a message before the Lambda target's retries end names source_retention_days."""
    raw = lambda_worker(handler="tests.infra.handlers:many_receives", source_retention_days=1, dlq_retention_days=3)
    message = refusal(raw)
    assert message.startswith(
        f'"{AT}.source_retention_days" is too short for lambda worker default: source_retention_seconds must exceed'
        " the Lambda target's retry horizon"
    )
    assert message.endswith(": 1")


def test_lambda_settings_report_shows_the_lambda_targets_values() -> None:
    """make run's report shows a lambda worker's memory, its fleet or pollers and the Lambda target's visibility, and
    no ECS stop timeout."""
    from infra.report import contract_cell, runs_on, tasks_cell

    environment = parse_environment("qa", lambda_worker(max_tasks=3, provisioned_pollers=POLLERS_RAW))
    (worker,) = environment.workers
    contract = environment.contract(worker)
    target = environment.lambda_target(worker)
    assert target is not None
    assert ("Lambda, 2..6 pollers", "x86_64, Lambda 512 MiB") == (tasks_cell(worker), runs_on(worker))
    assert f"{target.queue_visibility_seconds} s" in contract_cell(worker, contract, "visibility_timeout_seconds")
    assert "- (Lambda)" == contract_cell(worker, contract, "stop_timeout_seconds")
