"""Task scale-in protection against a real HTTP server on 127.0.0.1 standing in for the ECS agent endpoint;
and the runtime's use of it while messages are in flight, on the simulated clock (SQS on moto, the agent's answers
given in-process by :class:`VirtualAgent`, which records and answers as the HTTP server does)."""

from __future__ import annotations

import email.message
import io
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from consumer import Message
from consumer.runtime import consumer as runtime
from consumer.runtime.protection import ScaleInProtection
from tests.integration.conftest import create_pair
from tests.integration.recorder import runtime_call_recorder
from tests.integration.support import fast_contract
from tests.integration.virtual import Virtual

AGENT_PATH = "/api/0123456789abcdef-1234567890"  # ECS_AGENT_URI carries a per-task path
STATE_PATH = f"{AGENT_PATH}/task-protection/v1/state"
ENABLE = {"ProtectionEnabled": True, "ExpiresInMinutes": 60}
DISABLE = {"ProtectionEnabled": False}
REFUSED_URI = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback
LINK_LOCAL_URI = f"http://169.254.170.2{AGENT_PATH}"  # where ECS_AGENT_URI points on Fargate
TASK_ARN = "arn:aws:ecs:eu-west-1:123456789012:task/cluster/0123456789abcdef"

HTTP_500 = (500, {"error": {"Arn": TASK_ARN, "Code": "ServerException", "Message": "agent failed"}})
FAILURE_200 = (200, {"failure": {"Arn": TASK_ARN, "Reason": "TASK_NOT_VALID"}})
ERROR_400 = (400, {"error": {"Arn": TASK_ARN, "Code": "InvalidParameterException", "Message": "bad request"}})
NOT_JSON_200 = (200, "<html>proxy</html>")
REJECTIONS = pytest.mark.parametrize(
    ("reply", "logged"),
    [
        (HTTP_500, "HTTP 500: error: "),
        (FAILURE_200, "failure: "),
        (ERROR_400, "HTTP 400: error: "),
        (NOT_JSON_200, "JSONDecodeError"),
    ],
    ids=["http-500", "failure-200", "error-400", "not-json"],
)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    body: Any


@dataclass
class Agent:
    """A stand-in ECS agent: records each request, answers queued replies, then a success."""

    uri: str
    requests: list[Recorded] = field(default_factory=list)
    replies: list[tuple[int, Any]] = field(default_factory=list)
    delay_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply_to(self, body: Any) -> tuple[int, Any]:
        with self.lock:
            if self.replies:
                return self.replies.pop(0)
        enabled = bool(body.get("ProtectionEnabled")) if isinstance(body, dict) else False
        return 200, {"protection": {"ExpirationDate": None, "ProtectionEnabled": enabled, "TaskArn": TASK_ARN}}

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def agent() -> Iterator[Agent]:
    """A ThreadingHTTPServer on a free loopback port; yields its agent URI (with the per-task path)."""

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            self.answer()

        def do_GET(self) -> None:
            self.answer()

        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            with state.lock:
                state.requests.append(Recorded(self.command, self.path, body))
            # The real agent makes this request to ECS with the task role: the permissions tier checks it.
            runtime_call_recorder.record_agent_request(self.command, self.path)
            status, reply = state.reply_to(body)
            time.sleep(state.delay_seconds)
            payload = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    host, port = server.server_address[:2]
    state = Agent(uri=f"http://{host}:{port}{AGENT_PATH}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def protection(agent: Agent, clock: FakeClock) -> ScaleInProtection:
    return ScaleInProtection(agent.uri, clock=clock)


def failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "task_protection_failed"]


def test_protection_without_agent_uri_sends_no_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off ECS (agent_uri None) enabled is False and no method opens any URL."""
    opened: list[Any] = []
    monkeypatch.setattr(urllib.request.OpenerDirector, "open", lambda self, *a, **k: opened.append(a))
    protection = ScaleInProtection(None)
    protection.busy()
    protection.refresh()
    protection.idle()
    protection.close()
    assert protection.enabled is False
    assert opened == []


def test_from_env_reads_ecs_agent_uri(agent: Agent) -> None:
    """from_env takes the agent URI from ECS_AGENT_URI and talks to it."""
    protection = ScaleInProtection.from_env({"ECS_AGENT_URI": agent.uri})
    protection.busy()
    assert protection.enabled is True
    assert [(r.method, r.path) for r in agent.requests] == [("PUT", STATE_PATH)]


def test_agent_requests_are_recorded_for_the_permissions_tier(agent: Agent, protection: ScaleInProtection) -> None:
    """busy() reaches the agent, which calls ecs:UpdateTaskProtection with the task role: recorded as such."""
    call = ("ecs-agent.PUT /task-protection/v1/state", "ecs:UpdateTaskProtection", "task")
    runtime_call_recorder.forget(call)
    protection.busy()
    assert call in runtime_call_recorder.recorded()


def test_from_env_without_ecs_agent_uri_is_disabled() -> None:
    """Without ECS_AGENT_URI (not on ECS) protection is disabled."""
    assert ScaleInProtection.from_env({"HOME": "/root"}).enabled is False


def test_from_env_passes_keyword_arguments(agent: Agent) -> None:
    """from_env forwards keyword arguments such as expires_in_minutes."""
    ScaleInProtection.from_env({"ECS_AGENT_URI": agent.uri}, expires_in_minutes=15).busy()
    assert agent.bodies() == [{"ProtectionEnabled": True, "ExpiresInMinutes": 15}]


def test_init_rejects_expiry_outside_agent_limits() -> None:
    """ExpiresInMinutes outside 1..2880 is a programming error, raised at construction."""
    with pytest.raises(ValueError, match="1..2880"):
        ScaleInProtection("http://127.0.0.1:9", expires_in_minutes=2881)


def test_busy_sends_put_enabling_protection(agent: Agent, protection: ScaleInProtection) -> None:
    """busy() PUTs ProtectionEnabled true with ExpiresInMinutes to the state path."""
    protection.busy()
    assert agent.requests == [Recorded("PUT", STATE_PATH, ENABLE)]


def test_busy_when_already_protected_sends_nothing(agent: Agent, protection: ScaleInProtection) -> None:
    """A second busy() while protection is held and far from expiry sends no request."""
    protection.busy()
    protection.busy()
    assert agent.bodies() == [ENABLE]


def test_busy_from_many_threads_sends_one_request(agent: Agent, protection: ScaleInProtection) -> None:
    """Concurrent busy() calls reach the agent once."""
    threads = [threading.Thread(target=protection.busy) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert agent.bodies() == [ENABLE]


def test_busy_within_ten_minutes_of_expiry_renews(
    agent: Agent, protection: ScaleInProtection, clock: FakeClock
) -> None:
    """busy() while protection expires within 10 minutes enables it again."""
    protection.busy()
    clock.advance(50 * 60)
    protection.busy()
    assert agent.bodies() == [ENABLE, ENABLE]


def test_idle_sends_put_disabling_protection(agent: Agent, protection: ScaleInProtection) -> None:
    """idle() after busy() PUTs ProtectionEnabled false."""
    protection.busy()
    protection.idle()
    assert agent.requests[-1] == Recorded("PUT", STATE_PATH, DISABLE)


def test_idle_when_not_protected_sends_nothing(agent: Agent, protection: ScaleInProtection) -> None:
    """idle() without held protection sends no request."""
    protection.idle()
    assert agent.requests == []


def test_idle_after_protection_expired_sends_nothing(
    agent: Agent, protection: ScaleInProtection, clock: FakeClock
) -> None:
    """idle() once the protection has lapsed on its own sends no request."""
    protection.busy()
    clock.advance(60 * 60)
    protection.idle()
    assert agent.bodies() == [ENABLE]


def test_refresh_outside_renewal_window_sends_nothing(
    agent: Agent, protection: ScaleInProtection, clock: FakeClock
) -> None:
    """refresh() with 11 minutes of protection left sends no request."""
    protection.busy()
    clock.advance(49 * 60)
    protection.refresh()
    assert agent.bodies() == [ENABLE]


def test_refresh_within_ten_minutes_of_expiry_renews(
    agent: Agent, protection: ScaleInProtection, clock: FakeClock
) -> None:
    """refresh() with 10 minutes of protection left re-enables it."""
    protection.busy()
    clock.advance(50 * 60)
    protection.refresh()
    assert agent.bodies() == [ENABLE, ENABLE]


def test_refresh_after_renewal_counts_from_the_renewal(
    agent: Agent, protection: ScaleInProtection, clock: FakeClock
) -> None:
    """A renewal restarts the expiry, so the next refresh inside the new window sends nothing."""
    protection.busy()
    clock.advance(50 * 60)
    protection.refresh()
    clock.advance(49 * 60)
    protection.refresh()
    assert agent.bodies() == [ENABLE, ENABLE]


def test_refresh_when_idle_sends_nothing(agent: Agent, protection: ScaleInProtection, clock: FakeClock) -> None:
    """refresh() after idle() never re-enables protection."""
    protection.busy()
    protection.idle()
    clock.advance(55 * 60)
    protection.refresh()
    assert agent.bodies() == [ENABLE, DISABLE]


@REJECTIONS
def test_busy_rejected_by_agent_is_logged_not_raised(
    agent: Agent, protection: ScaleInProtection, caplog: pytest.LogCaptureFixture, reply: tuple[int, Any], logged: str
) -> None:
    """An HTTP error, a failure/error object or a non-JSON reply logs task_protection_failed and returns."""
    agent.replies.append(reply)
    with caplog.at_level(logging.WARNING, logger="consumer.runtime.protection"):
        protection.busy()
    [record] = failures(caplog)
    assert (record.levelno, record.action) == (logging.WARNING, "enable")
    assert logged in record.error


@REJECTIONS
def test_busy_after_rejection_retries(
    agent: Agent, protection: ScaleInProtection, reply: tuple[int, Any], logged: str
) -> None:
    """A rejected enable leaves the task unprotected, so the next busy() asks again."""
    agent.replies.append(reply)
    protection.busy()
    protection.busy()
    protection.busy()
    assert agent.bodies() == [ENABLE, ENABLE]


def test_busy_failure_object_names_the_reason(
    agent: Agent, protection: ScaleInProtection, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent's failure Reason appears in the logged error."""
    agent.replies.append(FAILURE_200)
    with caplog.at_level(logging.WARNING, logger="consumer.runtime.protection"):
        protection.busy()
    assert "TASK_NOT_VALID" in failures(caplog)[0].error


def test_busy_connection_refused_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """An agent that refuses the connection logs task_protection_failed and returns."""
    protection = ScaleInProtection(REFUSED_URI, timeout_seconds=1.0)
    with caplog.at_level(logging.WARNING, logger="consumer.runtime.protection"):
        protection.busy()
    [record] = failures(caplog)
    assert record.action == "enable"
    assert "refused" in record.error.lower()


def test_busy_timeout_is_logged_not_raised(agent: Agent, caplog: pytest.LogCaptureFixture) -> None:
    """An agent slower than timeout_seconds logs task_protection_failed and returns."""
    agent.delay_seconds = 1.0
    protection = ScaleInProtection(agent.uri, timeout_seconds=0.2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="consumer.runtime.protection"):
        protection.busy()
    assert time.monotonic() - started < 0.9
    assert "timed out" in failures(caplog)[0].error


def test_idle_failure_is_retried_by_next_idle(agent: Agent, protection: ScaleInProtection) -> None:
    """A rejected disable keeps the protection on record, so the next idle() asks again."""
    protection.busy()
    agent.replies.append(HTTP_500)
    protection.idle()
    protection.idle()
    assert agent.bodies() == [ENABLE, DISABLE, DISABLE]


def test_refresh_after_failed_disable_disables_instead_of_renewing(
    agent: Agent, protection: ScaleInProtection, clock: FakeClock
) -> None:
    """Protection left on by a rejected disable is dropped by refresh(), never renewed."""
    protection.busy()
    agent.replies.append(HTTP_500)
    protection.idle()
    clock.advance(55 * 60)
    protection.refresh()
    assert agent.bodies() == [ENABLE, DISABLE, DISABLE]


def test_refresh_after_failed_enable_while_busy_retries(agent: Agent, protection: ScaleInProtection) -> None:
    """A rejected enable while messages are in flight is requested again by refresh()."""
    agent.replies.append(HTTP_500)
    protection.busy()
    protection.refresh()
    protection.refresh()
    assert agent.bodies() == [ENABLE, ENABLE]


def test_close_disables_protection(agent: Agent, protection: ScaleInProtection) -> None:
    """close() while protected PUTs ProtectionEnabled false."""
    protection.busy()
    protection.close()
    assert agent.bodies() == [ENABLE, DISABLE]


def test_close_when_not_protected_sends_nothing(agent: Agent, protection: ScaleInProtection) -> None:
    """close() without held protection sends no request."""
    protection.close()
    assert agent.requests == []


class VirtualAgent:
    """The stand-in agent on the simulated clock, as :class:`ScaleInProtection`'s opener (no socket): like the
    :func:`agent` fixture's server, it records each request in ``state`` (and for the permissions tier) and answers
    ``state``'s next reply, an HTTP error status raised as urllib raises it. Each call takes a loopback round trip of
    virtual time, as bench/sim/world.py's ``_Agent`` (which records nothing and always agrees) takes the world's."""

    def __init__(self, virtual: Virtual, state: Agent) -> None:
        self.virtual = virtual
        self.state = state

    def open(self, request: urllib.request.Request, timeout: float | None = None) -> io.BytesIO:
        method, path = request.get_method(), urllib.parse.urlsplit(request.full_url).path
        raw = request.data
        body = json.loads(raw) if isinstance(raw, bytes) and raw else None
        with self.state.lock:
            self.state.requests.append(Recorded(method, path, body))
        runtime_call_recorder.record_agent_request(method, path)
        status, reply = self.state.reply_to(body)
        self.virtual.sim.sleep(2 * self.virtual.aws.latency())
        payload = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
        if status >= 400:
            raise urllib.error.HTTPError(
                request.full_url, status, "agent error", email.message.Message(), io.BytesIO(payload)
            )
        return io.BytesIO(payload)


def virtual_protection(virtual: Virtual, agent: Agent) -> ScaleInProtection:
    """Protection through :class:`VirtualAgent`, on the run's clock and with its lock (held across the agent's call,
    so it must be one the scheduler sees)."""
    return ScaleInProtection(
        agent.uri,
        clock=virtual.sim.monotonic,
        lock=virtual.sim.lock(),  # type: ignore[arg-type]
        opener=VirtualAgent(virtual, agent),  # type: ignore[arg-type]
    )


def test_consumer_holds_protection_while_messages_are_in_flight(
    virtual: Virtual, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime PUTs protection on before the first received message starts, once for two in flight, and
    off when the last is done, while it keeps running. The heartbeat's once-a-tick reconciliation is held
    off (a 30 s tick), so these are the runtime's own calls as messages arrive and finish. On the virtual clock."""
    monkeypatch.setattr(runtime, "TICK_SECONDS", 30.0)
    contract = fast_contract(concurrency=2)
    agent = Agent(uri=LINK_LOCAL_URI)
    both_started = virtual.sim.condition()  # a barrier of two, 10 virtual s at most
    seen_at_start: list[list[Any]] = []

    def handle(_: Message) -> None:
        with both_started:
            seen_at_start.append(agent.bodies())
            both_started.notify_all()
            if not both_started.wait_for(lambda: len(seen_at_start) >= 2, timeout=10):
                raise threading.BrokenBarrierError

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        worker = virtual.consumer_of(pair, contract, handle, protection=virtual_protection(virtual, agent))
        with virtual.running(worker):
            sqs.send_message_batch(
                QueueUrl=pair.queue_url, Entries=[{"Id": b, "MessageBody": b} for b in ("first", "second")]
            )
            virtual.wait_until(lambda: len(agent.requests) >= 2, timeout=10)
        assert seen_at_start == [[ENABLE], [ENABLE]]
        assert agent.requests == [Recorded("PUT", STATE_PATH, ENABLE), Recorded("PUT", STATE_PATH, DISABLE)]

    virtual.run(body)


def test_consumer_renews_a_refused_protection_while_busy(virtual: Virtual) -> None:
    """The agent refuses the first enable: the heartbeat's reconciliation asks again within a tick or two, while
    the handler still runs (its refresh, every heartbeat_interval = 60 s here, would come far too late). On the
    virtual clock."""
    contract = fast_contract(max_duration_seconds=300, concurrency=1)
    assert contract.heartbeat_interval_seconds == 60
    agent = Agent(uri=LINK_LOCAL_URI)
    agent.replies.append(HTTP_500)
    enabled_twice = virtual.sim.event()

    def handle(_: Message) -> None:
        deadline = virtual.sim.monotonic() + 10
        while agent.bodies().count(ENABLE) < 2 and virtual.sim.monotonic() < deadline:
            virtual.sim.sleep(0.05)
        if agent.bodies().count(ENABLE) == 2:
            enabled_twice.set()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        worker = virtual.consumer_of(pair, contract, handle, protection=virtual_protection(virtual, agent))
        with virtual.running(worker):
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job")
            virtual.wait_until(lambda: agent.bodies()[-1:] == [DISABLE], timeout=20)
        assert enabled_twice.is_set()
        assert agent.bodies() == [ENABLE, ENABLE, DISABLE]

    virtual.run(body)
