"""A Lambda execution environment's cold start: the :class:`~consumer.runtime.invocation.LambdaWorker` built from
the variables the stack writes, as ``python -m consumer run`` builds its consumer (consumer/runtime/cli.py).

Its AWS calls are the runtime's (the function role's, tests/infra/runtime_calls.json), so it lives in the runtime
package; consumer/lambda_entry.py calls it at an environment's first invocation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from consumer.contract import QUEUE_ARN_ENV

if TYPE_CHECKING:
    from consumer.runtime.invocation import LambdaWorker

log = logging.getLogger("consumer")

#: The function's memory, which Lambda sets in every execution environment
#: (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime).
FUNCTION_MEMORY_ENV = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
#: Outside Lambda (a local run), the memory the queue check sizes nothing by: any allowed value.
DEFAULT_MEMORY_MIB = 128


def worker_from_env(environ: Mapping[str, str]) -> LambdaWorker:
    """The execution environment's worker, built as ``python -m consumer run`` builds its consumer (logging, the
    configuration and the handler's start-up check, the clients, the guard's table, metrics and tracing)."""
    from consumer.declaration import max_rate_of
    from consumer.lambda_target import LambdaTarget
    from consumer.runtime.config import LOG_LEVEL_ENV, load_config
    from consumer.runtime.connect import connect
    from consumer.runtime.consumer import Collaborators, task_role_id_from_env
    from consumer.runtime.drift import queue_name_from_url
    from consumer.runtime.invocation import Binding, LambdaWorker
    from consumer.runtime.observability import Metrics, configure_logging, log_level
    from consumer.runtime.tracing import tracer_from_env
    from consumer.runtime.wiring import Intake, Queues

    configure_logging(level=log_level(environ.get(LOG_LEVEL_ENV) or "INFO", LOG_LEVEL_ENV), exclusive=True)
    config = load_config(environ)
    tracer = tracer_from_env(environ)
    # The queue as the Lambda target derives it (its visibility from the function's timeout), checked at the cold
    # start as the container checks it at its start: a queue edited by hand, or a stack and an image of different
    # versions, fails every invocation with the difference named, rather than running on timings nobody derived.
    target = LambdaTarget(
        contract=config.contract,
        max_tasks=1,  # the fleet's size: it shapes the mapping's concurrency, not the queue
        memory_mib=int(environ.get(FUNCTION_MEMORY_ENV) or DEFAULT_MEMORY_MIB),
        max_rate=max_rate_of(config.handler),
    )
    connected = connect(config, environ, expected=target.queue_attributes().source)
    _, name = queue_name_from_url(config.queue_url)
    worker = LambdaWorker(
        Binding(
            queues=Queues(client=connected.client, queue_url=config.queue_url, dlq_url=connected.dlq_url),
            queue_arn=environ.get(QUEUE_ARN_ENV) or connected.binding.queue_arn,
        ),
        contract=config.contract,
        handler=config.handler,
        collaborators=Collaborators(
            idempotency=connected.store, metrics=Metrics(dimensions={"Queue": name}), tracer=tracer
        ),
        intake=Intake(task_role_id=task_role_id_from_env(environ), sources=config.sources),
    )
    log.info("function_started", extra={"queue_url": config.queue_url, "concurrency": config.contract.concurrency})
    return worker
