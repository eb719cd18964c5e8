"""What the DLQ tool's tests share: the CLI run in-process, on the simulated world (:func:`virtual_cli`) or against
moto's server (:func:`cli`), and DLQ helpers.

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
from consumer.ops.queues import ClientFactory, Tools, make_client
from consumer.runtime.dead_letter import send_parameters
from tests.integration.conftest import REGION, QueuePair
from tests.integration.virtual import Virtual

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


class Clients:
    """The client factory a test runs the CLI with: ``make`` (the tool's own ``make_client``, or the simulated
    world's clients), plus botocore hooks registered on every client a command creates (``on_call``)."""

    def __init__(self, make: ClientFactory = make_client) -> None:
        self.make = make
        self.hooks: list[tuple[str, str, Callable[..., Any]]] = []

    def __call__(self, service: str, queue_url: str | None = None) -> Any:
        client = self.make(service, queue_url)
        for event, operation, hook in self.hooks:
            client.meta.events.register(f"{event}.{service}.{operation}", hook)
        return client


@pytest.fixture
def clients() -> Clients:
    """The factory of every client the CLI creates in this test; hooks are added with ``on_call``."""
    return Clients()


@pytest.fixture
def cli(moto_server: str, clients: Clients) -> Callable[..., Result]:
    """Run ``python -m consumer <args>`` in-process with AWS_ENDPOINT_URL pointing at moto's server, its
    clients made by ``clients`` (passed as the context's ``obj``, which the dlq commands take their factory from)."""
    from consumer.cli import app

    runner = CliRunner()

    def invoke(
        *args: str, input: str | None = None, endpoint: str = moto_server, columns: str | None = "250"
    ) -> Result:
        env = {"AWS_ENDPOINT_URL": endpoint, "COLUMNS": columns, "QUEUE_URL": None, "DLQ_URL": None}
        return runner.invoke(app, list(args), input=input, env=env, obj=clients)

    return invoke


@pytest.fixture
def virtual_cli(virtual: Virtual, clients: Clients) -> Callable[..., Result]:
    """Run ``python -m consumer <args>`` in-process inside ``virtual.run(body)``, on the simulated world: the
    commands' clients are ``virtual.aws``'s (caller ``dlq-tool``, no faults), made through ``clients`` so that its
    hooks (``on_call``) apply, and their clock is ``virtual.sim``, so a long poll, a lease or SQS's clock turning
    passes in no real time. Both go in as the context's ``obj`` (:class:`consumer.ops.queues.Tools`)."""
    from consumer.cli import app

    clients.make = lambda service, _queue_url=None: virtual.aws.client(service, caller="dlq-tool", faults=False)
    tools = Tools(clients=clients, clock=virtual.sim)
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, columns: str | None = "250") -> Result:
        env = {"COLUMNS": columns, "QUEUE_URL": None, "DLQ_URL": None}
        return runner.invoke(app, list(args), input=input, env=env, obj=tools)

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


def on_call(clients: Clients, event: str, operation: str, hook: Callable[..., Any]) -> None:
    """Register ``hook`` for botocore's ``<event>.sqs.<operation>`` on every SQS client the command creates."""
    clients.hooks.append((event, operation, hook))


def hook_client(clients: Clients, operation: str, *, allowed: int, error: BaseException) -> None:
    """Make ``operation`` raise ``error`` after ``allowed`` calls, on every client the command creates."""
    calls = {"count": 0}

    def fail_after(**_: Any) -> None:
        calls["count"] += 1
        if calls["count"] > allowed:
            raise error

    on_call(clients, "before-call", operation, fail_after)


def signal_on_call(clients: Clients, event: str, operation: str, signum: int) -> None:
    """Deliver ``signum`` to this process from inside the first ``operation`` call: a deterministic Ctrl-C or stop."""
    calls = {"count": 0}

    def deliver(**_: Any) -> None:
        calls["count"] += 1
        if calls["count"] == 1:
            signal.raise_signal(signum)

    on_call(clients, event, operation, deliver)
