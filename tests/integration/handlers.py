"""Handlers the runtime tests run, in-process and as `python -m consumer run` subprocesses.

Side effects go to the file named by SIDE_EFFECTS_FILE (one line per completed
effect), so a test can count them across process restarts.
"""

from __future__ import annotations

import json
import os
import time

from consumer import Message, PoisonMessage, worker


def record(message: Message) -> None:
    path = os.environ.get("SIDE_EFFECTS_FILE")
    if path:
        with open(path, "a") as out:
            out.write(
                json.dumps({"body": message.body, "pid": os.getpid(), "receive_count": message.receive_count}) + "\n"
            )


@worker(max_duration=5, concurrency=2, max_receive_count=3, retry_backoff_base=1, retry_backoff_max=1)
def slow(message: Message) -> None:
    """Sleeps for the seconds in the body (a number), then records its side effect."""
    time.sleep(float(message.body))
    record(message)


@worker(max_duration=5, concurrency=2, max_receive_count=3)
def poison_if_bad(message: Message) -> None:
    """Records good bodies; a body of "bad" is poison."""
    if message.body == "bad":
        raise PoisonMessage("body was 'bad'")
    record(message)


@worker(max_duration=5, concurrency=3, fifo=True, max_receive_count=3)
def ordered_slow(message: Message) -> None:
    """FIFO: sleeps 2 s, then records its side effect (3 slots: one receive can bring a group of 3)."""
    time.sleep(2)
    record(message)
