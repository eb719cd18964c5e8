"""The manual local run: ``local up`` writes an env file, ``run`` loads it, ``local send`` sends sample events.

``local up`` serves until Ctrl-C, so its output cannot be ``eval``-ed: it writes the task's
environment to a file instead (``KEY=value`` lines, each value quoted for a POSIX shell), which
``set -a; . ./.local.env; set +a`` loads in another terminal and :func:`read_env_file` reads back.
``local send`` puts valid notification events (the harness's :func:`sample_event`, which the demo
sends too) on the queue that environment names, and only on a loopback endpoint: it is no producer
for a deployed queue.
"""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from consumer.local.harness import Planned, batch_entries, batches, sample_event
from consumer.local.stack import LocalProvisioningError, local_client

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


def send_environment(
    environ: Mapping[str, str], env_file: Path | None, default_file: Path
) -> tuple[dict[str, str], str]:
    """Where ``local send`` finds the queue, and a word on where that came from.

    ``env_file`` when given; else this shell's environment when it has ``QUEUE_URL`` (loaded from
    the file, say); else ``default_file``, where ``local up`` writes it.
    """
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
    """``count`` sample events, each with a new id (also its idempotency key), so a second send is
    processed again rather than skipped as a duplicate; with ``poison`` each breaks the schema."""
    run = uuid.uuid4().hex[:8]
    plan = []
    for index in range(count):
        event_id = f"evt-local-{run}-{index:03d}"
        # A channel outside the schema's enum: the handler refuses it as poison, and the reason names the rule.
        event = sample_event(event_id, index, **({"channel": "pigeon"} if poison else {}))
        plan.append(Planned(event_id, "poison" if poison else "sample", json.dumps(event, ensure_ascii=False)))
    return plan


class Sent(NamedTuple):
    event_id: str
    message_id: str
    poison: bool


def send_samples(environment: Mapping[str, str], count: int, poison: bool) -> tuple[str, list[Sent]]:
    """Send :func:`sample_plan`'s events to the local ``QUEUE_URL``; returns the queue URL and what was sent."""
    queue_url = environment.get("QUEUE_URL", "")
    endpoint = environment.get("AWS_ENDPOINT_URL", "")
    if not queue_url:
        raise LocalProvisioningError('"QUEUE_URL" must be set to the local source queue\'s URL: it is not set')
    if urlsplit(endpoint).hostname not in LOOPBACK_HOSTS:
        raise LocalProvisioningError(
            f'"AWS_ENDPOINT_URL" must be a local endpoint (127.0.0.1 or localhost; `local send` never sends to'
            f" AWS): {endpoint!r}"
        )
    sqs = local_client("sqs", endpoint)
    sent = []
    for batch in batches(sample_plan(count, poison)):
        response = _send_batch(sqs, queue_url, {str(n): p for n, p in enumerate(batch)})
        by_entry = {entry["Id"]: entry["MessageId"] for entry in response.get("Successful", [])}
        sent += [Sent(p.event_id, by_entry[str(n)], poison) for n, p in enumerate(batch)]
    return queue_url, sent


def _send_batch(sqs: Any, queue_url: str, pending: Mapping[str, Planned]) -> dict[str, Any]:
    from botocore.exceptions import ClientError, EndpointConnectionError

    try:
        response: dict[str, Any] = sqs.send_message_batch(QueueUrl=queue_url, Entries=batch_entries(pending))
    except EndpointConnectionError as error:
        raise LocalProvisioningError(
            f"cannot reach {error.kwargs.get('endpoint_url')}: is `python -m consumer local up` running?"
        ) from error
    except ClientError as error:
        raise LocalProvisioningError(f"SendMessageBatch to {queue_url} failed: {error}") from error
    if response.get("Failed"):
        raise LocalProvisioningError(f"SendMessageBatch to {queue_url} failed: {response['Failed']}")
    return response
