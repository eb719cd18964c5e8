"""Handlers used only by infra tests to synthesize contract variants."""

from datetime import timedelta

from consumer import worker


@worker(max_duration=timedelta(minutes=5), concurrency=4, max_receive_count=3)
def five_minutes(message):  # noqa: ANN001, ANN201
    """A 5 min handler: visibility 330 s, three receives."""


@worker(max_duration=timedelta(hours=2), concurrency=2)
def two_hours(message):  # noqa: ANN001, ANN201
    """A 2 h handler: the queue gets the 900 s heartbeat lease."""


@worker(max_duration=30, fifo=True, content_based_deduplication=True)
def ordered(message):  # noqa: ANN001, ANN201
    """A FIFO handler."""


@worker(max_duration=timedelta(minutes=5), concurrency=4, max_receive_count=3, fair_queue=True)
def tenants(message):  # noqa: ANN001, ANN201
    """five_minutes on a fair queue: each tenant's MessageGroupId is a message group SQS keeps fair."""


@worker(max_duration=30, concurrency=8, idempotent=True)
def upserts(message):  # noqa: ANN001, ANN201
    """A handler idempotent by itself (an upsert keyed by the message): no guard, so no table and no DynamoDB grant."""


@worker(max_duration=60, concurrency=16, max_batch=10)
def wide_batch(messages):  # noqa: ANN001, ANN201
    """A batch handler, 16 calls at a time: on Lambda each invocation is one call, so MaximumConcurrency is
    max_tasks x 16."""


@worker(max_duration=120, concurrency=10, max_receive_count=100)
def many_receives(message):  # noqa: ANN001, ANN201
    """100 receives of a 2 min handler: its Lambda retry horizon (six times the function timeout a receive) passes a
    day, its container's does not."""


@worker(max_duration=60, concurrency=4, max_batch=50, batch_window=5)
def windowed_batch(messages):  # noqa: ANN001, ANN201
    """A batch handler of up to 50 messages collected for 5 s: on Lambda, BatchSize 50 and a 5 s batching window."""
