"""``python -m consumer local up|send|targets`` and ``python -m consumer demo``: development tooling, not in the image."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from consumer.exit_codes import ExitCode

if TYPE_CHECKING:
    from consumer.local.stack import LocalStack

#: ``local up``'s port, fixed so the environment it writes stays valid across restarts. Below every
#: common ephemeral range (Linux 32768-60999, others 49152+), so no outgoing connection holds it, and
#: not the default of another local AWS endpoint (moto 5000, LocalStack 4566, ElasticMQ 9324) or of a
#: common dev server (3000, 5173, 8000, 8080).
LOCAL_PORT = 4750
#: Where ``local up`` writes the environment and ``local send`` looks for it (ignored by git).
DEFAULT_ENV_FILE = Path(".local.env")

local_app = typer.Typer(no_args_is_help=True, help="Run the stack locally on moto's SQS server (no AWS account).")


@local_app.command("up")
def local_up(
    template: str = typer.Option("cdk.out/SqsWorker-dev.template.json", help="Synthesized template to provision."),
    port: int = typer.Option(
        LOCAL_PORT, min=0, max=65535, help="Port on 127.0.0.1, fixed so the env file stays valid (0 = any free port)."
    ),
    env_file: Path = typer.Option(
        DEFAULT_ENV_FILE,
        help="Write the first worker's task environment here (KEY=value lines) before serving; each worker's,"
        " the first's included, also goes to .local.<worker>.env next to it.",
    ),
) -> None:
    """Start moto's server on 127.0.0.1, create the stack from TEMPLATE, write each worker's environment, wait for Ctrl-C.

    In another terminal: `set -a; . ./.local.env; set +a; python -m consumer run`, then
    `python -m consumer local send` to give it an event; for one chosen worker, its own .local.<worker>.env and
    `local send --worker NAME`.
    """
    import threading

    from consumer.local.stack import LocalProvisioningError, provision, start_server

    try:
        server, endpoint = start_server(port)
    except LocalProvisioningError as error:
        _fail(error)
    try:
        try:
            local = provision(endpoint, Path(template))
        except LocalProvisioningError as error:
            _fail(error)
        print(f"local stack {local.stack_name} on {endpoint}; alarms: {', '.join(local.alarms)}")
        if local.skipped:
            print(f"not created locally: {', '.join(local.skipped)}")
        commands = _write_worker_env_files(local, env_file)
        several = len(local.workers) > 1
        print(
            "ready; Ctrl-C stops the server. In another terminal, start a consumer, then send it an event"
            + (" (a terminal per worker):" if several else ":")
        )
        for command in commands:
            print(f"  {command}", flush=True)
        stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
        stopped.wait()
    finally:
        server.stop()


def _write_worker_env_files(local: LocalStack, env_file: Path) -> list[str]:
    """Write the first worker's environment to ``env_file`` and each worker's (the first's included) to its
    :func:`~consumer.local.manual.worker_env_file`, removing the worker files of workers this stack lacks; print one
    line per worker (name, handler, queue, files) and return the commands to run and feed each worker's consumer:
    on a one-worker stack the ``env_file`` ones, on a stack of several each worker's own."""
    import shlex

    from consumer.contract import HANDLER_ENV
    from consumer.local.manual import env_file_workers, shell_path, worker_env_file, write_env_file

    several = len(local.workers) > 1
    # A worker file an earlier `local up` of another stack left would name queues this server does not have.
    for stale in set(env_file_workers(env_file)) - set(local.workers):
        worker_env_file(env_file, stale).unlink(missing_ok=True)
    python = _python()
    commands = []
    for index, worker in enumerate(local.workers):
        environment = local.process_environment(worker)
        # Every worker has its own file, so `--worker NAME` and `. ./.local.NAME.env` run any one of them by hand.
        paths = ([env_file] if index == 0 else []) + [worker_env_file(env_file, worker)]
        for path in paths:
            write_env_file(
                path,
                environment,
                header=f"the environment the {'Lambda function' if worker in local.functions else 'ECS task'} of worker"
                f" {worker} of {local.stack_name} receives, resolved to"
                f" the local stack on {local.endpoint},\nplus what a local process needs; written by"
                f" `python -m consumer local up`.\nload it: set -a; . {shell_path(path)}; set +a",
            )
        print(
            f"worker {worker}: handler {environment.get(HANDLER_ENV, '?')}, queue {environment.get('QUEUE_URL', '?')};"
            f" its task's environment ({len(environment)} variables) in {' and '.join(map(str, paths))}"
        )
        send = f"{python} -m consumer local send"
        if env_file != DEFAULT_ENV_FILE:
            send += f" --env-file {shlex.quote(str(env_file))}"
        if several:
            send += f" --worker {worker}"
        loaded = paths[-1] if several else env_file
        commands += [f"set -a; . {shell_path(loaded)}; set +a; {python} -m consumer {local.command(worker)}", send]
    return commands


@local_app.command("function")
def local_function() -> None:
    """Run one worker as AWS Lambda would, until Ctrl-C: an event source mapping's loop on its queue invoking
    consumer.lambda_entry.handler with each batch's records (docs/lambda.md).

    Reads the worker's environment as `run` does: `set -a; . ./.local.env; set +a; python -m consumer local function`.
    """
    import os
    import threading

    from consumer.errors import ConfigurationError, ContractError
    from consumer.local.mapping import serve
    from consumer.runtime.observability import configure_logging

    configure_logging()
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    try:
        serve(os.environ, stopped)
    except (ConfigurationError, ContractError) as error:
        _fail(error)


@local_app.command("send")
def local_send(
    count: int = typer.Option(1, min=1, max=100, help="How many events to send."),
    poison: bool = typer.Option(
        False, "--poison", help="Send events the worker's handler refuses as poison (they go to the DLQ)."
    ),
    worker: str | None = typer.Option(
        None, help="Send to this worker's queue (its env file, .local.<worker>.env, as `local up` wrote it)."
    ),
    body: str | None = typer.Option(
        None, help="Send this text as each message's body instead of the handler's samples."
    ),
    env_file: Path | None = typer.Option(
        None,
        help="The env file `local up` wrote; without it QUEUE_URL and AWS_ENDPOINT_URL from the environment,"
        f" else {DEFAULT_ENV_FILE}.",
        show_default=False,
    ),
) -> None:
    """Send the samples the worker's handler declares (@worker(samples=...); a body built from each event id when it
    declares none) to its source queue."""
    import os

    from consumer.local.manual import Samples, samples_for, send_environment, send_samples
    from consumer.local.samples import body_plan
    from consumer.local.stack import LocalProvisioningError

    if body is not None and poison:
        _fail(ValueError(f'"--body" must not come with "--poison" (the body is sent as given): {body!r}'))
    try:
        environment, source = send_environment(os.environ, env_file, DEFAULT_ENV_FILE, worker)
        samples = Samples(body_plan(count, body), "") if body is not None else samples_for(environment, count, poison)
        queue_url, sent = send_samples(environment, samples.plan)
    except LocalProvisioningError as error:
        _fail(error)
    kind = "given-body" if body is not None else "built" if samples.built else "poison" if poison else "valid"
    print(f"sent {len(sent)} {kind} event(s) to {queue_url} (from {source}):")
    for event in sent:
        print(f"  event_id {event.event_id}  message_id {event.message_id}")
    for note in (samples.built, samples.outcome):
        if note:
            print(note)


@local_app.command("targets")
def local_targets(
    environment: str = typer.Option("prod", help="The environment of cdk.json whose workers to compare."),
    cdk_out: Path = typer.Option(
        Path("cdk.out"), help="The cloud assembly `python -m infra.report` (or `make run`) wrote."
    ),
) -> None:
    """Print docs/targets.md's tables: each worker of ENVIRONMENT on ECS and on Lambda, what a million messages cost
    at 1 to 1,000 msg/s, where the other target becomes cheaper, and what bounds each."""
    from consumer.local.targets_docs import markdown

    try:
        print(markdown(cdk_out, environment), end="")
    except (OSError, ValueError, KeyError) as error:  # ContractError is a ValueError
        _fail(error)


def _fail(error: Exception) -> NoReturn:
    print(f"consumer local: {error}", file=sys.stderr)
    raise typer.Exit(ExitCode.CONFIG) from error


def _python() -> str:
    """This interpreter as the user can type it: relative when it is under the current directory (.venv/bin/python)."""
    import os

    relative = os.path.relpath(sys.executable)
    return relative if not relative.startswith("..") else sys.executable


def demo(
    template: str = typer.Option("cdk.out/SqsWorker-demo.template.json", help="Synthesized template to provision."),
    messages: int = typer.Option(120, min=6, max=2000, help="Events to produce (at least one of each kind)."),
    reports: int = typer.Option(28, min=3, max=500, help="Report requests for the reports worker (one of each kind)."),
    samples: int = typer.Option(
        10,
        min=1,
        max=500,
        help="Messages for each other worker: its handler's declared samples in turn (at least one of each),"
        " else bodies built for it.",
    ),
    consumers: int = typer.Option(2, min=1, max=8, help="Consumer processes (like ECS tasks)."),
    slow_seconds: float = typer.Option(14.0, min=1.0, max=25.0, help="How long a 'slow' delivery takes."),
    produce_seconds: float = typer.Option(10.0, min=0.0, max=300.0, help="Spread production over this long."),
    rolling_restart: bool = typer.Option(True, help="SIGTERM one consumer halfway and start a new one."),
    timeout: float = typer.Option(300.0, min=10.0, help="Give up (exit 1) after this many seconds."),
    logs: str = typer.Option(".demo", help="Directory for the consumers' logs (JSON lines and EMF)."),
    report: str | None = typer.Option(None, help="Also write the report as JSON to this file."),
) -> None:
    """The whole system locally: provision the demo stack on moto, run each worker's consumers, produce, report.

    Every worker of the stack runs: the notifications example and the report job with their own mixes, any other
    with its handler's declared samples. Exits 0 only if every event ended where its kind calls for (delivered
    once, or in the DLQ with a reason), none was lost or delivered twice, and every consumer exited 0 on SIGTERM.
    """
    from consumer.local.demo import DemoOptions, run_demo
    from consumer.local.stack import LocalProvisioningError

    options = DemoOptions(
        template=Path(template),
        messages=messages,
        reports=reports,
        samples=samples,
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
        raise typer.Exit(ExitCode.CONFIG) from error
