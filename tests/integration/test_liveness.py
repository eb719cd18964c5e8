"""Liveness on moto's server: the loops' progress beats, and what the check (`python -m consumer health`) makes of them.

The runtime (Consumer, its poller and heartbeat threads) runs in this process with the progress file's clock an hour
back (:class:`JumpingClock`), then moved to now, and the check reads the file: a loop that still beats is fresh at
once, one that stopped keeps its hour-old time, so nothing waits out an allowance and no assertion depends on how fast
a loaded machine runs. The allowances themselves (a receive's worst case under the client's timeouts + 10 s, the
heartbeat's shorter one, so a frozen process names the heartbeat first) and the check's answer at each edge are
tests/unit/test_liveness.py's. One real-tier test runs `python -m consumer health` itself, as ECS does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import boto3
import pytest

import consumer.runtime.consumer
from bench.proxy import FaultPlan, FaultProxy
from consumer import Message
from consumer.contract import WorkerContract
from consumer.limits import SQS_CLIENT
from consumer.runtime.clients import client_config
from consumer.runtime.consumer import Collaborators, Consumer
from consumer.runtime.liveness import Liveness, check
from consumer.testing import running, wait_until
from tests.integration.conftest import REGION, ROOT, QueuePair, create_pair

#: Longer than any allowance, so a frozen receive stays frozen for the whole test.
HOLD_SECONDS = 120


class ReceiveHoldingProxy(FaultProxy):
    """Forwards every request to moto; once ``hold`` is set, a ReceiveMessage never gets an answer (until released)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.hold = threading.Event()
        self.holding = threading.Event()  # a receive is being held now
        self.release = threading.Event()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        if self.hold.is_set() and request.headers.get("X-Amz-Target", "").endswith(".ReceiveMessage"):
            self.holding.set()
            self.release.wait(HOLD_SECONDS)
        super()._handle(request)


@pytest.fixture
def proxy(moto_server: str) -> Iterator[ReceiveHoldingProxy]:
    proxy = ReceiveHoldingProxy(moto_server)
    proxy.start()
    yield proxy
    proxy.release.set()
    proxy.stop()


@pytest.fixture
def server_sqs(moto_server: str) -> Any:
    return boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)


def health(liveness_file: Path) -> tuple[int, str]:
    """The check `python -m consumer health` makes, in this process: (its exit code, its one line)."""
    healthy, line = check(liveness_file, time.time())
    return (0 if healthy else 1), line


def health_until(liveness_file: Path, code: int, timeout: float) -> str:
    """Check every tenth of a second until the check's exit code is ``code``; its line then."""
    return health_when(liveness_file, lambda seen: seen[0] == code, timeout)


def health_when(liveness_file: Path, condition: Callable[[tuple[int, str]], bool], timeout: float) -> str:
    """Check every tenth of a second until its (exit code, line) meets ``condition``; its line then."""
    deadline = time.monotonic() + timeout
    seen = health(liveness_file)
    while not condition(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
        seen = health(liveness_file)
    assert condition(seen), seen
    return seen[1]


# --------------------------------------------------------------------------- the runtime in process, time controlled

#: How far back the progress file's clock starts: far past every allowance (the shortest is the heartbeat's, >= 77 s).
PAST_SECONDS = 3600
#: Long enough that no handler overruns while a test holds it (the stuck-handler exit would end the run).
WATCHED = WorkerContract(max_duration_seconds=60, concurrency=1, retry_backoff_base_seconds=1)
#: A fresh loop's line; a stalled one's says how long ago (at least PAST_SECONDS) and its allowance.
FRESH = r"healthy: acknowledger (idle|\d+ s ago), heartbeat \d+ s ago, poller-0 \d+ s ago"


class JumpingClock:
    """The progress file's clock (``Liveness(clock=...)``): wall time an hour back until :meth:`jump`, then wall time.

    Every loop is recorded at the start as having progressed then, an hour ago; after the jump a loop that beats again
    writes a fresh time and one that stopped keeps an hour-old one. The check (real wall time) then tells them apart at
    once: no waiting out a 128 s allowance, no timing assertion a loaded machine could break.
    """

    def __init__(self) -> None:
        self.offset = -PAST_SECONDS

    def __call__(self) -> float:
        return time.time() + self.offset

    def jump(self) -> None:
        self.offset = 0


@contextmanager
def watched(
    endpoint: str, pair: QueuePair, handler: Callable[[Message], None], tmp_path: Path
) -> Iterator[tuple[JumpingClock, Path]]:
    """The runtime (``Consumer.run``: its poller, heartbeat and handler threads) on ``endpoint`` with the run's SQS
    client settings, its progress file on a :class:`JumpingClock`; yields the clock and the file once every loop has
    started and the check, an hour back, finds them all stalled (so a healthy answer later comes from beats after the
    jump)."""
    clock, liveness_file = JumpingClock(), tmp_path / "liveness.json"
    client = boto3.Session(region_name=REGION).client("sqs", endpoint_url=endpoint, config=client_config(SQS_CLIENT))
    runtime = Consumer(
        client,
        queue_url=pair.queue_url,
        dlq_url=pair.dlq_url,
        contract=WATCHED,
        handler=handler,
        collaborators=Collaborators(liveness=Liveness(liveness_file, clock=clock)),
    )
    with running(runtime):
        wait_until(liveness_file.exists, what="the progress file")
        code, line = health(liveness_file)
        assert code == 1 and "heartbeat stalled" in line and "poller-0 stalled" in line, line
        yield clock, liveness_file


@pytest.fixture
def short_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 s long polls: an idle poller's empty receives return (and beat) every second instead of every 20 s."""
    monkeypatch.setattr(consumer.runtime.consumer, "LONG_POLL_SECONDS", 1)


@pytest.mark.usefixtures("short_polls")
def test_health_is_0_for_an_idle_consumer_whose_empty_receives_return(
    moto_server: str, server_sqs: Any, tmp_path: Path
) -> None:
    """Idle: each empty receive that returns is the poller's progress, each tick the heartbeat's; both fresh."""
    pair = create_pair(server_sqs, WATCHED)
    with watched(moto_server, pair, lambda _message: None, tmp_path) as (clock, liveness_file):
        clock.jump()
        line = health_until(liveness_file, 0, timeout=30)
    assert re.fullmatch(FRESH, line), line


@pytest.mark.usefixtures("short_polls")
def test_health_is_1_naming_the_poller_whose_receive_never_returns(
    moto_server: str, server_sqs: Any, proxy: ReceiveHoldingProxy, tmp_path: Path
) -> None:
    """A receive the endpoint never answers: the poller stops beating and the check names it, with its allowance;
    the heartbeat, still beating, is not named."""
    pair = create_pair(server_sqs, WATCHED)
    with watched(proxy.url, pair, lambda _message: None, tmp_path) as (clock, liveness_file):
        proxy.hold.set()
        try:
            wait_until(proxy.holding.is_set, what="a receive held at the endpoint")
            clock.jump()
            line = health_when(liveness_file, lambda seen: "heartbeat" not in seen[1], timeout=30)
        finally:
            proxy.release.set()
    stalled = re.fullmatch(
        rf"unhealthy: poller-0 stalled: no progress since \S+ \((\d+) s ago, {WATCHED.poll_stall_seconds} s allowed\)",
        line,
    )
    assert stalled and int(stalled[1]) >= PAST_SECONDS, line


def test_health_is_0_while_the_poller_waits_for_a_busy_handler(
    moto_server: str, server_sqs: Any, tmp_path: Path
) -> None:
    """Every handler busy (one, blocked): the poller receives nothing and waits for a free slot; waiting on purpose
    is progress, so it stays fresh."""
    pair = create_pair(server_sqs, WATCHED)
    server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody="blocks")
    began, finish = threading.Event(), threading.Event()

    def blocking(_message: Message) -> None:
        began.set()
        finish.wait(WATCHED.max_duration_seconds / 2)

    with watched(moto_server, pair, blocking, tmp_path) as (clock, liveness_file):
        try:
            wait_until(began.is_set, what="the handler started")
            clock.jump()
            line = health_until(liveness_file, 0, timeout=30)
        finally:
            finish.set()
    assert re.fullmatch(FRESH, line), line


def test_health_is_0_while_the_poller_backs_off_after_failed_receives(
    moto_server: str, server_sqs: Any, tmp_path: Path
) -> None:
    """Every receive fails (HTTP 500, retried by botocore, then the consumer's own backoff): a receive that returns
    with an error and the backoff after it are progress; a failing SQS, which every task sees at once, must not have
    ECS replace them all."""
    pair = create_pair(server_sqs, WATCHED)
    failing = FaultProxy(moto_server, FaultPlan(error_before=1.0, targets=("AmazonSQS.ReceiveMessage",)))
    failing.start()
    try:
        with watched(failing.url, pair, lambda _message: None, tmp_path) as (clock, liveness_file):
            wait_until(lambda: failing.fault_counts()["error_before"], what="a failed receive")
            clock.jump()
            line = health_until(liveness_file, 0, timeout=60)
    finally:
        failing.stop()
    assert re.fullmatch(FRESH, line), line


def health_command(liveness_file: Path) -> tuple[int, str, str]:
    """`python -m consumer health` as ECS runs it: (exit code, stdout, stderr)."""
    env = {**os.environ, "CONSUMER_LIVENESS_FILE": str(liveness_file)}
    result = subprocess.run(
        [sys.executable, "-m", "consumer", "health"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    return result.returncode, result.stdout, result.stderr


@pytest.mark.real
def test_health_command_exits_0_on_a_fresh_file_and_1_naming_a_stalled_loop(tmp_path: Path) -> None:
    """A progress file written now: exit 0, its line on stdout; the same loops with the heartbeat's beat past its
    allowance: exit 1, its line on stderr. Real: the exit code and streams ECS's health check reads from the command,
    a fresh interpreter that imports no AWS SDK."""
    liveness_file = tmp_path / "liveness.json"
    liveness = Liveness(liveness_file)
    liveness.start({"poller-0": WATCHED.poll_stall_seconds, "heartbeat": WATCHED.heartbeat_stall_seconds})
    code, out, err = health_command(liveness_file)
    assert (code, err) == (0, ""), out
    assert re.fullmatch(r"healthy: heartbeat \d+ s ago, poller-0 \d+ s ago\n", out), out
    stale = Liveness(liveness_file, clock=lambda: time.time() - WATCHED.heartbeat_stall_seconds - 5)
    stale.start({"heartbeat": WATCHED.heartbeat_stall_seconds})
    code, out, err = health_command(liveness_file)
    assert (code, out) == (1, ""), err
    assert re.fullmatch(
        rf"unhealthy: heartbeat stalled: no progress since \S+ \(\d+ s ago, {WATCHED.heartbeat_stall_seconds} s allowed\)\n",
        err,
    ), err
