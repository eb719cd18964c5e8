"""What a batch handler returns: the outcome of each message of its batch.

A batch handler (``@worker(max_batch=...)``) takes a list of :class:`~consumer.Message` and returns a
:class:`BatchResult` naming each message's outcome. The rule: **a message the result does not name as succeeded is
never deleted**. A message it names as failed is settled as if a one-message handler had raised that error (retried
after a backoff, to the DLQ on its last receive with the error as reason, at once for a :class:`~consumer.PoisonMessage`
or a declared ``non_retryable`` type, handed back with the circuit opened for a
:class:`~consumer.DownstreamUnavailable`); a message it does not name at all, or every message when the handler
returns anything but a :class:`BatchResult`, is retried like a failure whose reason says so. So forgetting a message
can cost it a retry, never its loss; and raising from the handler applies that error to the whole batch.

Standard library only, like the rest of the public API.

Example::

    @worker(max_duration=timedelta(seconds=60), concurrency=2, max_batch=100, batch_window=timedelta(seconds=2))
    def handle(messages: list[Message]) -> BatchResult:
        result, rows = BatchResult(), []
        for message in messages:
            try:
                rows.append((message, json.loads(message.body)))
            except ValueError as error:
                result.poison(message, f"body is not JSON: {error}")
        insert_all([row for _, row in rows])  # raises: the whole batch is retried
        return result.succeeded(*(message for message, _ in rows))
"""

from __future__ import annotations

from collections.abc import Iterator

from consumer.message import Message, PoisonMessage


class UnreportedMessage(Exception):
    """The error a message is retried with when its batch handler did not report it (see :class:`BatchResult`)."""


class BatchResult:
    """Each message's outcome, as a batch handler reports it; see the module's docstring for the rule.

    ``succeeded`` deletes, ``failed(message, error)`` settles ``message`` as a one-message handler raising ``error``
    would, ``poison(message, reason)`` is ``failed(message, PoisonMessage(reason))``. Each returns the result, so
    ``return BatchResult().succeeded(*messages)`` reports a whole batch done. Naming one message twice raises
    ``ValueError`` at once: two outcomes for one message is a bug in the handler, not a choice the runtime can make.
    """

    __slots__ = ("_outcomes",)

    def __init__(self) -> None:
        #: id(message) -> (message, error); error None: succeeded. The message is kept, so its id stays its own.
        self._outcomes: dict[int, tuple[Message, BaseException | None]] = {}

    def succeeded(self, *messages: Message) -> BatchResult:
        for message in messages:
            self._report(message, None)
        return self

    def failed(self, message: Message, error: BaseException) -> BatchResult:
        if not isinstance(error, BaseException):
            raise TypeError(f"BatchResult.failed: error must be an exception, not {type(error).__name__}")
        self._report(message, error)
        return self

    def poison(self, message: Message, reason: str) -> BatchResult:
        return self.failed(message, PoisonMessage(reason))

    def outcome(self, message: Message) -> tuple[bool, BaseException | None]:
        """(reported, error): whether ``message`` was reported, and the error it failed with (None: succeeded)."""
        entry = self._outcomes.get(id(message))
        if entry is None or entry[0] is not message:
            return False, None
        return True, entry[1]

    def reported(self) -> Iterator[Message]:
        """Every message reported, in the order reported."""
        return (message for message, _ in self._outcomes.values())

    def __len__(self) -> int:
        return len(self._outcomes)

    def _report(self, message: Message, error: BaseException | None) -> None:
        if not isinstance(message, Message):
            raise TypeError(f"BatchResult: expected a Message of the batch, not {type(message).__name__}")
        previous = self._outcomes.get(id(message))
        if previous is not None:
            was = "succeeded" if previous[1] is None else f"failed ({type(previous[1]).__name__})"
            raise ValueError(f"BatchResult: message {message.message_id} is reported twice: it already {was}")
        self._outcomes[id(message)] = (message, error)
