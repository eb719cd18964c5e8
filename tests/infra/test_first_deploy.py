"""A failed first deploy leaves nothing behind: retained data is RetainExceptOnCreate, never plain Retain.

A plain ``Retain`` keeps a resource even when CloudFormation rolls back the create that made it: the named
queues stay, and the retry fails with "already exists". ``RetainExceptOnCreate`` deletes what a rolled-back
create made and keeps everything else through deletes and replacements:
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html
Every check here holds for each environment of the repository's cdk.json (expectations from its own
``retain_queues``) and for environments this module builds, whichever way they set it.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.settings import CONTEXT_KEY
from tests.infra.conftest import EXISTING_VPC_AND_CLUSTER, Synthesized, synthesize

#: The resource types that hold an environment's data: messages, idempotency records, logs, the topics' key.
DATA_TYPES = frozenset({"AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::KMS::Key"})
#: (DeletionPolicy, UpdateReplacePolicy) where cdk.json's retain_queues is true, and where it is false.
RETAINED = ("RetainExceptOnCreate", "Retain")
DISPOSABLE = ("Delete", "Delete")

WORKERS = {
    "notify": {"handler": "consumer.examples.notifications:handle"},
    "exports": {"handler": "tests.infra.handlers:five_minutes"},
    "ordered": {"handler": "tests.infra.handlers:ordered"},
}
SHARED = {"pages_to_tickets": True, "source_retention_days": 1, "dlq_retention_days": 7, "workers": WORKERS}
#: Both settings of retain_queues, in a VPC the stack creates (with its flow log) and in an existing one.
ENVIRONMENTS = {
    "keep": {**SHARED, "retain_queues": True},
    "drop": {**SHARED, "retain_queues": False},
    "keepshared": {**SHARED, "retain_queues": True, **EXISTING_VPC_AND_CLUSTER},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """This module's own environments, synthesized once (cdk-nag included)."""
    return synthesize(tmp_path_factory.mktemp("cdk.out"), {CONTEXT_KEY: ENVIRONMENTS})


@pytest.fixture(scope="module")
def every(synthesized: dict[str, Synthesized], built: dict[str, Synthesized]) -> dict[str, Synthesized]:
    """cdk.json's environments and this module's, by name (the built ones prefixed ``test:``)."""
    return {**synthesized, **{f"test:{name}": env for name, env in built.items()}}


def policies(resource: dict[str, Any]) -> tuple[str, str]:
    """A resource's (DeletionPolicy, UpdateReplacePolicy), CloudFormation's default Delete where absent."""
    return resource.get("DeletionPolicy", "Delete"), resource.get("UpdateReplacePolicy", "Delete")


def test_data_is_retained_except_on_create_where_retain_queues_is_true(every: dict[str, Synthesized]) -> None:
    """Every queue, table, log group and key: RetainExceptOnCreate + UpdateReplacePolicy Retain where the
    environment retains its data, Delete where it does not."""
    for name, env in every.items():
        expected = RETAINED if env.stack.settings.retain_queues else DISPOSABLE
        data = {k: r for k, r in env.json["Resources"].items() if r["Type"] in DATA_TYPES}
        # Each worker's pair, table and log group, and the topics' key, at least (the flow log's group too
        # where the stack makes the VPC): a vanished type would pass the loop below vacuously.
        assert len(data) >= 4 * len(env.stack.workers) + 1, name
        assert {k: policies(r) for k, r in data.items()} == dict.fromkeys(data, expected), name


def test_nothing_else_is_retained(every: dict[str, Synthesized]) -> None:
    """Only the data types carry a policy other than Delete: a resource left behind by a stack delete is data."""
    for name, env in every.items():
        kept = {k: r["Type"] for k, r in env.json["Resources"].items() if policies(r) != DISPOSABLE}
        assert set(kept.values()) <= DATA_TYPES, name


def test_no_resource_outlives_the_rollback_of_its_create(every: dict[str, Synthesized]) -> None:
    """No template holds DeletionPolicy Retain, the policy that keeps a resource when its create rolls back."""
    for name, env in every.items():
        retained = sorted(k for k, r in env.json["Resources"].items() if r.get("DeletionPolicy") == "Retain")
        assert retained == [], name


def test_the_flow_logs_group_follows_the_environment(built: dict[str, Synthesized]) -> None:
    """The VPC flow log's group, which the CDK retains by default, is retained only where the data is."""
    for name, expected in (("keep", RETAINED), ("drop", DISPOSABLE)):
        env = built[name]
        (flow_log,) = env.resources("AWS::EC2::FlowLog").values()
        group = flow_log["Properties"]["LogGroupName"]["Ref"]
        assert policies(env.json["Resources"][group]) == expected, name
    assert not built["keepshared"].resources("AWS::EC2::FlowLog")  # an existing VPC: its flow logs are not ours
