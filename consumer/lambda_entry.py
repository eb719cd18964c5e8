"""The Lambda function's handler: ``consumer.lambda_entry.handler``, fed by an SQS event source mapping.

The same ``@worker`` module as the container's ``python -m consumer run``, read from the same variables the stack
writes (``QUEUE_URL``, ``DLQ_URL``, ``CONSUMER_HANDLER``, the ``CONSUMER_*`` contract, ``CONSUMER_IDEMPOTENCY_TABLE``,
``CONSUMER_TASK_ROLE_ID``, here the function's execution role's RoleId), plus ``QUEUE_ARN``: the source every record
must come from (derived from ``QUEUE_URL`` and the region when unset, as in a local run).

The first invocation of an execution environment builds its :class:`~consumer.runtime.invocation.LambdaWorker` (a
configuration error then fails that invocation, and Lambda retries the batch: the message is never deleted); the
mapping must be created with ``FunctionResponseTypes: ["ReportBatchItemFailures"]``, which the stack sets
(https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consumer.runtime.invocation import LambdaContext, LambdaWorker

#: The source queue's ARN, which the stack writes beside QUEUE_URL.
QUEUE_ARN_ENV = "QUEUE_ARN"

log = logging.getLogger("consumer")

_worker: LambdaWorker | None = None
_building = threading.Lock()


def handler(event: Mapping[str, Any], context: LambdaContext) -> dict[str, list[dict[str, str]]]:
    """Lambda's entry point: run ``event``'s records; the answer's ``batchItemFailures`` lists what to keep."""
    global _worker
    with _building:
        if _worker is None:
            _worker = worker_from_env(os.environ)
    return _worker.handle(event, context)


def worker_from_env(environ: Mapping[str, str]) -> LambdaWorker:
    """The execution environment's worker, built as ``python -m consumer run`` builds its consumer (logging, the
    configuration and the handler's start-up check, the clients, the guard's table, metrics and tracing)."""
    import boto3

    from consumer.runtime.clients import dynamodb_client, sqs_client
    from consumer.runtime.config import LOG_LEVEL_ENV, load_config, resolve_region
    from consumer.runtime.consumer import Collaborators, task_role_id_from_env
    from consumer.runtime.drift import queue_name_from_url
    from consumer.runtime.idempotency import DynamoDBStore, InMemoryStore
    from consumer.runtime.invocation import Binding, LambdaWorker
    from consumer.runtime.observability import Metrics, configure_logging, log_level
    from consumer.runtime.tracing import tracer_from_env
    from consumer.runtime.wiring import Intake, Queues

    configure_logging(level=log_level(environ.get(LOG_LEVEL_ENV) or "INFO", LOG_LEVEL_ENV), exclusive=True)
    config = load_config(environ)
    tracer = tracer_from_env(environ)
    region, _ = resolve_region(environ, config.queue_url, configured=boto3.Session().region_name)
    session = boto3.Session(region_name=region)
    client = sqs_client(session, config.contract)
    account, name = queue_name_from_url(config.queue_url)
    queue_arn = environ.get(QUEUE_ARN_ENV) or f"arn:aws:sqs:{region}:{account}:{name}"
    store = None
    if not config.contract.idempotent:
        table = config.idempotency_table
        store = DynamoDBStore(table, client=dynamodb_client(session, config.contract)) if table else InMemoryStore()
    worker = LambdaWorker(
        Binding(queues=Queues(client=client, queue_url=config.queue_url, dlq_url=config.dlq_url), queue_arn=queue_arn),
        contract=config.contract,
        handler=config.handler,
        collaborators=Collaborators(idempotency=store, metrics=Metrics(dimensions={"Queue": name}), tracer=tracer),
        intake=Intake(task_role_id=task_role_id_from_env(environ), sources=config.sources),
    )
    log.info("function_started", extra={"queue_url": config.queue_url, "concurrency": config.contract.concurrency})
    return worker
