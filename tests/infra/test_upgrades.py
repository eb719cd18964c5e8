"""Upgrades that keep data: resources holding messages never get a new logical id; prod retains them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from infra.app import build_app, cdk_json_context
from tests.infra.conftest import Synthesized

#: Logical ids of the resources that hold data or subscriptions, pinned: a change here means
#: CloudFormation would REPLACE the resource, and a replaced queue loses every message in it (a
#: replaced topic, its confirmed subscriptions). Never update these to make a test pass.
PINNED_LOGICAL_IDS = {
    "source queue": "QueuesQueueD811C857",
    "dead-letter queue": "QueuesDeadLetterQueue82AA3FB7",
    "idempotency table": "ConsumerIdempotencyTableBB140E0E",
    "paging topic": "PagingTopicF7F4870D",
    "paging key": "PagingKey83442547",
}


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "demo"])
def test_queue_and_table_logical_ids_are_pinned(synthesized: dict[str, Synthesized], name: str) -> None:
    """Renaming a construct id would replace the queue (losing its messages): the ids must never change."""
    env = synthesized[name]
    found = {
        "source queue": env.logical_id(env.stack.queues.queue),
        "dead-letter queue": env.logical_id(env.stack.queues.dead_letter_queue),
        "idempotency table": env.logical_id(env.stack.consumer.idempotency_table),
        "paging topic": env.logical_id(env.stack.paging.topic),
        "paging key": env.logical_id(env.stack.paging.key),
    }
    assert found == PINNED_LOGICAL_IDS


@pytest.mark.parametrize(
    ("name", "policy"), [("dev", "Delete"), ("demo", "Delete"), ("staging", "Retain"), ("prod", "Retain")]
)
def test_data_removal_policy_per_environment(synthesized: dict[str, Synthesized], name: str, policy: str) -> None:
    """prod and staging keep their queues, table and topics when the stack is deleted; dev and demo destroy them."""
    env = synthesized[name]
    for construct in (
        env.stack.queues.queue,
        env.stack.queues.dead_letter_queue,
        env.stack.consumer.idempotency_table,
        env.stack.paging.key,
    ):
        resource = env.json["Resources"][env.logical_id(construct)]
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == (policy, policy), construct.node.path


#: Flags cdk.json set before the feature flags were decided (issue 14); the rest were added then.
FLAGS_BEFORE_THE_DECISION = {
    "@aws-cdk/core:checkSecretUsage",
    "@aws-cdk/aws-iam:minimizePolicies",
    "@aws-cdk/core:target-partitions",
}
#: Recommended flags left at their default (false in cdk.json), each because it changes a resource or can
#: fail a synth that passes today: docs/upgrades.md says why.
FLAGS_LEFT = {
    "@aws-cdk/core:annotationsInValidationReport",
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup",
    "@aws-cdk/aws-ecs:disableExplicitDeploymentControllerForCircuitBreaker",
    "@aws-cdk/aws-ecs:removeDefaultDeploymentAlarm",
    "@aws-cdk/aws-ecs:removeEmptyLoadBalancers",
    "@aws-cdk/core:enableAdditionalMetadataCollection",
    "@aws-cdk/core:validateAgainstDefaultRules",
}
#: What the CDK CLI adds to the context on deploy: CDKMetadata (version reporting) is then compared too.
CLI_CONTEXT = {
    "aws:cdk:enable-path-metadata": True,
    "aws:cdk:enable-asset-metadata": True,
    "aws:cdk:version-reporting": True,
}


def templates(outdir: Path, context: dict[str, Any]) -> dict[str, Any]:
    """Every environment's template, synthesized with exactly ``context`` (cdk.json is not merged in)."""
    app, _ = build_app(cdk.App(outdir=str(outdir), context=context))
    app.synth()
    return {path.name: json.loads(path.read_text()) for path in sorted(outdir.glob("*.template.json"))}


def test_feature_flags_in_cdk_json_change_no_template(tmp_path: Path) -> None:
    """The recommended flags cdk.json adopted leave every environment's template as it was (logical ids,
    properties, CDKMetadata): adopting them replaced or changed nothing deployed; the seven left stay off."""
    context = {**cdk_json_context(), **CLI_CONTEXT}
    added = {key for key in context if key.startswith("@aws-cdk")} - FLAGS_BEFORE_THE_DECISION
    assert {key for key in added if context[key] is False} == FLAGS_LEFT
    with_flags = templates(tmp_path / "with", context)
    without = templates(tmp_path / "without", {k: v for k, v in context.items() if k not in added})
    assert len(with_flags) == 4
    assert with_flags == without
