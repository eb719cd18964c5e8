"""A worker declaring more vCPU than its one consumer process can use: synth warns (cdk synth and deploy print it),
naming the setting and what to do instead; a worker of one vCPU or less gets no warning."""

from __future__ import annotations

import re

import pytest
from aws_cdk.assertions import Annotations, Match

from infra.worker_settings import CONTEXT_KEY, ONE_PROCESS_CPU_UNITS, beyond_one_process
from tests.infra.conftest import Synthesized, synthesize_once
from tests.infra.templates import SHARED

NOTIFY = {"handler": "consumer.examples.notifications:handle", "handler_environment": {"NOTIFY_DRY_RUN": "true"}}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """notify at 1 vCPU, wide at 2 vCPU: synthesized once with cdk-nag."""
    workers = {"notify": {**NOTIFY, "cpu": 1024}, "wide": {**NOTIFY, "cpu": 2048}}
    return synthesize_once(tmp_path_factory, {CONTEXT_KEY: {"cores": {**SHARED, "workers": workers}}})["cores"]


def warnings(env: Synthesized, worker: str) -> list[str]:
    path = env.stack.workers[worker].consumer.task_definition.node.path
    found = Annotations.from_stack(env.stack).find_warning("*", Match.any_value())
    return [w.entry.data for w in found if w.id == "/" + path]


def test_a_two_vcpu_worker_is_warned_that_one_process_uses_one(env: Synthesized) -> None:
    """wide's task definition carries the warning, with the setting, the vCPU and the advice."""
    (warning,) = warnings(env, "wide")
    assert warning.startswith("cpu 2048 is 2 vCPU, but the task runs one consumer process")
    assert "Declare cpu 1024 and raise max_tasks instead" in warning
    assert re.search(r"\[ack: sqs-worker:cpu-beyond-one-process\]$", warning)


def test_a_one_vcpu_worker_is_not_warned(env: Synthesized) -> None:
    """notify (exactly one vCPU) carries no warning."""
    assert warnings(env, "notify") == []


@pytest.mark.parametrize(("cpu", "warned"), [(256, False), (ONE_PROCESS_CPU_UNITS, False), (2048, True), (16384, True)])
def test_beyond_one_process_at_both_edges(cpu: int, warned: bool) -> None:
    """Up to one vCPU nothing is said; above it, the sentence names the task's vCPU."""
    assert (beyond_one_process(cpu) is not None) == warned
