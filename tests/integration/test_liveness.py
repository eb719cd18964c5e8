"""Liveness against a real `python -m consumer run` on moto's server: freeze a loop, watch `consumer health` fail.

Slow by nature (the allowances are the contract's, not shortened for the test): the poll allowance is 128 s (a
receive's worst case under the client's timeouts + 10 s), the slow handler's heartbeat allowance 79 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from bench.proxy import FaultProxy
from consumer.limits import SQS_CLIENT, SQS_MAX_WAIT_SECONDS
from tests.integration.conftest import create_pair
from tests.integration.test_process import CONTRACT, ROOT, process_guard, server_sqs, start, wait_for_event

__all__ = ["process_guard", "server_sqs"]  # fixtures shared with test_process.py

#: Longer than any allowance, so a frozen receive stays frozen for the whole test.
HOLD_SECONDS = 120


class ReceiveHoldingProxy(FaultProxy):
    """Forwards every request to moto; once ``hold`` is set, a ReceiveMessage never gets an answer (until released)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.hold = threading.Event()
        self.release = threading.Event()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        if self.hold.is_set() and request.headers.get("X-Amz-Target", "").endswith(".ReceiveMessage"):
            self.release.wait(HOLD_SECONDS)
        super()._handle(request)


@pytest.fixture
def proxy(moto_server: str) -> Iterator[ReceiveHoldingProxy]:
    proxy = ReceiveHoldingProxy(moto_server)
    proxy.start()
    yield proxy
    proxy.release.set()
    proxy.stop()


def health(liveness_file: Path) -> tuple[int, str]:
    """`python -m consumer health` as ECS runs it: (exit code, its one line)."""
    env = {**os.environ, "CONSUMER_LIVENESS_FILE": str(liveness_file)}
    result = subprocess.run(
        [sys.executable, "-m", "consumer", "health"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=10
    )
    return result.returncode, (result.stdout + result.stderr).strip()


def health_until(liveness_file: Path, code: int, timeout: float) -> str:
    """Run the check every second until it exits ``code``; its line then."""
    deadline = time.monotonic() + timeout
    seen = health(liveness_file)
    while seen[0] != code and time.monotonic() < deadline:
        time.sleep(1)
        seen = health(liveness_file)
    assert seen[0] == code, seen
    return seen[1]


@pytest.mark.slow(75)
def test_health_stays_0_while_idle_and_while_the_endpoint_holds_receives_past_the_read_timeout(
    moto_server: str, server_sqs: Any, proxy: ReceiveHoldingProxy, tmp_path: Path, process_guard: list
) -> None:
    """Idle long polls stay healthy; so does a receive the endpoint holds past the client's read timeout and into
    its retry (a slow SQS, which every task would see at once, must not have ECS replace them all)."""
    pair = create_pair(server_sqs, CONTRACT)
    liveness_file = tmp_path / "liveness.json"
    process = start(
        moto_server,
        pair.queue_url,
        tmp_path / "effects",
        AWS_ENDPOINT_URL=proxy.url,
        CONSUMER_LIVENESS_FILE=str(liveness_file),
    )
    process_guard.append(process)
    wait_for_event(process, "consumer_started")
    started = time.monotonic()
    while time.monotonic() - started < SQS_MAX_WAIT_SECONDS + 5:  # past one empty long poll
        assert health(liveness_file)[0] == 0
        time.sleep(3)
    proxy.hold.set()
    server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody="0")  # ends the current long poll now
    frozen = time.monotonic()
    while time.monotonic() - frozen < SQS_CLIENT.read_seconds + 15:  # one read timeout and into the retry
        code, line = health(liveness_file)
        assert code == 0, line
        time.sleep(3)
    assert process.poll() is None


@pytest.mark.slow(80)
def test_health_turns_1_naming_the_heartbeat_when_the_process_is_frozen_and_recovers_after(
    moto_server: str, server_sqs: Any, tmp_path: Path, process_guard: list
) -> None:
    """SIGSTOP freezes every loop: the heartbeat, with the shorter allowance (79 s), is named first; SIGCONT
    brings the check back to 0."""
    pair = create_pair(server_sqs, CONTRACT)
    liveness_file = tmp_path / "liveness.json"
    process = start(moto_server, pair.queue_url, tmp_path / "effects", CONSUMER_LIVENESS_FILE=str(liveness_file))
    process_guard.append(process)
    wait_for_event(process, "consumer_started")
    code, line = health(liveness_file)
    assert code == 0, line
    process.send_signal(signal.SIGSTOP)
    try:
        line = health_until(liveness_file, 1, timeout=CONTRACT.heartbeat_stall_seconds + 10)
        assert (
            line.startswith("unhealthy: heartbeat stalled: no progress since ")
            and f"{CONTRACT.heartbeat_stall_seconds} s allowed" in line
        )
    finally:
        process.send_signal(signal.SIGCONT)
    assert health_until(liveness_file, 0, timeout=10).startswith("healthy: heartbeat ")
