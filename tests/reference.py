"""The framework's reference project: the environments the framework's own tests synthesize.

This repository is a team's to make its own: ``cdk.json``'s environments and workers are theirs to change (add a
worker, replace or remove the example, rename one). A test of the framework must not break when they do, so a
test that needs known values (the example's 90 s timings, prod's webhook secret, demo's two workers) synthesizes
this context instead of ``cdk.json``'s: the environments ``cdk.json`` shipped with, written out here, every handler
one the framework owns (``consumer.examples``, and :func:`report_job` here in place of the team package's
``workers.reports``, which a team may change or delete). What must hold for whatever ``cdk.json`` a team writes is
checked on the repository's own ``cdk.json`` by ``tests/infra/test_repository.py``, and on a team's typical edits
of it by ``tests/edits``; the few tests of the shipped example itself say so in their names and skip, with the
reason, where the example is no longer deployed (:func:`shipped_example`).
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from consumer import Message, PoisonMessage, worker
from infra.worker_settings import CONTEXT_KEY

ROOT = Path(__file__).resolve().parents[1]
NOTIFICATIONS = "consumer.examples.notifications:handle"
DEMO_NOTIFICATIONS = "consumer.examples.demo:handle"
#: The reference demo's second worker: a slow job declared as the team package's report job is.
REPORT_JOB = "tests.reference:report_job"


@worker(
    max_duration=timedelta(minutes=10),
    concurrency=2,
    acceptable_latency=timedelta(minutes=30),
    average_duration=timedelta(minutes=2),
    non_retryable=(json.JSONDecodeError,),
)
def report_job(message: Message) -> None:
    """A slow worker's handler (10 min, two at a time): accepts a JSON object with a ``report_id``."""
    request = json.loads(message.body)
    if not isinstance(request, dict) or "report_id" not in request:
        raise PoisonMessage("a report request is a JSON object with a report_id")


#: The environments exactly as ``cdk.json`` shipped them (:func:`shipped_example` compares with these).
SHIPPED: dict[str, dict[str, Any]] = {
    "dev": {
        "handler": NOTIFICATIONS,
        "min_tasks": 0,
        "max_tasks": 2,
        "cpu": 256,
        "memory_mib": 512,
        "source_retention_days": 1,
        "dlq_retention_days": 7,
        "log_retention_days": 7,
        "retain_queues": False,
        "pages_to_tickets": True,
        "nat_gateways": 0,
        "handler_environment": {"NOTIFY_DRY_RUN": "true"},
    },
    "staging": {
        "handler": NOTIFICATIONS,
        "min_tasks": 1,
        "max_tasks": 4,
        "cpu": 512,
        "memory_mib": 1024,
        "source_retention_days": 4,
        "dlq_retention_days": 14,
        "log_retention_days": 30,
        "retain_queues": True,
        "require_paging": False,
        "nat_gateways": 1,
        "secrets": {"NOTIFY_WEBHOOK_URL": "ssm:/sqs-worker/staging/notify-webhook-url"},
    },
    "prod": {
        "handler": NOTIFICATIONS,
        "min_tasks": 2,
        "max_tasks": 20,
        "cpu": 512,
        "memory_mib": 1024,
        "source_retention_days": 4,
        "dlq_retention_days": 14,
        "log_retention_days": 365,
        "retain_queues": True,
        "nat_gateways": 2,
        "secrets": {"NOTIFY_WEBHOOK_URL": "ssm:/sqs-worker/prod/notify-webhook-url"},
    },
    "demo": {
        "source_retention_days": 1,
        "dlq_retention_days": 7,
        "log_retention_days": 7,
        "retain_queues": False,
        "pages_to_tickets": True,
        "nat_gateways": 0,
        "workers": {
            "notifications": {
                "handler": DEMO_NOTIFICATIONS,
                "identity": "default",
                "max_tasks": 2,
                "handler_environment": {"NOTIFY_DRY_RUN": "true"},
            },
            "reports": {
                "handler": "workers.reports:handle",
                "max_tasks": 2,
                "handler_environment": {"REPORTS_DRY_RUN": "true"},
            },
            "webhooks": {
                "handler": "consumer.examples.webhooks:handle",
                "target": "lambda",
                "max_tasks": 2,
                "handler_environment": {"SUBSCRIBER_DRY_RUN": "true"},
            },
            "audit": {
                "handler": "workers.audit:handle",
                "max_tasks": 2,
                "handler_environment": {"AUDIT_DATABASE_PATH": "/tmp/sqs-worker-audit.sqlite3"},
            },
        },
    },
}
#: The reference environments: the shipped ones with the team package's report job replaced by :func:`report_job`,
#: and without the two workers the demo gained with the batch and async shapes (``webhooks``, the async example, and
#: ``audit``, the team package's batch handler): the framework's tests of the reference demo keep its two workers, and
#: the shipped demo with all four runs in tests/integration/test_demo.py (:func:`shipped_demo`). A copy is what tests
#: get: :func:`reference_context`.
ENVIRONMENTS: dict[str, dict[str, Any]] = copy.deepcopy(SHIPPED)
ENVIRONMENTS["demo"]["workers"] = {
    "notifications": ENVIRONMENTS["demo"]["workers"]["notifications"],
    "reports": {"handler": REPORT_JOB, "max_tasks": 2},
}


def reference_context() -> dict[str, Any]:
    """The reference environments as a CDK context (``{"sqs-worker:environments": {...}}``), a fresh copy."""
    return {CONTEXT_KEY: copy.deepcopy(ENVIRONMENTS)}


def reference_context_json() -> str:
    """:func:`reference_context` as ``CDK_CONTEXT_JSON``: ``python app.py`` (and ``python -m infra.report``) given it
    synthesize the reference environments in place of cdk.json's (the CDK reads that variable over the app's own
    context: aws-cdk-lib ``App``, ``loadContext``)."""
    return json.dumps(reference_context())


def shipped_demo() -> tuple[dict[str, Any], dict[str, str]]:
    """The demo environment as cdk.json shipped it (``make run``'s: the notifications example, the team package's
    report job, the async webhooks example and the team package's batch audit handler), less any worker whose handler
    this repository no longer has (a team deleted workers/reports.py, say);
    and those left out, by handler, with why. A test of a shipped mix skips, saying why, when its worker is out."""
    from consumer.declaration import load_handler
    from consumer.errors import ContractError

    demo = copy.deepcopy(SHIPPED["demo"])
    missing = {}
    for name, settings in list(demo["workers"].items()):
        try:
            load_handler(settings["handler"])
        except ContractError as error:
            missing[settings["handler"]] = str(error)
            del demo["workers"][name]
    return demo, missing


def repository_environments() -> dict[str, Any]:
    """The repository's own ``cdk.json`` environments, as the team has them now."""
    environments: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"][CONTEXT_KEY]
    return environments


def shipped_example(environment: str, *, handler: str = NOTIFICATIONS) -> dict[str, Any]:
    """``environment`` of the repository's ``cdk.json`` if it still deploys the shipped example (``handler`` as its
    first worker, and the settings it shipped with); otherwise the calling test skips, saying what changed.

    Only tests of the shipped example itself call this: they pin its layout, which a team is free to change.
    """
    environments = repository_environments()
    raw = environments.get(environment)
    if raw is None:
        pytest.skip(f"the shipped example is not deployed: cdk.json has no {environment!r} environment")
    shipped = SHIPPED.get(environment, {})
    if raw != shipped:
        changed = ", ".join(sorted(key for key in {*raw, *shipped} if raw.get(key) != shipped.get(key)))
        first = raw.get("handler") or next(iter(raw.get("workers", {}).values()), {}).get("handler")
        runs = "" if first == handler else f"; its first worker runs {first}, not the example's {handler}"
        pytest.skip(
            f"the shipped example is not deployed as shipped: cdk.json's {environment!r} environment differs from"
            f" the shipped one in {changed}{runs}"
        )
    return raw
