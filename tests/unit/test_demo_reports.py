"""The demo's reports lane: the shipped example's report job (workers.reports), its mix and its accounting.

Tests of the shipped example: they skip, saying why, where the repository no longer has workers/reports.py.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

reports = pytest.importorskip("workers.reports", reason="the shipped example's report job is not in this repository")

from consumer.declaration import non_retryable_of  # noqa: E402
from consumer.local.demo_lane import account  # noqa: E402
from consumer.local.demo_reports import REPORT_KINDS, build_report_mix  # noqa: E402
from consumer.local.harness import Planned  # noqa: E402
from consumer.message import PoisonMessage  # noqa: E402

POISON = {"kind": "poison", "reason": "body is not JSON: Expecting value: line 1 column 1 (char 0)"}


def test_build_report_mix_follows_the_shares_with_every_kind() -> None:
    """28 report requests split 15/4/6/3 (valid, transient, malformed, not JSON), each id unique, the same mix on
    every run."""
    mix = build_report_mix(28)
    assert Counter(p.kind for p in mix) == {"valid": 15, "transient": 4, "malformed": 6, "not_json": 3}
    assert len({p.event_id for p in mix}) == 28
    assert mix == build_report_mix(28)


def test_build_report_mix_rejects_fewer_requests_than_kinds() -> None:
    """Three requests cannot cover four kinds: the error names the parameter, the rule and the value."""
    with pytest.raises(ValueError, match=r'"reports" must be at least 4 \(one of each kind\): 3'):
        build_report_mix(3)


def test_build_report_mix_malformed_requests_are_poison_to_the_report_job() -> None:
    """Every malformed request fails the report job's parse as PoisonMessage, six distinct reasons."""
    reasons = set()
    for planned in (p for p in build_report_mix(28) if p.kind == "malformed"):
        with pytest.raises(PoisonMessage) as raised:
            reports.parse(planned.body)
        reasons.add(raised.value.reason)
    assert len(reasons) == 6


def test_build_report_mix_not_json_requests_raise_the_report_job_s_declared_non_retryable_error() -> None:
    """A "not JSON" request fails the report job's parse with json.JSONDecodeError, the type its @worker declares
    non_retryable (the DLQ at the first receive, kind non_retryable); two variants."""
    bodies = {p.body[:10] for p in build_report_mix(28) if p.kind == "not_json"}
    assert len(bodies) == 2
    for planned in (p for p in build_report_mix(28) if p.kind == "not_json"):
        with pytest.raises(json.JSONDecodeError):
            reports.parse(planned.body)
    assert non_retryable_of(reports.handle) == (json.JSONDecodeError,)


def test_build_report_mix_valid_requests_render_under_their_report_id() -> None:
    """Valid and transient requests parse as reports named by their event id, and render with escaped cells."""
    for planned in (p for p in build_report_mix(28) if p.kind in ("valid", "transient")):
        request = reports.parse(planned.body)
        assert request["report_id"] == planned.event_id
        assert "&lt;apac &amp; oceania&gt;" in reports.render(request)


def test_build_report_mix_only_transient_requests_fail_once() -> None:
    """A transient request is refused exactly once by the store (one 2 s backoff); no other kind fails."""
    mix = build_report_mix(28)
    assert {p.transient_failures for p in mix if p.kind == "transient"} == {1}
    assert {p.transient_failures for p in mix if p.kind != "transient"} == {0}


def test_account_reports_lane_balances_with_uploads_and_poison() -> None:
    """The reports worker's kinds: valid and transient uploaded once, malformed in the DLQ with a reason."""
    plan = [Planned("rpt-0", "valid", "{}"), Planned("rpt-1", "transient", "{}"), Planned("rpt-2", "malformed", "{}")]
    result = account(plan, REPORT_KINDS, {"rpt-0": 1, "rpt-1": 1}, {"rpt-2": POISON}, 0)
    assert (result.balanced, result.delivered, result.dead_lettered) == (True, 2, {"malformed": 1})


def test_account_reports_lane_malformed_uploaded_is_misplaced() -> None:
    """A malformed request that reached the store is in the wrong place: the reports lane does not balance."""
    result = account([Planned("rpt-0", "malformed", "{}")], REPORT_KINDS, {"rpt-0": 1}, {}, 0)
    assert (result.misplaced, result.balanced) == (["rpt-0"], False)
