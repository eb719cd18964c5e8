"""The minimal threaded loop, the second yardstick: ``python -m bench.peers.minimal KIND CONCURRENCY``.

What a team writes in an afternoon when one thread is not enough: ``RECEIVERS`` (4) receiver threads, a thread pool
of CONCURRENCY handlers, one boto3 client (default configuration but ``max_pool_connections`` sized for every
thread that may call it at once), and batched deletes. A receiver takes as many free handler slots as it can (1 to
10, waiting for the first), receives that many (20 s long poll), gives the slots back that came back empty and hands
each message to the pool; a finished handler puts its message on the delete list and the thread whose message fills
a batch of 10 deletes it with one ``DeleteMessageBatch`` (a flusher thread sends what is left every 0.5 s). No
heartbeat, no idempotency, no logging, no shutdown handling: SIGTERM ends it (what it held comes back after the
queue's visibility timeout). ``QUEUE_URL``; the endpoint from ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from botocore.config import Config

from bench.peers import work

RECEIVERS = 4
BATCH = 10
FLUSH_SECONDS = 0.5


class Loop:
    def __init__(self, kind: str, concurrency: int, queue_url: str) -> None:
        self.kind, self.queue_url = kind, queue_url
        # Every receiver, every handler thread (its delete) and the flusher may call at once.
        self.sqs = boto3.client("sqs", config=Config(max_pool_connections=concurrency + RECEIVERS + 1))
        self.pool = ThreadPoolExecutor(concurrency)
        self.slots = threading.BoundedSemaphore(concurrency)
        self.done: list[str] = []  # receipt handles of finished messages
        self.lock = threading.Lock()

    def receive(self) -> None:
        while True:
            self.slots.acquire()
            taken = 1
            while taken < BATCH and self.slots.acquire(blocking=False):
                taken += 1
            try:
                messages = self.sqs.receive_message(
                    QueueUrl=self.queue_url, MaxNumberOfMessages=taken, WaitTimeSeconds=20
                ).get("Messages", [])
            except Exception as error:  # noqa: BLE001 (an endpoint hiccup: give the slots back, try again)
                print(f"receive failed: {error}", file=sys.stderr)
                messages = []
                time.sleep(1)
            for _ in range(taken - len(messages)):
                self.slots.release()
            for message in messages:
                self.pool.submit(self.handle, message)

    def handle(self, message: Any) -> None:
        try:
            work.do(self.kind, json.loads(message["Body"])["n"] if work.RECORDING else None)
        except Exception as error:  # noqa: BLE001 (leave the message for another attempt)
            print(f"handler failed: {error}", file=sys.stderr)
            self.slots.release()
            return
        self.slots.release()
        with self.lock:
            self.done.append(message["ReceiptHandle"])
            batch = self.take() if len(self.done) >= BATCH else []
        self.delete(batch)

    def take(self) -> list[str]:
        batch, self.done = self.done[:BATCH], self.done[BATCH:]
        return batch

    def delete(self, batch: list[str]) -> None:
        if batch:
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(batch)],
            )

    def flush(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            with self.lock:
                batch = self.take()
            self.delete(batch)

    def run(self) -> None:
        threads = [threading.Thread(target=self.receive, daemon=True) for _ in range(RECEIVERS)]
        threads.append(threading.Thread(target=self.flush, daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


if __name__ == "__main__":
    Loop(sys.argv[1], int(sys.argv[2]), os.environ["QUEUE_URL"]).run()
