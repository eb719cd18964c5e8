"""DownstreamUnavailable's timing: the runtime's circuit, driven through an outage and a blip, against the alarm's rule.

The alarm counts ``circuit_opens`` per :func:`infra.metrics.circuit_period_seconds` and pages on opens in
:data:`infra.queue_alarms.DOWNSTREAM_EVALUATION_PERIODS` periods in a row (tests/infra/test_oncall.py asserts the
synthesized rule); CloudWatch evaluates nothing locally, so the rule is checked here as data.
"""

from __future__ import annotations

import io

import pytest

from consumer.contract import WorkerContract
from consumer.limits import SQS_MAX_VISIBILITY_SECONDS, SQS_MAX_WAIT_SECONDS
from consumer.runtime.circuit import PROBE, Circuit
from consumer.runtime.heartbeat import METRICS_FLUSH_SECONDS as RUNTIME_FLUSH_SECONDS
from consumer.runtime.observability import Metrics
from consumer.runtime.polling import TICK_SECONDS
from infra.metrics import METRICS_FLUSH_SECONDS, METRICS_FLUSH_SLACK_SECONDS, circuit_period_seconds
from infra.queue_alarms import DOWNSTREAM_EVALUATION_PERIODS

#: The worst flush delays an open's datapoint can get, alternated so consecutive opens land as far apart as possible.
FLUSH_DELAYS = (0.0, METRICS_FLUSH_SECONDS + METRICS_FLUSH_SLACK_SECONDS)
CONTRACTS = {
    "default": WorkerContract(max_duration_seconds=90),
    "short handler": WorkerContract(max_duration_seconds=5),
    "long handler": WorkerContract(max_duration_seconds=900, source_retention_seconds=4 * 86_400),
    "small cap": WorkerContract(max_duration_seconds=30, retry_backoff_base_seconds=1, retry_backoff_max_seconds=8),
}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def outage_opens(contract: WorkerContract, start: float, end: float, retry_after: float | None) -> list[float]:
    """When one process's circuit opens while the downstream is down from ``start`` to ``end``, at the slowest: each
    probe is received after a full long poll and its handler runs ``max_duration`` before raising again."""
    clock = Clock(start)
    circuit = Circuit(contract, metrics=Metrics(stream=io.StringIO()), clock=clock)
    opens, probe = [], 0
    while clock.now < end:
        opens.append(clock.now)
        clock.now += circuit.open(retry_after, f"m{probe}")
        assert circuit.receive_limit() == PROBE
        probe += 1
        circuit.probing([f"m{probe}"])
        clock.now += SQS_MAX_WAIT_SECONDS + contract.max_duration_seconds
    return opens


def pages(stamps: list[float], period: int) -> bool:
    """CloudWatch's rule: Sum >= 1 in DOWNSTREAM_EVALUATION_PERIODS consecutive periods (a period without data is
    missing, not breaching)."""
    with_data = {int(stamp // period) for stamp in stamps}
    return any(all(p + k in with_data for k in range(DOWNSTREAM_EVALUATION_PERIODS)) for p in with_data)


def stamped(opens: list[float]) -> list[float]:
    return [t + FLUSH_DELAYS[i % 2] for i, t in enumerate(opens)]


@pytest.mark.parametrize("name", sorted(CONTRACTS))
@pytest.mark.parametrize("retry_after", [None, 3_600.0])
def test_circuit_period_holds_an_open_in_every_period_of_an_outage(name: str, retry_after: float | None) -> None:
    """At the slowest re-opens and the worst flush delays, an outage lasting the alarm's periods pages, whatever its
    start within a period: no period of it is empty, so the alarm neither misses nor flaps."""
    contract = CONTRACTS[name]
    period = circuit_period_seconds(contract)
    assert period >= contract.retry_backoff_max_seconds and period % 60 == 0
    for start in range(0, period, 13):
        stamps = stamped(outage_opens(contract, start, start + DOWNSTREAM_EVALUATION_PERIODS * period, retry_after))
        periods = {int(s // period) for s in stamps}
        assert periods == set(range(min(periods), max(periods) + 1)), (name, start)
        assert pages(stamps, period), (name, start)


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_circuit_blip_does_not_page(name: str) -> None:
    """A blip opens each of 20 tasks' circuits once, within seconds, the probes close them: with any flush delays and
    any start, its datapoints fill at most two periods in a row, never three."""
    period = circuit_period_seconds(CONTRACTS[name])
    for start in range(0, period, 7):
        for late in range(21):
            # Tasks opening over 5 s; the first `late` of them flushed as late as a flush can be.
            stamps = [start + task / 4 + FLUSH_DELAYS[task < late] for task in range(20)]
            assert not pages(stamps, period), (name, start, late)


def test_circuit_period_is_the_longest_gap_between_opens_rounded_to_a_minute() -> None:
    """300 s cap + 20 s long poll + 90 s handler + 61 s flush = 471 s, rounded up to 480 s."""
    assert circuit_period_seconds(WorkerContract(max_duration_seconds=90)) == 480
    assert circuit_period_seconds(WorkerContract(max_duration_seconds=99)) == 480
    assert circuit_period_seconds(WorkerContract(max_duration_seconds=100)) == 540


def test_circuit_period_fits_cloudwatchs_evaluation_range_at_the_contracts_bounds() -> None:
    """Period x periods is at most 1 day under an hour's period and 7 days from there (PutMetricAlarm), up to the
    longest handler and backoff cap a contract accepts."""
    longest = WorkerContract(
        max_duration_seconds=SQS_MAX_VISIBILITY_SECONDS - 300,
        retry_backoff_max_seconds=SQS_MAX_VISIBILITY_SECONDS,
        source_retention_seconds=12 * 86_400,
        dlq_retention_seconds=14 * 86_400,
        max_receive_count=2,
    )
    for contract in [*CONTRACTS.values(), longest]:
        period = circuit_period_seconds(contract)
        limit = 86_400 if period < 3_600 else 604_800
        assert DOWNSTREAM_EVALUATION_PERIODS * period <= limit, contract


def test_metrics_flush_matches_the_runtimes() -> None:
    """The alarm's flush allowance is the runtime's flush interval, and the slack covers the heartbeat's tick."""
    assert METRICS_FLUSH_SECONDS == RUNTIME_FLUSH_SECONDS
    assert TICK_SECONDS <= METRICS_FLUSH_SLACK_SECONDS
