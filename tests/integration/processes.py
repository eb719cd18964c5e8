"""Helpers of the real tier (``pytest -m real``): ``python -m consumer ...`` started as a real process, its log read,
its side effects counted; shared by the test modules that need them (local_runs.py: what a user's terminal runs)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import boto3

from consumer.declaration import contract_of
from consumer.testing import depth, poll_until
from tests.integration.conftest import REGION, ROOT, consumer_run_environment
from tests.integration.handlers import slow

CONTRACT = contract_of(slow)  # 5 s max duration: visibility 15 s, stop timeout 10 s


def start(
    moto_server: str, queue_url: str, side_effects: Path, unset: tuple[str, ...] = (), **extra: str
) -> subprocess.Popen[str]:
    """`python -m consumer run` on moto's server with the slow handler; ``extra`` added, ``unset`` removed."""
    env = consumer_run_environment(
        moto_server,
        QUEUE_URL=queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:slow",
        SIDE_EFFECTS_FILE=str(side_effects),
    )
    env.update(extra)
    for key in unset:
        env.pop(key, None)
    return subprocess.Popen(
        [sys.executable, "-m", "consumer", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_event(process: subprocess.Popen[str], event: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Read JSON log lines until ``event`` appears; returns the lines read."""
    lines: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        raw = process.stdout.readline()
        if not raw:
            break
        if raw.startswith("{") and '"event"' in raw:
            lines.append(json.loads(raw))
            if lines[-1]["event"] == event:
                return lines
    raise AssertionError(f"{event} not logged; stderr: {process.stderr.read() if process.poll() is not None else ''}")


def wait_in_flight(sqs: Any, url: str, count: int, timeout: float = 10.0) -> None:
    poll_until(lambda: depth(sqs, url).in_flight >= count, timeout)


def effects(path: Path) -> list[dict[str, Any]]:
    """The side effects the test handlers wrote to ``path``, one JSON line each."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def create_table(moto_server: str) -> str:
    """An idempotency table shaped like the stack's, in REGION on moto's server."""
    name = f"idem-{uuid.uuid4().hex[:12]}"
    boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_server).create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name
