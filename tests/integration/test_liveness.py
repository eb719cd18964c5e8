"""Liveness on moto's server: the loops' progress beats, and what `python -m consumer health` makes of them.

Two kinds of test. The fast ones run the runtime (Consumer, its poller and heartbeat threads) in this process with
the progress file's clock an hour back (:class:`JumpingClock`), move it to now, and ask the real
`python -m consumer health`: a loop that still beats is fresh at once, one that stopped keeps its hour-old time, so
nothing waits out an allowance and no assertion depends on how fast a loaded machine runs. The slow ones run
`python -m consumer run` itself with the contract's allowances (the poll allowance is 128 s: a receive's worst case
under the client's timeouts + 10 s; the slow handler's heartbeat allowance 79 s).
"""

from __future__ import annotations

import os
import re
import signal
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
from consumer.limits import SQS_CLIENT, SQS_MAX_WAIT_SECONDS
from consumer.runtime.clients import client_config
from consumer.runtime.consumer import Consumer
from consumer.runtime.liveness import Liveness
from consumer.testing import running, wait_until
from tests.integration.conftest import REGION, ROOT, QueuePair, create_pair
from tests.integration.processes import CONTRACT, start, wait_for_event

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


def health(liveness_file: Path) -> tuple[int, str]:
    """`python -m consumer health` as ECS runs it: (exit code, its one line)."""
    env = {**os.environ, "CONSUMER_LIVENESS_FILE": str(liveness_file)}
    result = subprocess.run(
        [sys.executable, "-m", "consumer", "health"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=10
    )
    return result.returncode, (result.stdout + result.stderr).strip()


def health_until(liveness_file: Path, code: int, timeout: float) -> str:
    """Run the check every second until it exits ``code``; its line then."""
    return health_when(liveness_file, lambda seen: seen[0] == code, timeout)


def health_when(liveness_file: Path, condition: Callable[[tuple[int, str]], bool], timeout: float) -> str:
    """Run the check every second until its (exit code, line) meets ``condition``; its line then."""
    deadline = time.monotonic() + timeout
    seen = health(liveness_file)
    while not condition(seen) and time.monotonic() < deadline:
        time.sleep(1)
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
    """The runtime (``Consumer.run``: its poller, heartbeat and worker threads) on ``endpoint`` with the run's SQS client
    settings, its progress file on a :class:`JumpingClock`; yields the clock and the file once every loop has started
    and the check, an hour back, finds them all stalled (so a healthy answer later comes from beats after the jump)."""
    clock, liveness_file = JumpingClock(), tmp_path / "liveness.json"
    client = boto3.Session(region_name=REGION).client("sqs", endpoint_url=endpoint, config=client_config(SQS_CLIENT))
    runtime = Consumer(
        client,
        queue_url=pair.queue_url,
        dlq_url=pair.dlq_url,
        contract=WATCHED,
        handler=handler,
        liveness=Liveness(liveness_file, clock=clock),
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
    assert health_until(liveness_file, 0, timeout=10).startswith("healthy: acknowledger ")
