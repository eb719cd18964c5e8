"""Shared fixtures for infra tests: each whole app is synthesized once per session (per xdist worker process).

Rules for this folder: synthesize, then assert template properties with ``aws_cdk.assertions``; never a
whole-template snapshot. A test of the framework synthesizes a context it builds itself (a module's own variants,
``synthesize_once(tmp_path_factory, {...})``, or ``synthesize(tmp_path, {...})`` for a test's own), or the
reference environments of ``tests/reference.py`` (the ``reference``, ``dev`` and ``prod`` fixtures), or it holds for
every environment and worker of the repository's own ``cdk.json``, whatever a team made of it (the ``repository``
fixture, ``tests/infra/test_repository.py``); only a test of the shipped example reads ``cdk.json``'s values, says so
in its name and skips where the example is not deployed (``tests.reference.shipped_example``). A test of one
construct's behaviour that needs no environment builds it alone (:func:`standalone_worker`). What a session fixture
or ``synthesize_once`` gives is shared by every module of the process: read it, never change it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, CfnElement
from aws_cdk.assertions import Template

from infra.app import build_app, cdk_json_context
from infra.stack import WorkerStack
from infra.worker_settings import CONTEXT_KEY
from tests.reference import reference_context, repository_environments


@dataclass
class Synthesized:
    """One synthesized environment: its stack object and its template as written to disk."""

    stack: WorkerStack
    json: dict[str, Any]
    outdir: Path

    @cached_property
    def template(self) -> Template:
        """The template for ``aws_cdk.assertions``, loaded into the jsii process on first use (a test reading only
        ``json`` never pays for it)."""
        return Template.from_json(self.json)

    def logical_id(self, construct: Any) -> str:
        """The logical id of an L2 construct's resource, or of an L1 resource itself."""
        return self.stack.get_logical_id(
            construct if isinstance(construct, CfnElement) else construct.node.default_child
        )

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == resource_type}

    def container(self, worker: str | None = None) -> dict[str, Any]:
        """The container definition of ``worker``'s task definition (default the first worker's)."""
        consumer = self.stack.workers[worker].consumer if worker else self.stack.consumer
        task = self.resources("AWS::ECS::TaskDefinition")[self.logical_id(consumer.task_definition)]
        definitions: list[dict[str, Any]] = task["Properties"]["ContainerDefinitions"]
        # The consumer is the one essential container; a tracing sidecar (infra/tracing.py) is not essential.
        (definition,) = [d for d in definitions if d.get("Essential", True)]
        return definition


def synthesize(
    outdir: Path, context: dict[str, Any] | None = None, *, cloudformation_validation: bool = False
) -> dict[str, Synthesized]:
    """Run the real app (nag included) and load each stack's template from the cloud assembly.

    ``context`` is merged over ``cdk.json``'s (its feature flags stay): a ``sqs-worker:environments`` key replaces
    cdk.json's environments, and a test of the framework always gives one (without it, the repository's own).

    aws-cdk-lib's built-in CloudFormation validation (``App(builtin_cloud_formation_validation=)``, what
    ``cdk synth`` runs) takes about 7 CPU seconds to start in each process, and with cdk.json's
    ``validateAgainstDefaultRules: false`` its findings are warnings in the validation report, which cdk-nag's checks
    (``tests/infra/checks.py``) count as open findings. It runs where the tests hold a whole app, once a session:
    the reference environments (``reference``), the repository's cdk.json (``repository``) and each edit of
    tests/edits; a module's own variants, synthesized for the properties of one construct or setting, leave it off.
    """
    app = App(
        outdir=str(outdir),
        context={**cdk_json_context(), **(context or {})},
        builtin_cloud_formation_validation=cloudformation_validation,
    )
    app, stacks = build_app(app)
    app.synth()
    result = {}
    for stack in stacks:
        data = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
        result[stack.settings.name] = Synthesized(stack, data, outdir)
    return result


#: What :func:`synthesize_once` synthesized in this process, by context.
_SYNTHESIZED: dict[str, dict[str, Synthesized]] = {}


def synthesize_once(tmp_path_factory: pytest.TempPathFactory, context: dict[str, Any]) -> dict[str, Synthesized]:
    """:func:`synthesize` of ``context``, once per session: a module asking for a context another module already
    synthesized (same environments, same order) reads that synthesis, which neither may change."""
    key = json.dumps(context, sort_keys=True)
    if key not in _SYNTHESIZED:
        _SYNTHESIZED[key] = synthesize(tmp_path_factory.mktemp("cdk.out"), context)
    return _SYNTHESIZED[key]


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """The reference environments (``tests/reference.py``: dev, staging, prod and demo as cdk.json shipped them,
    with framework-owned handlers), synthesized once for the session: never the repository's cdk.json."""
    return synthesize(tmp_path_factory.mktemp("cdk.out"), reference_context(), cloudformation_validation=True)


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """Every environment of the repository's own cdk.json, whatever a team made of it, synthesized once for the
    session (cdk-nag included): what tests/infra/test_repository.py checks and the permissions tier evaluates."""
    return synthesize(
        tmp_path_factory.mktemp("cdk.out"), {CONTEXT_KEY: repository_environments()}, cloudformation_validation=True
    )


@pytest.fixture(scope="session")
def dev(reference: dict[str, Synthesized]) -> Synthesized:
    """The reference dev: the notifications example (90 s), one worker, dry run, pages to tickets."""
    return reference["dev"]


@pytest.fixture(scope="session")
def prod(reference: dict[str, Synthesized]) -> Synthesized:
    """The reference prod: the notifications example, its webhook secret, paging taken at deploy."""
    return reference["prod"]


SynthFactory = Callable[..., dict[str, Synthesized]]

#: cdk.json settings of an environment in an existing VPC and cluster (no lookups: synth stays offline).
EXISTING_VPC_AND_CLUSTER: dict[str, Any] = {
    "vpc": {
        "vpc_id": "vpc-0123456789abcdef0",
        "availability_zones": ["eu-west-1a", "eu-west-1b"],
        "private_subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
    },
    "cluster_name": "platform",
}


def standalone_worker(handler: str, construct_id: str = "reports", **arguments: Any) -> Any:
    """A ``Worker`` built as a team's own CDK app would (no cdk.json): its own stack, cluster and one topic for pages
    and tickets. ``arguments`` name fields of :class:`infra.worker_settings.WorkerSettings` (``name`` defaults to
    what ``WorkerStack`` would give: ``default`` under the id ``Default``, else the id) or of
    :class:`infra.shared.SharedResources`, each given to its object as is. What a test of a refusal calls inside
    ``pytest.raises``."""
    import dataclasses

    from aws_cdk import App, Stack
    from aws_cdk import aws_ecs as ecs
    from aws_cdk import aws_sns as sns

    from consumer.declaration import contract_of, load_handler
    from infra.shared import SharedResources
    from infra.worker import DEFAULT_WORKER_ID, Worker
    from infra.worker_settings import DEFAULT_WORKER_NAME, WorkerSettings

    shared_fields = {f.name for f in dataclasses.fields(SharedResources)}
    shared_arguments = {k: v for k, v in arguments.items() if k in shared_fields}
    settings_arguments = {k: v for k, v in arguments.items() if k not in shared_fields}
    settings_arguments.setdefault("name", DEFAULT_WORKER_NAME if construct_id == DEFAULT_WORKER_ID else construct_id)
    stack = Stack(App(), "Standalone")
    topic = sns.Topic(stack, "Topic")
    cluster = ecs.Cluster(stack, "Cluster")
    return Worker(
        stack,
        construct_id,
        settings=WorkerSettings(handler=handler, **settings_arguments),
        contract=contract_of(load_handler(handler)),
        shared=SharedResources(cluster=cluster, page_topic=topic, ticket_topic=topic, **shared_arguments),
    )
