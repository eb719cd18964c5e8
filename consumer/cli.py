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


class _StoppedBeforeStart(BaseException):
    """SIGTERM/SIGINT arrived while starting up: nothing is held yet, so stopping means exiting.

    A BaseException, like KeyboardInterrupt, because botocore treats any Exception raised while
    sending as a failed attempt to retry, which would keep a stopping task in its start-up.
    """


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

    from consumer.config import LOG_LEVEL_ENV, load_config, resolve_region
    from consumer.contract import ConfigurationError
    from consumer.drift import StartupError, check_queue, queue_name_from_url
    from consumer.idempotency import DynamoDBStore, InMemoryStore
    from consumer.observability import Metrics, configure_logging, log_level
    from consumer.protection import ScaleInProtection
    from consumer.runtime import LONG_POLL_SECONDS, Consumer, task_role_id_from_env

    configure_logging()  # at INFO until CONSUMER_LOG_LEVEL is read, so that refusing a bad one is logged too
    # Installed first: ECS may stop a task that is still starting (a deployment rolling on, a scale-in),
    # and a start-up blocked on a slow endpoint must still end at once with exit 0, not be killed.
    running: list[Consumer] = []

    def on_signal(signum: int, _frame: object) -> None:
        if not running:
            raise _StoppedBeforeStart(signal.Signals(signum).name)
        running[0].stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        configure_logging(level=log_level(os.environ.get(LOG_LEVEL_ENV) or "INFO", LOG_LEVEL_ENV))
        log.info("consumer_starting", extra={"pid": os.getpid()})
        config = load_config(os.environ)
        region, _ = resolve_region(os.environ, config.queue_url, configured=boto3.Session().region_name)
        session = boto3.Session(region_name=region)  # every client of the run is made from it, in that region
        client = session.client(
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
        table = config.idempotency_table
        store = DynamoDBStore(table, client=session.client("dynamodb")) if table else InMemoryStore()
        running.append(
            Consumer(
                client,
                queue_url=config.queue_url,
                dlq_url=dlq_url,
                contract=config.contract,
                handler=config.handler,
                idempotency=store,
                protection=ScaleInProtection.from_env(os.environ),
                metrics=Metrics(dimensions={"Queue": config.queue_url.rsplit("/", 1)[-1]}),
                task_role_id=task_role_id_from_env(os.environ),
            )
        )
    except (ConfigurationError, StartupError) as error:
        log.error("startup_failed", extra={"error": str(error)})
        print(f"consumer: cannot start: {error}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from error
    except _StoppedBeforeStart as stopped:
        log.info("consumer_stopped_before_start", extra={"signal": str(stopped)})
        raise typer.Exit(0) from None
    raise typer.Exit(running[0].run())


def _require_local_tooling(command: str) -> None:
    """``local`` and ``demo`` need a checkout's development set-up (moto, cdk.out); the image leaves them out."""
    from importlib.util import find_spec

    missing = [name for name in ("consumer.local", "consumer.demo", "moto") if find_spec(name) is None]
    if missing:
        print(
            f"consumer {command}: local tooling, not in this installation (missing: {', '.join(missing)}); "
            "run it from a repository checkout after `make run` or `make test` has set it up",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_CONFIG)


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

    _require_local_tooling("local up")

    from consumer.local import LocalProvisioningError, provision, start_server

    server, endpoint = start_server(port)
    try:
        try:
            local = provision(endpoint, Path(template))
        except LocalProvisioningError as error:
            print(f"consumer local: {error}", file=sys.stderr)
            raise typer.Exit(EXIT_CONFIG) from error
        print(f"# local stack {local.stack_name} on {endpoint}; alarms: {', '.join(local.alarms)}")
        if local.skipped:
            print(f"# not created locally: {', '.join(local.skipped)}")
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


@app.command()
def demo(
    template: str = typer.Option("cdk.out/SqsWorker-demo.template.json", help="Synthesized template to provision."),
    messages: int = typer.Option(120, min=6, max=2000, help="Events to produce (at least one of each kind)."),
    consumers: int = typer.Option(2, min=1, max=8, help="Consumer processes (like ECS tasks)."),
    slow_seconds: float = typer.Option(14.0, min=1.0, max=25.0, help="How long a 'slow' delivery takes."),
    produce_seconds: float = typer.Option(10.0, min=0.0, max=300.0, help="Spread production over this long."),
    rolling_restart: bool = typer.Option(True, help="SIGTERM one consumer halfway and start a new one."),
    timeout: float = typer.Option(300.0, min=10.0, help="Give up (exit 1) after this many seconds."),
    logs: str = typer.Option(".demo", help="Directory for the consumers' logs (JSON lines and EMF)."),
    report: str | None = typer.Option(None, help="Also write the report as JSON to this file."),
) -> None:
    """The whole system locally: provision the demo stack on moto, run consumers, produce a mix, report.

    Exits 0 only if every event ended where its kind calls for (delivered once, or
    in the DLQ with a reason), none was lost or delivered twice, and every
    consumer exited 0 on SIGTERM.
    """
    from pathlib import Path

    _require_local_tooling("demo")
    from consumer.demo import DemoOptions, run_demo
    from consumer.local import LocalProvisioningError

    options = DemoOptions(
        template=Path(template),
        messages=messages,
        consumers=consumers,
        slow_seconds=slow_seconds,
        produce_seconds=produce_seconds,
        rolling_restart=rolling_restart,
        timeout_seconds=timeout,
        log_dir=Path(logs),
        report=Path(report) if report else None,
    )
    try:
        raise typer.Exit(run_demo(options))
    except LocalProvisioningError as error:
        print(f"consumer demo: {error}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from error
