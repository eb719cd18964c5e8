"""The manual local run: ``local up`` writes an env file, ``run`` loads it, ``local send`` sends sample events.

``local up`` serves until Ctrl-C, so its output cannot be ``eval``-ed: it writes the task's
environment to a file instead (``KEY=value`` lines, each value quoted for a POSIX shell), which
``set -a; . ./.local.env; set +a`` loads in another terminal and :func:`read_env_file` reads back.
The first worker's environment is in ``.local.env`` (the one-worker commands), and each worker's, the first's
included, in ``.local.<worker>.env`` as well (:func:`worker_env_file`), which ``local send --worker NAME`` reads:
so one chosen worker of any stack runs by hand with its own file.
``local send`` puts the samples the worker's handler declares (:func:`samples_for`; ``@worker(samples=...)``,
or a body built from each event id when it declares none) on the queue that environment names, and only on a
loopback endpoint: it is no producer for a deployed queue.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from consumer.local.harness import Planned, outgoing
from consumer.local.samples import (
    BUILT,
    DECLARE_HINT,
    POISON,
    SamplesUnavailableError,
    declared_samples,
    plan_samples,
)
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
                ", ".join(env_file_workers(base)) or "none: start `python -m consumer local up`, which writes one each"
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


class Samples(NamedTuple):
    """What ``local send`` sends a worker's handler, and what to tell the user about it."""

    plan: list[Planned]
    #: What the consumer logs for them (printed after sending).
    outcome: str
    #: Said before the outcome when the bodies were built rather than declared (None when declared).
    built: str | None = None


PROCESSED = "the consumer logs message_processed for each"
POISONED = "the consumer logs message_moved_to_dlq for each; `python -m consumer dlq peek` (env loaded) shows them"
EITHER = (
    "the consumer logs message_processed for each, or message_moved_to_dlq if the handler refuses it"
    " (`python -m consumer dlq peek`, env loaded, shows those)"
)


def samples_for(environment: Mapping[str, str], count: int, poison: bool) -> Samples:
    """``count`` messages for the handler ``environment`` names: its declared samples (``@worker(samples=...)``),
    the poison ones with ``poison``; without declared samples, bodies built from each event id, and a note saying
    so. A handler that does not load, or ``poison`` for one that declares no poison sample, is a
    :class:`LocalProvisioningError` naming it."""
    try:
        handler, declared = declared_samples(environment)
        plan = plan_samples(declared, count, prefix="evt-local", poison=poison, handler=handler)
    except SamplesUnavailableError as error:
        raise LocalProvisioningError(str(error)) from error
    if any(p.kind == BUILT for p in plan):
        built = (
            f"{handler or 'the handler (CONSUMER_HANDLER is not set)'} declares no samples, so each body was built"
            f" from its event id ({plan[0].body}): {DECLARE_HINT} to send what it expects"
        )
        return Samples(plan, EITHER, built)
    return Samples(plan, POISONED if poison else PROCESSED)


class Sent(NamedTuple):
    event_id: str
    message_id: str
    poison: bool


def send_samples(environment: Mapping[str, str], planned: list[Planned]) -> tuple[str, list[Sent]]:
    """Send ``planned`` to the local ``QUEUE_URL``; returns the queue URL and what was sent."""
    queue_url = environment.get("QUEUE_URL", "")
    endpoint = environment.get("AWS_ENDPOINT_URL", "")
    if not queue_url:
        raise LocalProvisioningError('"QUEUE_URL" must be set to the local source queue\'s URL: it is not set')
    if urlsplit(endpoint).hostname not in LOOPBACK_HOSTS:
        raise LocalProvisioningError(
            f'"AWS_ENDPOINT_URL" must be a local endpoint (127.0.0.1 or localhost; `local send` never sends to'
            f" AWS): {endpoint!r}"
        )
    result = _send(local_client("sqs", endpoint), queue_url, [outgoing(p) for p in planned])
    ids = {message.idempotency_key: message_id for message, message_id in result.sent}
    return queue_url, [Sent(p.event_id, ids[p.event_id], p.kind == POISON) for p in planned]


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
