"""docs/evidence/BENCHMARKS.md is generated from saved results: every placeholder filled, ratios computed right."""

from __future__ import annotations

import re

import pytest

from bench import container, report


def _row(impl: str, concurrency: int, handler: str, rate: float, cost: float, cpu: float = 1.5) -> dict:
    return {
        "impl": impl,
        "concurrency": concurrency,
        "handler": handler,
        "messages_per_second": rate,
        "requests_per_message": cost,
        "cpu_ms_per_message": cpu,
        "billed_requests_per_message": cost,
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
    "bodies": [
        {**_row(impl, 16, "noop", rate, cost), "body": body, "billed_requests_per_message": billed}
        for body, rate, cost, billed in (("1 KiB", 500.0, 0.2, 0.2), ("1 MiB", 50.0, 0.25, 16.25))
        for impl in ("ours", "naive")
    ],
    "plain": [
        {**_row("plain", 1, "noop", 1000.0, 0.2, cpu=0.61), "when": "start"},
        {**_row("plain", 1, "noop", 500.0, 0.2, cpu=0.84), "when": "end"},
    ],
}


def test_report_template_placeholders_are_exactly_the_sections() -> None:
    """Each {{name}} in the template has a section, so no section is silently left out of the page."""
    placeholders = set(re.findall(r"\{\{(\w+)\}\}", report.TEMPLATE.read_text()))
    assert set(report.sections()) == placeholders
    assert placeholders == {
        "requests",
        "throughput",
        "bare",
        "bodies",
        "ablation",
        "latency",
        "shutdown",
        "duplicates",
        "memory",
        "profile",
        "build",
        "container",
        "peers",
        "async",
        "tracing",
    }


def test_report_throughput_table_shows_the_ratio_to_the_baseline() -> None:
    """600 msg/s against 300 msg/s reads 2.00x in the ours / naive column."""
    text = report._throughput_section(RESULT)
    assert "| 16 | 600 | 300 | 2.00x |" in text


def test_report_throughput_table_shows_cpu_per_message() -> None:
    """Each row carries ours' and the baseline's CPU ms per message (1.50 here) after the ratio."""
    rows = [{**r, "cpu_ms_per_message": 2.25} if r["impl"] == "naive" else r for r in RESULT["rows"]]
    text = report._throughput_section({**RESULT, "rows": rows})
    assert "| 16 | 600 | 300 | 2.00x | 1.50 | 2.25 |" in text


def test_report_throughput_table_without_cpu_figures_shows_a_dash() -> None:
    """A result saved before the subject reported CPU time renders "-", not an error."""
    rows = [{k: v for k, v in r.items() if k != "cpu_ms_per_message"} for r in RESULT["rows"]]
    assert "| 16 | 600 | 300 | 2.00x | - | - |" in report._throughput_section({**RESULT, "rows": rows})


def _peers_row(round_number: int, subject: str, cpu: float) -> dict[str, object]:
    return {"cell": "noop_c16", "round": round_number, "subject": subject, "cpu_ms_per_message": cpu, "deleted": 1}


def test_report_bare_section_gives_each_rounds_ratio_of_ours_to_the_bare_loop_and_their_median() -> None:
    """Three rounds: ours without the guard at 1.10, 1.30, 1.20 of the bare loop (median 1.20), with the guard at
    4.00 each; the goal beside them."""
    rows = []
    for n, (bare, ours) in enumerate(((0.5, 0.55), (0.4, 0.52), (0.5, 0.6))):
        rows += [_peers_row(n, "bare", bare), _peers_row(n, "ours-idempotent", ours), _peers_row(n, "ours", 4 * bare)]
    text = report._bare_section({"meta": RESULT["meta"], "rows": rows})
    assert "| ours, idempotent handler | 1.20 | 1.10, 1.30, 1.20 |" in text
    assert "| ours (DynamoDB guard) | 4.00 | 4.00, 4.00, 4.00 |" in text
    assert text.endswith("Goal (issue 26): ours without the guard at most 1.25 of the bare loop.")


def test_report_bare_section_without_a_peers_run_names_the_command() -> None:
    """No peers result yet: the section says how to get it."""
    assert report._bare_section(None) == "_Not measured yet: run `make peers`._"


def test_report_requests_table_shows_both_costs() -> None:
    """Requests per message, as sent and as billed, appear per concurrency for ours and the baseline."""
    rows = [{**r, "billed_requests_per_message": 1.2} if r["impl"] == "naive" else r for r in RESULT["rows"]]
    assert "| 1 | 0.200 | 0.200 | 1.100 | 1.200 |" in report._requests_section({**RESULT, "rows": rows})


def test_report_requests_table_without_billed_figures_shows_a_dash() -> None:
    """A result saved before the subject counted billed requests renders "-" in the billed columns."""
    rows = [{k: v for k, v in r.items() if k != "billed_requests_per_message"} for r in RESULT["rows"]]
    assert "| 1 | 0.200 | - | 1.100 | - |" in report._requests_section({**RESULT, "rows": rows})


def test_report_bodies_table_has_a_row_per_body_size() -> None:
    """Each body size reads ours' then the baseline's msg/s, requests and billed requests per message."""
    text = report._bodies_section(RESULT)
    assert text.startswith("Handler `noop`, concurrency 16:")
    assert "| 1 KiB | 500 | 0.200 | 0.200 | 500 | 0.200 | 0.200 |" in text
    assert "| 1 MiB | 50 | 0.250 | 16.250 | 50 | 0.250 | 16.250 |" in text


def test_report_bodies_table_without_body_runs_names_the_command() -> None:
    """A throughput result from before the body sizes were measured says how to get them."""
    result = {k: v for k, v in RESULT.items() if k != "bodies"}
    assert report._bodies_section(result) == "_Not measured yet: run `python -m bench throughput`._"


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


def _profile(rate: float, sdk: float, logging: float) -> dict:
    return {
        "meta": RESULT["meta"],
        "concurrency": 16,
        "messages_per_second": rate,
        "cpu_ms_per_message": 0.5,
        "samples": 2000,
        "categories": {"SDK call": sdk, "logging": logging},
        "self": [{"function": "JsonFormatter.format", "file": "consumer/runtime/observability.py", "share": logging}],
        "inclusive": [{"function": "HandlerRunner.run", "file": "consumer/runtime/processing.py", "share": 0.4}],
    }


def test_report_profile_section_sets_before_beside_after() -> None:
    """Each category reads its share before and after; both runs' rate and top functions are shown."""
    text = report._profile_section(_profile(800, 0.5, 0.15), _profile(2500, 0.7, 0.02))
    assert "| category | before | after |" in text
    assert "| SDK call | 50.0 % | 70.0 % |" in text
    assert "| logging | 15.0 % | 2.0 % |" in text
    assert "800 msg/s at concurrency 16, 0.50 CPU ms/msg, 2000 samples." in text
    assert "| `JsonFormatter.format` | `consumer/runtime/observability.py` | 2.0 % |" in text
    assert "Top functions by inclusive (anywhere on the stack), before:" in text


def test_report_profile_section_without_the_before_run_names_its_command() -> None:
    """Only the current profile: its tables, and the command that produces the before run."""
    text = report._profile_section(None, _profile(2500, 0.7, 0.02))
    assert "python -m bench profile --save-as before" in text
    assert "| category | after |" in text


def test_report_profile_section_with_neither_run_names_the_command() -> None:
    """No profile at all says how to get one."""
    assert report._profile_section(None, None) == "_Not measured yet: run `python -m bench profile`._"


def test_report_ablation_sets_each_switched_off_run_beside_ours_by_default() -> None:
    """ours at noop/16 ran 600 msg/s at 0.2 req/msg by default; with the lookahead off 400 at 0.35: one row of each."""
    off = {**_row("ours", 16, "noop", 400.0, 0.35, cpu=2.0), "variant": "no lookahead"}
    text = report._ablation_section({**RESULT, "ablation": [off]})
    assert "| no lookahead | noop | 16 | 600 | 400 | 0.200 | 0.350 | 1.50 | 2.00 |" in text


def test_report_latency_table_has_a_row_per_endpoint_and_the_ratio_on_the_runs_own() -> None:
    """ministack's rows (the run's endpoint) give the ratio; moto's rows show beside them, named."""
    rows = [
        {"endpoint": endpoint, "impl": impl, "samples": 120, "p50_ms": p50, "p90_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0}
        for endpoint, impl, p50 in (
            ("ministack", "ours", 50.0),
            ("ministack", "naive", 500.0),
            ("moto", "ours", 8.0),
            ("moto", "naive", 400.0),
        )
    ]
    text = report._latency_section({"meta": RESULT["meta"], "rows": rows})
    assert "| moto | ours | 120 | 8 | 1 | 2 | 3 |" in text
    assert "| ministack | naive | 120 | 500 | 1 | 2 | 3 |" in text
    assert "p50 ours / naive (ministack): 0.10x." in text
