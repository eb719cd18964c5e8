"""The report job: render a requested report as an HTML page and upload it.

A slower worker than the notifications example, declared so: a report may take minutes, so each task runs
two at a time and the lease, the stop timeout and the scaling target follow from ``max_duration`` (10 min).

A ``report.requested`` event carries the report's rows (a producer collected them)::

    {"report_id": "sales-2026-11-23", "type": "report.requested", "title": "Sales by region",
     "columns": ["region", "orders"], "rows": [["eu", 12], ["us", 30]]}

The page is rendered with Jinja2, autoescaped (a cell's text never becomes markup), and PUT to
``REPORTS_UPLOAD_URL/<report_id>.html``: a PUT of the same report to the same key is safe to repeat, as it must
be (SQS delivers at least once). ``REPORTS_DRY_RUN=true`` declares a dry run (rendered and logged, not
uploaded); with neither set the handler refuses to start, because returning would delete every event unsent.
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, StrictUndefined

from consumer import ConfigurationError, Message, PoisonMessage, Sample, worker

log = logging.getLogger(__name__)

UPLOAD_URL_ENV = "REPORTS_UPLOAD_URL"
DRY_RUN_ENV = "REPORTS_DRY_RUN"
UPLOAD_TIMEOUT_SECONDS = 60
#: The report id names the uploaded object: URL-safe by construction, never a path of its own.
REPORT_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{7,127}$")
REQUIRED = ("report_id", "type", "title", "columns", "rows")

# StrictUndefined: a template naming a field the report lacks fails loudly instead of printing nothing.
_PAGE = Environment(autoescape=True, undefined=StrictUndefined).from_string(
    """<!doctype html>
<html><head><meta charset="utf-8"><title>{{ title }}</title></head>
<body><h1>{{ title }}</h1>
<table>
<thead><tr>{% for column in columns %}<th>{{ column }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</tbody>
</table>
<p>{{ rows | length }} rows</p>
</body></html>
"""
)


#: What ``python -m consumer local send --worker reports`` sends (and the local demo, for a worker it has no mix for):
#: a valid request (a cell that must be escaped among its rows), then two the job refuses at the first receive: a row
#: one cell short (``PoisonMessage``) and a body that is not JSON (``json.JSONDecodeError``, declared non-retryable).
SAMPLES = (
    Sample(
        json.dumps(
            {
                "report_id": "sales-sample-0001",
                "type": "report.requested",
                "title": "Sales by region",
                "columns": ["region", "orders"],
                "rows": [["eu", 12], ["us", 30], ["<apac & oceania>", 7]],
            }
        )
    ),
    Sample(
        json.dumps(
            {
                "report_id": "sales-sample-0002",
                "type": "report.requested",
                "title": "Sales by region",
                "columns": ["region", "orders"],
                "rows": [["eu"], ["us", 30]],
            }
        ),
        poison=True,
    ),
    Sample("report_id=sales-sample-0003&type=report.requested", poison=True),
)


class ReportStoreUnavailable(Exception):
    """The store could not take the report now (timeout, 5xx, 408, 429): retry later."""


def parse(body: str) -> dict[str, Any]:
    """The report request in ``body``; :class:`PoisonMessage` if it is not one (it never will be on a retry).

    A body that is not JSON raises :class:`json.JSONDecodeError` itself: ``handle`` declares it non-retryable, so
    the consumer moves it to the DLQ at its first receive with the decoder's message (a position, no content) as
    reason. The other reasons name the field and the rule, never a cell's value.
    """
    try:
        request = json.loads(body)
    except RecursionError as error:  # not a JSONDecodeError: nested deeper than the interpreter parses
        raise PoisonMessage(f"body is not JSON: {type(error).__name__}") from error
    if not isinstance(request, dict):
        raise PoisonMessage(f"body must be a JSON object, got {type(request).__name__}")
    missing = [name for name in REQUIRED if name not in request]
    if missing:
        raise PoisonMessage(f"report request lacks {', '.join(missing)}")
    if request["type"] != "report.requested":
        raise PoisonMessage(f'"type" must be "report.requested": {request["type"]!r}')
    if not isinstance(request["report_id"], str) or not REPORT_ID.match(request["report_id"]):
        raise PoisonMessage(f'"report_id" must match {REPORT_ID.pattern}')
    columns, rows = request["columns"], request["rows"]
    if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
        raise PoisonMessage('"columns" must be a non-empty list of names')
    if not isinstance(rows, list):
        raise PoisonMessage('"rows" must be a list of rows')
    for number, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(columns):
            raise PoisonMessage(f'"rows"[{number}] must be a list of {len(columns)} cells, one per column')
    return request


def render(request: Mapping[str, Any]) -> str:
    """The report as an HTML page (every value escaped)."""
    return _PAGE.render(title=request["title"], columns=request["columns"], rows=request["rows"])


def upload_target(environ: Mapping[str, str]) -> str | None:
    """The base URL reports go to, or None for a declared dry run; :class:`ConfigurationError` otherwise."""
    url, dry_run = environ.get(UPLOAD_URL_ENV), environ.get(DRY_RUN_ENV, "")
    if dry_run not in ("", "true", "false"):
        raise ConfigurationError(DRY_RUN_ENV, 'must be "true" or "false"', dry_run)
    if url:
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https") or not urlsplit(url).hostname:
            # Shown up to its scheme: an upload URL may carry a signature.
            raise ConfigurationError(UPLOAD_URL_ENV, "must be an http:// or https:// URL with a host", f"{scheme}://…")
        return url.rstrip("/")
    if dry_run == "true":
        return None
    raise ConfigurationError(
        UPLOAD_URL_ENV, f"must be set to the report store's http(s):// URL, or {DRY_RUN_ENV}=true declared", url
    )


def upload(report_id: str, page: str, base_url: str | None, timeout: float = UPLOAD_TIMEOUT_SECONDS) -> None:
    """PUT ``page`` as ``<base_url>/<report_id>.html``; a 4xx but 408/429 is permanent, anything else transient."""
    if base_url is None:
        log.info("report_dry_run", extra={"report_id": report_id, "bytes": len(page.encode())})
        return
    request = urllib.request.Request(
        f"{base_url}/{report_id}.html",
        data=page.encode(),
        headers={"Content-Type": "text/html; charset=utf-8"},
        method="PUT",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError as error:
        if 400 <= error.code < 500 and error.code not in (408, 429):
            raise PoisonMessage(f"report store rejected the report with HTTP {error.code}") from error
        raise ReportStoreUnavailable(f"report store answered HTTP {error.code}") from error
    except (urllib.error.URLError, TimeoutError) as error:
        raise ReportStoreUnavailable(f"report store unreachable: {error}") from error
    log.info("report_uploaded", extra={"report_id": report_id, "bytes": len(page.encode())})


@worker(
    max_duration=timedelta(minutes=10),
    concurrency=2,
    acceptable_latency=timedelta(minutes=30),
    average_duration=timedelta(minutes=2),
    # A body that is not JSON never will be: the DLQ at its first receive, kind non_retryable (parse() lets it out).
    non_retryable=(json.JSONDecodeError,),
    setup=upload_target,  # consumer run refuses to start with neither an upload URL nor a declared dry run
    samples=SAMPLES,
)
def handle(message: Message) -> None:
    """Check one report request, render it and upload it (or log it, in a declared dry run)."""
    base_url = upload_target(os.environ)  # raises rather than return as if uploaded
    request = parse(message.body)
    # Never wait on the store past the attempt's deadline: the consumer gives up on the attempt then (its result
    # no longer counts), and a handler still waiting would only keep one of the two slots taken.
    upload(request["report_id"], render(request), base_url, timeout=min(UPLOAD_TIMEOUT_SECONDS, message.remaining()))
