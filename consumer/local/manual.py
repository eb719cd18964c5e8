"""The manual local run: ``local up`` writes an env file, ``run`` loads it, ``local send`` sends sample events.

``local up`` serves until Ctrl-C, so its output cannot be ``eval``-ed: it writes the task's
environment to a file instead (``KEY=value`` lines, each value quoted for a POSIX shell), which
``set -a; . ./.local.env; set +a`` loads in another terminal and :func:`read_env_file` reads back.
On a stack of several workers the first worker's environment is still in ``.local.env`` (so the
one-worker commands keep working), and each worker's is in ``.local.<worker>.env`` as well
(:func:`worker_env_file`), which ``local send --worker NAME`` reads.
``local send`` puts sample events that fit the worker's handler (:func:`samples_for`: the
notification events the demo sends too, or report requests) on the queue that environment names,
and only on a loopback endpoint: it is no producer for a deployed queue.
"""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from consumer.contract import HANDLER_ENV
from consumer.local.harness import Planned, outgoing, sample_event
from consumer.local.stack import LocalProvisioningError, local_client
from consumer.producer import Outgoing, SendResult, send

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def shell_path(path: Path) -> str:
    """``path`` as ``.`` (source) needs it: with a slash, or the shell searches PATH instead."""
    shown = str(path)
    return shlex.quote(shown if "/" in shown else f"./{shown}")


def write_env_file(path: Path, environment: Mapping[str, str], header: str) -> None:
    """Write ``environment`` as ``KEY=value`` lines a POSIX shell sources, after ``header`` as comments.

    Written to a temporary file and renamed, so a terminal sourcing it never reads half of it.
    """
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{key}={shlex.quote(value)}" for key, value in sorted(environment.items())]
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(path)


def read_env_file(path: Path) -> dict[str, str]:
    """The ``KEY=value`` assignments of ``path``, shell quoting undone (a quoted value may span lines)."""
    environment = {}
    try:
        words = shlex.split(path.read_text(), comments=True)
    except ValueError as error:  # an unclosed quote
        raise LocalProvisioningError(f"{path} must hold KEY=value lines a POSIX shell can source: {error}") from error
    for word in words:
        key, equals, value = word.partition("=")
        if not equals or not key.isidentifier():
            raise LocalProvisioningError(f"{path} must hold only KEY=value assignments: {word!r}")
        environment[key] = value
    return environment


def worker_env_file(env_file: Path, worker: str) -> Path:
    """Where ``local up`` writes ``worker``'s environment next to ``env_file``: ``.local.env`` ->
    ``.local.reports.env`` (the name before the suffix, so the file still ends in ``.env``)."""
    return env_file.with_name(f"{env_file.stem}.{worker}{env_file.suffix}")


def env_file_workers(env_file: Path) -> list[str]:
    """The workers ``local up`` wrote an env file for next to ``env_file`` (:func:`worker_env_file`'s names)."""
    pattern = worker_env_file(env_file, "*").name
    names = (
        path.name.removeprefix(f"{env_file.stem}.").removesuffix(env_file.suffix)
        for path in env_file.parent.glob(pattern)
    )
    return sorted(name for name in names if "." not in name)


def send_environment(
    environ: Mapping[str, str], env_file: Path | None, default_file: Path, worker: str | None = None
) -> tuple[dict[str, str], str]:
    """Where ``local send`` finds the queue, and a word on where that came from.

    With ``worker``, that worker's file next to ``env_file`` (default ``default_file``); else ``env_file``
    when given; else this shell's environment when it has ``QUEUE_URL`` (loaded from the file, say); else
    ``default_file``, where ``local up`` writes it.
    """
    if worker is not None:
        base = env_file or default_file
        path = worker_env_file(base, worker)
        if not path.is_file():
            there = (
                ", ".join(env_file_workers(base)) or f"none: {base} alone is a one-worker stack's, leave --worker out"
            )
            raise LocalProvisioningError(
                f'"--worker" must be one of the workers `local up` wrote an env file for next to {base} ({there}):'
                f" {worker!r}"
            )
        return read_env_file(path), str(path)
    if env_file is None and "QUEUE_URL" in environ:
        return dict(environ), "the environment"
    path = env_file or default_file
    if not path.is_file():
        raise LocalProvisioningError(
            f'"--env-file" must name the file `local up` wrote: {path} does not exist (and "QUEUE_URL" is not set);'
            " start `python -m consumer local up` first"
        )
    return read_env_file(path), str(path)


def sample_plan(count: int, poison: bool) -> list[Planned]:
    """``count`` sample notification events, each with a new id (also its idempotency key), so a second send
    is processed again rather than skipped as a duplicate; with ``poison`` each breaks the schema."""

    def event(event_id: str, index: int) -> dict[str, Any]:
        # A channel outside the schema's enum: the handler refuses it as poison, and the reason names the rule.
        return sample_event(event_id, index, **({"channel": "pigeon"} if poison else {}))

    return _plan("evt-local", count, poison, event)


def report_plan(count: int, poison: bool) -> list[Planned]:
    """``count`` sample ``report.requested`` events (``workers.reports``), each with a new ``report_id`` (also its
    idempotency key); with ``poison`` each has a row one cell short, which the handler refuses as poison."""

    def event(report_id: str, index: int) -> dict[str, Any]:
        rows: list[list[Any]] = [["eu", 12 + index], ["us", 30]]
        return {
            "report_id": report_id,
            "type": "report.requested",
            "title": f"Sales by region ({index + 1})",
            "columns": ["region", "orders"],
            "rows": [["eu"], *rows[1:]] if poison else rows,
        }

    return _plan("report-local", count, poison, event)


def body_plan(count: int, body: str) -> list[Planned]:
    """``count`` messages with ``body`` as it is (``--body``), each with a new idempotency key."""
    return _plan("body-local", count, False, lambda _id, _index: body)


def _plan(prefix: str, count: int, poison: bool, make: Callable[[str, int], Any]) -> list[Planned]:
    run = uuid.uuid4().hex[:8]
    plan = []
    for index in range(count):
        event_id = f"{prefix}-{run}-{index:03d}"
        made = make(event_id, index)
        body = made if isinstance(made, str) else json.dumps(made, ensure_ascii=False)
        plan.append(Planned(event_id, "poison" if poison else "sample", body))
    return plan


class Samples(NamedTuple):
    """The sample events that fit a handler, and what its consumer logs for them."""

    plan: Callable[[int, bool], list[Planned]]
    processed: str
    poisoned: str


NOTIFICATION_SAMPLES = Samples(
    sample_plan,
    "the consumer logs message_processed for each (a dry run on dev: notification_dry_run first)",
    "the consumer logs message_moved_to_dlq for each; `python -m consumer dlq peek` (env loaded) shows them",
)
REPORT_SAMPLES = Samples(
    report_plan,
    "the consumer logs message_processed for each (a declared dry run: report_dry_run first)",
    NOTIFICATION_SAMPLES.poisoned,
)
#: The handlers :func:`samples_for` has samples for: the examples' by package, the team's report job by name.
EXAMPLES_PACKAGE = "consumer.examples."
REPORTS_HANDLER = "workers.reports:handle"


def samples_for(environment: Mapping[str, str]) -> Samples:
    """The samples that fit the handler ``environment`` names (``CONSUMER_HANDLER``, the notification samples when
    unset); for another handler a :class:`LocalProvisioningError` naming it and saying how to send a body of one's
    own."""
    handler = environment.get(HANDLER_ENV)
    # No handler named (QUEUE_URL set by hand): the notification samples, as before workers had handlers of their own.
    if handler is None or handler.startswith(EXAMPLES_PACKAGE):
        return NOTIFICATION_SAMPLES
    if handler == REPORTS_HANDLER:
        return REPORT_SAMPLES
    raise LocalProvisioningError(
        f'"{HANDLER_ENV}" must be a handler `local send` has samples for ({EXAMPLES_PACKAGE}*, {REPORTS_HANDLER}):'
        f" {handler!r}; send a body of your own with --body TEXT"
    )


class Sent(NamedTuple):
    event_id: str
    message_id: str
    poison: bool


def send_samples(
    environment: Mapping[str, str], count: int, poison: bool, plan: Callable[[int, bool], list[Planned]] = sample_plan
) -> tuple[str, list[Sent]]:
    """Send ``plan``'s events to the local ``QUEUE_URL``; returns the queue URL and what was sent."""
    queue_url = environment.get("QUEUE_URL", "")
    endpoint = environment.get("AWS_ENDPOINT_URL", "")
    if not queue_url:
        raise LocalProvisioningError('"QUEUE_URL" must be set to the local source queue\'s URL: it is not set')
    if urlsplit(endpoint).hostname not in LOOPBACK_HOSTS:
        raise LocalProvisioningError(
            f'"AWS_ENDPOINT_URL" must be a local endpoint (127.0.0.1 or localhost; `local send` never sends to'
            f" AWS): {endpoint!r}"
        )
    planned = plan(count, poison)
    result = _send(local_client("sqs", endpoint), queue_url, [outgoing(p) for p in planned])
    ids = {message.idempotency_key: message_id for message, message_id in result.sent}
    return queue_url, [Sent(p.event_id, ids[p.event_id], poison) for p in planned]


def _send(sqs: Any, queue_url: str, messages: list[Outgoing]) -> SendResult:
    """:func:`consumer.producer.send`, its failures (after its retries) as one :class:`LocalProvisioningError`."""
    from botocore.exceptions import EndpointConnectionError

    result = send(sqs, queue_url, messages)
    unreachable = [f.exception for f in result.failed if isinstance(f.exception, EndpointConnectionError)]
    if unreachable:
        raise LocalProvisioningError(
            f"cannot reach {unreachable[0].kwargs.get('endpoint_url')}: is `python -m consumer local up` running?"
        ) from unreachable[0]
    if result.failed:
        failures = [f"{f.message.idempotency_key}: {f.code} {f.error}" for f in result.failed]
        raise LocalProvisioningError(f"SendMessageBatch to {queue_url} failed for {', '.join(failures)}")
    return result
