"""A failed first deploy leaves nothing behind: retained data is RetainExceptOnCreate, never plain Retain.

A plain ``Retain`` keeps a resource even when CloudFormation rolls back the create that made it: the named
queues stay, and the retry fails with "already exists". ``RetainExceptOnCreate`` deletes what a rolled-back
create made and keeps everything else through deletes and replacements:
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html
The check (tests/infra/checks.py) holds for the reference environments, for the environments this module builds
(either ``retain_queues``, the stack's VPC or an existing one), and, in tests/infra/test_repository.py and
tests/edits, for the repository's own cdk.json and a team's edits of it.
"""

from __future__ import annotations

import pytest

from infra.worker_settings import CONTEXT_KEY
from tests.infra.checks import DISPOSABLE, RETAINED, check_data_retention, removal_policies
from tests.infra.conftest import EXISTING_VPC_AND_CLUSTER, Synthesized, synthesize_once

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
    return synthesize_once(tmp_path_factory, {CONTEXT_KEY: ENVIRONMENTS})


@pytest.fixture(scope="module")
def every(reference: dict[str, Synthesized], built: dict[str, Synthesized]) -> dict[str, Synthesized]:
    """The reference environments and this module's, by name (the built ones prefixed ``test:``); the repository's
    own cdk.json and a team's edits of it get the same check in tests/infra/test_repository.py and tests/edits."""
    return {**reference, **{f"test:{name}": env for name, env in built.items()}}


def test_data_is_retained_except_on_create_and_nothing_else_outlives_the_stack(every: dict[str, Synthesized]) -> None:
    """Every queue, table, log group and key: RetainExceptOnCreate + UpdateReplacePolicy Retain where the
    environment retains its data, Delete where it does not; nothing else kept, nothing plain Retain."""
    for env in every.values():
        check_data_retention(env)


def test_the_flow_logs_group_follows_the_environment(built: dict[str, Synthesized]) -> None:
    """The VPC flow log's group, which the CDK retains by default, is retained only where the data is."""
    for name, expected in (("keep", RETAINED), ("drop", DISPOSABLE)):
        env = built[name]
        (flow_log,) = env.resources("AWS::EC2::FlowLog").values()
        group = flow_log["Properties"]["LogGroupName"]["Ref"]
        assert removal_policies(env.json["Resources"][group]) == expected, name
    assert not built["keepshared"].resources("AWS::EC2::FlowLog")  # an existing VPC: its flow logs are not ours
