"""``python -m consumer``: one entry for ``run`` (the ECS container's command), ``health`` (its health check),
``dlq`` (the operator's tool, in the image for ECS Exec) and ``local up``/``demo`` (development, not in the image).

Each command's package is imported only when that command runs: ``run`` loads the runtime alone,
never the DLQ tool's rich or the local tooling's moto.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from typing import Any

import typer

from consumer.exit_codes import ExitCode

COMMANDS = ("run", "health", "dlq", "local", "demo")
LOCAL_COMMANDS = ("local", "demo")


def build_app(command: str | None = None) -> typer.Typer:
    """The CLI with ``command``'s part only, or every part that is installed (for help)."""
    app = typer.Typer(add_completion=False, no_args_is_help=True, help="SQS consumer driven by the worker contract.")

    @app.callback()
    def main() -> None:
        """SQS consumer driven by the worker contract."""

    if command in (None, "run"):
        from consumer.runtime.cli import run

        app.command()(run)
    if command in (None, "health"):
        from consumer.runtime.cli import health

        app.command()(health)
    if command in (None, "dlq"):
        from consumer.ops.commands import app as dlq_app

        app.add_typer(dlq_app, name="dlq")
    if command in LOCAL_COMMANDS or (command is None and not _missing_local_tooling()):
        _require_local_tooling(command or "local")
        from consumer.local.cli import demo, local_app

        app.add_typer(local_app, name="local")
        app.command()(demo)
    return app


def _missing_local_tooling() -> list[str]:
    return [name for name in ("consumer.local", "moto") if find_spec(name) is None]


def _require_local_tooling(command: str) -> None:
    """``local`` and ``demo`` need a checkout's development set-up (moto, cdk.out); the image leaves them out."""
    missing = _missing_local_tooling()
    if missing:
        print(
            f"consumer {command}: local tooling, not in this installation (missing: {', '.join(missing)}); "
            "run it from a repository checkout after `make run` or `make test` has set it up",
            file=sys.stderr,
        )
        raise SystemExit(ExitCode.CONFIG)


def main(argv: list[str] | None = None) -> Any:
    arguments = sys.argv[1:] if argv is None else argv
    command = arguments[0] if arguments and arguments[0] in COMMANDS else None
    return build_app(command)(arguments, prog_name="python -m consumer")


def __getattr__(name: str) -> Any:
    """``consumer.cli.app``: the whole CLI, built on first use (tests drive it with typer's CliRunner)."""
    if name == "app":
        return build_app()
    raise AttributeError(name)
