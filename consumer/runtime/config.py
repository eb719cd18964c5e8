"""Runtime configuration, read in ``main()`` from the environment the stack wrote (never at import)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import InvalidRegionError
from botocore.utils import validate_region_name

from consumer.contract import (
    DLQ_URL_ENV,
    ENV_PREFIX,
    ENVIRONMENT_FIELDS,
    HANDLER_ENV,
    IDEMPOTENCY_TABLE_ENV,
    QUEUE_URL_ENV,
    WorkerContract,
)
from consumer.declaration import contract_of, load_handler, setup_of, worker_argument
from consumer.errors import ConfigurationError, ContractDriftError, ContractError
from consumer.sources import Sources

#: The consumer's log level: DEBUG, INFO (the default), WARNING, ERROR or CRITICAL.
LOG_LEVEL_ENV = f"{ENV_PREFIX}LOG_LEVEL"
#: Where a region is set, in the AWS CLI's order. boto3 reads only AWS_DEFAULT_REGION
#: (https://github.com/boto/boto3/issues/2574); ECS sets both, other tools only AWS_REGION.
REGION_ENVS = ("AWS_REGION", "AWS_DEFAULT_REGION")
CONFIG_FILE_REGION = "the AWS config file's region"
#: The hosts of queue URLs that name their region: sqs.<region>.amazonaws.com (.com.cn in China), the
#: legacy <region>.queue.amazonaws.com, and the legacy queue.amazonaws.com of us-east-1.
_QUEUE_HOST = re.compile(
    r"sqs\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?|(?:(?P<legacy>[a-z0-9-]+)\.)?queue\.amazonaws\.com"
)


@dataclass(frozen=True)
class RuntimeConfig:
    """What ``python -m consumer run`` needs; ``from_stack`` is False for a local run without the stack's env.

    ``sources``: what the worker's declared SNS topics and EventBridge rules deliver (``consumer.sources``).
    """

    queue_url: str
    dlq_url: str | None
    handler: Callable[..., Any]
    contract: WorkerContract
    from_stack: bool
    idempotency_table: str | None
    sources: Sources = field(default_factory=Sources)


def load_config(environ: Mapping[str, str]) -> RuntimeConfig:
    """Read the binding and the contract; the stack's contract must equal the handler's declaration.

    Without ``CONSUMER_MAX_DURATION_SECONDS`` (a local run) the contract is the
    handler's own declaration. ``CONSUMER_SNS_ENVELOPE_TOPICS`` and ``CONSUMER_EVENTBRIDGE_EVENTS`` are read into
    ``sources`` (a malformed one refuses to start). Last, the handler's start-up check runs (:func:`run_setup`).
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
    sources = Sources.from_env(environ)
    run_setup(handler, environ)
    return RuntimeConfig(
        queue_url=queue_url,
        dlq_url=environ.get(DLQ_URL_ENV) or None,
        handler=handler,
        contract=contract,
        from_stack=from_stack,
        idempotency_table=environ.get(IDEMPOTENCY_TABLE_ENV) or None,
        sources=sources,
    )


def run_setup(handler: Callable[..., Any], environ: Mapping[str, str]) -> None:
    """Call the handler's declared start-up check once with ``environ``; any failure is a :class:`ConfigurationError`.

    The check's own ConfigurationError passes unchanged; anything else it raises (a bug in the
    check) refuses to start as well, in one line naming the handler, the check and the error.
    """
    setup = setup_of(handler)
    if setup is None:
        return
    try:
        setup(environ)
    except ConfigurationError:
        raise
    except (Exception, SystemExit) as error:  # a check calling sys.exit() still refuses in one line
        name = getattr(setup, "__qualname__", repr(setup))
        failed = f"{type(error).__name__}: {' '.join(str(error).split())}"
        raise ConfigurationError(
            HANDLER_ENV, f"names a handler whose start-up check {name} failed ({failed})", environ.get(HANDLER_ENV)
        ) from error


def check_declaration(declared: WorkerContract, deployed: WorkerContract) -> None:
    """Refuse to run a handler whose declaration differs from the one the stack was built from."""
    differences: list[tuple[str, Any, Any]] = [
        (f.name, getattr(deployed, f.name), getattr(declared, f.name))
        for f in dataclasses.fields(WorkerContract)
        if f.name not in ENVIRONMENT_FIELDS and getattr(deployed, f.name) != getattr(declared, f.name)
    ]
    if differences:
        name, deployed_value, declared_value = differences[0]
        listed = ", ".join(f"{worker_argument(n)}: stack {d!r}, handler {h!r}" for n, d, h in differences)
        raise ContractDriftError(
            f"{ENV_PREFIX}{name.upper()}",
            f"differs from the handler's @worker declaration ({listed}); redeploy the stack from the"
            " image's code (cdk deploy) or change the declaration back",
            deployed_value,
        )


def region_of_queue_url(url: str) -> str | None:
    """The region an AWS queue URL names (``https://sqs.eu-west-1.amazonaws.com/...``); None for any other URL.

    >>> region_of_queue_url("https://sqs.eu-west-1.amazonaws.com/123456789012/orders")
    'eu-west-1'
    """
    match = _QUEUE_HOST.fullmatch(urlsplit(url).hostname or "")
    if match is None:
        return None
    return match["region"] or match["legacy"] or "us-east-1"


def resolve_region(environ: Mapping[str, str], queue_url: str, *, configured: str | None) -> tuple[str, str]:
    """(region, where it came from): the one region every AWS client of a run uses.

    The standard sources first: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, then ``configured`` (the
    config file's region, as boto3's session reads it); else the region ``queue_url`` names. A
    standard source naming another region than the queue URL is refused rather than followed: SQS
    would answer that the queue does not exist, which sends the reader looking for the wrong fault.
    """
    named = region_of_queue_url(queue_url)
    sources = [(environ.get(name), name) for name in REGION_ENVS] + [(configured, CONFIG_FILE_REGION)]
    region, source = next(((value, name) for value, name in sources if value), (named, QUEUE_URL_ENV))
    if region is None:
        raise ConfigurationError(
            REGION_ENVS[0],
            f"must be set (or {REGION_ENVS[1]}, or a region in the AWS config file), because {QUEUE_URL_ENV} names"
            " no region",
            queue_url,
        )
    try:
        validate_region_name(region)  # botocore's own rule, checked here to name where the value came from
    except InvalidRegionError:
        raise ConfigurationError(source, "must be an AWS region name such as eu-west-1", region) from None
    if named is not None and named != region:
        raise ConfigurationError(
            QUEUE_URL_ENV,
            f"names region {named}, but {source} is {region} (SQS would answer that the queue does not exist);"
            " make them agree",
            queue_url,
        )
    return region, source
