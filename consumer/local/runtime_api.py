"""A Lambda Runtime API on 127.0.0.1 (dev only; never in the image): what Lambda's service serves a function's runtime,
so the function image's real entry point (``python -m awslambdaric consumer.lambda_entry.handler``) runs here as it
runs on AWS. AWS's Runtime Interface Emulator is a binary from GitHub, which this machine cannot fetch; the API it
would serve is small and documented (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html):

- ``GET /2018-06-01/runtime/invocation/next``: the next event (it waits until there is one), with the headers
  ``Lambda-Runtime-Aws-Request-Id``, ``Lambda-Runtime-Deadline-Ms`` (the invocation's end, in Unix milliseconds),
  ``Lambda-Runtime-Invoked-Function-Arn`` and ``Lambda-Runtime-Trace-Id``;
- ``POST /2018-06-01/runtime/invocation/{AwsRequestId}/response``: the function's answer (202);
- ``POST /2018-06-01/runtime/invocation/{AwsRequestId}/error``: a function error (202);
- ``POST /2018-06-01/runtime/init/error``: the runtime could not start (202).

The runtime interface client AWS publishes (``awslambdaric``) is the check that this model speaks the API:
tests/integration/test_runtime_api.py runs it against this server.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/2018-06-01/runtime"
DEFAULT_FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:worker"


@dataclass(frozen=True)
class Answer:
    """How one invocation ended: ``kind`` "response" (``body`` the answer) or "error" (``body`` the error document),
    or "timeout" (nothing posted within the invocation's time)."""

    kind: str
    body: Any = None


class RuntimeApi:
    """Serves events to one function runtime, one invocation at a time: :meth:`invoke` queues an event and waits for
    the runtime's answer. ``address`` is what ``AWS_LAMBDA_RUNTIME_API`` must hold."""

    def __init__(self, *, function_arn: str = DEFAULT_FUNCTION_ARN, port: int = 0) -> None:
        self.function_arn = function_arn
        self.init_error: Any = None
        self._events: queue.Queue[tuple[str, bytes, float]] = queue.Queue()
        self._answers: dict[str, queue.Queue[Answer]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="runtime-api", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def invoke(self, event: Any, *, timeout_seconds: float) -> Answer:
        """Invoke the function with ``event``; its answer, or a "timeout" answer after ``timeout_seconds``."""
        request_id = str(uuid.uuid4())
        answers: queue.Queue[Answer] = queue.Queue(maxsize=1)
        with self._lock:
            self._answers[request_id] = answers
        deadline = time.time() + timeout_seconds
        self._events.put((request_id, json.dumps(event).encode(), deadline))
        try:
            return answers.get(timeout=timeout_seconds)
        except queue.Empty:
            return Answer("timeout")
        finally:
            with self._lock:
                self._answers.pop(request_id, None)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> RuntimeApi:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _answered(self, request_id: str, answer: Answer) -> bool:
        with self._lock:
            answers = self._answers.get(request_id)
        if answers is None:
            return False
        answers.put(answer)
        return True

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path != f"{PREFIX}/invocation/next":
                    self._reply(404, {"errorType": "NotFound"})
                    return
                request_id, body, deadline = api._events.get()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Lambda-Runtime-Aws-Request-Id", request_id)
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(deadline * 1000)))
                self.send_header("Lambda-Runtime-Invoked-Function-Arn", api.function_arn)
                self.send_header("Lambda-Runtime-Trace-Id", f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]}")
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                document = json.loads(raw) if raw else None
                parts = self.path.removeprefix(PREFIX).strip("/").split("/")
                if parts == ["init", "error"]:
                    api.init_error = document
                    self._reply(202, {"status": "OK"})
                elif len(parts) == 3 and parts[0] == "invocation" and parts[2] in ("response", "error"):
                    known = api._answered(parts[1], Answer(parts[2], document))
                    self._reply(202 if known else 400, {"status": "OK"} if known else {"errorType": "InvalidRequestID"})
                else:
                    self._reply(404, {"errorType": "NotFound"})

            def _reply(self, status: int, document: Any) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
                pass

        return Handler
