"""A worker whose handler is idempotent by itself (@worker(idempotent=True)) beside one that is not: the first gets
no idempotency table, no CONSUMER_IDEMPOTENCY_TABLE and no DynamoDB grant; the other keeps all three."""

from __future__ import annotations

from typing import Any

import pytest

from infra.service import IDEMPOTENCY_TABLE_ACTIONS
from infra.worker_settings import CONTEXT_KEY
from tests.infra.checks import TEMPLATE_CHECKS
from tests.infra.conftest import Synthesized, synthesize_once
from tests.infra.templates import SHARED

NOTIFY = {"handler": "consumer.examples.notifications:handle", "handler_environment": {"NOTIFY_DRY_RUN": "true"}}
UPSERTS = {"handler": "tests.infra.handlers:upserts"}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """notify (guarded) first, upserts (idempotent by itself) second, synthesized once with cdk-nag."""
    context = {CONTEXT_KEY: {"upsert": {**SHARED, "workers": {"notify": NOTIFY, "upserts": UPSERTS}}}}
    return synthesize_once(tmp_path_factory, context)["upsert"]


def environment(env: Synthesized, worker: str) -> dict[str, Any]:
    return {e["Name"]: e["Value"] for e in env.container(worker)["Environment"]}


def dynamodb_actions(env: Synthesized, worker: str) -> list[str]:
    role = {"Ref": env.logical_id(env.stack.workers[worker].consumer.task_role)}
    return sorted(
        action
        for policy in env.resources("AWS::IAM::Policy").values()
        if role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for action in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
        if action.startswith("dynamodb:")
    )


def test_idempotent_worker_has_no_table_no_binding_and_no_dynamodb_grant(env: Synthesized) -> None:
    """upserts: its consumer has no table, its task no CONSUMER_IDEMPOTENCY_TABLE but CONSUMER_IDEMPOTENT=true (the
    consumer's drift check reads it), and its task role no dynamodb: action at all."""
    upserts = environment(env, "upserts")
    assert (env.stack.workers["upserts"].consumer.idempotency_table, "CONSUMER_IDEMPOTENCY_TABLE" in upserts) == (
        None,
        False,
    )
    assert upserts["CONSUMER_IDEMPOTENT"] == "true"
    assert dynamodb_actions(env, "upserts") == []


def test_guarded_worker_beside_it_keeps_its_table_and_grant(env: Synthesized) -> None:
    """notify: the stack's one table, bound in its task, with exactly the guard's actions on its role."""
    (table,) = env.resources("AWS::DynamoDB::Table")
    assert table == env.logical_id(env.stack.workers["notify"].consumer.idempotency_table)
    assert environment(env, "notify")["CONSUMER_IDEMPOTENCY_TABLE"] == {"Ref": table}
    assert "CONSUMER_IDEMPOTENT" not in environment(env, "notify")
    assert dynamodb_actions(env, "notify") == sorted(IDEMPOTENCY_TABLE_ACTIONS)


@pytest.mark.parametrize("check", list(TEMPLATE_CHECKS))
def test_framework_checks_hold_with_an_idempotent_worker(env: Synthesized, check: str) -> None:
    """Every check the repository's own cdk.json passes holds on this stack too (tests/infra/checks.py)."""
    TEMPLATE_CHECKS[check](env)
