"""A fault-injecting HTTP reverse proxy on 127.0.0.1, between SQS clients and moto's server.

Why a proxy: moto keeps every queue in memory, so restarting moto would lose the
queues and every message in them, which no real SQS restart does. The proxy
plays the endpoint instead: it forwards each request to moto unchanged and, with
the probabilities of a :class:`FaultPlan`, answers it itself with an error:

* ``throttle_before``: HTTP 400 ``RequestThrottled`` (SQS's JSON protocol: the
  ``__type`` of the body plus the ``x-amzn-query-error`` header botocore reads
  for query-compatible services), without forwarding: nothing happened.
* ``error_before``: HTTP 500 ``InternalError``, without forwarding.
* ``error_after``: the request IS forwarded and applied by moto, then the answer
  is replaced by HTTP 500 ``InternalError``: the lost answer. A lost
  ReceiveMessage leaves messages in flight that no consumer has seen (they come
  back after the lease with a higher receive count); a lost SendMessage makes
  the client retry and send a duplicate.

:meth:`FaultProxy.outage` is the "endpoint restart": the proxy stops listening,
closes every open connection (so clients see refused and reset connections),
and comes back on the same port a few seconds later, with moto's state intact.

Only requests whose ``X-Amz-Target`` starts with one of ``FaultPlan.targets``
(SQS by default) are faulted; everything else is forwarded untouched. An ``observer``
sees every request that was forwarded (an :class:`Exchange`): the chaos suite reads
from them who received which message when (:mod:`bench.chaos_evidence`).
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

THROTTLE_BEFORE, ERROR_BEFORE, ERROR_AFTER = "throttle_before", "error_before", "error_after"
FAULT_KINDS = (THROTTLE_BEFORE, ERROR_BEFORE, ERROR_AFTER)
#: Longer than a 20 s long poll plus moto's slowest answer: the proxy never times out a live request.
UPSTREAM_TIMEOUT_SECONDS = 60
#: Headers that describe one hop, not the message (RFC 9110 section 7.6.1), and the length we recompute.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
    | {"content-length", "server", "date"}
)


@dataclass(frozen=True, kw_only=True)
class FaultPlan:
    """Per-request fault probabilities (0 to 1, drawn in this order), for requests to ``targets``.

    Example::

        FaultPlan(throttle_before=0.03, error_before=0.02, error_after=0.02)
    """

    throttle_before: float = 0.0
    error_before: float = 0.0
    error_after: float = 0.0
    targets: tuple[str, ...] = ("AmazonSQS.",)
    seed: int = 5

    def __post_init__(self) -> None:
        for name in FAULT_KINDS:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f'"{name}" must be between 0 and 1: {value}')
        if self.throttle_before + self.error_before + self.error_after > 1.0:
            raise ValueError(
                "the fault probabilities must add up to at most 1:"
                f" {self.throttle_before} + {self.error_before} + {self.error_after}"
            )


@dataclass(frozen=True)
class Exchange:
    """One request the proxy forwarded to moto, as its observer sees it.

    ``sent_at`` and ``answered_at`` are ``time.monotonic()`` when the request arrived and when moto's answer came
    back (before the proxy passed it on); ``status`` is None when forwarding failed (whether moto applied it is
    unknown); ``passed_on`` says whether the client got moto's answer (False for a lost answer, ``error_after``).
    """

    operation: str
    user_agent: str
    body: bytes
    status: int | None
    answer: bytes
    sent_at: float
    answered_at: float
    passed_on: bool


def error_body(kind: str, operation: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of an injected error, shaped as SQS's JSON protocol answers it."""
    if kind == THROTTLE_BEFORE:
        status, code, fault, message = 400, "RequestThrottled", "Sender", "Rate exceeded (injected by the chaos proxy)"
    else:
        status, code, fault = 500, "InternalError", "Receiver"
        message = f"We encountered an internal error (injected by the chaos proxy, {kind}, {operation})"
    body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": message}).encode()
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-query-error": f"{code};{fault}",
        "x-amzn-RequestId": f"chaos-{random.getrandbits(64):016x}",
    }
    return status, headers, body


class FaultProxy:
    """Forward HTTP requests from ``127.0.0.1:port`` to ``upstream``, injecting faults per :class:`FaultPlan`.

    Example::

        proxy = FaultProxy("http://127.0.0.1:5000", FaultPlan(throttle_before=0.05))
        proxy.start()            # clients use proxy.url as AWS_ENDPOINT_URL
        proxy.outage(5.0)        # the endpoint restart: 5 s of refused connections
        proxy.faults             # Counter {("throttle_before", "ReceiveMessage"): 12, ...}
        proxy.stop()
    """

    def __init__(
        self,
        upstream: str,
        plan: FaultPlan | None = None,
        port: int = 0,
        observer: Callable[[Exchange], None] | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.plan = plan or FaultPlan()
        self.observer = observer
        self.faults: Counter[tuple[str, str]] = Counter()
        self.forwarded: Counter[str] = Counter()
        self.outages: list[dict[str, float]] = []
        self._paused = threading.Event()
        self._lock = threading.Lock()
        self._rng = random.Random(self.plan.seed)
        self._connections: set[socket.socket] = set()
        self._inflight: set[int] = set()  # ids of requests being forwarded to moto now
        self._next_id = 0
        self._server = self._bind(port)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None

    # --- control --------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="chaos-proxy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread = None
        self._server.server_close()
        self._drop_connections()

    def pause_faults(self) -> None:
        """Forward everything untouched until :meth:`resume_faults`.

        This includes the answers to requests that arrived before the pause: a long poll drawn for
        ``error_after`` while faults were on gets its real answer if that answer comes after the pause.
        """
        self._paused.set()

    @property
    def in_flight(self) -> int:
        """How many requests are being forwarded to moto now."""
        with self._lock:
            return len(self._inflight)

    def settle(self, timeout: float = UPSTREAM_TIMEOUT_SECONDS) -> float:
        """Wait until every request being forwarded now has been answered; returns the seconds waited.

        A client that died (SIGKILL) or was cut off (an outage) mid long poll leaves its request
        waiting at moto: moto hands the next message to that dead poll, and the message comes back
        only after its lease, one receive count up. Settling before a phase that asserts receive
        counts rules that out. Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        began = time.monotonic()
        with self._lock:
            pending = set(self._inflight)
        while True:
            with self._lock:
                if not pending & self._inflight:
                    return time.monotonic() - began
            if time.monotonic() - began > timeout:
                raise TimeoutError(
                    f"{len(pending & self._inflight)} forwarded requests still unanswered after {timeout} s"
                )
            time.sleep(0.05)

    def resume_faults(self) -> None:
        self._paused.clear()

    def outage(self, seconds: float) -> None:
        """The endpoint restart: stop listening, reset open connections, listen again on the same port."""
        began = time.monotonic()
        self.stop()
        time.sleep(seconds)
        self._server = self._bind(self.port)
        self.start()
        self.outages.append({"seconds": round(time.monotonic() - began, 2)})

    def fault_counts(self) -> dict[str, dict[str, int]]:
        """Injected faults as {kind: {operation: count}}."""
        with self._lock:
            out: dict[str, dict[str, int]] = {kind: {} for kind in FAULT_KINDS}
            for (kind, operation), count in sorted(self.faults.items()):
                out[kind][operation] = count
            return out

    # --- internals ------------------------------------------------------------
    def _bind(self, port: int) -> ThreadingHTTPServer:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._connections.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._connections.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass  # reset by an outage

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                proxy._handle(self)

            def do_GET(self) -> None:  # noqa: N802
                proxy._handle(self)

            def log_message(self, *_: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        return server

    def _drop_connections(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _draw(self, target: str) -> str | None:
        """Which fault (or None) this request gets."""
        if self._paused.is_set() or not target.startswith(self.plan.targets):
            return None
        plan = self.plan
        with self._lock:
            roll = self._rng.random()
        for kind, threshold in (
            (THROTTLE_BEFORE, plan.throttle_before),
            (ERROR_BEFORE, plan.throttle_before + plan.error_before),
            (ERROR_AFTER, plan.throttle_before + plan.error_before + plan.error_after),
        ):
            if roll < threshold:
                return kind
        return None

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length", "0"))
        body = request.rfile.read(length) if length else b""
        target = request.headers.get("X-Amz-Target", "")
        operation = target.rpartition(".")[2] or request.command
        fault = self._draw(target)
        if fault in (THROTTLE_BEFORE, ERROR_BEFORE):
            self._count(fault, operation)
            self._reply(request, *error_body(fault, operation))
            return
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            self._inflight.add(request_id)
        sent_at = time.monotonic()

        def observe(status: int | None, answer: bytes, passed_on: bool) -> None:
            if self.observer is not None:
                agent = request.headers.get("User-Agent", "")
                self.observer(Exchange(operation, agent, body, status, answer, sent_at, answered_at, passed_on))

        try:
            status, headers, answer = self._forward(request, body)
        except OSError as error:
            # moto unreachable or the outage reset us mid-request: the client sees a bad gateway.
            answered_at = time.monotonic()
            observe(None, b"", passed_on=False)
            self._reply(request, 502, {"Content-Type": "text/plain"}, f"upstream failed: {error}".encode())
            return
        finally:
            with self._lock:
                self._inflight.discard(request_id)
        answered_at = time.monotonic()
        with self._lock:
            self.forwarded[operation] += 1
        if fault == ERROR_AFTER and not self._paused.is_set():
            self._count(fault, operation)
            self._reply(request, *error_body(fault, operation))
            observe(status, answer, passed_on=False)
            return
        observe(status, answer, passed_on=self._reply(request, status, headers, answer))

    def _forward(self, request: BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(
            self.upstream_host, self.upstream_port, timeout=UPSTREAM_TIMEOUT_SECONDS
        )
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
            headers["Content-Length"] = str(len(body))
            connection.request(request.command, request.path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            kept = {k: v for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS}
            return response.status, kept, answer
        finally:
            connection.close()

    def _count(self, kind: str, operation: str) -> None:
        with self._lock:
            self.faults[(kind, operation)] += 1

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> bool:
        """Answer the client; False if it went away (or the outage reset the connection) first."""
        try:
            request.send_response(status)
            for name, value in headers.items():
                request.send_header(name, value)
            request.send_header("Content-Length", str(len(body)))
            request.end_headers()
            request.wfile.write(body)
        except OSError:
            return False
        return True
