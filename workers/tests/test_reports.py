"""The report job (workers/reports.py): request checks, rendering, the upload's outcomes, and the handler run
through the real runtime on moto, as a team tests its own handler (docs/testing.md, "Testing a handler")."""

from __future__ import annotations

import json
import math
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from moto import mock_aws

from consumer import ConfigurationError, Message, PoisonMessage
from consumer.declaration import contract_of, non_retryable_of
from consumer.message import Attempt
from consumer.runtime.consumer import Consumer
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, drain, running, send_samples, wait_until
from workers import reports
from workers.reports import ReportStoreUnavailable, handle, parse, render, upload, upload_target

REQUEST: dict[str, Any] = {
    "report_id": "sales-2026-11-23",
    "type": "report.requested",
    "title": "Sales by region",
    "columns": ["region", "orders"],
    "rows": [["eu", 12], ["us", 30]],
}


class Store(BaseHTTPRequestHandler):
    """A report store on 127.0.0.1: records each PUT (path, content type, body) and answers ``status``."""

    status = 200
    received: list[tuple[str, str | None, str]] = []

    def do_PUT(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        Store.received.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(Store.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Store]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Store)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Store.status, Store.received = 200, []
    monkeypatch.setenv(reports.UPLOAD_URL_ENV, f"http://127.0.0.1:{server.server_port}/reports/")
    yield Store
    server.shutdown()
    server.server_close()


def message(body: str) -> Message:
    return Message(body=body, message_id="m-1", receipt_handle="rh-1")


def test_report_is_declared_as_a_slow_job() -> None:
    """Its own declaration (the notifications example declares 90 s and 8 at a time): 10 min per report, two at
    a time, so its lease covers a whole report and the ECS stop timeout is Fargate's longest."""
    contract = contract_of(handle)
    assert (contract.max_duration_seconds, contract.concurrency) == (600, 2)
    assert contract.visibility_timeout_seconds >= 600 and contract.stop_timeout_seconds == 120


def test_handler_uploads_the_rendered_page_under_the_report_id(store: type[Store]) -> None:
    """A valid request is PUT once, as <base>/<report_id>.html (the same key on a redelivery)."""
    handle(message(json.dumps(REQUEST)))
    ((path, content_type, body),) = store.received
    assert (path, content_type) == ("/reports/sales-2026-11-23.html", "text/html; charset=utf-8")
    assert "<td>us</td><td>30</td>" in body and "<p>2 rows</p>" in body


def test_render_escapes_every_value() -> None:
    """A cell, a column or a title holding markup is shown as text, never run as markup in the page."""
    page = render({**REQUEST, "title": "<b>t</b>", "columns": ["<i>c</i>", "n"], "rows": [["<script>x</script>", 1]]})
    assert "<script>" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "&lt;b&gt;t&lt;/b&gt;" in page


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("[1]", "body must be a JSON object, got list"),
        (json.dumps({"type": "report.requested"}), "report request lacks report_id, title, columns, rows"),
        (json.dumps({**REQUEST, "type": "other"}), '"type" must be "report.requested": \'other\''),
        (json.dumps({**REQUEST, "report_id": "../etc/x"}), f'"report_id" must match {reports.REPORT_ID.pattern}'),
        (json.dumps({**REQUEST, "columns": []}), '"columns" must be a non-empty list of names'),
        (json.dumps({**REQUEST, "rows": {}}), '"rows" must be a list of rows'),
        (json.dumps({**REQUEST, "rows": [["eu", 1], ["us"]]}), '"rows"[1] must be a list of 2 cells, one per column'),
    ],
)
def test_parse_refuses_what_can_never_succeed_as_poison(body: str, reason: str) -> None:
    """A request that is not one goes straight to the DLQ with a reason naming the field and the rule."""
    with pytest.raises(PoisonMessage) as raised:
        parse(body)
    assert raised.value.reason == reason


@pytest.mark.parametrize("status", [400, 403, 413])
def test_upload_permanent_rejection_is_poison(store: type[Store], status: int) -> None:
    """A 4xx from the store means this report can never be uploaded."""
    store.status = status
    with pytest.raises(PoisonMessage, match=f"HTTP {status}"):
        handle(message(json.dumps(REQUEST)))


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_upload_transient_failure_is_retried(store: type[Store], status: int) -> None:
    """Timeouts, throttling and 5xx raise an ordinary exception: retry later."""
    store.status = status
    with pytest.raises(ReportStoreUnavailable, match=f"HTTP {status}"):
        handle(message(json.dumps(REQUEST)))


@pytest.mark.parametrize(("remaining", "expected"), [(math.inf, reports.UPLOAD_TIMEOUT_SECONDS), (7.0, 7.0)])
def test_handler_waits_on_the_store_no_longer_than_the_attempt_has_left(
    store: type[Store], monkeypatch: pytest.MonkeyPatch, remaining: float, expected: float
) -> None:
    """The upload's timeout is the attempt's remaining time when that is shorter (a Message built outside the
    consumer has no deadline: the upload's own limit)."""
    timeouts: list[float] = []
    urlopen = urllib.request.urlopen

    def recording(request: Any, timeout: float) -> Any:
        timeouts.append(timeout)
        return urlopen(request, timeout=timeout)

    monkeypatch.setattr(urllib.request, "urlopen", recording)
    attempt = Attempt(deadline=100.0 + remaining, clock=lambda: 100.0)
    handle(Message(body=json.dumps(REQUEST), message_id="m-1", receipt_handle="rh-1", attempt=attempt))
    assert (timeouts, len(store.received)) == ([expected], 1)


def test_upload_to_an_unreachable_store_is_retried() -> None:
    """A refused connection is transient."""
    with pytest.raises(ReportStoreUnavailable, match="unreachable"):
        upload("sales-2026-11-23", "<p></p>", "http://127.0.0.1:9")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"REPORTS_UPLOAD_URL": "https://store.example/reports/"}, "https://store.example/reports"),
        ({"REPORTS_DRY_RUN": "true"}, None),
    ],
)
def test_upload_target_is_the_url_or_a_declared_dry_run(environ: dict[str, str], expected: str | None) -> None:
    """A URL (trailing slash dropped: the key is appended) or, only if declared, a dry run."""
    assert upload_target(environ) == expected


@pytest.mark.parametrize(
    ("environ", "message_text"),
    [
        (
            {},
            '"REPORTS_UPLOAD_URL" must be set to the report store\'s http(s):// URL, or REPORTS_DRY_RUN=true '
            "declared: not set",
        ),
        ({"REPORTS_DRY_RUN": "yes"}, '"REPORTS_DRY_RUN" must be "true" or "false": \'yes\''),
        (
            {"REPORTS_UPLOAD_URL": "ftp://store.example/x?sig=secret"},
            "\"REPORTS_UPLOAD_URL\" must be an http:// or https:// URL with a host: 'ftp://…'",
        ),
    ],
)
def test_upload_target_refuses_to_start_without_a_destination(environ: dict[str, str], message_text: str) -> None:
    """Neither a URL nor a declared dry run would delete every report unsent: the start-up check refuses,
    naming the variable, the rule and the value (a URL shown up to its scheme: it may carry a signature)."""
    with pytest.raises(ConfigurationError) as raised:
        upload_target(environ)
    assert str(raised.value) == message_text


def test_parse_lets_a_body_that_is_not_json_out_as_the_declared_non_retryable_error() -> None:
    """A body that is not JSON raises the decoder's own error, which the handler declares non-retryable."""
    with pytest.raises(json.JSONDecodeError):
        parse("not json")
    assert non_retryable_of(handle) == (json.JSONDecodeError,)


def test_parse_refuses_json_nested_too_deeply_as_poison() -> None:
    """Nesting past the interpreter's limit is a RecursionError, not a JSONDecodeError: still poison, with a reason."""
    with pytest.raises(PoisonMessage) as raised:
        parse("[" * 100_000)
    assert raised.value.reason == "body is not JSON: RecursionError"


def test_handler_through_the_runtime_uploads_and_dead_letters_a_bad_request(store: type[Store]) -> None:
    """Through the real runtime on moto: a valid request is uploaded and deleted; a bad one is in the DLQ with
    its reason."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="reports")["QueueUrl"]
        dlq = sqs.create_queue(QueueName="reports-dlq")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(REQUEST))
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({**REQUEST, "report_id": "x"}))
        sqs.send_message(QueueUrl=url, MessageBody="not json")
        consumer = Consumer(sqs, queue_url=url, dlq_url=dlq, contract=contract_of(handle), handler=handle)
        with running(consumer) as run:
            wait_until(
                lambda: depth(sqs, url).total == 0 and depth(sqs, dlq).visible == 2,
                timeout=15,
                what="the report uploaded and deleted, the two bad requests in the DLQ",
            )
        dead = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    assert run.exit_code == 0
    assert [path for path, _type, _body in store.received] == ["/reports/sales-2026-11-23.html"]
    reasons = {m["Body"]: read_reason(m["MessageAttributes"]) for m in dead}
    assert {body: (r["kind"], r["reason"], r["receive_count"]) for body, r in reasons.items() if r} == {
        json.dumps({**REQUEST, "report_id": "x"}): ("poison", f'"report_id" must match {reports.REPORT_ID.pattern}', 1),
        "not json": ("non_retryable", "JSONDecodeError: Expecting value: line 1 column 1 (char 0)", 1),
    }


def test_declared_samples_end_where_declared(store: type[Store]) -> None:
    """The samples `local send` and the demo send (its @worker(samples=...)), through the real runtime on moto: the
    valid request uploaded once, the two marked poison=True in the DLQ at their first receive."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="reports")["QueueUrl"]
        dlq = sqs.create_queue(QueueName="reports-dlq")["QueueUrl"]
        sent = send_samples(sqs, url, handle)
        consumer = Consumer(sqs, queue_url=url, dlq_url=dlq, contract=contract_of(handle), handler=handle)
        with running(consumer) as run:
            wait_until(lambda: depth(sqs, url).total == 0, timeout=15, what="every sample settled")
        dead = {m["MessageAttributes"]["idempotency-key"]["StringValue"]: m for m in drain(sqs, dlq)}
    assert run.exit_code == 0
    assert set(dead) == {key for key, sample in sent.items() if sample.poison} and len(dead) == 2
    assert {read_reason(m["MessageAttributes"])["receive_count"] for m in dead.values()} == {1}  # type: ignore[index]
    assert [path for path, _type, _body in store.received] == ["/reports/sales-sample-0001.html"]
