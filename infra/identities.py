"""Which resources each worker holds, and the record that keeps an edit of cdk.json from moving them.

A worker's resources (its queues, DLQ, idempotency table, service, alarms: their logical ids and names) follow its
**identity**, never its place in ``workers``. The identity is, in this order:

1. the worker's own ``"identity"`` key: the name of the worker whose resources it keeps (a rename on purpose), or
   ``"default"`` for the stack's unprefixed resources (``<stack>-source``, ``QueuesQueueD811C857``, ...);
2. what :data:`LOCK_FILE` records for the worker's name;
3. its name; except in an environment never recorded, where the worker listed first takes ``"default"``, as every
   release before identities gave it, so a stack deployed by one keeps its resources on its first synth after.

``python app.py`` (``cdk synth``, ``cdk deploy``, ``make run``) checks every environment of cdk.json it builds against
the record and refuses, in one line naming the setting and what to do, an edit that would hand a recorded worker's
resources to another handler or leave them to no worker (CloudFormation would delete them, or orphan them where
retain_queues). A synth that succeeds records what it built (new workers, renames declared with ``"identity"``):
the file is the team's, written by its first synth and committed as ``cdk.context.json`` is; the framework ships
none. ``python -m infra.identities accept|forget ENV [IDENTITY]`` records a change made on purpose
(docs/upgrades.md, "Renaming, moving and retiring a worker").
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
    "Which worker holds which resources, per environment (identity: worker, handler). Written by python app.py;"
    f" commit it. Changes on purpose: python -m infra.identities accept|forget ENV [IDENTITY] ({_HOW})."
)
_SHAPE = '{"environments": {ENV: {IDENTITY: {"worker": NAME, "handler": "module:function"}}}}'

#: One environment's record: identity -> {"worker": name, "handler": "module:function"}.
Record = dict[str, dict[str, str]]


def resources_of(stack_name: str, identity: str) -> str:
    """The resources an identity holds, as a reader finds them in the console."""
    prefix = stack_name if identity == DEFAULT_IDENTITY else f"{stack_name}-{identity}"
    return f"queue {prefix}-source, its DLQ and its idempotency table"


def _who(holding: Mapping[str, str]) -> str:
    """A recorded holder as cdk.json shows it: a named worker, or the one worker of the ``handler`` form."""
    if holding["worker"] == DEFAULT_WORKER_NAME:
        return f"the environment's worker (handler {holding['handler']})"
    return f"worker {holding['worker']} (handler {holding['handler']})"


def resolve(
    environment: str, stack_name: str, workers: Sequence[WorkerSettings], recorded: Record | None
) -> tuple[WorkerSettings, ...]:
    """``workers`` with their identities resolved (the module's rules), the holder of ``"default"`` first; a
    :class:`SettingsError` for an identity two workers claim, or (with ``recorded``) an edit the record refuses."""
    identities = {w.name: _identity_of(w.name, w.identity, recorded) for w in workers}
    if recorded is None and DEFAULT_IDENTITY not in identities.values():
        undeclared = [w.name for w in workers if w.identity is None]
        if undeclared and DEFAULT_WORKER_NAME not in undeclared:
            identities[undeclared[0]] = DEFAULT_IDENTITY
    resolved = [dataclasses.replace(w, identity=identities[w.name]) for w in workers]
    holders: dict[str, WorkerSettings] = {}
    for worker in resolved:
        assert worker.identity is not None
        other = holders.setdefault(worker.identity, worker)
        if other is not worker:
            raise SettingsError(
                f"{worker.path}.identity" if "workers" in worker.path else worker.path,
                f"must be held by one worker only: {other.name} holds it too"
                f" ({resources_of(stack_name, worker.identity)}); give one of them another name, or its own"
                f' "identity" ({_HOW})',
                worker.identity,
            )
    if recorded is not None:
        _check(environment, stack_name, holders, recorded)
    return tuple(sorted(resolved, key=lambda w: w.identity != DEFAULT_IDENTITY))


def _identity_of(name: str, declared: str | None, recorded: Record | None) -> str:
    """A worker's identity by the module's rules, but for the first-synth rule (:func:`resolve` applies it)."""
    if declared is not None:
        return declared
    return next((i for i, holding in (recorded or {}).items() if holding["worker"] == name), name)


def _check(environment: str, stack_name: str, holders: Mapping[str, WorkerSettings], recorded: Record) -> None:
    """Refuse an edit that hands recorded resources to another handler, or to no worker."""
    for identity, holding in recorded.items():
        worker = holders.get(identity)
        if worker is None:
            raise SettingsError(
                f"{CONTEXT_KEY}.{environment}",
                f"must keep a worker on the {resources_of(stack_name, identity)} that {LOCK_FILE} gives {_who(holding)}:"
                f" with none the next deploy deletes them with their messages (or orphans them where retain_queues)."
                f' Put it back, or give the worker meant to hold them "identity": "{identity}"; never deployed, or'
                f" retired on purpose: python -m infra.identities forget {environment} {identity} ({_HOW})",
                identity,
            )
        if worker.handler != holding["handler"]:
            raise SettingsError(
                f"{worker.path}.handler",
                f"would hand the {resources_of(stack_name, identity)}, with their backlog and producers, from"
                f" {holding['handler']} to another handler. Meant: python -m infra.identities accept {environment}"
                f' {identity}; a rename or a swap by mistake: give each worker back its name, or its "identity"'
                f" ({_HOW})",
                worker.handler,
            )


def record_of(workers: Sequence[WorkerSettings]) -> Record:
    """What the record holds for an environment whose workers are resolved."""
    return {w.identity or w.name: {"worker": w.name, "handler": w.handler} for w in workers}


class IdentityLock:
    """:data:`LOCK_FILE` (default: beside cdk.json): every environment's record (an absent file records nothing).

    What a synth built is held in :attr:`pending` until :meth:`commit` writes it, once the synth has succeeded.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or LOCK_PATH
        self.environments: dict[str, Record] = _read(self.path)
        self.pending: dict[str, Record] = {}

    def recorded(self, environment: str) -> Record | None:
        return self.environments.get(environment)

    def record(self, environment: str, workers: Sequence[WorkerSettings]) -> None:
        """Hold ``environment``'s resolved workers (already checked against the record, by :func:`resolve`)."""
        self.pending[environment] = record_of(workers)

    def commit(self) -> None:
        """Write what :meth:`record` held, if that changes the file."""
        changed = {env: record for env, record in self.pending.items() if self.environments.get(env) != record}
        self.pending = {}
        if changed:
            self.environments.update(changed)
            self.save()

    def save(self) -> None:
        content = {"about": _ABOUT, "environments": dict(sorted(self.environments.items()))}
        self.path.write_text(json.dumps(content, indent=2) + "\n")


def _read(path: Path) -> dict[str, Record]:
    """The records in ``path``, or a one-line :class:`SettingsError` (a merge conflict left in it, say)."""
    if not path.exists():
        return {}
    try:
        raw: Any = json.loads(path.read_text())
    except ValueError as error:
        raise SettingsError(
            LOCK_FILE,
            f"must be JSON ({_SHAPE}): a merge conflict? keep every environment's entries of both sides, or delete the"
            " file and synthesize again from the cdk.json that is deployed",
            f"line {getattr(error, 'lineno', '?')}",
        ) from None
    environments = raw.get("environments") if isinstance(raw, Mapping) else None
    if not isinstance(environments, Mapping):
        raise SettingsError(LOCK_FILE, f"must be {_SHAPE}", "no environments")
    for env, record in environments.items():
        bad = not isinstance(record, Mapping) or not all(
            isinstance(h, Mapping) and all(isinstance(h.get(k), str) for k in ("worker", "handler"))
            for h in record.values()
        )
        if bad:
            raise SettingsError(f"{LOCK_FILE}.{env}", f"must be {_SHAPE}", record)
    return {
        env: {i: {"worker": h["worker"], "handler": h["handler"]} for i, h in r.items()}
        for env, r in environments.items()
    }


USAGE = (
    "usage: python -m infra.identities accept ENV IDENTITY   (the handler cdk.json now gives it is meant)\n"
    "       python -m infra.identities forget ENV IDENTITY   (its resources are to be deleted, or orphaned)\n"
    "       python -m infra.identities forget ENV            (the environment is gone, or was never deployed)"
)


def main(argv: Sequence[str] | None = None, path: Path | None = None) -> int:
    """``python -m infra.identities accept|forget ENV [IDENTITY]``: record a change of cdk.json made on purpose."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not (args[:1] == ["accept"] and len(args) == 3 or args[:1] == ["forget"] and len(args) in (2, 3)):
        print(USAGE, file=sys.stderr)
        return 2
    lock = IdentityLock(path)
    command, environment, identity = args[0], args[1], (args[2] if len(args) == 3 else None)
    record = lock.recorded(environment)
    if record is None or (identity is not None and identity not in record):
        what = f"no identity {identity}" if record is not None else "nothing"
        print(
            f"{LOCK_FILE}: environment {environment} records {what} (it holds: {', '.join(record or {})})",
            file=sys.stderr,
        )
        return 2
    if identity is None:  # forget ENV
        del lock.environments[environment]
        print(f"{environment}: forgotten; its next synth records it afresh")
        lock.save()
        return 0
    holder = _holder(lock.path.parent / "cdk.json", environment, identity, record)
    if command == "forget":
        if holder is not None:
            print(
                f"cdk.json: worker {holder[0]} of {environment} still holds {identity}: remove it from cdk.json (or give"
                ' it another "identity") first',
                file=sys.stderr,
            )
            return 2
        del record[identity]
        print(f"{environment}: {identity} forgotten; the next deploy deletes (or orphans) what it held")
    else:
        if holder is None:
            print(f"cdk.json: no worker of {environment} holds {identity}", file=sys.stderr)
            return 2
        record[identity] = {"worker": holder[0], "handler": holder[1]}
        print(f"{environment}: worker {holder[0]} now runs {holder[1]} on what {identity} held")
    lock.save()
    return 0


def _holder(cdk_json: Path, environment: str, identity: str, record: Record) -> tuple[str, str] | None:
    """The worker of ``cdk_json``'s ``environment`` holding ``identity`` by the module's rules: (name, handler)."""
    raw = json.loads(cdk_json.read_text())["context"][CONTEXT_KEY].get(environment, {})
    workers = raw["workers"] if "workers" in raw else {DEFAULT_WORKER_NAME: raw}
    for name, worker in workers.items():
        if _identity_of(name, worker.get("identity"), record) == identity:
            return name, str(worker.get("handler"))
    return None


if __name__ == "__main__":
    sys.exit(main())
