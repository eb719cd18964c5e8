"""The declaration: ``@worker`` next to a handler's code, and finding it again (``contract_of``, ``load_handler``).

``@worker(...)`` builds the handler's :class:`~consumer.contract.WorkerContract` (validated there) and keeps it on
the function, with what belongs beside the contract rather than in it (``setup=``, ``non_retryable=``: no timing
depends on them, and types do not serialize into the environment; ``max_rate=``, ``error_text=``: no
infrastructure value or drift check depends on them; ``samples=``: example messages for the local tools and
tests, see :class:`Sample`).
Standard library only, like the contract.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeVar

from consumer.contract import WorkerContract
from consumer.errors import ContractError
from consumer.limits import LEASE_CAP_SECONDS, MAX_CONCURRENCY, SOURCE_MAX_MESSAGE_BYTES, SQS_MAX_BATCH

HANDLER_ATTRIBUTE = "__worker_contract__"
SETUP_ATTRIBUTE = "__worker_setup__"
NON_RETRYABLE_ATTRIBUTE = "__worker_non_retryable__"
MAX_RATE_ATTRIBUTE = "__worker_max_rate__"
ERROR_TEXT_ATTRIBUTE = "__worker_error_text__"
#: ``error_text``: what the runtime writes of an exception in DLQ reasons and logs (see :func:`worker`).
ErrorText = Literal["include", "omit"]
ERROR_TEXT_CHOICES: tuple[ErrorText, ...] = ("include", "omit")
#: ``max_rate`` bounds, in handler starts per second: below one start in ~17 minutes a message would outlive
#: any lease waiting for its turn; above 10,000 a process cannot start handlers that fast anyway.
MAX_RATE_MIN, MAX_RATE_MAX = 0.001, 10_000
SAMPLES_ATTRIBUTE = "__worker_samples__"
#: Room a sample body leaves under the source queue's size limit for the attributes the local tools send it with
#: (its idempotency key and trace header: under 200 bytes with their names and types).
SAMPLE_ATTRIBUTE_HEADROOM_BYTES = 1_024
SAMPLE_MAX_BYTES = SOURCE_MAX_MESSAGE_BYTES - SAMPLE_ATTRIBUTE_HEADROOM_BYTES


@dataclass(frozen=True)
class Sample:
    """A message body the handler is written for, declared next to it with ``@worker(samples=...)``.

    ``poison=True`` marks a body the handler must refuse at its first receive (it raises
    :class:`~consumer.PoisonMessage` or a type it declares ``non_retryable``): ``python -m consumer local send
    --poison`` sends those, and the local demo expects each in the DLQ with a reason; every other sample must be
    processed. A plain string in ``samples`` is ``Sample(body)``.

    Example::

        @worker(
            max_duration=timedelta(seconds=45),
            samples=('{"invoice_id": "inv-0001", "total": "12.50"}', Sample('{"total": "1.00"}', poison=True)),
        )
        def handle(message: Message) -> None: ...
    """

    body: str
    poison: bool = False


def seconds(parameter: str, value: object) -> int:
    """Whole seconds from a ``timedelta`` or a number, rounded up (more time is the safe side).

    >>> seconds("max_duration", timedelta(minutes=1, milliseconds=1))
    61
    """
    if isinstance(value, timedelta):
        return math.ceil(value.total_seconds())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ContractError(parameter, "must be a timedelta or a number of seconds", value)
    if not math.isfinite(value):
        raise ContractError(parameter, "must be a finite number of seconds", value)
    return math.ceil(value)


F = TypeVar("F", bound=Callable[..., Any])


def worker(
    *,
    max_duration: timedelta | float,
    concurrency: int = 1,
    batch_size: int = SQS_MAX_BATCH,
    max_receive_count: int = 5,
    fifo: bool = False,
    content_based_deduplication: bool = False,
    fair_queue: bool = False,
    idempotent: bool = False,
    max_batch: int | None = None,
    batch_window: timedelta | float = 0,
    acceptable_latency: timedelta | float = 60,
    average_duration: timedelta | float | None = None,
    retry_backoff_base: timedelta | float = 2,
    retry_backoff_max: timedelta | float = 300,
    max_lease: timedelta | float = LEASE_CAP_SECONDS,
    stop_timeout: timedelta | float | None = None,
    setup: Callable[[Mapping[str, str]], object] | None = None,
    non_retryable: tuple[type[Exception], ...] = (),
    max_rate: float | None = None,
    error_text: ErrorText = "include",
    samples: Sequence[str | Sample] = (),
) -> Callable[[F], F]:
    """Declare a handler's contract next to its code; the function itself is returned unchanged.

    Durations take a ``timedelta`` or a number of seconds (rounded up).

    ``idempotent=True`` says the handler is idempotent by itself: running it twice for one message has the effect
    of running it once (an upsert keyed by the message, a downstream that deduplicates on the idempotency key).
    The runtime then runs no idempotency guard (no claim before the handler, no completion after it) and the stack
    creates no DynamoDB table for the worker. It is part of the contract: the stack and the handler must agree.

    ``setup`` is the handler's start-up check: ``python -m consumer run`` calls ``setup(environ)``
    once, with the process environment, before it reaches AWS or receives anything; raising
    :class:`ConfigurationError` refuses to start (exit 2, that one line). It is not part of the
    contract: it changes no timing, no :meth:`WorkerContract.to_env` value and no drift check, and
    synth never calls it.

    ``non_retryable`` are the exception types (subclasses included) that mean the message can never
    succeed, as Shoryuken's ``non_retryable_exceptions``: a handler raising one sends the message to
    the DLQ at its first receive, as ``PoisonMessage`` does, with kind ``non_retryable`` and the
    exception's type and text as reason, without spending the retry budget. Like ``setup`` it is kept
    beside the contract, not in it.
    ``max_rate`` (handler starts per second, default None: no limit) paces the handler for a
    rate-limited downstream: at most that many starts in any second, per process, across its worker
    threads. Beside the contract like ``setup``: it is read from the handler in the image, where it
    applies, and no queue, alarm or task setting derives from it (with several tasks, the downstream
    sees up to ``max_rate`` times the task count).
    ``error_text`` says what the runtime writes of an exception the handler raised, in the DLQ reason (retries
    exhausted, a ``non_retryable`` type) and in log lines: ``"include"`` (the default) its type and text, as
    ``str(error)`` gives it; ``"omit"`` its type and where the handler's code raised it (file:line and function),
    never its text, which often holds a value from the message (personal data a sender chose). A
    ``PoisonMessage(reason)`` or ``DownstreamUnavailable`` reason is written as the handler's author wrote it either
    way. Beside the contract like ``max_rate``.
    ``samples`` are message bodies the handler is written for (a string, or a :class:`Sample` marked
    ``poison=True`` for one it must refuse): ``python -m consumer local send`` and the local demo send them, and
    :func:`consumer.testing.send_samples` puts them on a test's queue. Checked here (each a non-empty string SQS
    accepts as a body, within the source queue's size limit); beside the contract too, never in the image's
    environment.

    Example::

        def check(environ: Mapping[str, str]) -> None:
            if not environ.get("NOTIFY_WEBHOOK_URL"):
                raise ConfigurationError("NOTIFY_WEBHOOK_URL", "must be set", None)

        @worker(max_duration=timedelta(seconds=90), concurrency=8, setup=check)
        def handle(message: Message) -> None: ...
    """
    if setup is not None and not callable(setup):
        raise ContractError("setup", "must be a function taking the environment (a Mapping[str, str]), or None", setup)
    check_non_retryable(non_retryable)
    check_error_text(error_text)
    if max_rate is not None and (
        isinstance(max_rate, bool)
        or not isinstance(max_rate, (int, float))
        or not MAX_RATE_MIN <= max_rate <= MAX_RATE_MAX
    ):
        rule = f"must be a number of handler starts per second between {MAX_RATE_MIN} and {MAX_RATE_MAX}, or None"
        raise ContractError("max_rate", rule, max_rate)
    declared_samples = check_samples(samples)
    try:
        contract = WorkerContract(
            max_duration_seconds=seconds("max_duration", max_duration),
            concurrency=concurrency,
            batch_size=batch_size,
            max_receive_count=max_receive_count,
            fifo=fifo,
            content_based_deduplication=content_based_deduplication,
            fair_queue=fair_queue,
            idempotent=idempotent,
            max_batch=max_batch,
            batch_window_seconds=seconds("batch_window", batch_window),
            # Known once the function is: checked again then (declare), with the bounds of its shape.
            asynchronous=isinstance(concurrency, int) and concurrency > MAX_CONCURRENCY,
            acceptable_latency_seconds=seconds("acceptable_latency", acceptable_latency),
            average_duration_seconds=None
            if average_duration is None
            else seconds("average_duration", average_duration),
            retry_backoff_base_seconds=seconds("retry_backoff_base", retry_backoff_base),
            retry_backoff_max_seconds=seconds("retry_backoff_max", retry_backoff_max),
            max_lease_seconds=seconds("max_lease", max_lease),
            stop_timeout_seconds=None if stop_timeout is None else seconds("stop_timeout", stop_timeout),
        )
    except ContractError as error:  # name what the author wrote: max_duration, not max_duration_seconds
        raise type(error)(worker_argument(error.parameter), error.rule, error.value) from None
    if max_rate is not None:
        check_rate_fits_the_lease(contract, max_rate)

    def declare(function: F) -> F:
        shaped = with_shape(contract, function, max_rate)
        setattr(function, HANDLER_ATTRIBUTE, shaped)
        setattr(function, SETUP_ATTRIBUTE, setup)  # beside the contract, never in it: no timing depends on it
        setattr(function, NON_RETRYABLE_ATTRIBUTE, non_retryable)  # likewise; and a type has no environment form
        setattr(function, MAX_RATE_ATTRIBUTE, max_rate)  # beside it too: see the docstring
        setattr(function, ERROR_TEXT_ATTRIBUTE, error_text)  # beside it: what the runtime logs, nothing else
        setattr(function, SAMPLES_ATTRIBUTE, declared_samples)  # beside it: examples for the tools, no setting
        return function

    return declare


def with_shape(contract: WorkerContract, function: Callable[..., Any], max_rate: float | None) -> WorkerContract:
    """``contract`` for ``function``'s shape: ``asynchronous`` when it is an ``async def``, checked again with the
    bounds of that shape (a thread count for a ``def``, coroutines for an ``async def``)."""
    asynchronous = inspect.iscoroutinefunction(function)
    if max_rate is not None and (asynchronous or contract.max_batch is not None):
        shape = "an async def handler" if asynchronous else "a batch handler (max_batch)"
        raise ContractError(
            "max_rate", f"is not supported for {shape} yet: pace the downstream in the handler", max_rate
        )
    if asynchronous == contract.asynchronous:
        return contract
    try:
        return dataclasses.replace(contract, asynchronous=asynchronous)
    except ContractError as error:
        raise type(error)(worker_argument(error.parameter), error.rule, error.value) from None


def worker_argument(field: str) -> str:
    """The ``@worker`` argument a contract field comes from (``max_duration_seconds``: ``max_duration``)."""
    argument = field.removesuffix("_seconds")
    return argument if argument in inspect.signature(worker).parameters else field


def contract_of(handler: Callable[..., Any], parameter: str = "handler") -> WorkerContract:
    """The contract a handler declared with :func:`worker`."""
    contract = getattr(handler, HANDLER_ATTRIBUTE, None)
    if not isinstance(contract, WorkerContract):
        name = getattr(handler, "__qualname__", repr(handler))
        raise ContractError(parameter, "must be decorated with @worker(max_duration=...)", name)
    return contract


def setup_of(handler: Callable[..., Any]) -> Callable[[Mapping[str, str]], object] | None:
    """The start-up check a handler declared with ``@worker(..., setup=check)``, or None."""
    return getattr(handler, SETUP_ATTRIBUTE, None)


def non_retryable_of(handler: Callable[..., Any]) -> tuple[type[Exception], ...]:
    """The exception types a handler declared with ``@worker(..., non_retryable=(...))``; empty if none."""
    declared: tuple[type[Exception], ...] = getattr(handler, NON_RETRYABLE_ATTRIBUTE, ())
    return declared


def check_non_retryable(value: object) -> None:
    """Refuse anything but a tuple of ``Exception`` subclasses.

    A ``BaseException`` that is not an ``Exception`` (``SystemExit``, ``KeyboardInterrupt``) is refused: it
    says the process or the thread is ending, not that the message is bad, so it must never dead-letter one.
    """
    rule = "must be a tuple of Exception subclasses, such as (KeyError, ValueError)"
    if not isinstance(value, tuple):
        raise ContractError("non_retryable", rule, value)
    for entry in value:
        if not (isinstance(entry, type) and issubclass(entry, Exception)):
            name = entry.__name__ if isinstance(entry, type) else repr(entry)
            raise ContractError("non_retryable", f"{rule}; {name} is not one", value)


def check_error_text(value: object) -> None:
    """Refuse anything but ``"include"`` or ``"omit"``."""
    if not (isinstance(value, str) and value in ERROR_TEXT_CHOICES):
        rule = 'must be "include" (an exception\'s type and text) or "omit" (its type and where the handler raised it)'
        raise ContractError("error_text", rule, value)


def error_text_of(handler: Callable[..., Any]) -> ErrorText:
    """What a handler declared with ``@worker(..., error_text=...)``: ``"include"`` unless it declared ``"omit"``."""
    return "omit" if getattr(handler, ERROR_TEXT_ATTRIBUTE, "include") == "omit" else "include"


def check_rate_fits_the_lease(contract: WorkerContract, max_rate: float) -> None:
    """Refuse a ``max_rate`` under which a received message could wait for its turn past its lease.

    A message waits for its start holding its slot, and up to ``concurrency`` messages wait in line, the last one
    ``concurrency / max_rate`` seconds. The heartbeat extends only started messages, so that wait must end while the
    lease still leaves the heartbeat its threshold; past it the message turns visible again, another task receives it
    and its receive count rises without an attempt.
    """
    wait = contract.concurrency / max_rate
    room = contract.visibility_timeout_seconds - contract.heartbeat_threshold_seconds
    if wait > room:
        raise ContractError(
            "max_rate",
            f"must start every held message within its lease: concurrency {contract.concurrency} / max_rate"
            f" {max_rate:g} = {wait:g} s of waiting is more than the {room} s the {contract.visibility_timeout_seconds} s"
            f" visibility timeout leaves before the heartbeat's {contract.heartbeat_threshold_seconds} s threshold"
            " (raise max_rate, lower concurrency, or raise max_duration or max_lease)",
            max_rate,
        )


def max_rate_of(handler: Callable[..., Any]) -> float | None:
    """The handler starts per second a handler declared with ``@worker(..., max_rate=N)``, or None (no limit)."""
    rate = getattr(handler, MAX_RATE_ATTRIBUTE, None)
    return rate if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None


def samples_of(handler: Callable[..., Any]) -> tuple[Sample, ...]:
    """The sample messages a handler declared with ``@worker(..., samples=(...))``, as :class:`Sample`; empty if none."""
    declared: tuple[Sample, ...] = getattr(handler, SAMPLES_ATTRIBUTE, ())
    return declared


def check_samples(value: object) -> tuple[Sample, ...]:
    """``value`` as a tuple of :class:`Sample`; :class:`ContractError` naming ``samples`` for anything else.

    A body must be a non-empty string of the characters SQS accepts in a message body, at most
    :data:`SAMPLE_MAX_BYTES` in UTF-8: a sample SQS would refuse, or store with characters replaced, would not reach
    the handler as declared.
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html (MessageBody)
    """
    rule = 'must be a tuple of message bodies (str) or Sample(body, poison=True), such as (\'{"id": "1"}\',)'
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise ContractError("samples", rule, value)
    samples = []
    for index, entry in enumerate(value):
        sample = Sample(entry) if isinstance(entry, str) else entry
        if not isinstance(sample, Sample) or not isinstance(sample.body, str) or not isinstance(sample.poison, bool):
            raise ContractError("samples", f"{rule}; entry {index} is not one", entry)
        if not sample.body:
            raise ContractError(
                "samples", f"must hold non-empty bodies (SQS sends none); entry {index} is empty", entry
            )
        refused = next((c for c in sample.body if not _sqs_body_character(c)), None)
        if refused is not None:
            raise ContractError(
                "samples",
                f"must hold only characters SQS accepts in a message body; entry {index} has U+{ord(refused):04X}",
                _shown(sample.body),
            )
        size = len(sample.body.encode("utf-8"))
        if size > SAMPLE_MAX_BYTES:
            raise ContractError(
                "samples",
                f"must hold bodies of at most {SAMPLE_MAX_BYTES} bytes; entry {index} has {size}",
                _shown(sample.body),
            )
        samples.append(sample)
    return tuple(samples)


def _sqs_body_character(character: str) -> bool:
    """Whether SQS accepts ``character`` in a message body: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
    #x10000-#x10FFFF (the XML 1.0 character range)."""
    code = ord(character)
    return code in (0x9, 0xA, 0xD) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or 0x10000 <= code <= 0x10FFFF


def _shown(body: str) -> str:
    """A body as an error shows it: its first 60 characters."""
    return body if len(body) <= 60 else body[:59] + "…"


def load_handler(spec: str, parameter: str = "handler") -> Callable[..., Any]:
    """Import ``package.module:function`` and return the function (it must carry a contract).

    >>> load_handler("consumer.examples.notifications:handle").__name__
    'handle'
    """
    module_name, sep, attribute = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if module_name.startswith("."):  # importlib would raise TypeError: a relative name has no package to start from
        raise ContractError(
            parameter, 'must name an absolute module ("package.module:function"), not a relative one', spec
        )
    if not sep or not all(part.isidentifier() for part in module_name.split(".")) or not attribute.isidentifier():
        raise ContractError(parameter, 'must look like "package.module:function"', spec)
    # Whatever the module does wrong on import ends here as one ContractError: the consumer's start-up and
    # synth both print it as one line naming the setting, never as the module's traceback.
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ContractError(parameter, f"names a module that cannot be imported ({error})", spec) from error
    except SyntaxError as error:
        where = f"{error.filename}, line {error.lineno}: {error.msg}"
        raise ContractError(parameter, f"names a module with a syntax error ({where})", spec) from error
    except (Exception, SystemExit) as error:  # a module calling sys.exit() on import must not end the process silently
        raised = f"raised {type(error).__name__} when imported ({' '.join(str(error).split())})"
        raise ContractError(parameter, f"names a module that {raised}", spec) from error
    handler: object = getattr(module, attribute, None)
    if not callable(handler):
        raise ContractError(parameter, f"names no function {attribute!r} in {module_name}", spec)
    contract_of(handler, parameter)
    return handler
