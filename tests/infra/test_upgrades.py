"""Upgrades that keep data: resources holding messages never get a new logical id; prod retains them."""

from __future__ import annotations

import pytest

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
