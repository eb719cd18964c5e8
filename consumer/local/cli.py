"""``python -m consumer local up|send`` and ``python -m consumer demo``: development tooling, not in the image."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import NoReturn

import typer

from consumer.exit_codes import ExitCode

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
        DEFAULT_ENV_FILE, help="Write the task's environment here (KEY=value lines) before serving."
    ),
) -> None:
    """Start moto's server on 127.0.0.1, create the stack from TEMPLATE, write the task's environment, wait for Ctrl-C.

    In another terminal: `set -a; . ./.local.env; set +a; python -m consumer run`, then
    `python -m consumer local send` to give it an event.
    """
    import shlex
    import threading

    from consumer.local.manual import shell_path, write_env_file
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
        environment = local.process_environment()
        write_env_file(
            env_file,
            environment,
            header=f"the environment the ECS task of {local.stack_name} receives, resolved to the local stack on"
            f" {endpoint},\nplus what a local process needs; written by `python -m consumer local up`."
            f"\nload it: set -a; . {shell_path(env_file)}; set +a",
        )
        python = _python()
        send = f"{python} -m consumer local send"
        if env_file != DEFAULT_ENV_FILE:
            send += f" --env-file {shlex.quote(str(env_file))}"
        print(f"local stack {local.stack_name} on {endpoint}; alarms: {', '.join(local.alarms)}")
        if local.skipped:
            print(f"not created locally: {', '.join(local.skipped)}")
        print(f"wrote the task's environment ({len(environment)} variables) to {env_file}")
        print("ready; Ctrl-C stops the server. In another terminal, start a consumer, then send it an event:")
        print(f"  set -a; . {shell_path(env_file)}; set +a; {python} -m consumer run")
        print(f"  {send}", flush=True)
        stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
        stopped.wait()
    finally:
        server.stop()


@local_app.command("send")
def local_send(
    count: int = typer.Option(1, min=1, max=100, help="How many events to send."),
    poison: bool = typer.Option(False, "--poison", help="Send events that break the schema (they go to the DLQ)."),
    env_file: Path | None = typer.Option(
        None,
        help="The env file `local up` wrote; without it QUEUE_URL and AWS_ENDPOINT_URL from the environment,"
        f" else {DEFAULT_ENV_FILE}.",
        show_default=False,
    ),
) -> None:
    """Send sample notification events (the example handler's schema) to the local stack's source queue."""
    import os

    from consumer.local.manual import send_environment, send_samples
    from consumer.local.stack import LocalProvisioningError

    try:
        environment, source = send_environment(os.environ, env_file, DEFAULT_ENV_FILE)
        queue_url, sent = send_samples(environment, count, poison)
    except LocalProvisioningError as error:
        _fail(error)
    kind = "schema-breaking (poison)" if poison else "valid"
    print(f"sent {len(sent)} {kind} event(s) to {queue_url} (from {source}):")
    for event in sent:
        print(f"  event_id {event.event_id}  message_id {event.message_id}")
    if poison:
        print("the consumer logs message_moved_to_dlq for each; `python -m consumer dlq peek` (env loaded) shows them")
    else:
        print("the consumer logs message_processed for each (a dry run on dev: notification_dry_run first)")


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
    from consumer.local.demo import DemoOptions, run_demo
    from consumer.local.stack import LocalProvisioningError

    options = DemoOptions(
        template=Path(template),
        messages=messages,
        reports=reports,
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
