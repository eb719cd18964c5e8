"""The demo's second lane: the team's report job (``workers.reports``), its producer mix and its report store.

The report job is the slow worker (``max_duration`` 10 min, so a 660 s lease and retry backoffs from 2 s
up to 5 min). The mix is chosen so that each of its paths shows within the demo's half minute without a
weaker declaration: a valid report is uploaded once; a transient store failure is one HTTP 503, retried
after the first backoff (2 s) and then uploaded once; a malformed request is the handler's
``PoisonMessage`` and goes to the DLQ at its first receive, with the handler's reason; a body that is not JSON
raises ``json.JSONDecodeError``, which the report job declares ``non_retryable``: the DLQ at its first receive
too, kind ``non_retryable``, the decoder's message as reason. No event of this
lane waits out the 660 s lease: that would take a consumer dying with the message in hand, which the
rolling restart (on the first lane only) is there to show.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from consumer.local.demo_lane import DEAD_LETTERED, DELIVERED, Kind, Mix, RecordingDownstream, plan_mix
from consumer.local.harness import Planned
from workers.reports import UPLOAD_URL_ENV

#: The report requests the producer mixes, and where each must end.
REPORT_KINDS: dict[str, Kind] = {
    "valid": Kind(0.55, DELIVERED, "PUT answered 200 (uploaded)"),
    "transient": Kind(0.15, DELIVERED, "HTTP 503 once, then 200 after the 2 s backoff"),
    "malformed": Kind(0.2, DEAD_LETTERED, "never reached: not a report request (PoisonMessage)"),
    "not_json": Kind(0.1, DEAD_LETTERED, "never reached: JSONDecodeError, declared non_retryable"),
}
REPORTS_MIX = Mix(REPORT_KINDS, url_env=UPLOAD_URL_ENV, downstream="the report store")


def report_request(report_id: str, index: int, **overrides: Any) -> dict[str, Any]:
    """A valid ``report.requested`` event (a cell needing escaping included); None overrides drop a field."""
    request = {
        "report_id": report_id,
        "type": "report.requested",
        "title": f"Orders by region, week {index % 52 + 1}",
        "columns": ["region", "orders"],
        "rows": [["eu", 12 + index], ["us", 30], ["<apac & oceania>", index % 7]],
    }
    request.update(overrides)
    return {k: v for k, v in request.items() if v is not None}


def _not_json(report_id: str, index: int, variant: int) -> str:
    """A body that is not JSON: the report job's declared non-retryable JSONDecodeError."""
    good = report_request(report_id, index)
    variants: list[Callable[[], str]] = [
        lambda: json.dumps(good)[:-5],  # truncated JSON
        lambda: f"report_id={report_id}&type=report.requested",  # form-encoded, not JSON
    ]
    return variants[variant % len(variants)]()


def _malformed_request(report_id: str, index: int, variant: int) -> str:
    """A body the report job must refuse as poison, each for its own reason."""
    good = report_request(report_id, index)
    variants: list[Callable[[], str]] = [
        lambda: json.dumps([good]),  # an array, not an object
        lambda: json.dumps(report_request(report_id, index, rows=None)),  # a required field missing
        lambda: json.dumps(report_request(report_id, index, type="report.created")),  # wrong event type
        lambda: json.dumps({**good, "report_id": "../../etc/passwd"}),  # an id that is a path
        lambda: json.dumps(report_request(report_id, index, columns=[])),  # no columns
        lambda: json.dumps(report_request(report_id, index, rows=[["eu", 1], ["us"]])),  # a row short of a cell
    ]
    return variants[variant % len(variants)]()


def build_report_mix(count: int, seed: int = 13) -> list[Planned]:
    """``count`` report requests in the shares of :data:`REPORT_KINDS` (at least one of each), reproducibly."""

    def body(report_id: str, index: int, kind: str, variant: int) -> str:
        if kind == "not_json":
            return _not_json(report_id, index, variant)
        if kind == "malformed":
            return _malformed_request(report_id, index, variant)
        return json.dumps(report_request(report_id, index))

    return plan_mix(
        REPORT_KINDS,
        count,
        "reports",
        seed,
        prefix="rpt-demo",
        body=body,
        transient_failures=lambda kind, _: 1 if kind == "transient" else 0,
    )


class ReportStore(RecordingDownstream):
    """The report store on 127.0.0.1: takes ``PUT /reports/<report_id>.html`` and counts uploads per report id.

    A planned transient failure answers 503 to its first ``transient_failures`` PUTs; a PUT for a report
    the plan does not hold answers 404 (the handler then dead-letters it, and the accounting shows it).
    """

    PATH = "/reports"

    def __init__(self, plan: Iterable[Planned]) -> None:
        super().__init__()
        self.plan = {p.event_id: p for p in plan}

    def respond(self, key: str, path: str) -> int:
        report_id = path.removeprefix(f"{self.PATH}/").removesuffix(".html")
        planned = self.plan.get(report_id)
        attempt = self.attempt(report_id)
        if planned is None:
            return self.answered(report_id, 404)
        return self.answered(report_id, 503 if attempt <= planned.transient_failures else 200)
