"""Celery on its SQS transport (kombu), in its own virtualenv (``bench/peers/celery-requirements.txt``).

Worker: ``celery -A celery_peer worker --concurrency N`` from this folder (``PYTHONPATH`` = this folder), with
``QUEUE_URL``, ``AWS_ENDPOINT_URL`` and the subject's credentials in the environment; ``CELERY_SETTING`` picks:

- ``default``: the SQS setup the Celery docs show ("Using Amazon SQS"): broker ``sqs://`` with the credentials, the
  region and the queue as a predefined queue (the endpoint's host and port in the URL, ``is_secure`` off, because
  it is local), and every other setting left alone: the prefork pool (N child processes), prefetch multiplier 4,
  early acknowledgement (the message is deleted when a child accepts the task, before it runs), kombu's 10 s
  long poll and 1 s polling interval.
- ``tuned``: what an experienced user sets for SQS workers: ``task_acks_late`` (delete after the task ran, so a
  killed worker does not lose what it held) with ``worker_prefetch_multiplier = 1`` (the pair the Celery docs
  recommend for long tasks: reserve only what runs), the ``threads`` pool (N threads in one process: handlers that
  wait on I/O do not need N processes), ``wait_time_seconds`` 20 (SQS's longest poll: fewer empty receives),
  ``polling_interval`` 0 (no pause after an empty receive on top of the long poll) and no gossip, mingle or
  heartbeat (worker-to-worker broadcasts SQS cannot carry; the Celery docs' SQS page says so).

Tasks: one per kind of :mod:`work`, named ``bench.<kind>``, taking the message's key ``n``.
Bodies: ``python celery_peer.py bodies KIND COUNT [FIRST]`` prints COUNT message bodies, one JSON string a line,
made by Celery's own producer (``send_task`` on kombu's in-memory transport) and wrapped as kombu's SQS channel
wraps a message it sends (``AsyncMessage().encode(dumps(message))``): exactly what ``send_task`` would put on SQS.
"""

from __future__ import annotations

import json
import os
import sys
from urllib.parse import quote, urlsplit

import work
from celery import Celery

QUEUE = "bench"
SETTING = os.environ.get("CELERY_SETTING", "default")

app = Celery("bench")


def _configure() -> None:
    endpoint = urlsplit(os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"))
    key = quote(os.environ.get("AWS_ACCESS_KEY_ID", ""), safe="")
    secret = quote(os.environ.get("AWS_SECRET_ACCESS_KEY", ""), safe="")
    transport: dict[str, object] = {
        "region": os.environ.get("AWS_DEFAULT_REGION", "eu-west-1"),
        "is_secure": False,
        "predefined_queues": {QUEUE: {"url": os.environ.get("QUEUE_URL", "")}},
    }
    app.conf.update(
        broker_url=f"sqs://{key}:{secret}@{endpoint.hostname}:{endpoint.port}",
        broker_transport_options=transport,
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
    )
    if SETTING == "tuned":
        transport.update(wait_time_seconds=20, polling_interval=0)
        app.conf.update(
            task_acks_late=True,
            worker_prefetch_multiplier=1,
            worker_pool="threads",
            worker_enable_remote_control=False,
            worker_send_task_events=False,
        )
    elif SETTING != "default":
        raise SystemExit(f"CELERY_SETTING must be default or tuned: {SETTING!r}")


_configure()


def _task(kind: str) -> None:
    def run(n: int) -> None:
        work.do(kind, n)

    run.__name__ = kind
    app.task(name=f"bench.{kind}")(run)


for _kind in work.SECONDS:
    _task(_kind)


def bodies(kind: str, count: int, first: int = 0) -> list[str]:
    """``count`` SQS message bodies for task ``bench.<kind>`` with keys ``first``..., as Celery's producer sends."""
    from kombu.asynchronous.aws.sqs.message import AsyncMessage
    from kombu.utils.json import dumps

    producer_app = Celery("bench", broker="memory://")
    producer_app.conf.task_default_queue = QUEUE
    out = []
    with producer_app.connection() as connection:
        channel = connection.default_channel
        for n in range(first, first + count):
            producer_app.send_task(f"bench.{kind}", args=(n,), connection=connection)
            message = channel._get(QUEUE)  # the dict kombu's SQS channel would have been handed (Channel._put)
            out.append(AsyncMessage().encode(dumps(message)))
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["bodies"]:
        for body in bodies(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0):
            print(json.dumps(body))
