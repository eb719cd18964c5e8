"""The DLQ tool's run start on SQS's clock, without a network: the answers of a scripted ``read``."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.ops import passes as dlq_pass


def answers(*dates: str | None) -> tuple[list[int], Any]:
    """A ``read`` returning these Date headers in turn (the last one repeats); and the list of its calls."""
    calls: list[int] = []

    def read() -> dict[str, Any]:
        calls.append(len(calls))
        date = dates[min(len(calls) - 1, len(dates) - 1)]
        headers = {"date": date} if date else {}
        return {"ResponseMetadata": {"HTTPHeaders": headers}, "Attributes": {"n": str(len(calls))}}

    return calls, read


class StepClock:
    """The part of :class:`consumer.runtime.clock.Clock` the start reads: a sleep only moves the clock on, so the
    polls take no real time; ``time()`` starts at ``wall``."""

    def __init__(self, wall: float = 1_000.5) -> None:
        self.now, self.wall = 0.0, wall

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_start_on_sqs_clock_is_the_moment_sqs_clock_turns_to_the_next_second() -> None:
    """SQS's Date header has whole seconds: the start is the first new second seen, with that answer."""
    calls, read = answers(
        "Mon, 23 Nov 2026 10:00:00 GMT", "Mon, 23 Nov 2026 10:00:00 GMT", "Mon, 23 Nov 2026 10:00:01 GMT"
    )

    start, response = dlq_pass.start_on_sqs_clock(read, StepClock())

    assert (start.sqs_ms, start.from_sqs) == (1_795_428_001_000, True)
    assert (len(calls), response["Attributes"]) == (3, {"n": "3"})


def test_start_on_sqs_clock_without_a_date_header_uses_this_machines_clock() -> None:
    """An endpoint that sends no Date header: one call, this machine's time, and the start says so."""
    calls, read = answers(None)

    start, _ = dlq_pass.start_on_sqs_clock(read, StepClock(wall=1_000.5))

    assert (start.sqs_ms, start.from_sqs, len(calls)) == (1_000_500, False, 1)


def test_start_on_sqs_clock_that_never_turns_takes_the_next_second() -> None:
    """A Date that does not change within the wait (a caching proxy) gives the second after it, not a hang."""
    _, read = answers("Mon, 23 Nov 2026 10:00:00 GMT")

    start, _ = dlq_pass.start_on_sqs_clock(read, StepClock())

    assert start.sqs_ms == 1_795_428_001_000


@pytest.mark.parametrize(("sent", "arrived"), [("1795428000999", False), ("1795428001000", True), (None, False)])
def test_run_start_counts_a_message_as_arrived_from_the_start_millisecond_on(sent: str | None, arrived: bool) -> None:
    """SentTimestamp at or after the start is an arrival; one before it, or none at all, was there."""
    start = dlq_pass.RunStart(sqs_ms=1_795_428_001_000, monotonic=0.0)
    message = {"Attributes": {"SentTimestamp": sent} if sent else {}}

    assert start.arrived_after(message) is arrived


def test_a_lease_is_timed_on_the_clock_it_is_given() -> None:
    """A held message's lease is extended before a step only once, on the lease's own clock, less than STEP_SECONDS
    of it is left: not with the whole visibility left, and at once when that clock has moved (here without a real
    second passing). On moto in process."""
    import boto3
    from moto import mock_aws

    clock = StepClock()
    visibility = dlq_pass.STEP_SECONDS + 30
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="held")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="x")
        extensions: list[str] = []
        sqs.meta.events.register(
            "before-call.sqs.ChangeMessageVisibilityBatch", lambda **_: extensions.append("extended")
        )
        with dlq_pass.Lease(sqs, url, visibility=visibility, clock=clock) as lease:
            (message,) = lease.receive(10) or []
            with lease.step([message]):
                pass
            assert extensions == []
            clock.sleep(31)
            with lease.step([message]):
                pass
            assert extensions == ["extended"]
