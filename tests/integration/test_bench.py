"""The benchmark harness on moto's server: its counting is right and the headline cost holds; the async cells' code
path runs end to end.

Not a benchmark: no timing is asserted. What is asserted are request counts per
deleted message at saturation, which do not depend on the machine's speed, so each runs on the smallest load that
shows its ratio (a warm-up of half a second, windows of 2 s). The harness starts moto and each subject as processes
of their own, as a benchmark run does: these are the lab's own end-to-end runs (``pytest -m lab``; ``make bench``
runs them before it measures), not make test's, which never imports the lab.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.coroutines import harness as async_harness
from bench.coroutines import report as async_report
from bench.endpoint import local_endpoint
from bench.peers.harness import Settings
from bench.throughput import measure

pytestmark = pytest.mark.lab

#: Deep enough that every receive finds 10 visible messages, so only the consumer decides the batch size.
DEPTH = 150


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's server in a process of its own (as `--endpoint moto` runs it): the session's in-process
    server shares this interpreter with every other test's leftover threads, which slows it unevenly."""
    with local_endpoint("moto") as url:
        yield url


def test_bench_ours_at_saturation_costs_at_most_a_quarter_request_per_message(endpoint: str) -> None:
    """Concurrency 10 on a queue kept full: one receive of 10 and one delete batch per 10 messages (floor 0.2). Real:
    the harness's own count of the requests a `python -m consumer run` process makes to an endpoint process (the
    runtime's floor on the virtual clock is tests/sim/test_behaviour.py's)."""
    row = measure(endpoint, "ours", 10, 0.0, warmup=0.5, window=2.0, target_depth=DEPTH)
    assert row["deleted"] >= 20, row
    # 0.2 is the floor over a long run; a 2 s window can hold deletes of messages received before it.
    assert 0.1 < row["requests_per_message"] <= 0.25, row
    assert row["duplicate_starts"] == 0, row


def test_bench_naive_baseline_pays_a_delete_per_message(endpoint: str) -> None:
    """The baseline receives 10 and deletes each: at least 1.1 requests per message, so the comparison is real.

    Counted over the whole run, not the 2 s window: a window can open between a receive and its
    deletes, which leaves the window's ratio a little under 1.1 (CI once saw 74/68 = 1.088).
    Over the whole run the bound holds by construction: one DeleteMessage per deleted message,
    and at least one ReceiveMessage per 10 of them. Real: the baseline's process, counted by the harness."""
    row = measure(endpoint, "naive", 1, 0.0, warmup=0.5, window=2.0, target_depth=DEPTH)
    deleted, calls = row["total_deleted"], row["total_requests_by_operation"]
    assert deleted >= 10, row
    assert calls.get("DeleteMessage") == deleted, row
    assert calls.get("DeleteMessageBatch", 0) == 0, row
    assert 10 * calls.get("ReceiveMessage", 0) >= deleted, row
    assert 10 * sum(calls.values()) >= 11 * deleted, row


@pytest.fixture(scope="module")
def counting_endpoint() -> Iterator[str]:
    """moto's server behind the request counter (bench/counting_endpoint.py), as ministack runs behind it in a run."""
    with local_endpoint("moto", counting=True) as url:
        yield url


def test_bench_async_measures_threads_and_coroutines_with_and_without_the_guard(counting_endpoint: str) -> None:
    """``python -m bench async``'s code path, tiny (one round, short windows, a shallow queue): the threaded and the
    coroutine cells each run as ``python -m consumer run``, with and without the DynamoDB guard, every figure the
    section shows is there, and each holds by construction: a thread per slot against coroutines on one loop, and
    DynamoDB requests only under the guard. No speed is asserted. Real: four `python -m consumer run` processes
    (their threads and memory are what the section reports), started and measured as the benchmark does."""
    settings = Settings(rounds=1, warmup=0.5, window=2.0, feed_depth=40, steady=4.0)
    result = async_harness.run(
        counting_endpoint, settings=settings, shapes=("thread_c256", "async_c256"), progress=lambda _: None
    )
    rows = {(r["cell"], r["guard"]): r for r in result["rows"]}
    assert set(rows) == {(s, g) for s in ("thread_c256", "async_c256") for g in ("idempotent", "dynamodb")}
    for (_, guard), row in rows.items():
        assert "error" not in row, row
        assert row["deleted"] > 0 and row["ideal"] == pytest.approx(256 / 0.2), row
        assert row["tree_processes"] == 1 and row["tree_peak_rss_mib"] >= row["tree_pss_mib"] > 0, row
        assert row["tree_threads_max"] >= row["tree_threads"] > 0, row
        assert 0 < row["steady_after_seconds"] < 10 and row["held_at_end"] >= 0, row
        assert (row["dynamodb_requests_per_message"] > 0) == (guard == "dynamodb"), row
    for guard in ("idempotent", "dynamodb"):
        # 256 handler threads, or the loop's executor (at most 32), the pollers and the runtime's own few.
        assert rows[("thread_c256", guard)]["tree_threads_max"] > 256
        assert rows[("async_c256", guard)]["tree_threads_max"] < 64
    meta = {"date": "2026-11-28", "commit": "abc1234", "endpoint": "moto", "cpus": 2, "python": "3.11"}
    text = async_report.section({"meta": meta, **result})
    assert text.count("| `async def`, 256 coroutines | 1,280 |") == 2, text
