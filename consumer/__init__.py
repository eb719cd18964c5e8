"""An SQS consumer whose timings come from the handler's own declaration.

Public names: :func:`worker` (declare a handler), :class:`Message` (what a
handler receives), :class:`PoisonMessage` (raise it for a message that can
never succeed), :class:`DownstreamUnavailable` (raise it when the downstream is down: the
consumer pauses receiving and probes before it resumes), :class:`ConfigurationError` (a setting that keeps the consumer
from starting: raise it from a handler's ``setup`` check to refuse to start),
:class:`WorkerContract` (the derived timings), :class:`Sample` (a sample message a handler declares with
``@worker(samples=...)``, for the local tools and tests), :class:`BatchResult` (what a batch handler,
``@worker(max_batch=...)``, returns: each message's outcome).

Importing this package imports the standard library only: the CDK app imports
handlers to read their declaration, and must never pull in runtime code.
"""

from consumer.batch import BatchResult
from consumer.contract import WorkerContract
from consumer.declaration import Sample, worker
from consumer.errors import ConfigurationError, ContractError
from consumer.message import DownstreamUnavailable, Message, PoisonMessage

__all__ = [
    "BatchResult",
    "ConfigurationError",
    "ContractError",
    "DownstreamUnavailable",
    "Message",
    "PoisonMessage",
    "Sample",
    "WorkerContract",
    "worker",
]
