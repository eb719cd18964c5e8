"""The repository's own cdk.json, whatever a team made of it: every environment and worker it declares holds the
framework's promises (tests/infra/checks.py), with every expected value derived from that environment's own
settings and each worker's own declaration, never a number of the shipped example.

A team adds its worker, replaces or removes the example, renames one: these tests keep passing for any valid
cdk.json, and when one fails it names the environment, the worker and the rule. (What a team's typical edits do to
the checks is proven in tests/edits, on edited copies of this same cdk.json.)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from consumer.declaration import contract_of, load_handler
from infra.settings import load_environments
from infra.worker_settings import CONTEXT_KEY
from tests.infra.checks import TEMPLATE_CHECKS
from tests.infra.conftest import Synthesized
from tests.reference import SHIPPED, repository_environments, shipped_example

ENVIRONMENTS = list(repository_environments())


def test_every_environment_of_cdk_json_parses_and_synthesizes(repository: dict[str, Synthesized]) -> None:
    """Each environment of cdk.json gives one stack, with a queue pair for each of its workers, and a service for
    each ECS worker or a function and its mapping for each Lambda one."""
    assert list(repository) == ENVIRONMENTS
    for name, env in repository.items():
        workers = len(env.stack.settings.workers)
        functions = sum(w.target == "lambda" for w in env.stack.settings.workers)
        assert list(env.stack.workers) == [w.name for w in env.stack.settings.workers], name
        env.template.resource_count_is("AWS::SQS::Queue", 2 * workers)
        env.template.resource_count_is("AWS::ECS::Service", workers - functions)
        env.template.resource_count_is("AWS::Lambda::EventSourceMapping", functions)


def test_every_worker_runs_the_contract_its_handler_declares() -> None:
    """Each worker's contract is its handler's @worker declaration with the environment's retention applied."""
    for settings in load_environments({CONTEXT_KEY: repository_environments()}):
        for worker in settings.workers:
            declared = contract_of(load_handler(worker.handler))
            contract = settings.contract(worker)
            assert contract.max_duration_seconds == declared.max_duration_seconds, (settings.name, worker.name)
            assert contract.source_retention_seconds == settings.source_retention_days * 86_400


@pytest.mark.parametrize("environment", ENVIRONMENTS)
@pytest.mark.parametrize("check", list(TEMPLATE_CHECKS))
def test_framework_checks_hold_for_every_environment(
    repository: dict[str, Synthesized], environment: str, check: str
) -> None:
    """Queues, services, task roles, alarms, topics, dashboard, outputs, logical ids, runbook links and cdk-nag:
    the framework's checks on each environment of the repository's cdk.json."""
    run: Callable[[Synthesized], None] = TEMPLATE_CHECKS[check]
    run(repository[environment])


def test_shipped_example_cdk_json_is_what_the_reference_says_shipped() -> None:
    """As shipped, cdk.json holds exactly tests/reference.py's SHIPPED environments, so the reference the framework's
    tests synthesize is what ships. A test of the shipped example: it skips, naming what changed, once a team has
    made cdk.json its own."""
    environments = repository_environments()
    if set(environments) != set(SHIPPED):
        pytest.skip(
            f"the shipped example is not deployed as shipped: cdk.json's environments are {sorted(environments)}"
        )
    for name in SHIPPED:
        assert shipped_example(name) == SHIPPED[name]
