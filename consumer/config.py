"""Runtime configuration, read in ``main()`` from the environment the stack wrote (never at import)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from consumer.contract import (
    DLQ_URL_ENV,
    ENV_PREFIX,
    ENVIRONMENT_FIELDS,
    HANDLER_ENV,
    IDEMPOTENCY_TABLE_ENV,
    QUEUE_URL_ENV,
    ContractDriftError,
    ContractError,
    WorkerContract,
    contract_of,
    load_handler,
)
from consumer.message import Message

#: The consumer's log level: DEBUG, INFO (the default), WARNING, ERROR or CRITICAL.
LOG_LEVEL_ENV = f"{ENV_PREFIX}LOG_LEVEL"


@dataclass(frozen=True)
class RuntimeConfig:
    """What ``python -m consumer run`` needs; ``from_stack`` is False for a local run without the stack's env."""

    queue_url: str
    dlq_url: str | None
    handler: Callable[[Message], None]
    contract: WorkerContract
    from_stack: bool
    idempotency_table: str | None


def load_config(environ: Mapping[str, str]) -> RuntimeConfig:
    """Read the binding and the contract; the stack's contract must equal the handler's declaration.

    Without ``CONSUMER_MAX_DURATION_SECONDS`` (a local run) the contract is the
    handler's own declaration.
    """
    queue_url = environ.get(QUEUE_URL_ENV, "")
    if not queue_url:
        raise ContractError(QUEUE_URL_ENV, "must be set to the source queue's URL", environ.get(QUEUE_URL_ENV))
    spec = environ.get(HANDLER_ENV, "")
    if not spec:
        raise ContractError(HANDLER_ENV, 'must be set to "package.module:function"', environ.get(HANDLER_ENV))
    handler = load_handler(spec, parameter=HANDLER_ENV)
    declared = contract_of(handler, HANDLER_ENV)
    from_stack = f"{ENV_PREFIX}MAX_DURATION_SECONDS" in environ
    contract = WorkerContract.from_env(environ) if from_stack else declared
    if from_stack:
        check_declaration(declared, contract)
    return RuntimeConfig(
        queue_url=queue_url,
        dlq_url=environ.get(DLQ_URL_ENV) or None,
        handler=handler,
        contract=contract,
        from_stack=from_stack,
        idempotency_table=environ.get(IDEMPOTENCY_TABLE_ENV) or None,
    )


def check_declaration(declared: WorkerContract, deployed: WorkerContract) -> None:
    """Refuse to run a handler whose declaration differs from the one the stack was built from."""
    differences: list[tuple[str, Any, Any]] = [
        (f.name, getattr(deployed, f.name), getattr(declared, f.name))
        for f in dataclasses.fields(WorkerContract)
        if f.name not in ENVIRONMENT_FIELDS and getattr(deployed, f.name) != getattr(declared, f.name)
    ]
    if differences:
        name, deployed_value, declared_value = differences[0]
        listed = ", ".join(f"{n}: stack {d!r}, handler {h!r}" for n, d, h in differences)
        raise ContractDriftError(
            f"{ENV_PREFIX}{name.upper()}",
            f"differs from the handler's @worker declaration ({listed}); redeploy the stack from the"
            " image's code (cdk deploy) or change the declaration back",
            deployed_value,
        )
