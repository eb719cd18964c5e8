"""Liveness against a real `python -m consumer run` on moto's server: freeze a loop, watch `consumer health` fail.

Slow by nature (the allowances are the contract's, not shortened for the test): the poll allowance is 30 s, the
slow handler's heartbeat allowance 13 s (heartbeat every 3 s + 10 s).
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


def test_health_stays_0_while_idle_and_turns_1_naming_the_poller_when_receives_stop_returning(
    moto_server: str, server_sqs: Any, proxy: ReceiveHoldingProxy, tmp_path: Path, process_guard: list
) -> None:
    """Idle long polls (empty answers every 20 s) stay healthy past the 30 s allowance; a receive that never returns
    (the endpoint holds it) fails the check within the allowance, naming poller-0, while the heartbeat is fine."""
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
    while time.monotonic() - started < CONTRACT.poll_stall_seconds + 5:  # past the allowance: beats keep it healthy
        assert health(liveness_file)[0] == 0
        time.sleep(3)
    proxy.hold.set()
    server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody="0")  # ends the current long poll now
    frozen = time.monotonic()
    line = health_until(liveness_file, 1, timeout=CONTRACT.poll_stall_seconds + 15)
    assert time.monotonic() - frozen >= CONTRACT.poll_stall_seconds - 1
    assert line.startswith("unhealthy: poller-0 stalled: no progress since ") and "30 s allowed" in line
    assert "heartbeat" not in line
    assert process.poll() is None  # the process itself is alive: only the check sees the stall


def test_health_turns_1_naming_the_heartbeat_when_the_process_is_frozen_and_recovers_after(
    moto_server: str, server_sqs: Any, tmp_path: Path, process_guard: list
) -> None:
    """SIGSTOP freezes every loop: the heartbeat, with the shorter allowance (13 s), is named first; SIGCONT
    brings the check back to 0."""
    pair = create_pair(server_sqs, CONTRACT)
    liveness_file = tmp_path / "liveness.json"
    process = start(moto_server, pair.queue_url, tmp_path / "effects", CONSUMER_LIVENESS_FILE=str(liveness_file))
    process_guard.append(process)
    wait_for_event(process, "consumer_started")
    assert health(liveness_file) == (0, health(liveness_file)[1])
    process.send_signal(signal.SIGSTOP)
    try:
        line = health_until(liveness_file, 1, timeout=CONTRACT.heartbeat_stall_seconds + 10)
        assert line.startswith("unhealthy: heartbeat stalled: no progress since ") and "13 s allowed" in line
    finally:
        process.send_signal(signal.SIGCONT)
    assert health_until(liveness_file, 0, timeout=10).startswith("healthy: heartbeat ")
