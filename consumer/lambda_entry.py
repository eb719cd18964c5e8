"""The Lambda function's handler: ``consumer.lambda_entry.handler``, fed by an SQS event source mapping.

The same ``@worker`` module as the container's ``python -m consumer run``, read from the same variables the stack
writes (``QUEUE_URL``, ``DLQ_URL``, ``CONSUMER_HANDLER``, the ``CONSUMER_*`` contract, ``CONSUMER_IDEMPOTENCY_TABLE``,
``CONSUMER_TASK_ROLE_ID``, here the function's execution role's RoleId), plus ``QUEUE_ARN``: the source every record
must come from (the queue's own ARN when unset, as in a local run). The queue is checked against the contract as the
container checks it at its start, with the visibility the Lambda target derives.

The first invocation of an execution environment builds its :class:`~consumer.runtime.invocation.LambdaWorker` (a
configuration error then fails that invocation, and Lambda retries the batch: the message is never deleted); the
mapping must be created with ``FunctionResponseTypes: ["ReportBatchItemFailures"]``, which the stack sets
(https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consumer.runtime.invocation import LambdaContext, LambdaWorker

_worker: LambdaWorker | None = None
_building = threading.Lock()


def handler(event: Mapping[str, Any], context: LambdaContext) -> dict[str, list[dict[str, str]]]:
    """Lambda's entry point: run ``event``'s records; the answer's ``batchItemFailures`` lists what to keep."""
    global _worker
    with _building:
        if _worker is None:
            from consumer.runtime.cold_start import worker_from_env

            _worker = worker_from_env(os.environ)
    return _worker.handle(event, context)
