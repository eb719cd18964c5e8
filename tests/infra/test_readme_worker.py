"""The README's "Adding a worker" quick start synthesizes as written: its cdk.json lines are a real environment.

The README documents the shipped example (dev as cdk.json shipped it, the team package's report job): these tests
compare it with the shipped dev of tests/reference.py, and skip, saying why, where a handler the README names is
no longer in the repository (a team deleted workers/reports.py, say).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from consumer.declaration import contract_of, load_handler
from consumer.errors import ContractError
from infra.worker_settings import CONTEXT_KEY, WORKER_KEYS
from tests.infra.conftest import Synthesized, synthesize_once
from tests.reference import SHIPPED

ROOT = Path(__file__).resolve().parents[2]
#: The heading the README puts above the block, and the environment its `make synth ENV=...` names.
HEADING = "### Adding a worker"
ENVIRONMENT = "dev"


def readme_section() -> str:
    """The README's text from :data:`HEADING` to the next section."""
    return (ROOT / "README.md").read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]


def readme_workers() -> dict[str, Any]:
    """The ``"workers": {...}`` lines of the json block under :data:`HEADING`, parsed."""
    section = readme_section()
    match = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert match, f"no json block under {HEADING!r} in README.md"
    assert f"make synth ENV={ENVIRONMENT}" in section
    workers: dict[str, Any] = json.loads("{" + match.group(1) + "}")["workers"]
    return workers


def require_readme_handlers() -> None:
    """Skip (saying why) where a handler the README's block names cannot be loaded: the example is gone."""
    for name, worker in readme_workers().items():
        try:
            load_handler(worker["handler"])
        except ContractError as error:
            pytest.skip(f"the README's example worker {name} is not in this repository: {error}")


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """dev as cdk.json shipped it, its per-worker keys replaced by the README's workers (as the README says to)."""
    require_readme_handlers()
    settings = {k: v for k, v in SHIPPED[ENVIRONMENT].items() if k not in WORKER_KEYS}
    context = {CONTEXT_KEY: {ENVIRONMENT: {**settings, "workers": readme_workers()}}, "env": ENVIRONMENT}
    return synthesize_once(tmp_path_factory, context)[ENVIRONMENT]


def test_readme_workers_synthesize_nag_clean_with_a_queue_pair_and_service_each(environment: Synthesized) -> None:
    """Every worker the README lists runs its handler in its own service on its own queue pair (synth ran nag)."""
    workers = readme_workers()
    assert list(environment.stack.workers) == list(workers)
    for name, worker in workers.items():
        variables = {v["Name"]: v["Value"] for v in environment.container(name)["Environment"]}
        assert variables["CONSUMER_HANDLER"] == worker["handler"]
    assert len(environment.resources("AWS::ECS::Service")) == len(workers)
    assert len(environment.resources("AWS::SQS::Queue")) == 2 * len(workers)


def test_readme_first_worker_keeps_the_environments_names_and_the_next_is_prefixed(environment: Synthesized) -> None:
    """What the README says of names: the first worker's are today's, a later one's carry `<stack>-<name>`."""
    first, second = list(readme_workers())[:2]
    queues = {q["Properties"]["QueueName"] for q in environment.resources("AWS::SQS::Queue").values()}
    assert {"SqsWorker-dev-source", f"SqsWorker-dev-{second}-source"} <= queues
    assert environment.logical_id(environment.stack.workers[first].queues.queue) == "QueuesQueueD811C857"
    assert environment.logical_id(environment.stack.workers[second].queues.queue).startswith(f"{second}Queues")


def test_shipped_example_readme_quotes_the_team_handlers_declaration_as_it_is() -> None:
    """The declaration the README quotes for workers/reports.py is the module's own (skipped where the team's
    package no longer has it)."""
    require_readme_handlers()
    contract = contract_of(load_handler("workers.reports:handle"))
    minutes = contract.max_duration_seconds // 60
    quoted = f"@worker(max_duration=timedelta(minutes={minutes}), concurrency={contract.concurrency})"
    assert quoted in readme_section()


def test_readme_first_worker_keeps_what_dev_gives_its_handler_today() -> None:
    """The README's first worker is the shipped dev's own: same handler and handler_environment (NOTIFY_DRY_RUN), so
    following the README leaves dev's consumer able to start (without it the example refuses: no webhook URL, no
    dry run)."""
    dev = SHIPPED[ENVIRONMENT]
    first = next(iter(readme_workers().values()))
    assert first["handler"] == dev["handler"]
    assert first.get("handler_environment") == dev.get("handler_environment")
