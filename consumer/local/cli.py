"""``python -m consumer local up`` and ``python -m consumer demo``: development tooling, not in the image."""

from __future__ import annotations

import signal
import sys

import typer

from consumer.exit_codes import ExitCode

local_app = typer.Typer(no_args_is_help=True, help="Run the stack locally on moto's SQS server (no AWS account).")


@local_app.command("up")
def local_up(
    template: str = typer.Option("cdk.out/SqsWorker-dev.template.json", help="Synthesized template to provision."),
    port: int = typer.Option(0, help="Port on 127.0.0.1 (0 = any free port)."),
) -> None:
    """Start moto's server on 127.0.0.1, create the stack from TEMPLATE, print the task's environment, wait for Ctrl-C."""
    import shlex
    import threading
    from pathlib import Path

    from consumer.local.stack import LocalProvisioningError, provision, start_server

    server, endpoint = start_server(port)
    try:
        try:
            local = provision(endpoint, Path(template))
        except LocalProvisioningError as error:
            print(f"consumer local: {error}", file=sys.stderr)
            raise typer.Exit(ExitCode.CONFIG) from error
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

    from consumer.local.demo import DemoOptions, run_demo
    from consumer.local.stack import LocalProvisioningError

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
        raise typer.Exit(ExitCode.CONFIG) from error
