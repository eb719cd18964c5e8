"""Command line: ``python -m consumer run`` (the ECS container's command)."""

from __future__ import annotations

import logging
import os
import signal
import sys

import typer

from consumer.dlq import app as dlq_app

app = typer.Typer(add_completion=False, no_args_is_help=True, help="SQS consumer driven by the worker contract.")
app.add_typer(dlq_app, name="dlq")
log = logging.getLogger("consumer")

EXIT_CONFIG = 2


@app.callback()
def main() -> None:
    """SQS consumer driven by the worker contract."""


@app.command()
def run() -> None:
    """Consume QUEUE_URL with CONSUMER_HANDLER until SIGTERM/SIGINT; exit 0 after a clean drain.

    Reads QUEUE_URL, CONSUMER_HANDLER, the stack's CONSUMER_* contract (or the
    handler's own declaration when absent), DLQ_URL, CONSUMER_IDEMPOTENCY_TABLE
    and the standard AWS variables (region, credentials, AWS_ENDPOINT_URL).
    """
    import boto3
    from botocore.config import Config

    from consumer.config import load_config
    from consumer.contract import ContractError
    from consumer.drift import StartupError, check_queue, queue_name_from_url
    from consumer.idempotency import DynamoDBStore, InMemoryStore
    from consumer.observability import Metrics, configure_logging
    from consumer.protection import ScaleInProtection
    from consumer.runtime import LONG_POLL_SECONDS, Consumer

    configure_logging(level=os.environ.get("CONSUMER_LOG_LEVEL", "INFO"))
    try:
        config = load_config(os.environ)
        client = boto3.client(
            "sqs",
            config=Config(
                retries={"mode": "standard", "max_attempts": 3},
                connect_timeout=5,
                read_timeout=LONG_POLL_SECONDS + 10,  # a long poll must not time out on our side
            ),
        )
        binding = check_queue(
            client,
            queue_url=config.queue_url,
            dlq_url=config.dlq_url,
            contract=config.contract,
            check_retention=config.from_stack,
        )
        dlq_url = config.dlq_url
        if dlq_url is None:  # a local run: find the DLQ through the queue's own redrive policy
            account, _ = queue_name_from_url(config.queue_url)
            dlq_name = binding.dead_letter_queue_arn.rsplit(":", 1)[-1]
            dlq_url = client.get_queue_url(QueueName=dlq_name, QueueOwnerAWSAccountId=account)["QueueUrl"]
    except (ContractError, StartupError) as error:
        log.error("startup_failed", extra={"error": str(error)})
        print(f"consumer: cannot start: {error}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from error
    store = DynamoDBStore(config.idempotency_table) if config.idempotency_table else InMemoryStore()
    consumer = Consumer(
        client,
        queue_url=config.queue_url,
        dlq_url=dlq_url,
        contract=config.contract,
        handler=config.handler,
        idempotency=store,
        protection=ScaleInProtection.from_env(os.environ),
        metrics=Metrics(dimensions={"Queue": config.queue_url.rsplit("/", 1)[-1]}),
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: consumer.stop())
    raise typer.Exit(consumer.run())


local_app = typer.Typer(no_args_is_help=True, help="Run the stack locally on moto's SQS server (no AWS account).")
app.add_typer(local_app, name="local")


@local_app.command("up")
def local_up(
    template: str = typer.Option("cdk.out/SqsWorker-dev.template.json", help="Synthesized template to provision."),
    port: int = typer.Option(0, help="Port on 127.0.0.1 (0 = any free port)."),
) -> None:
    """Start moto's server on 127.0.0.1, create the stack from TEMPLATE, print the task's environment, wait for Ctrl-C."""
    import shlex
    import threading
    from pathlib import Path

    from consumer.local import LocalProvisioningError, provision, start_server

    server, endpoint = start_server(port)
    try:
        try:
            local = provision(endpoint, Path(template))
        except LocalProvisioningError as error:
            print(f"consumer local: {error}", file=sys.stderr)
            raise typer.Exit(EXIT_CONFIG) from error
        print(f"# local stack {local.stack_name} on {endpoint}; alarms: {', '.join(local.alarms)}")
        print("# the environment the ECS task receives, plus what a local process needs:")
        for key, value in sorted(local.process_environment().items()):
            print(f"export {key}={shlex.quote(value)}")
        print("# ready: run `python -m consumer run` with these variables; Ctrl-C stops the server", flush=True)
        stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
        stopped.wait()
    finally:
        server.stop()
