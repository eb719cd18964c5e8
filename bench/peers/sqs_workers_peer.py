"""sqs-workers, in its own virtualenv (``bench/peers/sqs-workers-requirements.txt``).

``python sqs_workers_peer.py KIND PROCESSES`` from this folder, with ``QUEUE_URL``, ``AWS_ENDPOINT_URL`` and the
subject's credentials in the environment. sqs-workers has no concurrency inside a process: ``process_queue`` receives
up to 10 messages (10 s long poll), runs the handler on each in turn and deletes the batch with one
``DeleteMessageBatch``. Its users scale by running more processes (its ``process_queues`` runs one process per
queue, forking after the ``SQSEnv`` is made), so concurrency N is N processes on the queue, forked here from one
parent after it made the ``SQSEnv`` and the queue, as ``process_queues`` does.

The queue is a ``RawQueue`` (messages another service sent, plain JSON bodies: no sqs-workers job attributes), with
the library's defaults otherwise (``SQSEnv()``: boto3's default session, standard retries, the default backoff).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from typing import Any

import work


def queue(kind: str) -> Any:
    from sqs_workers import RawQueue, SQSEnv

    sqs = SQSEnv()
    raw = sqs.queue("bench", RawQueue, queue_url=os.environ["QUEUE_URL"])

    @raw.raw_processor()
    def handle(message: Any) -> None:
        work.do(kind, json.loads(message.body)["n"] if work.RECORDING else None)

    return raw


def main() -> None:
    kind, processes = sys.argv[1], int(sys.argv[2])
    raw = queue(kind)
    if processes == 1:
        raw.process_queue()
        return
    children = [multiprocessing.get_context("fork").Process(target=raw.process_queue) for _ in range(processes)]
    for child in children:
        child.start()
    for child in children:
        child.join()


if __name__ == "__main__":
    main()
