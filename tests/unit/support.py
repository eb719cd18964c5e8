"""Helpers more than one unit test module shares: a demo lane's result, an environment's plan from its settings, the
one line a settings refusal is, a moto ReceiveMessage answer as the chaos proxy records it, the Dockerfile and the
calls the stub container engine (tests/unit/conftest.py) logged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.proxy import Exchange
from consumer.local.bill import Capacity, EnvironmentPlan, WorkerPlan
from consumer.local.demo_lane import Accounting, LaneResult
from consumer.local.demo_notifications import MIX
from infra.settings import EnvironmentSettings, parse_environment
from infra.worker_settings import SettingsError


def lane_of(accounting: Accounting, exit_code: int = 0, worker: str = "notifications") -> LaneResult:
    consumers: list[dict[str, Any]] = [{"number": 1, "exit_code": exit_code, "stopped_in_seconds": 0.2, "log": "x"}]
    return LaneResult(
        worker=worker,
        handler="consumer.examples.demo:handle",
        accounting=accounting,
        consumers=consumers,
        retried=0,
        heartbeat_extensions=0,
        requeued=0,
        sqs_requests=2,
        processed=1,
        downstream_refusals={},
        mix=MIX,
    )


FIVE_MINUTES = "tests.infra.handlers:five_minutes"  # max 300 s, concurrency 4: average 150 s; guarded


UPSERTS = "tests.infra.handlers:upserts"  # max 30 s, concurrency 8: average 15 s; idempotent (no guard)


ORDERED = "tests.infra.handlers:ordered"  # FIFO, max 30 s, concurrency 1


#: Two workers: one on Graviton at two tasks, one on x86_64 with one on-demand task and the rest on Spot, at three.
ENVIRONMENT = {
    "nat_gateways": 1,
    "workers": {
        "resize": {
            "handler": FIVE_MINUTES,
            "architecture": "arm64",
            "min_tasks": 2,
            "max_tasks": 4,
            "cpu": 256,
            "memory_mib": 512,
        },
        "upsert": {
            "handler": UPSERTS,
            "spot": {"on_demand_base": 1},
            "min_tasks": 3,
            "max_tasks": 6,
            "cpu": 512,
            "memory_mib": 1024,
        },
    },
}


def plan_of(settings: EnvironmentSettings) -> EnvironmentPlan:
    """The plan the template of ``settings`` deploys, from the settings (tests/infra/test_bill.py checks the template
    reader gives the same)."""
    workers = tuple(
        WorkerPlan(
            worker=worker.name,
            handler=worker.handler,
            cpu=worker.cpu,
            memory_mib=worker.memory_mib,
            architecture=worker.architecture,
            min_tasks=worker.min_tasks,
            max_tasks=worker.max_tasks,
            capacity=None
            if worker.spot is None
            else Capacity(
                on_demand_base=worker.spot.on_demand_base,
                on_demand_weight=worker.spot.on_demand_weight,
                spot_weight=worker.spot.spot_weight,
            ),
            contract=settings.contract(worker),
            public_ip=settings.vpc is None and settings.nat_gateways == 0,
            containers=1 if settings.tracing is None else 2,
        )
        for worker in settings.workers
    )
    return EnvironmentPlan(
        environment=settings.name,
        workers=workers,
        nat_gateways=settings.nat_gateways,
        public_ipv4=settings.nat_gateways,
        container_insights=settings.cluster_name is None,
    )


def refusal(raw: dict[str, Any]) -> str:
    """The one line synth fails with for the environment ``qa`` of ``raw``."""
    with pytest.raises(SettingsError) as raised:
        parse_environment("qa", raw)
    message = str(raised.value)
    assert "\n" not in message
    return message


KEY = "evt-chaos-00061"


def receive_answer(sender: str, message_id: str, count: int, at: float, *, passed_on: bool = True) -> Exchange:
    """A ReceiveMessage answer as moto gives it (JSON protocol), from a consumer labelled ``sender``."""
    answer = {
        "Messages": [
            {
                "MessageId": message_id,
                "ReceiptHandle": f"handle-{message_id}-{count}",
                "Attributes": {"ApproximateReceiveCount": str(count)},
                "MessageAttributes": {"idempotency-key": {"StringValue": KEY, "DataType": "String"}},
            }
        ]
    }
    agent = f"Boto3/1.44.5 md/Botocore#1.44.5 cfg/retry-mode#standard app/{sender} Botocore/1.44.5"
    return Exchange("ReceiveMessage", agent, b"{}", 200, json.dumps(answer).encode(), at - 0.5, at, passed_on)


DOCKERFILE = Path(__file__).resolve().parents[2] / "consumer" / "Dockerfile"


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text().splitlines()
