"""Which resources each worker holds, and the record that keeps an edit of cdk.json from moving them.

A worker's resources (its queues, DLQ, idempotency table, service, alarms: their logical ids and names) follow its
**identity**, never its place in ``workers``. The identity is, in this order:

1. the worker's own ``"identity"`` key: the name of the worker whose resources it keeps (a rename on purpose), or
   ``"default"`` for the stack's unprefixed resources (``<stack>-source``, ``QueuesQueueD811C857``, ...);
2. what :data:`LOCK_FILE` records for the worker's name;
3. its name; except in an environment never recorded, where the worker listed first takes ``"default"``, as every
   release before identities gave it, so a stack deployed by one keeps its resources on its first synth after.

``python app.py`` (``cdk synth``, ``cdk deploy``, ``make run``) checks every environment it builds against the record
and refuses, in one line naming the worker and what to do, an edit that would hand a recorded worker's resources to
another handler or leave them to no worker (CloudFormation would delete them, or orphan them where retain_queues).
New workers, and renames declared with ``"identity"``, are recorded by the same synth: commit the file as
``cdk.context.json`` is committed. ``python -m infra.identities accept|forget ENV WORKER`` records a change made on
purpose (docs/upgrades.md, "Renaming, moving and retiring a worker").
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.worker_settings import CONTEXT_KEY, DEFAULT_WORKER_NAME, SettingsError, WorkerSettings

#: The identity of the stack's unprefixed resources (the construct id ``Default``, infra/worker.py).
DEFAULT_IDENTITY = DEFAULT_WORKER_NAME
#: The record, beside cdk.json.
LOCK_FILE = "workers.lock.json"
LOCK_PATH = Path(__file__).resolve().parent.parent / LOCK_FILE
_HOW = 'docs/upgrades.md, "Renaming, moving and retiring a worker"'
_ABOUT = (
    "Which worker holds which resources, per environment (identity: worker, handler). Written by python app.py for new"
    f" workers; commit it. Changes on purpose: python -m infra.identities accept|forget ENV WORKER ({_HOW})."
)

#: One environment's record: identity -> {"worker": name, "handler": "module:function"}.
Record = dict[str, dict[str, str]]


def resources_of(stack_name: str, identity: str) -> str:
    """The resources an identity holds, as a reader finds them in the console."""
    prefix = stack_name if identity == DEFAULT_IDENTITY else f"{stack_name}-{identity}"
    return f"queue {prefix}-source, its DLQ and its idempotency table"


def resolve(
    environment: str, stack_name: str, workers: Sequence[WorkerSettings], recorded: Record | None
) -> tuple[WorkerSettings, ...]:
    """``workers`` with their identities resolved (the module's rules), the holder of ``"default"`` first; a
    :class:`SettingsError` for an identity two workers claim, or (with ``recorded``) an edit the record refuses."""
    by_name = {holding["worker"]: identity for identity, holding in (recorded or {}).items()}
    identities = {w.name: w.identity or by_name.get(w.name) for w in workers}
    if recorded is None and DEFAULT_IDENTITY not in identities.values():
        undeclared = [w.name for w in workers if identities[w.name] is None]
        if undeclared and DEFAULT_WORKER_NAME not in undeclared:
            identities[undeclared[0]] = DEFAULT_IDENTITY
    resolved = [dataclasses.replace(w, identity=identities[w.name] or w.name) for w in workers]
    holders: dict[str, WorkerSettings] = {}
    for worker in resolved:
        assert worker.identity is not None
        other = holders.setdefault(worker.identity, worker)
        if other is not worker:
            raise SettingsError(
                f"{worker.path}.identity",
                f"must be held by one worker only: {other.name} holds it too ({resources_of(stack_name, worker.identity)})",
                worker.identity,
            )
    if recorded is not None:
        _check(environment, stack_name, holders, recorded)
    return tuple(sorted(resolved, key=lambda w: w.identity != DEFAULT_IDENTITY))


def _check(environment: str, stack_name: str, holders: Mapping[str, WorkerSettings], recorded: Record) -> None:
    """Refuse an edit that hands recorded resources to another handler, or to no worker."""
    for identity, holding in recorded.items():
        worker = holders.get(identity)
        if worker is None:
            keep = f'"identity": "{identity}"'
            raise SettingsError(
                f"{LOCK_FILE}.{environment}.{identity}",
                f"is held by worker {holding['worker']}, which cdk.json no longer has: the next deploy would delete"
                f" its {resources_of(stack_name, identity)} with their messages (or orphan them where retain_queues)."
                f" Put the worker back, or give its new name {keep}; to retire it on purpose:"
                f" python -m infra.identities forget {environment} {holding['worker']} ({_HOW})",
                holding["handler"],
            )
        if worker.handler != holding["handler"]:
            raise SettingsError(
                f"{worker.path}.handler",
                f"would hand the {resources_of(stack_name, identity)} of worker {worker.name}, with their backlog and"
                f" producers, from {holding['handler']} to another handler. If that is what you mean:"
                f" python -m infra.identities accept {environment} {worker.name} ({_HOW})",
                worker.handler,
            )


def record_of(workers: Sequence[WorkerSettings]) -> Record:
    """What the record holds for an environment whose workers are resolved."""
    return {w.identity or w.name: {"worker": w.name, "handler": w.handler} for w in workers}


class IdentityLock:
    """:data:`LOCK_FILE`: every environment's record (an absent file records nothing)."""

    def __init__(self, path: Path = LOCK_PATH) -> None:
        self.path = path
        raw: Any = json.loads(path.read_text()) if path.exists() else {}
        environments = raw.get("environments", {}) if isinstance(raw, Mapping) else None
        if not isinstance(environments, Mapping) or not all(
            isinstance(record, Mapping)
            and all(isinstance(h, Mapping) and {"worker", "handler"} <= set(h) for h in record.values())
            for record in environments.values()
        ):
            raise SettingsError(
                str(path), 'must be {"environments": {ENV: {IDENTITY: {"worker": ..., "handler": ...}}}}', raw
            )
        self.environments: dict[str, Record] = {
            env: {identity: dict(holding) for identity, holding in record.items()}
            for env, record in environments.items()
        }

    def recorded(self, environment: str) -> Record | None:
        return self.environments.get(environment)

    def record(self, environment: str, workers: Sequence[WorkerSettings]) -> None:
        """Record ``environment``'s resolved workers (checked against the record already, by :func:`resolve`) and
        write the file if that changed it."""
        record = record_of(workers)
        if self.environments.get(environment) != record:
            self.environments[environment] = record
            self.save()

    def save(self) -> None:
        content = {"about": _ABOUT, "environments": dict(sorted(self.environments.items()))}
        self.path.write_text(json.dumps(content, indent=2) + "\n")


def main(argv: Sequence[str] | None = None, path: Path = LOCK_PATH) -> int:
    """``python -m infra.identities accept|forget ENV WORKER``: record a change of cdk.json made on purpose."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[0] not in ("accept", "forget"):
        print(
            "usage: python -m infra.identities accept ENV WORKER   (the worker's new handler is meant)\n"
            "       python -m infra.identities forget ENV WORKER   (its resources are to be deleted, or orphaned)",
            file=sys.stderr,
        )
        return 2
    command, environment, worker = args
    lock = IdentityLock(path)
    record = lock.recorded(environment) or {}
    held = [identity for identity, holding in record.items() if holding["worker"] == worker]
    if not held:
        print(f"{LOCK_FILE}: environment {environment} records no worker {worker}", file=sys.stderr)
        return 2
    if command == "forget":
        del record[held[0]]
        print(f"{environment}: worker {worker} forgotten; the next deploy deletes (or orphans) what it held")
    else:
        handler = _current_handler(path.parent / "cdk.json", environment, worker)
        if handler is None:
            print(f"cdk.json: environment {environment} has no worker {worker}", file=sys.stderr)
            return 2
        record[held[0]]["handler"] = handler
        print(f"{environment}: worker {worker} now runs {handler} on what it held")
    lock.environments[environment] = record
    lock.save()
    return 0


def _current_handler(cdk_json: Path, environment: str, worker: str) -> str | None:
    """The handler ``cdk_json`` gives ``worker`` of ``environment``."""
    raw = json.loads(cdk_json.read_text())["context"][CONTEXT_KEY].get(environment, {})
    if "workers" not in raw:
        return raw.get("handler") if worker == DEFAULT_WORKER_NAME else None
    handler = raw["workers"].get(worker, {}).get("handler")
    return handler if isinstance(handler, str) else None


if __name__ == "__main__":
    sys.exit(main())
