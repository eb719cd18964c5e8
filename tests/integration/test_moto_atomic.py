"""consumer/local/moto_atomic.py: moto's SQS made atomic per call, as SQS is.

moto's receive checks a message's visibility and then marks it received; a receive on another thread between the
two takes the same message. The tests widen that gap (``Message.mark_received`` made slow) so the race happens
every time: unpatched, two concurrent receives both hold one message; patched, one does and the other's long poll
ends empty. A long poll takes the lock only while it looks, so a receive waiting never holds up another call; it
still gets a message sent while it waits, and waits its full time otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.sqs import models

from consumer.local import moto_atomic
from tests.integration.conftest import REGION

GAP_SECONDS = 0.2


@pytest.fixture
def slow_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Widen the gap between moto's visibility check and its mark: the race, made certain."""
    mark = models.Message.mark_received

    def slow(message: Any, visibility_timeout: int | None = None) -> None:
        time.sleep(GAP_SECONDS)
        mark(message, visibility_timeout=visibility_timeout)

    monkeypatch.setattr(models.Message, "mark_received", slow)


@pytest.fixture
def unpatched(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's SQS backend as moto ships it: the patch's wrappers undone for this test."""
    for name, method in list(vars(models.SQSBackend).items()):
        if hasattr(method, "__wrapped__"):
            monkeypatch.setattr(models.SQSBackend, name, method.__wrapped__)
    monkeypatch.delattr(models.SQSBackend, moto_atomic._MARK, raising=False)


@pytest.fixture
def queue() -> Iterator[tuple[Any, str]]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="atomic")["QueueUrl"]
        yield sqs, url


def receive_twice_at_once(sqs: Any, url: str) -> list[list[str]]:
    """Two long polls started together; the message ids each got."""
    got: list[list[str]] = [[], []]

    def receive(i: int) -> None:
        answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1, VisibilityTimeout=60)
        got[i] = [m["MessageId"] for m in answer.get("Messages", [])]

    threads = [threading.Thread(target=receive, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


def test_unpatched_moto_hands_one_message_to_two_receives_at_once(
    unpatched: None, slow_mark: None, queue: tuple[Any, str]
) -> None:
    """The race the patch removes, shown on moto as shipped (if moto ever fixes it, this test says so)."""
    sqs, url = queue
    sqs.send_message(QueueUrl=url, MessageBody="one")
    first, second = receive_twice_at_once(sqs, url)
    assert first == second and len(first) == 1


def test_patched_moto_hands_a_message_to_one_receive(slow_mark: None, queue: tuple[Any, str]) -> None:
    moto_atomic.serialize_moto_sqs()
    sqs, url = queue
    sent = sqs.send_message(QueueUrl=url, MessageBody="one")["MessageId"]
    got = receive_twice_at_once(sqs, url)
    assert sorted(got, key=len) == [[], [sent]]


def test_a_long_poll_holds_the_lock_only_while_it_looks(queue: tuple[Any, str]) -> None:
    """A long poll on an empty queue takes the lock only for its looks (moto's receive with no wait), not while it
    waits: sampled twenty times over a second of its wait, the lock is free nearly every time (a poll holding it
    through its waits, letting go only between them, leaves it free almost never); then a send wakes it."""
    moto_atomic.serialize_moto_sqs()
    sqs, url = queue
    got: list[str] = []

    def receive() -> None:
        answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)
        got.extend(m["Body"] for m in answer.get("Messages", []))

    poll = threading.Thread(target=receive)
    poll.start()
    time.sleep(0.3)
    free = 0
    for _ in range(20):
        if moto_atomic._LOCK.acquire(blocking=False):
            moto_atomic._LOCK.release()
            free += 1
        time.sleep(0.05)
    sqs.send_message(QueueUrl=url, MessageBody="woken")
    poll.join(timeout=15)
    assert free >= 15, free
    assert got == ["woken"]


def test_a_long_poll_on_an_empty_queue_waits_its_time(queue: tuple[Any, str]) -> None:
    moto_atomic.serialize_moto_sqs()
    sqs, url = queue
    started = time.monotonic()
    answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)
    assert "Messages" not in answer
    assert time.monotonic() - started >= 2
