"""A team's first-day edits of the repository's cdk.json, each held to the framework's checks (tests/edits/tier.py).

Each edit is synthesized once (cdk-nag included), the first time one of its tests needs it; a parallel run keeps
the module on one worker (``--dist loadfile``), so no edit is synthesized twice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from consumer.local.task import TaskContainer
from infra.function import ConsumerFunction
from infra.worker_settings import CONTEXT_KEY
from tests.edits.tier import (
    EXAMPLES,
    TEAM_HANDLER,
    Environments,
    add_worker_everywhere,
    changed_environments,
    cut_costs,
    feed_from_sources,
    handlers_of,
    move_a_worker_to_lambda,
    permission_mismatches,
    remove_the_example,
    rename_a_worker,
    replace_production_handler,
    run_template_check,
    synthesize_edited,
    trace_production,
)
from tests.infra.checks import TEMPLATE_CHECKS
from tests.infra.conftest import Synthesized, synthesize
from tests.reference import repository_environments

EDITS: dict[str, Callable[[Environments], Environments]] = {
    "worker added everywhere": add_worker_everywhere,
    "prod's handler replaced": replace_production_handler,
    "example removed": remove_the_example,
    "worker renamed": rename_a_worker,
    "prod traced": trace_production,
    "prod fed by sources": feed_from_sources,
    "costs cut everywhere": cut_costs,
    "worker moved to lambda": move_a_worker_to_lambda,
}
_synthesized: dict[str, tuple[Environments, dict[str, Synthesized]]] = {}


def each_edit() -> list[Any]:
    """The edits as parameters, named by the edit."""
    return [pytest.param(name) for name in EDITS]


def edited(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Environments, dict[str, Synthesized]]:
    """The repository's environments after edit ``name``, synthesized once per process."""
    if name not in _synthesized:
        _synthesized[name] = synthesize_edited(EDITS[name], Path(tmp_path_factory.mktemp("cdk.out")))
    return _synthesized[name]


@pytest.mark.parametrize("name", each_edit())
def test_the_edit_is_made(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each edit changes what it says on the repository's cdk.json, whatever that holds (no check runs on nothing),
    and every environment it changed is synthesized, each under its own name."""
    environments, synthesized = edited(name, tmp_path_factory)
    before = {env: list(handlers_of(settings)) for env, settings in repository_environments().items()}
    after = {env: list(handlers_of(settings)) for env, settings in environments.items()}
    assert list(environments) == list(before)
    assert list(synthesized) == changed_environments(environments) != []
    assert all(s.stack.settings.name == env for env, s in synthesized.items())
    if name == "worker added everywhere":
        assert all(TEAM_HANDLER in handlers for handlers in after.values())
    elif name == "prod's handler replaced":
        production = "prod" if "prod" in after else list(after)[-1]
        assert after[production][0] == TEAM_HANDLER
    elif name == "example removed":
        changed = [env for env in after if after[env] != before[env]]
        assert len(changed) == 1 and not any(h.startswith(EXAMPLES) for h in after[changed[0]])
    elif name == "prod traced":
        tasks = [t for s in synthesized.values() for t in s.resources("AWS::ECS::TaskDefinition").values()]
        assert tasks and all(len(t["Properties"]["ContainerDefinitions"]) == 2 for t in tasks)  # consumer + collector
        for env in synthesized.values():  # the container tier runs the consumer beside its sidecar's dependency
            for worker in env.stack.workers:
                task = TaskContainer.from_assembly(env.outdir, env.stack.stack_name, worker)
                assert task.definition["DependsOn"] == [{"Condition": "START", "ContainerName": "OtelCollector"}]
    elif name == "costs cut everywhere":
        for env in synthesized.values():
            services = [s["Properties"] for s in env.resources("AWS::ECS::Service").values()]
            steps = [p for p in env.resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()]
            if env.stack.settings.cluster_name is None:
                assert any("CapacityProviderStrategy" in s for s in services)
                assert [p["Properties"]["PolicyType"] for p in steps].count("StepScaling") == len(services)
        platforms = [
            t["Properties"]["RuntimePlatform"]["CpuArchitecture"]
            for env in synthesized.values()
            for t in env.resources("AWS::ECS::TaskDefinition").values()
        ]
        assert "ARM64" in platforms
        for env in synthesized.values():  # no NAT where the stack creates the VPC: the tasks take a public IP
            if env.stack.settings.vpc is None:
                assert not env.resources("AWS::EC2::NatGateway")
                networks = [
                    s["Properties"]["NetworkConfiguration"] for s in env.resources("AWS::ECS::Service").values()
                ]
                assert {n["AwsvpcConfiguration"]["AssignPublicIp"] for n in networks} == {"ENABLED"}
    elif name == "worker moved to lambda":
        functions = [w for env in synthesized.values() for w in env.stack.workers.values() if w.target is not None]
        assert len(functions) == 1 and isinstance(functions[0].consumer, ConsumerFunction)
    elif name == "prod fed by sources":
        assert all(
            s.resources("AWS::SNS::Subscription") and s.resources("AWS::Events::Rule") for s in synthesized.values()
        )
    else:
        renamed = {env: list(s.stack.workers) for env, s in synthesized.items()}
        original = {env: _names(settings) for env, settings in repository_environments().items()}
        (where,) = [env for env in renamed if renamed[env] != original[env]]
        assert len(set(renamed[where]) - set(original[where])) == 1


def _names(settings: dict[str, Any]) -> list[str]:
    return list(settings["workers"]) if "workers" in settings else ["default"]


@pytest.mark.parametrize("check", list(TEMPLATE_CHECKS))
@pytest.mark.parametrize("name", each_edit())
def test_framework_template_checks_hold(name: str, check: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every environment the edit changed, every worker of it: the check named, as the repository's own pass it."""
    run_template_check(check, edited(name, tmp_path_factory)[1])


@pytest.mark.parametrize("name", each_edit())
def test_permissions_hold(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every permission scenario of every worker of the changed environments is answered as AWS must (paging, runtime calls, refusals, senders,
    the execution role, no worker reaching another's)."""
    assert permission_mismatches(*edited(name, tmp_path_factory)) == []


def test_moving_a_worker_to_lambda_replaces_no_queue_table_or_log_group(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The moved worker's queues, idempotency table and log group keep their logical ids, so CloudFormation updates
    them in place: of the source only the visibility timeout changes, the DLQ not at all."""
    _, synthesized = edited("worker moved to lambda", tmp_path_factory)
    ((name, after),) = synthesized.items()
    (moved,) = [w for w in after.stack.workers.values() if w.target is not None]
    if moved.name not in _names(repository_environments()[name]):
        pytest.skip("no worker of cdk.json can run on Lambda: the edit added the team's, which replaces nothing")
    context = {CONTEXT_KEY: repository_environments(), "env": name}
    before = synthesize(tmp_path_factory.mktemp("cdk.out"), context)[name]
    was = before.stack.workers[moved.name]
    pairs = [
        (was.queues.queue, moved.queues.queue),
        (was.queues.dead_letter_queue, moved.queues.dead_letter_queue),
        (was.consumer.idempotency_table, moved.consumer.idempotency_table),
        (was.consumer.log_group, moved.consumer.log_group),
    ]
    ids = [(before.logical_id(old), after.logical_id(new)) for old, new in pairs if old is not None]
    assert [old for old, _ in ids] == [new for _, new in ids]
    resources = [(before.json["Resources"][old], after.json["Resources"][new]) for old, new in ids]
    changed = [
        sorted(k for k in {*o["Properties"], *n["Properties"]} if o["Properties"].get(k) != n["Properties"].get(k))
        for o, n in resources
    ]
    assert [["VisibilityTimeout"], []] == changed[:2]
