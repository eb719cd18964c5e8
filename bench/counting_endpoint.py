"""ministack with a request counter: ``python -m bench.counting_endpoint`` (run by ministack's own interpreter).

The yardstick counts requests at the endpoint, never with hooks in the measured process (a botocore event
handler per request is CPU the subject would pay, and a peer in another language has no such hook). This wraps
ministack's ASGI application in a middleware that counts, per caller (the access key id a request is signed
with: the subject's and the feeder's are told apart) and per operation, every request it answers, and the
messages it deleted and handed out, and serves the counts at ``GET /_bench/counts`` (``POST /_bench/reset``
zeroes them). The counting runs in the endpoint's process: what it costs is the endpoint's, shared alike by
every implementation measured against it.

Operations are named as AWS names them: ``sqs.ReceiveMessage``, ``dynamodb.PutItem``. Both wire protocols are
read: the JSON protocol's ``X-Amz-Target`` header (botocore, the AWS SDK for JavaScript v3) and the query
protocol's ``Action`` form field (older SDKs). Deletes count the entries SQS reported successful
(``DeleteMessageBatch``'s ``Successful``, a ``DeleteMessage`` answered 200); receives count the messages
returned.

Standard library only besides ministack itself: it runs in ministack's virtualenv (``bench/endpoint.py``), which
pins an older botocore than the project's. ``python -m bench.counting_endpoint moto`` (the project's interpreter)
counts the same way in front of moto's server instead (a WSGI application: :func:`counting_wsgi`), so the tests can
run the counted benchmarks' code paths on the endpoint the suite already has; ``GATEWAY_PORT`` names the port either
way.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

COUNTS_PATH = "/_bench/counts"
RESET_PATH = "/_bench/reset"
#: Operations whose answers are read (to count deleted and received messages); every other answer is only counted.
_READ_ANSWERS = frozenset({"sqs.DeleteMessageBatch", "sqs.DeleteMessage", "sqs.ReceiveMessage"})
_TARGET_SERVICES = {"AmazonSQS": "sqs", "DynamoDB_20120810": "dynamodb"}
_XML_DELETED = re.compile(rb"<DeleteMessageBatchResultEntry>")
_XML_RECEIVED = re.compile(rb"<Message>")
_CREDENTIAL = re.compile(r"Credential=(?P<key>[^/,&\s]+)/")


class Counts:
    """Per caller (the access key id a request is signed with): requests per operation, messages deleted and
    received. Thread-safe (hypercorn serves on one event loop anyway)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callers: dict[str, dict[str, Any]] = {}

    def add(self, caller: str, operation: str, deleted: int = 0, received: int = 0) -> None:
        with self._lock:
            counts = self._callers.setdefault(caller, {"requests": Counter(), "deleted": 0, "received": 0})
            counts["requests"][operation] += 1
            counts["deleted"] += deleted
            counts["received"] += received

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {caller: {**c, "requests": dict(c["requests"])} for caller, c in self._callers.items()}

    def reset(self) -> None:
        with self._lock:
            self._callers.clear()


def caller_of(headers: dict[str, str], query: bytes) -> str:
    """The access key id of a SigV4-signed request (header or presigned query), or ``anonymous``."""
    match = _CREDENTIAL.search(headers.get("authorization", "")) or _CREDENTIAL.search(
        query.decode("latin-1").replace("%2F", "/")
    )
    return match["key"] if match else "anonymous"


def operation_of(headers: dict[str, str], body: bytes) -> str:
    """``service.Operation`` of one request, from the JSON protocol's target or the query protocol's Action."""
    target = headers.get("x-amz-target", "")
    if target:
        prefix, _, name = target.partition(".")
        return f"{_TARGET_SERVICES.get(prefix, prefix)}.{name}"
    if body:
        action = parse_qs(body.decode("utf-8", "replace")).get("Action")
        if action:
            return f"sqs.{action[0]}"
    return "other"


def messages_in_answer(operation: str, status: int, body: bytes) -> tuple[int, int]:
    """(deleted, received) that one answer reports."""
    if status != 200:
        return 0, 0
    if body.lstrip().startswith(b"<"):  # the query protocol answers in XML
        if operation == "sqs.DeleteMessageBatch":
            return len(_XML_DELETED.findall(body)), 0
        if operation == "sqs.ReceiveMessage":
            return 0, len(_XML_RECEIVED.findall(body))
        return (1, 0) if operation == "sqs.DeleteMessage" else (0, 0)
    if operation == "sqs.DeleteMessage":
        return 1, 0
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        return 0, 0
    if operation == "sqs.DeleteMessageBatch":
        return len(parsed.get("Successful", [])), 0
    return 0, len(parsed.get("Messages", []))


def counting(app: Any, counts: Counts) -> Any:
    """``app`` behind the counter, with the two ``/_bench`` paths of its own."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path in (COUNTS_PATH, RESET_PATH):
            if path == RESET_PATH:
                counts.reset()
            payload = json.dumps(counts.snapshot()).encode()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": payload})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        chunks: list[bytes] = []

        async def replay() -> dict[str, Any]:
            # The request body, read in full first (to name its operation), is handed on as one message.
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        operation = operation_of(headers, b"".join(chunks) if "x-amz-target" not in headers else b"")
        caller = caller_of(headers, scope.get("query_string", b""))
        if operation not in _READ_ANSWERS:
            counts.add(caller, operation)
            await app(scope, replay, send)
            return
        status = 0
        answer: list[bytes] = []

        async def reading(event: dict[str, Any]) -> None:
            nonlocal status
            if event["type"] == "http.response.start":
                status = event["status"]
            elif event["type"] == "http.response.body":
                answer.append(event.get("body", b""))
            await send(event)

        await app(scope, replay, reading)
        deleted, received = messages_in_answer(operation, status, b"".join(answer))
        counts.add(caller, operation, deleted=deleted, received=received)

    return wrapped


def counting_wsgi(app: Any, counts: Counts) -> Any:
    """:func:`counting` for a WSGI ``app`` (moto's server): the same counts, the same two ``/_bench`` paths."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path in (COUNTS_PATH, RESET_PATH):
            if path == RESET_PATH:
                counts.reset()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(counts.snapshot()).encode()]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)  # read in full (to name its operation), handed on unread
        headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
        operation = operation_of(headers, body if "x-amz-target" not in headers else b"")
        caller = caller_of(headers, environ.get("QUERY_STRING", "").encode("latin-1"))
        if operation not in _READ_ANSWERS:
            counts.add(caller, operation)
            return app(environ, start_response)
        status = [0]

        def reading(line: str, response_headers: Any, exc_info: Any = None) -> Any:
            status[0] = int(line.split(" ", 1)[0])
            return start_response(line, response_headers, exc_info)

        answer = b"".join(app(environ, reading))
        deleted, received = messages_in_answer(operation, status[0], answer)
        counts.add(caller, operation, deleted=deleted, received=received)
        return [answer]

    return wrapped


def _serve_moto(port: int) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    os.environ.setdefault("MOTO_PORT", str(port))  # as moto's own main: the URLs it hands out name this port
    app = counting_wsgi(DomainDispatcherApplication(create_backend_app), Counts())
    run_simple("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)


def main() -> None:
    if sys.argv[1:] == ["moto"]:
        _serve_moto(int(os.environ["GATEWAY_PORT"]))
        return
    import ministack.app as ministack  # type: ignore[import-not-found]  # ministack's own virtualenv only

    ministack.app = counting(ministack.app, Counts())  # main() serves the module's global ``app``
    ministack.main()


if __name__ == "__main__":
    main()
