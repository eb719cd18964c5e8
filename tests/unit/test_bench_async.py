"""``python -m bench async``'s pure parts: its handlers' declarations, the arithmetic over rounds (medians, each
round's ratio to the threaded cell) and the section's rendering of a small result. No endpoint, no subprocess."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from bench import report
from bench.coroutines import handlers
from bench.coroutines import report as async_report
from bench.coroutines.harness import head
from consumer.declaration import contract_of


@pytest.mark.parametrize("shape", sorted(handlers.SHAPES))
@pytest.mark.parametrize("idempotent", [False, True])
def test_each_cell_has_a_handler_of_its_shape_concurrency_and_guard(shape: str, idempotent: bool) -> None:
    """A def or an async def as the cell says, its concurrency declared, the guard on unless idempotent."""
    asynchronous, concurrency = handlers.SHAPES[shape]
    handler = getattr(handlers, handlers.name(shape, idempotent=idempotent))
    contract = contract_of(handler)
    assert inspect.iscoroutinefunction(handler) is asynchronous is contract.asynchronous
    assert (contract.concurrency, contract.idempotent) == (concurrency, idempotent)


def test_the_handlers_wait_200_ms_as_the_peers_io200_does() -> None:
    assert handlers.SECONDS == 0.2
    assert head("async_c1024", "dynamodb", 2) == {
        "cell": "async_c1024",
        "handler": "async def",
        "concurrency": 1024,
        "guard": "dynamodb",
        "round": 2,
        "ideal": pytest.approx(5120),
    }


def _row(shape: str, guard: str, round_number: int, rate: float, cpu: float, **extra: Any) -> dict[str, Any]:
    return {
        **head(shape, guard, round_number),
        "deleted": int(rate * 8),
        "received": int(rate * 8),
        "seconds": 8.0,
        "cpu_seconds": rate * 8 * cpu / 1000,
        "messages_per_second": rate,
        "cpu_ms_per_message": cpu,
        "sqs_requests_per_message": 0.2,
        "dynamodb_requests_per_message": 1.1 if guard == "dynamodb" else 0.0,
        "tree_threads_max": 263 if shape == "thread_c256" else 40,
        "tree_threads": 263 if shape == "thread_c256" else 40,
        "tree_peak_rss_mib": 60.0,
        "tree_pss_mib": 50.0,
        "machine_busy": 0.9,
        "held_at_end": 300 if shape == "thread_c256" else 1100,
        "load": 3.0,
        **extra,
    }


ROWS = [
    _row("thread_c256", "idempotent", 0, 1000, 0.70),
    _row("async_c256", "idempotent", 0, 1100, 0.70),
    _row("async_c1024", "idempotent", 0, 1200, 0.80),
    _row("thread_c256", "idempotent", 1, 800, 0.80),
    _row("async_c256", "idempotent", 1, 1000, 0.60),
    _row("async_c1024", "idempotent", 1, 400, 2.40, feed_starved=0.5, received=4800),
    _row("thread_c256", "idempotent", 2, 900, 0.75),
    _row("async_c256", "idempotent", 2, 900, 0.75),
    _row("async_c1024", "idempotent", 2, 0, 0.0, deleted=0),
]


def test_round_ratio_compares_with_the_threaded_cell_of_the_same_round_and_guard() -> None:
    ratio = async_report.round_ratio(ROWS, 1, "async_c256", "idempotent", "messages_per_second")
    assert ratio == pytest.approx(1.25)
    assert async_report.round_ratios(ROWS, "async_c256", "idempotent", "cpu_ms_per_message") == pytest.approx(
        [1.0, 0.75, 1.0]
    )
    # A round that deleted nothing is no figure; neither is a guard that never ran.
    assert async_report.round_ratios(ROWS, "async_c1024", "idempotent", "messages_per_second") == pytest.approx(
        [1.2, 0.5]
    )
    assert async_report.round_ratio(ROWS, 0, "async_c256", "dynamodb", "messages_per_second") is None


def test_medians_are_over_the_rounds_measured_with_the_ideal_share_and_the_cores_used() -> None:
    figures = async_report.medians(ROWS, "async_c1024", "idempotent")
    assert figures is not None
    assert figures["rounds"] == 2 and figures["messages_per_second"] == pytest.approx(800)
    assert figures["ideal"] == pytest.approx(5120) and figures["of_ideal"] == pytest.approx(800 / 5120)
    assert figures["messages_per_second_ratio"] == pytest.approx(0.85)
    assert figures["cores"] == pytest.approx((1200 * 0.8 + 400 * 2.4) / 2 / 1000)
    assert figures["starved"] == 0.5 and figures["received_per_deleted"] == pytest.approx(1.25)
    assert async_report.medians(ROWS, "async_c256", "dynamodb") is None


def _result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "meta": {"date": "2026-11-28", "commit": "abc1234", "endpoint": "ministack", "cpus": 2, "python": "3.11.7"},
        "settings": {
            "rounds": 3,
            "warmup_seconds": 3,
            "steady_seconds": 60,
            "window_seconds": 8,
            "shapes": ["thread_c256", "async_c256", "async_c1024"],
            "guards": ["idempotent", "dynamodb"],
        },
        "rows": rows,
    }


def test_section_shows_medians_with_each_round_ratios_threads_memory_and_notes() -> None:
    failed = {**head("async_c256", "dynamodb", 0), "error": "RuntimeError: the subject deleted nothing"}
    text = async_report.section(_result([*ROWS, _row("thread_c256", "dynamodb", 0, 200, 4.0), failed]))
    assert "| `def`, 256 threads | 1,280 | 900 (1,000 / 800 / 900) | 70 % (78 / 62 / 70) | 1 |" in text
    assert "| `async def`, 256 coroutines | 1,280 | 1,000 (1,100 / 1,000 / 900) | 78 % (86 / 78 / 70) |" in text
    assert "| 1.10 (1.10 / 1.25 / 1.00) | 0.70 (0.70 / 0.60 / 0.75) | 1.00 |" in text
    # Threads, memory, what it held (and for how long, by Little's law), requests and the machine, per guard.
    assert "| `def`, 256 threads | none | 263 | 60 | 300 | 0.33 | 0.200 | 0.000 | 90 % |" in text
    assert "| `def`, 256 threads | DynamoDB | 263 | 60 | 300 | 1.50 | 0.200 | 1.100 | 90 % |" in text
    assert "3 s warm-up then up to 60 s more until steady, 8 s counted" in text
    assert "nearly empty at up to 50 %" in text
    assert "received 1.25 messages per message deleted" in text
    assert "1 measurement(s) failed: RuntimeError: the subject deleted nothing" in text
    assert text.count("**With ") == 2 and text.count("**What each process held") == 1


def test_section_without_a_run_names_the_command_and_fills_its_placeholder() -> None:
    assert async_report.section(None) == "_Not measured yet: run `python -m bench async`._"
    assert "{{async}}" in report.TEMPLATE.read_text()
    assert "async" in report.sections()
