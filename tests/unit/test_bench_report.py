"""docs/BENCHMARKS.md is generated from saved results: every placeholder is filled, ratios are computed right."""

from __future__ import annotations

import re

import pytest

from bench import container, report


def _row(impl: str, concurrency: int, handler: str, rate: float, cost: float) -> dict:
    return {
        "impl": impl,
        "concurrency": concurrency,
        "handler": handler,
        "messages_per_second": rate,
        "requests_per_message": cost,
        "rss_idle_kib": 40960,
        "rss_load_kib": 51200,
    }


RESULT = {
    "meta": {"date": "2026-11-22", "commit": "abc1234", "endpoint": "ministack", "cpus": 2, "python": "3.11.7"},
    "rows": [
        _row(impl, c, handler, rate, cost)
        for handler in ("noop", "io50ms")
        for c in (1, 16)
        for impl, rate, cost in (("ours", 600.0, 0.2), ("naive", 300.0, 1.1))
    ],
}


def test_report_template_placeholders_are_exactly_the_sections() -> None:
    """Each {{name}} in the template has a section, so no section is silently left out of the page."""
    placeholders = set(re.findall(r"\{\{(\w+)\}\}", report.TEMPLATE.read_text()))
    assert placeholders == {
        "requests",
        "throughput",
        "ablation",
        "latency",
        "shutdown",
        "duplicates",
        "memory",
        "build",
        "container",
    }


def test_report_throughput_table_shows_the_ratio_to_the_baseline() -> None:
    """600 msg/s against 300 msg/s reads 2.00x in the ours / naive column."""
    text = report._throughput_section(RESULT)
    assert "| 16 | 600 | 300 | 2.00x |" in text


def test_report_requests_table_shows_both_costs() -> None:
    """Requests per message appear per concurrency for ours and the baseline."""
    assert "| 1 | 0.200 | 1.100 |" in report._requests_section(RESULT)


def test_report_missing_result_names_the_command_to_run() -> None:
    """A benchmark not run yet says which command produces it instead of showing stale figures."""
    assert "python -m bench shutdown" in report._shutdown_section(None)


def test_bench_container_counts_stop_times_only_with_a_delivery_in_flight() -> None:
    """A SIGTERM with nothing in flight measures a different stop: recorded, left out of the median."""
    rows = [
        {"impl": "container", "ready_seconds": r, "sigterm_to_exit_seconds": s, "in_flight": f}
        for r, s, f in ((1.0, 2.5, True), (2.0, 0.4, False), (3.0, 2.7, True))
    ]
    assert container._medians(rows) == {"ready_seconds": 2.0, "sigterm_to_exit_seconds": 2.6}
    with pytest.raises(RuntimeError, match="^no container run had a delivery in flight within 30 s of being ready$"):
        container._medians([{**r, "in_flight": False} for r in rows])
