"""The edits tier: the repository's cdk.json with a team's first-day edits, held to the framework's checks.

A team clones this repository and makes it its own: it adds a worker of its own to every environment (README,
"Adding a worker"), replaces prod's handler with its own, removes the example from an environment, renames a
worker, moves a worker to Lambda. Each module of this folder makes one of those edits to the repository's cdk.json as it is now (so the
tier keeps holding after the team's real edits too), synthesizes the result with cdk-nag, and runs on it the
same template checks (``tests/infra/checks.py``) and permission scenarios (``tests/infra/test_permissions.py``)
the repository's own environments pass. An edit that a framework test does not survive is a framework bug.

The edits are functions of the environments mapping (``cdk.json``'s ``sqs-worker:environments``), written for
any valid one: they read what is there (either form of an environment, any worker names) and never assume the
shipped example.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from infra.app import ENV_CONTEXT_KEY
from infra.identities import DEFAULT_IDENTITY
from infra.settings import MAX_WORKERS
from infra.worker_settings import CONTEXT_KEY, LAMBDA, WORKER_KEYS, WORKER_NAME_MAX_CHARS, check_worker_name
from tests.infra.checks import TEMPLATE_CHECKS
from tests.infra.conftest import Synthesized, synthesize
from tests.infra.function_checks import lambda_ready, move_to_lambda
from tests.infra.permission_rows import bind, evaluate_bound
from tests.infra.permissions import mismatches
from tests.reference import repository_environments

Environments = dict[str, dict[str, Any]]
#: The team's handler the edits deploy (tests/team_handlers.py: a timing none of the shipped handlers has), and the
#: name its worker gets where it is free.
TEAM_HANDLER = "tests.team_handlers:invoices"
TEAM_WORKER = "invoices"
#: The framework's example handlers: what "the example" means in an environment.
EXAMPLES = "consumer.examples."


def workers_of(environment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The environment's workers in the ``workers`` form, converting the one-worker form in place as docs/upgrades.md
    says (the per-worker keys move under the worker, named after its handler's module where that is a valid name,
    which keeps the stack's unprefixed resources with ``"identity": "default"``)."""
    if "workers" not in environment:
        worker = {key: environment.pop(key) for key in WORKER_KEYS if key in environment}
        worker.setdefault("identity", DEFAULT_IDENTITY)
        module = worker["handler"].partition(":")[0].rsplit(".", 1)[-1]
        environment["workers"] = {_free_name(module, set()): worker}
    workers: dict[str, dict[str, Any]] = environment["workers"]
    return workers


def _free_name(base: str, taken: set[str]) -> str:
    """A valid worker name from ``base`` (``notifications``; ``invoices2`` where ``invoices`` is taken)."""
    base = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")
    base = (base if base[:1].isalpha() else f"w{base}")[: WORKER_NAME_MAX_CHARS - 2].rstrip("-")
    name = next(candidate for candidate in (base, *(f"{base}{n}" for n in range(2, 100))) if candidate not in taken)
    return check_worker_name("edit", name)


def _team_worker(taken: set[str]) -> tuple[str, dict[str, Any]]:
    return _free_name(TEAM_WORKER, taken), {"handler": TEAM_HANDLER, "max_tasks": 3}


def add_worker_everywhere(environments: Environments) -> Environments:
    """The README's "Adding a worker", in every environment that has room for one more."""
    for environment in environments.values():
        workers = workers_of(environment)
        if len(workers) < MAX_WORKERS:
            name, worker = _team_worker(set(workers))
            workers[name] = worker
    return environments


def _the_production_environment(environments: Environments) -> str:
    """prod where there is one, else the environment listed last."""
    return "prod" if "prod" in environments else list(environments)[-1]


def replace_production_handler(environments: Environments) -> Environments:
    """prod's (first) worker runs the team's handler instead of the example: the handler and the example's own
    variables and secrets go, the fleet settings stay."""
    environment = environments[_the_production_environment(environments)]
    target = next(iter(environment["workers"].values())) if "workers" in environment else environment
    target["handler"] = TEAM_HANDLER
    target.pop("handler_environment", None)
    target.pop("secrets", None)
    return environments


def remove_the_example(environments: Environments) -> Environments:
    """The example's workers leave the first environment that runs one (the first environment where none does);
    the team's worker takes their place where no worker is left."""
    name = next(
        (n for n, e in environments.items() if any(h.startswith(EXAMPLES) for h in handlers_of(e))),
        next(iter(environments)),
    )
    workers = workers_of(environments[name])
    examples = [w for w, settings in workers.items() if settings["handler"].startswith(EXAMPLES)] or [
        next(iter(workers))
    ]
    for worker in examples:
        del workers[worker]
    if not workers:
        team, settings = _team_worker(set())
        workers[team] = settings
    return environments


def rename_a_worker(environments: Environments) -> Environments:
    """The last worker of the first environment listing several (else of the first environment) is renamed, keeping
    its queues as docs/upgrades.md says (``"identity"``: its old name, unless it declares one)."""
    name = next((n for n, e in environments.items() if len(e.get("workers", {})) > 1), next(iter(environments)))
    workers = workers_of(environments[name])
    old = list(workers)[-1]
    new = _free_name(f"{old}-renamed", set(workers))
    workers[old].setdefault("identity", old)
    environments[name]["workers"] = {(new if w == old else w): settings for w, settings in workers.items()}
    return environments


def trace_production(environments: Environments) -> Environments:
    """Traces in X-Ray for prod (docs/deploy.md, "Traces in X-Ray"): every worker of it gets the collector sidecar."""
    environments[_the_production_environment(environments)]["tracing"] = {"sample_ratio": 0.05}
    return environments


def feed_from_sources(environments: Environments) -> Environments:
    """prod's first worker is fed by an SNS topic (envelopes on, filtered) and an EventBridge rule on the default
    bus, in the environment's region where it names one (docs/configuration.md, "Sources")."""
    environment = environments[_the_production_environment(environments)]
    region = environment.get("region", "eu-west-1")
    account = environment.get("account", "123456789012")
    target = next(iter(workers_of(environment).values()))
    target["sources"] = [
        {
            "topic_arn": f"arn:aws:sns:{region}:{account}:orders",
            "raw_message_delivery": False,
            "filter_policy": {"kind": ["order"]},
        },
        {"name": "orders", "event_pattern": {"source": ["com.example.orders"]}},
    ]
    return environments


def cut_costs(environments: Environments) -> Environments:
    """The cost knobs in every environment (docs/configuration.md, "What it costs to run"): no NAT gateway where the
    stack creates the VPC (its tasks in public subnets), and each worker scales to zero, and alternately runs on
    Fargate Spot behind one on-demand task or on Graviton (Spot runs no ARM64). An environment on an existing cluster
    (``cluster_name``) takes Graviton only: synth refuses the other two there. A worker on Lambda takes Graviton only:
    Spot and min_tasks are ECS settings (a Lambda worker scales to zero by itself)."""
    for environment in environments.values():
        if "vpc" not in environment:
            environment["nat_gateways"] = 0
        existing = "cluster_name" in environment
        for index, worker in enumerate(workers_of(environment).values()):
            if worker.get("target") == LAMBDA:
                worker["architecture"] = "arm64"
                continue
            if index % 2 == 0 and not existing:
                worker["spot"] = {"on_demand_base": 1}
            else:
                worker["architecture"] = "arm64"
            if not existing:
                worker["min_tasks"] = 0
    return environments


def move_a_worker_to_lambda(environments: Environments) -> Environments:
    """The first worker, in cdk.json's order, whose handler Lambda can run moves to ``"target": "lambda"``
    (docs/configuration.md, "A worker on Lambda"): its ECS-only settings and its secrets go, the rest stays. Where no
    worker can, the team's worker joins the first environment on Lambda."""
    ready = lambda_ready(environments)
    if ready is not None:
        move_to_lambda(environments[ready[0]], ready[1])
        return environments
    workers = workers_of(next(iter(environments.values())))
    name, worker = _team_worker(set(workers))
    workers[name] = {**worker, "target": LAMBDA}
    return environments


def handlers_of(environment: Mapping[str, Any]) -> Iterator[str]:
    """The handlers an environment's workers run, in order."""
    if "workers" in environment:
        yield from (w["handler"] for w in environment["workers"].values())
    else:
        yield environment["handler"]


def edited(edit: Callable[[Environments], Environments]) -> Environments:
    """``edit`` applied to a copy of the repository's cdk.json environments."""
    return edit(copy.deepcopy(repository_environments()))


def changed_environments(environments: Environments) -> list[str]:
    """The environments an edit changed: those that differ from the repository's cdk.json."""
    before = repository_environments()
    return [name for name, settings in environments.items() if settings != before.get(name)]


def synthesize_edited(
    edit: Callable[[Environments], Environments], outdir: Path
) -> tuple[Environments, dict[str, Synthesized]]:
    """The repository's environments after ``edit``, and the synthesis (cdk-nag included: an open finding fails) of
    those it changed. Every environment is parsed and validated, as ``cdk synth`` does; one the edit left alone is
    the repository's own, synthesized and checked by tests/infra/test_repository.py, so only a one-environment edit
    is synthesized alone (``-c env=NAME``), which keeps the tier's four syntheses from costing sixteen."""
    environments = edited(edit)
    changed = changed_environments(environments)
    assert changed, "the edit changed no environment"
    selection = {ENV_CONTEXT_KEY: changed[0]} if len(changed) == 1 else {}
    synthesized = synthesize(outdir, {CONTEXT_KEY: environments, **selection}, cloudformation_validation=True)
    return environments, {name: synthesized[name] for name in changed}


def run_template_check(check: str, synthesized: Mapping[str, Synthesized]) -> None:
    """One of the framework's template checks on every edited environment."""
    for env in synthesized.values():
        TEMPLATE_CHECKS[check](env)


def permission_mismatches(environments: Environments, synthesized: Mapping[str, Synthesized]) -> list[str]:
    """Every permission scenario of every worker of the edited environments that AWS would answer otherwise."""
    grouped = evaluate_bound(bind(synthesized), environments)
    results = [pair for pairs in grouped.values() for pair in pairs]
    assert results, "no permission scenario was evaluated"
    return mismatches([s for s, _ in results], dict(results))
