"""The benchmark harness on moto's server: its counting is right and the headline cost holds.

Not a benchmark: no timing is asserted. What is asserted are request counts per
deleted message at saturation, which do not depend on the machine's speed.
"""

from __future__ import annotations

import pytest

from bench.throughput import measure

pytestmark = pytest.mark.usefixtures("moto_server")


def test_bench_ours_at_saturation_costs_at_most_a_quarter_request_per_message(moto_server: str) -> None:
    """Concurrency 10 on a queue kept full: one receive of 10 and one delete batch per 10 messages (floor 0.2)."""
    row = measure(moto_server, "ours", 10, 0.0, warmup=1.0, window=3.0, target_depth=40)
    assert row["deleted"] >= 20
    assert 0.2 <= row["requests_per_message"] <= 0.25
    assert row["duplicate_starts"] == 0


def test_bench_naive_baseline_pays_a_delete_per_message(moto_server: str) -> None:
    """The baseline receives 10 and deletes each: at least 1.1 requests per message, so the comparison is real."""
    row = measure(moto_server, "naive", 1, 0.0, warmup=1.0, window=3.0, target_depth=40)
    assert row["deleted"] >= 10
    assert row["requests_per_message"] >= 1.09
