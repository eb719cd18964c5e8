"""What every ``dlq`` command runs on: its AWS calls and errors, its lease on the messages it received,
the run's start on SQS's own clock, interrupts held back while a step must not be cut, and the protocol a
pass reports its progress through.

Every reading of the time and every wait goes through a :class:`~consumer.runtime.clock.Clock` (the runtime's),
the machine's (:data:`~consumer.runtime.clock.SYSTEM`) unless the caller passes another: a test runs the tools on
the simulated world's clock (``bench/sim``), where a lease or a long poll passes without waiting for it.

None of this is a command and none of it shows anything but a warning line on stderr: typer and rich stay
in ``consumer/ops/commands.py``, which builds the commands from these parts and draws the progress.
"""

from __future__ import annotations

import math
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from consumer.limits import SQS_MAX_BATCH
from consumer.runtime.aws_errors import error_code, is_missing_queue
from consumer.runtime.clock import SYSTEM, Clock

T = TypeVar("T")

#: Long poll of every receive: any wait > 0 asks every SQS server, so an empty answer means "nothing left".
RECEIVE_WAIT_SECONDS = 1
#: Receives in a row that bring back nothing a pass can use (only messages it already saw, or, for a
#: redrive, only ones that arrived after it started) before the pass ends.
MAX_STALE_RECEIVES = 3
#: The commands' botocore client settings (``queues.make_client``); STEP_SECONDS is derived from them.
CONNECT_TIMEOUT_SECONDS = 2
READ_TIMEOUT_SECONDS = 10
MAX_ATTEMPTS = 2
#: The longest one step can take (a send and its delete, or a write and its delete): two calls, each tried
#: MAX_ATTEMPTS times up to both timeouts, plus botocore's backoff before its one retry (under 1 s) and slack.
#: A message whose lease could end sooner is extended before the step, so its delete's receipt handle is good.
STEP_SECONDS = 2 * MAX_ATTEMPTS * (CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS) + 5
#: How often the run's start asks SQS the time until its clock turns to the next second, for at most
#: CLOCK_TICK_WAIT_SECONDS.
CLOCK_POLL_SECONDS = 0.1
CLOCK_TICK_WAIT_SECONDS = 1.5


# --- AWS calls and their errors -------------------------------------------------------


class AwsFailure(Exception):
    """An AWS call failed; the message names the operation and the queue (or stack), ``code`` is AWS's error code
    (``""`` when the call failed without one)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class UsageError(Exception):
    """The command cannot run as asked (no queue named, a bad input file...); refused before anything moved."""


def warn(text: str) -> None:
    """One line on stderr, beside whatever the command prints on stdout."""
    print(text, file=sys.stderr, flush=True)


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line of at most ``limit`` characters (an HTML error page's tags dropped)."""
    text = re.sub(r"<[^>]+>", " ", text)  # an HTML error page (a proxy, or moto's 500)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def explain(error: Exception) -> str:
    """One line saying what an AWS error means."""
    if isinstance(error, ClientError):
        code = error_code(error)
        if is_missing_queue(error):
            return "the queue does not exist (check the URL, the account and the region)"
        message = one_line(str(error.response.get("Error", {}).get("Message", "")))
        return f"{code}: {message}" if message else code or one_line(str(error))
    return one_line(str(error))


def entry_failure(failure: Mapping[str, Any]) -> str:
    """A batch call's per-entry failure as ``Code: Message``."""
    return f"{failure.get('Code')}: {failure.get('Message', '')}"


def aws(client: Any, operation: str, target: str, **kwargs: Any) -> Any:
    """Call ``operation`` (e.g. ``"ReceiveMessage"``); an AWS error becomes :class:`AwsFailure` naming it."""
    from botocore import xform_name

    try:
        return getattr(client, xform_name(operation))(**kwargs)
    except (ClientError, BotoCoreError) as error:
        raise AwsFailure(f"{operation} on {target} failed: {explain(error)}", error_code(error)) from None


def chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- interrupts -----------------------------------------------------------------------


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the command.

    A KeyboardInterrupt (a BaseException), so that nothing catching ``Exception``, botocore's retries
    among them, can swallow it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class Interrupts:
    """SIGINT and SIGTERM while a command runs: raised as :class:`Interrupted` at once, or, inside
    :meth:`step`, as soon as the step is done.

    A step is what must never be cut in two: a batch's send and the delete of its originals, or an
    export's write and fsync and the delete (cut between the two, a message would be in two places);
    and a receive and the noting of what it hid (cut, those messages would stay hidden for their lease).
    Signal handlers are process-wide, and so is this (the module's ``interrupts``); off the main thread,
    where Python lets no one install a handler, it changes nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._holding = False
        self._pending: int | None = None

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._on_signal) for signum in self.SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self._previous, self._holding, self._pending = {}, False, None

    def _on_signal(self, signum: int, _frame: object) -> None:
        if not self._holding:
            raise Interrupted(signum)
        if self._pending is None:
            warn(f"{signal.Signals(signum).name} received: finishing the step under way, then stopping")
        self._pending = signum

    @contextmanager
    def step(self) -> Iterator[None]:
        """Hold SIGINT and SIGTERM back while the block runs; raise :class:`Interrupted` after it if one came."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._pending is not None:
            raise Interrupted(self._pending)


interrupts = Interrupts()


# --- one pass over a queue --------------------------------------------------------------


class Lease:
    """The messages one pass received and has not deleted; all released (visibility 0) when the pass ends.

    Keeping them hidden until the end is what stops a pass from receiving a
    message twice; a message seen again anyway (its visibility ran out) is not
    returned again, only its receipt handle is refreshed. Releasing them on the
    way out, also on Ctrl-C or an error, leaves them where they were; if even
    that fails, they reappear on their own after ``visibility`` seconds. ``clock`` times the leases.
    """

    def __init__(self, client: Any, queue_url: str, *, visibility: int, clock: Clock = SYSTEM) -> None:
        self.client = client
        self.queue_url = queue_url
        self.visibility = visibility
        self.clock = clock
        self.handles: dict[str, str] = {}
        #: When each held message's lease ends, on ``clock.monotonic()``, counted from before the call that set it.
        self.expires: dict[str, float] = {}
        self.seen: set[str] = set()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            failed = self.release(list(self.handles))
        except AwsFailure as failure:
            failed = len(self.handles)
            warn(f"warning: {failure}")
        if failed:
            warn(f"warning: {failed} message(s) could not be released; they reappear within {self.visibility} s")

    def receive(self, count: int) -> list[dict[str, Any]] | None:
        """Up to ``count`` messages new to this pass; None once the queue has nothing more for it.

        A receive that brings only messages already seen (held ones whose lease ran out) hides them
        again for ``visibility``; so the pass gives up only after enough such receives in a row to
        have re-hidden everything it holds, plus MAX_STALE_RECEIVES: many held messages reappearing
        at once must not end a pass while unseen ones wait behind them.
        """
        stale = 0
        while stale < MAX_STALE_RECEIVES + math.ceil(len(self.handles) / SQS_MAX_BATCH):
            # A step too: a signal during the call waits for its answer, so that the messages it hides
            # are known here and released on the way out, not left hidden until their lease ends.
            with interrupts.step():
                asked = self.clock.monotonic()
                response = aws(
                    self.client,
                    "ReceiveMessage",
                    self.queue_url,
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=max(1, min(SQS_MAX_BATCH, count)),
                    VisibilityTimeout=self.visibility,
                    WaitTimeSeconds=RECEIVE_WAIT_SECONDS,
                    MessageAttributeNames=["All"],
                    MessageSystemAttributeNames=["All"],
                )
                messages = response.get("Messages", [])
                for message in messages:
                    self.handles[message["MessageId"]] = message["ReceiptHandle"]
                    self.expires[message["MessageId"]] = asked + self.visibility
            if not messages:
                return None
            fresh = []
            for message in messages:
                if message["MessageId"] not in self.seen:
                    self.seen.add(message["MessageId"])
                    fresh.append(message)
            if fresh:
                return fresh
            stale += 1
        return None

    def handle(self, message: Mapping[str, Any]) -> str:
        return self.handles[message["MessageId"]]

    def _forget(self, message_id: str) -> None:
        self.handles.pop(message_id, None)
        self.expires.pop(message_id, None)

    @contextmanager
    def step(self, messages: list[dict[str, Any]]) -> Iterator[tuple[list[dict[str, Any]], list[tuple[str, str]]]]:
        """One step on ``messages`` that ends in their delete and must not be cut (see :class:`Interrupts`).

        Yields the messages whose lease lasts at least STEP_SECONDS more (extended if needed) and the
        (message id, why) of those SQS would not extend: their receipt handle is no longer good, so the
        step must leave them alone (they stay in the queue).
        """
        with interrupts.step():
            refused = self._extend(messages, STEP_SECONDS)
            gone = {message_id for message_id, _ in refused}
            yield [m for m in messages if m["MessageId"] not in gone], refused

    def _extend(self, messages: list[dict[str, Any]], seconds: float) -> list[tuple[str, str]]:
        now = self.clock.monotonic()
        short = [m for m in messages if self.expires[m["MessageId"]] - now < seconds]
        lease = max(self.visibility, math.ceil(seconds))
        refused: list[tuple[str, str]] = []
        for chunk in chunks(short, SQS_MAX_BATCH):
            entries = [
                {"Id": str(i), "ReceiptHandle": self.handle(m), "VisibilityTimeout": lease} for i, m in enumerate(chunk)
            ]
            asked = self.clock.monotonic()
            response = aws(
                self.client, "ChangeMessageVisibilityBatch", self.queue_url, QueueUrl=self.queue_url, Entries=entries
            )
            failed = {f["Id"]: entry_failure(f) for f in response.get("Failed", [])}
            for i, message in enumerate(chunk):
                if str(i) in failed:
                    refused.append((message["MessageId"], f"its lease could not be extended: {failed[str(i)]}"))
                else:
                    self.expires[message["MessageId"]] = asked + lease
        return refused

    def delete(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Delete ``messages`` from the queue; returns those SQS did not delete (still there)."""
        not_deleted: list[dict[str, Any]] = []
        for chunk in chunks(messages, SQS_MAX_BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": self.handle(m)} for i, m in enumerate(chunk)]
            response = aws(self.client, "DeleteMessageBatch", self.queue_url, QueueUrl=self.queue_url, Entries=entries)
            failed = {entry["Id"] for entry in response.get("Failed", [])}
            for i, message in enumerate(chunk):
                if str(i) in failed:
                    not_deleted.append(message)
                else:
                    self._forget(message["MessageId"])
        return not_deleted

    def release(self, message_ids: list[str]) -> int:
        """Make these messages visible again now; returns how many SQS refused."""
        failed = 0
        for chunk in chunks([i for i in message_ids if i in self.handles], SQS_MAX_BATCH):
            entries = [
                {"Id": str(n), "ReceiptHandle": self.handles[message_id], "VisibilityTimeout": 0}
                for n, message_id in enumerate(chunk)
            ]
            response = aws(
                self.client, "ChangeMessageVisibilityBatch", self.queue_url, QueueUrl=self.queue_url, Entries=entries
            )
            failed += len(response.get("Failed", []))
            for message_id in chunk:
                self._forget(message_id)
        return failed


# --- the run's start, on SQS's clock -------------------------------------------------------


@dataclass(frozen=True)
class RunStart:
    """When a run started, in SQS's time, and the local monotonic reading of that moment (on ``clock``, which
    the run goes on reading)."""

    sqs_ms: int  #: milliseconds since the epoch, as SQS's SentTimestamp counts
    monotonic: float
    from_sqs: bool = True  #: False: this machine's clock (the endpoint sent no Date header)
    clock: Clock = field(default=SYSTEM, repr=False, compare=False)

    def sqs_now(self) -> float:
        """Now in SQS's time, seconds since the epoch."""
        return self.sqs_ms / 1000 + (self.clock.monotonic() - self.monotonic)

    def arrived_after(self, message: Mapping[str, Any]) -> bool:
        """Whether SQS took ``message`` in after the start (its SentTimestamp, SQS's clock too)."""
        sent = str(message.get("Attributes", {}).get("SentTimestamp", ""))
        return sent.isdigit() and int(sent) >= self.sqs_ms


def _server_time(response: Mapping[str, Any]) -> float | None:
    header = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return parsedate_to_datetime(header).timestamp() if header else None
    except (TypeError, ValueError):
        return None


def start_on_sqs_clock(
    read: Callable[[], Mapping[str, Any]], clock: Clock = SYSTEM
) -> tuple[RunStart, Mapping[str, Any]]:
    """The run's start on SQS's clock, and what ``read`` (one call to SQS) answered at that moment.

    A message's SentTimestamp is SQS's clock. Compared with this machine's, clock skew would let a run
    move again a message that arrived during it (this clock ahead) or leave one that was there (behind).
    The Date header of SQS's answers is SQS's clock to the second, so ``read`` is repeated every
    CLOCK_POLL_SECONDS until that second turns, and the new second is the start: exact to a round trip
    plus the poll interval, for at most about a second spent. Without a Date header (not SQS), this
    machine's clock (``from_sqs`` False); without a turn in CLOCK_TICK_WAIT_SECONDS, the second after
    the first answer's. ``clock`` is this machine's time and what the polls wait on.
    """
    response = read()
    first = _server_time(response)
    if first is None:
        start = RunStart(sqs_ms=int(clock.time() * 1000), monotonic=clock.monotonic(), from_sqs=False, clock=clock)
        return start, response
    deadline = clock.monotonic() + CLOCK_TICK_WAIT_SECONDS
    while clock.monotonic() < deadline:
        clock.sleep(CLOCK_POLL_SECONDS)
        response = read()
        now = _server_time(response)
        if now is not None and now > first:
            return RunStart(sqs_ms=int(now * 1000), monotonic=clock.monotonic(), clock=clock), response
    return RunStart(sqs_ms=int((first + 1) * 1000), monotonic=clock.monotonic(), clock=clock), response


# --- progress -----------------------------------------------------------------------------


class Progress(Protocol):
    """How far a pass is. The logic says; the command layer shows it (a rich bar, or a line now and then)."""

    def advance(self, count: int) -> None: ...

    def update(self, completed: int, total: int | None = None) -> None: ...


class ProgressFactory(Protocol):
    """Opens the progress of one pass: ``label``, ``total`` (None: unknown), what is counted (``unit``) and
    ``detail``, a callable saying more on demand (e.g. "moved 3, skipped by filter 1")."""

    def __call__(
        self, label: str, total: int | None, *, unit: str, detail: Callable[[], str] = ...
    ) -> AbstractContextManager[Progress]: ...
