"""``python -m consumer run``: the ECS container's command (typer for its exit; no rich, no ops or local tooling);
``python -m consumer health``: its ECS health check."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

import typer

from consumer.exit_codes import ExitCode

if TYPE_CHECKING:
    from consumer.runtime.consumer import Consumer

log = logging.getLogger("consumer")


class _StoppedBeforeStart(BaseException):
    """SIGTERM/SIGINT arrived while starting up: nothing is held yet, so stopping means exiting.

    A BaseException, like KeyboardInterrupt, because botocore treats any Exception raised while
    sending as a failed attempt to retry, which would keep a stopping task in its start-up.
    """


class StopOnSignal:
    """The SIGTERM/SIGINT handler of ``python -m consumer run`` (the simulated world delivers its signals to it too).

    Before the consumer exists it ends the start-up (:class:`_StoppedBeforeStart`); then it asks the consumer to stop
    (:meth:`Consumer.request_stop`, which takes no lock: the interrupted code may hold any).
    """

    def __init__(self) -> None:
        self.consumer: Consumer | None = None

    def __call__(self, signum: int, _frame: object) -> None:
        if self.consumer is None:
            raise _StoppedBeforeStart(signal.Signals(signum).name)
        self.consumer.request_stop()


def run() -> None:
    """Consume QUEUE_URL with CONSUMER_HANDLER until SIGTERM/SIGINT; exit 0 after a clean drain.

    Reads QUEUE_URL, CONSUMER_HANDLER, the stack's CONSUMER_* contract (or the
    handler's own declaration when absent), DLQ_URL, CONSUMER_IDEMPOTENCY_TABLE
    and the standard AWS variables (region, credentials, AWS_ENDPOINT_URL); CONSUMER_TRACING (and then the
    standard OTEL_* variables) for a span per attempt (docs/tracing.md).
    """
    from consumer.errors import ConfigurationError
    from consumer.runtime.config import LOG_LEVEL_ENV, load_config
    from consumer.runtime.connect import connect
    from consumer.runtime.consumer import Collaborators, Consumer, task_role_id_from_env
    from consumer.runtime.drift import StartupError
    from consumer.runtime.liveness import Liveness, liveness_path
    from consumer.runtime.observability import Metrics, configure_logging, log_level
    from consumer.runtime.protection import ScaleInProtection
    from consumer.runtime.tracing import tracer_from_env
    from consumer.runtime.wiring import Intake

    configure_logging()  # at INFO until CONSUMER_LOG_LEVEL is read, so that refusing a bad one is logged too
    # Installed first: ECS may stop a task that is still starting (a deployment rolling on, a scale-in),
    # and a start-up blocked on a slow endpoint must still end at once with exit 0, not be killed.
    on_signal = StopOnSignal()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        configure_logging(level=log_level(os.environ.get(LOG_LEVEL_ENV) or "INFO", LOG_LEVEL_ENV))
        log.info("consumer_starting", extra={"pid": os.getpid()})
        config = load_config(os.environ)
        # After the handler's module is imported (load_config): CONSUMER_TRACING=global uses the provider it installed.
        tracer = tracer_from_env(os.environ)
        connected = connect(config, os.environ)
        on_signal.consumer = consumer = Consumer(
            connected.client,
            queue_url=config.queue_url,
            dlq_url=connected.dlq_url,
            contract=config.contract,
            handler=config.handler,
            collaborators=Collaborators(
                idempotency=connected.store,
                protection=ScaleInProtection.from_env(os.environ),
                metrics=Metrics(dimensions={"Queue": config.queue_url.rsplit("/", 1)[-1]}),
                liveness=Liveness(liveness_path(os.environ)),
                tracer=tracer,
            ),
            intake=Intake(task_role_id=task_role_id_from_env(os.environ), sources=config.sources),
        )
    except (ConfigurationError, StartupError) as error:
        log.error("startup_failed", extra={"error": str(error)})
        print(f"consumer: cannot start: {error}", file=sys.stderr)
        raise typer.Exit(ExitCode.CONFIG) from error
    except _StoppedBeforeStart as stopped:
        log.info("consumer_stopped_before_start", extra={"signal": str(stopped)})
        raise typer.Exit(0) from None
    raise typer.Exit(consumer.run())


def health() -> None:
    """Exit 0 when every poller and the heartbeat made progress within its allowance, 1 otherwise (one line).

    ECS runs it in the task (the container's health check). Reads the file CONSUMER_LIVENESS_FILE names
    (default /tmp/consumer-liveness.json), which ``run`` keeps up to date; imports no AWS SDK.
    """
    import time

    from consumer.runtime.liveness import check, liveness_path

    healthy, line = check(liveness_path(os.environ), time.time())
    print(line, file=sys.stdout if healthy else sys.stderr)
    raise typer.Exit(ExitCode.OK if healthy else ExitCode.FAILED)
