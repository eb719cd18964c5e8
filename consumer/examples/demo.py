"""The notifications handler under a demo-sized declaration, for the local demo (``make run``).

Same code as :mod:`consumer.examples.notifications` (schema check, then one
webhook call), declared so that every path of the worker contract shows up in
about a minute: a 10 s lease that the heartbeat keeps alive for slower
deliveries, three receives before the DLQ and 1-4 s retry backoffs. The
``demo`` environment in ``cdk.json`` deploys it, so the local stack is built
from the same template a sandbox account would get.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from consumer import Message, worker
from consumer.examples import notifications

#: The demo-sized declaration, with the example's start-up check and samples (the chaos suite's FIFO corpus reuses
#: it with ``fifo=True``).
DECLARATION: dict[str, Any] = {
    "max_duration": timedelta(seconds=30),
    "concurrency": 8,
    "max_lease": timedelta(seconds=10),
    "max_receive_count": 3,
    "retry_backoff_base": timedelta(seconds=1),
    "retry_backoff_max": timedelta(seconds=4),
    "acceptable_latency": timedelta(seconds=30),
    "average_duration": timedelta(seconds=1),
    "setup": notifications.delivery_target,
    "samples": notifications.SAMPLES,
}


@worker(**DECLARATION)
def handle(message: Message) -> None:
    """Validate one notification event and hand it to the webhook (see ``notifications.handle``)."""
    notifications.handle(message)
