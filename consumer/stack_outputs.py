"""How a stack names its workers, for those that read it: one definition for ``infra/`` (which writes the
template) and the local and DLQ tooling (which read it). Standard library only.

The worker holding a stack's unprefixed resources (identity "default", infra/identities.py) keeps the outputs a
one-worker stack has always had (``QueueUrl``, ...); every other worker's outputs start with its name in PascalCase
(``ReportsQueueUrl``). The ``WorkerNames`` output lists the workers, that one first, and each task definition (or a
Lambda worker's function) names its worker in its metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The stack output listing the workers, comma-separated, the first one first.
WORKER_NAMES_OUTPUT = "WorkerNames"
#: The task definition's metadata key naming the worker it runs (CloudFormation ignores resource metadata).
WORKER_METADATA_KEY = "sqs-worker:worker"


def output_prefix(worker: str | None) -> str:
    """What a worker's stack outputs start with: ``""`` for None (the unprefixed one), else its name in PascalCase
    (``order-emails`` -> ``OrderEmails``; one prefix per name, since a name is lowercase words joined by ``-``)."""
    return "".join(word.capitalize() for word in worker.split("-")) if worker else ""


def task_definitions(resources: Mapping[str, Any]) -> list[tuple[str | None, Mapping[str, Any]]]:
    """Each ``AWS::ECS::TaskDefinition`` of a template's ``Resources``, in order, with the worker its metadata names
    (None where it names none: a stack built before workers, or by hand)."""
    return [
        (resource.get("Metadata", {}).get(WORKER_METADATA_KEY), resource)
        for resource in resources.values()
        if resource["Type"] == "AWS::ECS::TaskDefinition"
    ]


def worker_functions(resources: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Each ``AWS::Lambda::Function`` of a template's ``Resources`` that runs a worker (``"target": "lambda"``), in
    order, with the worker its metadata names; a function without that metadata (the CDK's custom resource
    providers) is none of them."""
    return [
        (resource["Metadata"][WORKER_METADATA_KEY], resource)
        for resource in resources.values()
        if resource["Type"] == "AWS::Lambda::Function" and WORKER_METADATA_KEY in resource.get("Metadata", {})
    ]


def consumer_container(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    """The consumer's container definition of a task definition resource: its one essential container (a tracing
    collector sidecar, infra/tracing.py, is not essential; ``Essential`` is true where a definition leaves it out).
    A ``ValueError`` when there is not exactly one."""
    essential: list[Mapping[str, Any]] = [
        c for c in definition["Properties"]["ContainerDefinitions"] if c.get("Essential", True)
    ]
    if len(essential) != 1:
        raise ValueError(f"expected one essential container in the task definition, found {len(essential)}")
    return essential[0]
