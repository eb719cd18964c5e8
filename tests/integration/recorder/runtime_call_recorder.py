"""Records every AWS call the consumer runtime makes during the integration tests, as (operation, IAM action, resource).

moto enforces no IAM, so a runtime call the task role does not allow passes every local test and fails
on AWS. This recorder collects what the runtime really calls; ``tests/infra/runtime_calls.json`` lists
it, the permissions tier (``tests/infra/test_permissions.py``) evaluates every listed call against the
synthesized task role, and the integration tier's last test fails on a call the file does not list.

How calls are caught, without a hook in product code:

* boto3/botocore calls: every client gets a ``before-parameter-build`` handler (botocore's event
  hooks) by wrapping ``botocore.session.Session.create_client``; a call is kept only when the frame
  that made it belongs to a runtime module (:data:`RUNTIME_PACKAGE`), so the tests' own set-up and
  assertion calls are ignored.
* subprocesses (``python -m consumer run``): ``sitecustomize.py`` next to this file installs the same
  wrapper when this directory is on ``PYTHONPATH`` and :data:`RECORD_DIR_ENV` names a directory;
  each process appends what it records to ``<dir>/<pid>.jsonl``.
* ECS task protection goes to the ECS agent over HTTP, not through botocore; the agent then calls
  ``ecs:UpdateTaskProtection`` / ``ecs:GetTaskProtection`` with the task role. The stand-in agent of
  ``tests/integration/test_protection.py`` reports each request with :func:`record_agent_request`.

Standard library only at import: the subprocess hook must not slow down processes that never use AWS.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

RECORD_DIR_ENV = "SQS_WORKER_RECORD_RUNTIME_CALLS_TO"
#: The package whose AWS calls are the runtime's, i.e. made with the task role in ECS (the operator's DLQ
#: tool lives in consumer/ops/ and runs with the operator's credentials).
RUNTIME_PACKAGE = "consumer.runtime"
#: Frames skipped when looking for the caller: the SDK's own and this module's.
_SDK_MODULE_PREFIXES = ("botocore", "boto3", "s3transfer", __name__, "runtime_call_recorder")
#: botocore operations whose IAM action has another name. SQS authorises a batch call with the action of
#: its single form: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-api-permissions-reference.html
ACTION_OF_OPERATION = {
    "sqs.DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs.ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "sqs.SendMessageBatch": "sqs:SendMessage",
}
#: Calls that need no permission at all, so there is nothing for the task role to grant.
#: https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html
NO_PERMISSION_NEEDED = {"sts.GetCallerIdentity": "none"}
#: The ECS agent's task-protection endpoint and the action the agent calls with the task role:
#: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html
AGENT_STATE_PATH = "/task-protection/v1/state"
AGENT_ACTIONS = {"PUT": "ecs:UpdateTaskProtection", "GET": "ecs:GetTaskProtection"}
#: A resource this module cannot classify; such an entry is never in the list, so the final test names it.
UNCLASSIFIED = "unclassified"

_lock = threading.Lock()
_recorded: set[tuple[str, str, str]] = set()


def iam_action(service: str, operation: str) -> str:
    """The IAM action that authorises ``service.operation`` (its own name unless listed otherwise)."""
    key = f"{service}.{operation}"
    return NO_PERMISSION_NEEDED.get(key) or ACTION_OF_OPERATION.get(key) or f"{service}:{operation}"


#: The runtime's own names for its two queues (its binding, QUEUE_URL and DLQ_URL), as locals or attributes.
QUEUE_BINDING_NAMES = {"queue_url": "source", "_queue_url": "source", "dlq_url": "dlq", "_dlq_url": "dlq"}


def queue_kind(queue: str, frame: Any = None) -> str:
    """``source`` or ``dlq``: by the caller's own binding when one of its names holds this queue's URL
    (``self.queue_url``, a ``dlq_url`` argument, ...), else by name (the stack and the tests name the
    pair ``<prefix>-source`` / ``<prefix>-dlq``)."""
    if frame is not None:
        owner = frame.f_locals.get("self")
        for names in (frame.f_locals, getattr(owner, "__dict__", {})):
            for name, kind in QUEUE_BINDING_NAMES.items():
                if names.get(name) == queue:
                    return kind
    name = urlparse(queue).path.rstrip("/").rsplit("/", 1)[-1] if "/" in queue else queue
    base = name.removesuffix(".fifo")
    for kind in ("source", "dlq"):
        if base.endswith(f"-{kind}"):
            return kind
    return f"{UNCLASSIFIED} queue {name}"


def resource_kind(service: str, caller: str, params: dict[str, Any], frame: Any = None) -> str:
    """Which of the stack's resources a call touches, in the vocabulary of ``tests/infra/runtime_calls.json``."""
    if service == "sqs":
        return queue_kind(str(params.get("QueueUrl") or params.get("QueueName", "")), frame)
    if service == "dynamodb" and caller == "consumer.runtime.idempotency":
        return "idempotency-table"
    if service == "sts":
        return "*"
    return f"{UNCLASSIFIED} {service} resource from {caller}"


def record(operation: str, action: str, resource: str) -> None:
    """Keep one call; in a subprocess, append it to this process's file at once (a SIGKILL loses nothing)."""
    key = (operation, action, resource)
    with _lock:
        if key in _recorded:
            return
        _recorded.add(key)
        directory = os.environ.get(RECORD_DIR_ENV)
        if directory and _in_subprocess:
            with open(Path(directory) / f"{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
                out.write(json.dumps(dict(zip(("operation", "action", "resource"), key, strict=True))) + "\n")


def record_agent_request(method: str, path: str) -> None:
    """A request the stand-in ECS agent received (only ``consumer/runtime/protection.py`` talks to it)."""
    if path.endswith(AGENT_STATE_PATH) and method in AGENT_ACTIONS:
        record(f"ecs-agent.{method} {AGENT_STATE_PATH}", AGENT_ACTIONS[method], "task")
    else:
        record(f"ecs-agent.{method} {path}", f"{UNCLASSIFIED} agent request", "task")


def _caller() -> tuple[str, Any]:
    """The module and frame of the first frame outside the SDK and this recorder: who made the call."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(_SDK_MODULE_PREFIXES):
            return name, frame
        frame = frame.f_back
    return "", None


def _on_call(params: dict[str, Any], model: Any, **_: Any) -> None:
    caller, frame = _caller()
    if caller != RUNTIME_PACKAGE and not caller.startswith(RUNTIME_PACKAGE + "."):
        return
    service = model.service_model.signing_name
    record(
        f"{service}.{model.name}",
        iam_action(service, model.name),
        resource_kind(service, caller, params, frame),
    )


def install(session_class: Any) -> Any:
    """Wrap ``session_class.create_client`` so every new client reports its calls; returns the original."""
    original = session_class.create_client
    if getattr(original, "_records_runtime_calls", False):
        return original

    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        client.meta.events.register("before-parameter-build", _on_call)
        return client

    create_client._records_runtime_calls = True  # type: ignore[attr-defined]
    session_class.create_client = create_client
    return original


def forget(*calls: tuple[str, str, str]) -> None:
    """Drop calls from this process's record (the recorder's own tests, to see one recorded afresh)."""
    with _lock:
        _recorded.difference_update(calls)


def recorded() -> set[tuple[str, str, str]]:
    """What this process recorded."""
    with _lock:
        return set(_recorded)


def recorded_by_subprocesses(directory: Path) -> set[tuple[str, str, str]]:
    """What every subprocess wrote to ``directory``."""
    found = set()
    for path in directory.glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            found.add((entry["operation"], entry["action"], entry["resource"]))
    return found


_in_subprocess = False


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Wraps ``botocore.session.Session`` right after botocore imports it, and never imports botocore itself."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "botocore.session":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            install(module.Session)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_in_subprocess() -> None:
    """Called by ``sitecustomize.py``: record this process's runtime calls to the directory the tests named."""
    global _in_subprocess
    if not os.environ.get(RECORD_DIR_ENV):
        return
    _in_subprocess = True
    if "botocore.session" in sys.modules:
        install(sys.modules["botocore.session"].Session)
    else:
        sys.meta_path.insert(0, _InstallOnImport())
