"""Dramatiq with dramatiq-sqs, in its own virtualenv (``bench/peers/dramatiq-requirements.txt``).

Worker: ``dramatiq dramatiq_peer --processes P --threads T`` from this folder (``PYTHONPATH`` = this folder), with
``QUEUE_NAME`` (the SQS queue's name: dramatiq-sqs finds its queue by name), ``AWS_ENDPOINT_URL`` and the subject's
credentials in the environment. Everything else is dramatiq's and dramatiq-sqs's default: the broker's default
middleware (age and time limits, retries...), a 20 s long poll, and the broker's ``visibility_timeout`` of 12 hours,
which dramatiq-sqs sets on every receive (so a message a killed worker held comes back 12 hours later).

Concurrency N runs ``ceil(N / 8)`` processes of 8 threads (dramatiq's default thread count): dramatiq-sqs holds at
most 10 messages per process (its prefetch is capped at SQS's batch of 10, ``MAX_PREFETCH``), so one process of N
threads would never run more than 10 handlers at once; more processes is how dramatiq scales past that.

Actors: one per kind of :mod:`work`, named as the kind, taking the message's key ``n``.
Bodies: ``python dramatiq_peer.py bodies KIND COUNT [FIRST]`` prints COUNT message bodies, one JSON string a line,
encoded as dramatiq-sqs's ``enqueue`` encodes a message (``b64encode(message.encode())``).
"""

from __future__ import annotations

import json
import os
import sys
from base64 import b64encode

import dramatiq
import work
from dramatiq_sqs import SQSBroker

QUEUE = os.environ.get("QUEUE_NAME", "bench")

broker = SQSBroker()  # boto3 reads the endpoint (AWS_ENDPOINT_URL), region and credentials from the environment
dramatiq.set_broker(broker)


def _actor(kind: str) -> None:
    def run(n: int) -> None:
        work.do(kind, n)

    run.__name__ = kind
    dramatiq.actor(run, actor_name=kind, queue_name=QUEUE)


for _kind in work.SECONDS:
    _actor(_kind)


def bodies(kind: str, count: int, first: int = 0) -> list[str]:
    """``count`` SQS message bodies for actor ``kind`` with keys ``first``..., as dramatiq-sqs enqueues them."""
    actor = broker.get_actor(kind)
    return [b64encode(actor.message(n).encode()).decode() for n in range(first, first + count)]


if __name__ == "__main__":
    if sys.argv[1:2] == ["bodies"]:
        for body in bodies(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0):
            print(json.dumps(body))
