"""What the DLQ tool's tests share: the CLI run in-process against moto's server, and DLQ helpers.

A test module takes the fixtures by naming them at module level (``cli = dlq_support.cli``),
which is how pytest finds fixtures defined in another module.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner, Result

from consumer.contract import WorkerContract
from consumer.message import Message
from consumer.ops import commands as dlq
from consumer.runtime.dead_letter import send_parameters
from tests.integration.conftest import REGION, QueuePair

CONTRACT = WorkerContract(max_duration_seconds=5)
FIFO_CONTRACT = WorkerContract(max_duration_seconds=5, fifo=True)
ATTRIBUTES = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffbin"},
}


@pytest.fixture
def server_sqs(moto_server: str) -> Any:
    """A boto3 SQS client on moto's server, for arranging and checking."""
    return boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)


@pytest.fixture
def cli(moto_server: str) -> Callable[..., Result]:
    """Run ``python -m consumer <args>`` in-process with AWS_ENDPOINT_URL pointing at moto's server."""
    from consumer.cli import app

    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, endpoint: str = moto_server) -> Result:
        env = {"AWS_ENDPOINT_URL": endpoint, "COLUMNS": "250", "QUEUE_URL": None, "DLQ_URL": None}
        return runner.invoke(app, list(args), input=input, env=env)

    return invoke


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the test process instead of ending it.

    The command under test installs its own handler while it runs; without one (the
    behaviour missing) a SIGTERM must fail the test, not kill the test session.
    """

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def dead_letter(
    sqs: Any, pair: QueuePair, reason: str, *, body: str = "{}", attributes: dict[str, Any] | None = None, **ids: str
) -> dict[str, Any]:
    """Put a message in the DLQ exactly as the consumer moves a poison message; returns the send parameters."""
    message = Message(
        body=body,
        message_id=f"orig-{ids.get('MessageDeduplicationId', reason)}",
        receipt_handle="unused",
        attributes=ids,
        message_attributes=ATTRIBUTES if attributes is None else attributes,
    )
    params = send_parameters(
        message, dlq_url=pair.dlq_url, reason=reason, kind="poison", source_queue_url=pair.queue_url
    )
    sqs.send_message(**params)
    return params


def on_call(monkeypatch: pytest.MonkeyPatch, event: str, operation: str, hook: Callable[..., Any]) -> None:
    """Register ``hook`` for botocore's ``<event>.sqs.<operation>`` on every SQS client the command creates."""
    real = dlq.make_client

    def factory(service: str, queue_url: str | None = None) -> Any:
        client = real(service, queue_url)
        client.meta.events.register(f"{event}.{service}.{operation}", hook)
        return client

    monkeypatch.setattr(dlq, "make_client", factory)


def hook_client(monkeypatch: pytest.MonkeyPatch, operation: str, *, allowed: int, error: BaseException) -> None:
    """Make ``operation`` raise ``error`` after ``allowed`` calls, on every client the command creates."""
    calls = {"count": 0}

    def fail_after(**_: Any) -> None:
        calls["count"] += 1
        if calls["count"] > allowed:
            raise error

    on_call(monkeypatch, "before-call", operation, fail_after)


def signal_on_call(monkeypatch: pytest.MonkeyPatch, event: str, operation: str, signum: int) -> None:
    """Deliver ``signum`` to this process from inside the first ``operation`` call: a deterministic Ctrl-C or stop."""
    calls = {"count": 0}

    def deliver(**_: Any) -> None:
        calls["count"] += 1
        if calls["count"] == 1:
            signal.raise_signal(signum)

    on_call(monkeypatch, event, operation, deliver)
