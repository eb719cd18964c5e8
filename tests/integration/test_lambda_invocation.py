"""The Lambda target's runtime: :class:`consumer.runtime.invocation.LambdaWorker` behind the local event source
mapping's loop (consumer/local/mapping.py), on moto and the simulated clock, so every backoff, timeout and lease
passes in virtual time.

Each test plays the mapping as AWS documents it (receive, invoke with the records, delete what the answer does not
list) and asserts where each message ends: deleted, in the DLQ with its reason, or back in the queue when it should.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from bench.sim.aws import REGION
from consumer import BatchResult, DownstreamUnavailable, Message, PoisonMessage, worker
from consumer.contract import WorkerContract
from consumer.local.mapping import EventSourceMapping, Invoked
from consumer.runtime.consumer import Collaborators
from consumer.runtime.dead_letter import REASON_ATTRIBUTE
from consumer.runtime.idempotency import InMemoryStore
from consumer.runtime.invocation import Binding, LambdaWorker
from consumer.runtime.wiring import Queues
from tests.integration.conftest import QueuePair, create_pair
from tests.integration.support import create_table, fast_contract
from tests.integration.virtual import Virtual

#: The source's visibility in these tests: far longer than any backoff, so a message back in the queue within
#: seconds came back because the function said so.
VISIBILITY_SECONDS = 120
#: The function's timeout in these tests (the mapping's context starts with it).
TIMEOUT_SECONDS = 30.0


class Lambda:
    """One function bound to a fresh queue pair on a :class:`Virtual` run: its worker and the mapping feeding it."""

    def __init__(
        self,
        virtual: Virtual,
        contract: WorkerContract,
        handler: Callable[..., Any],
        *,
        timeout_seconds: float = TIMEOUT_SECONDS,
        batch_size: int = 10,
        tracer: Any = None,
        on_stuck: Callable[[], None] = lambda: None,
    ) -> None:
        self.virtual = virtual
        sqs = virtual.sqs
        self.pair: QueuePair = create_pair(sqs, contract, VisibilityTimeout=str(VISIBILITY_SECONDS))
        arn = sqs.get_queue_attributes(QueueUrl=self.pair.queue_url, AttributeNames=["QueueArn"])["Attributes"]
        queue_arn = arn["QueueArn"]
        self.store = InMemoryStore(clock=virtual.sim.time)
        function_sqs = virtual.aws.client("sqs", caller="consumer", faults=False)
        self.worker = LambdaWorker(
            Binding(
                queues=Queues(client=function_sqs, queue_url=self.pair.queue_url, dlq_url=self.pair.dlq_url),
                queue_arn=queue_arn,
            ),
            contract=contract,
            handler=handler,
            collaborators=Collaborators(clock=virtual.sim, rng=random.Random(3), idempotency=self.store, tracer=tracer),
            on_stuck=on_stuck,
        )
        self.mapping = EventSourceMapping(
            client=virtual.aws.client("sqs", caller="mapping", faults=False),
            queue_url=self.pair.queue_url,
            queue_arn=queue_arn,
            region=REGION,
            function=self.worker.handle,
            batch_size=batch_size,
            timeout_seconds=timeout_seconds,
            clock=virtual.sim.monotonic,
            wait_seconds=1,
        )

    def send(self, *bodies: str, group: str | None = None) -> None:
        for body in bodies:
            extra: dict[str, Any] = {}
            if group is not None:
                extra = {"MessageGroupId": group, "MessageDeduplicationId": uuid.uuid4().hex}
            self.virtual.sqs.send_message(QueueUrl=self.pair.queue_url, MessageBody=body, **extra)

    def poll(self) -> Invoked:
        invoked = self.mapping.poll()
        assert invoked is not None, "the mapping received nothing"
        return invoked

    def dead_letters(self) -> dict[str, str]:
        """The DLQ's messages: body -> reason."""
        response = self.virtual.sqs.receive_message(
            QueueUrl=self.pair.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        )
        return {
            m["Body"]: json.loads(m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"])["reason"]
            for m in response.get("Messages", [])
        }

    def visible(self) -> list[str]:
        """The bodies visible in the source now (received with a 1 s lease)."""
        response = self.virtual.sqs.receive_message(
            QueueUrl=self.pair.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=1
        )
        return [m["Body"] for m in response.get("Messages", [])]

    def depth(self) -> int:
        """Messages in the source, visible or in flight."""
        attributes = self.virtual.sqs.get_queue_attributes(
            QueueUrl=self.pair.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def run(body: Callable[[Virtual], None]) -> None:
    virtual = Virtual()
    virtual.run(lambda: body(virtual))


def test_invocation_success_lists_nothing_and_the_mapping_deletes_all(aws_credentials: None) -> None:
    """Every record whose handler returned is left out of batchItemFailures, so the mapping deletes it."""
    seen: list[str] = []

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), lambda m: seen.append(m.body))
        function.send("a", "b", "c")
        invoked = function.poll()
        assert (sorted(invoked.deleted), invoked.failed_whole) == (sorted(invoked.message_ids), None)
        assert function.depth() == 0

    run(body)
    assert sorted(seen) == ["a", "b", "c"]


def test_invocation_failure_is_listed_and_comes_back_after_its_backoff(aws_credentials: None) -> None:
    """A handler that raises: its record is listed, and the function set its visibility to the backoff (1 s here),
    so it is back long before the queue's visibility."""

    def fail(message: Message) -> None:
        raise RuntimeError("downstream said no")

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), fail)
        function.send("x")
        invoked = function.poll()
        assert invoked.deleted == []
        virtual.sim.sleep(2.5)
        assert function.visible() == ["x"]

    run(body)


def test_invocation_poison_goes_to_the_dlq_with_its_reason(aws_credentials: None) -> None:
    """PoisonMessage: moved to the DLQ by the function with the handler's reason, and not listed."""

    def poison(message: Message) -> None:
        raise PoisonMessage("not an order")

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), poison)
        function.send("p")
        invoked = function.poll()
        assert invoked.deleted == invoked.message_ids
        assert function.dead_letters() == {"p": "not an order"}
        assert function.depth() == 0

    run(body)


def test_invocation_exhausted_message_goes_to_the_dlq_on_its_last_receive(aws_credentials: None) -> None:
    """A message failing on each of its max_receive_count receives is moved by the function on the last one."""

    def fail(message: Message) -> None:
        raise RuntimeError("still broken")

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(max_receive_count=3), fail)
        function.send("e")
        for _ in range(3):
            virtual.wait_until(lambda: function.mapping.poll() is not None, what="a receive")
        assert function.dead_letters() == {"e": "failed 3 times; last error: RuntimeError: still broken"}
        assert function.depth() == 0

    run(body)


def test_invocation_fifo_failure_stops_its_group_and_the_other_group_goes_on(aws_credentials: None) -> None:
    """FIFO: after a1 fails, a2 is not attempted (listed, its group blocked) while b1 of another group runs."""
    seen: list[str] = []

    def handle(message: Message) -> None:
        seen.append(message.body)
        if message.body == "a1" and seen.count("a1") == 1:
            raise RuntimeError("first try fails")

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(fifo=True, concurrency=2), handle)
        function.send("a1", "a2", group="a")
        function.send("b1", group="b")
        invoked = function.poll()
        assert len(invoked.message_ids) == 3 and len(invoked.deleted) == 1
        assert sorted(seen) == ["a1", "b1"]
        virtual.wait_until(lambda: function.mapping.poll() is not None and function.depth() == 0, what="a drained")

    run(body)
    assert seen[2:] == ["a1", "a2"]


def test_invocation_gives_up_on_a_handler_past_max_duration_and_lists_it(aws_credentials: None) -> None:
    """A handler past max_duration is given up on: the invocation answers without waiting for it, listing its record
    with no visibility change; its success after the invocation's end is recorded, so the redelivery after the
    queue's visibility is skipped as done, never run twice."""
    calls: list[str] = []

    def body(virtual: Virtual) -> None:
        def slow(message: Message) -> None:
            calls.append(message.body)
            virtual.sim.sleep(40)  # max_duration is 3 s, the function's timeout 30 s

        function = Lambda(virtual, fast_contract(), slow)
        function.send("s")
        started = virtual.sim.monotonic()
        invoked = function.poll()
        assert (invoked.deleted, invoked.failed_whole) == ([], None)
        assert virtual.sim.monotonic() - started < 5  # max_duration and a watch tick, not the handler's 40 s
        virtual.sim.sleep(45)
        assert function.visible() == []  # still in flight: the queue's visibility, not a backoff
        virtual.wait_until(lambda: function.mapping.poll() is not None, timeout=VISIBILITY_SECONDS, what="redelivery")
        assert function.depth() == 0

    run(body)
    assert calls == ["s"]


def test_invocation_late_success_within_the_invocation_is_deleted_by_the_function(aws_credentials: None) -> None:
    """A given-up handler that succeeds after the answer but while the record's lease lives: the function records its
    completion and deletes the message itself (the answer listed it)."""

    def body(virtual: Virtual) -> None:
        def slow(message: Message) -> None:
            virtual.sim.sleep(10)

        function = Lambda(virtual, fast_contract(), slow)
        function.send("s")
        invoked = function.poll()
        assert invoked.deleted == []
        virtual.sim.sleep(15)
        assert function.depth() == 0

    run(body)


def test_invocation_with_too_little_time_starts_nothing(aws_credentials: None) -> None:
    """An invocation whose remaining time (less the flush) is shorter than max_duration hands every record back
    (invocation_ending) without calling the handler; the message is back in the queue at once."""
    calls: list[str] = []

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), lambda m: calls.append(m.body), timeout_seconds=7.0)
        function.send("t")
        function.poll()
        assert function.visible() == ["t"]

    run(body)
    assert calls == []


def test_invocation_refuses_a_record_of_another_queue(aws_credentials: None) -> None:
    """A record whose eventSourceARN is not the bound queue's fails the invocation (nothing deleted)."""

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), lambda m: None)
        function.mapping.queue_arn = "arn:aws:sqs:us-east-1:123456789012:someone-else"
        function.send("o")
        invoked = function.poll()
        assert (invoked.deleted, (invoked.failed_whole or "").startswith("function error: ValueError")) == ([], True)

    run(body)


def test_invocation_batch_handler_lists_only_what_its_result_failed(aws_credentials: None) -> None:
    """A batch handler's BatchResult: the failed message is listed, the others deleted."""

    def handle(messages: list[Message]) -> BatchResult:
        result = BatchResult()
        for message in messages:
            if message.body == "bad":
                result.failed(message, RuntimeError("bad row"))
            else:
                result.succeeded(message)
        return result

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(max_batch=5, concurrency=1), handle, batch_size=5)
        function.send("ok1", "bad", "ok2")
        invoked = function.poll()
        assert len(invoked.message_ids) - len(invoked.deleted) == 1
        assert function.depth() == 1

    run(body)


def test_invocation_async_handler_runs_and_lists_its_failure(aws_credentials: None) -> None:
    """An async def handler runs on the invocation's event loop; a failure is listed as a thread's is."""

    async def handle(message: Message) -> None:
        await asyncio.sleep(0)
        if message.body == "bad":
            raise RuntimeError("async failure")

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(asynchronous=True), handle)
        function.send("ok", "bad")
        invoked = function.poll()
        assert len(invoked.deleted) == 1 and function.depth() == 1

    run(body)


def test_invocation_circuit_stays_open_for_the_environments_next_invocation(aws_credentials: None) -> None:
    """DownstreamUnavailable opens the environment's circuit: the next invocation starts nothing and hands its
    records back (copies delayed by the pause), not attempts."""
    calls: list[str] = []

    def handle(message: Message) -> None:
        calls.append(message.body)
        raise DownstreamUnavailable("payments API down", retry_after=60)

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(retry_backoff_max_seconds=300), handle)
        function.send("first")
        function.poll()
        function.send("second")
        function.poll()
        assert function.visible() == []  # both handed back as copies delayed by the pause

    run(body)
    assert calls == ["first"]


@pytest.mark.parametrize("shape", ["one", "batch"])
def test_invocation_duplicate_is_skipped_as_done(aws_credentials: None, shape: str) -> None:
    """A message whose work is recorded done (its idempotency key completed) is deleted without a second run."""
    calls: list[str] = []

    def one(message: Message) -> None:
        calls.append(message.body)

    def batch(messages: list[Message]) -> BatchResult:
        calls.extend(m.body for m in messages)
        return BatchResult().succeeded(*messages)

    def body(virtual: Virtual) -> None:
        contract = fast_contract() if shape == "one" else fast_contract(max_batch=5, concurrency=1)
        function = Lambda(virtual, contract, one if shape == "one" else batch)
        function.send("same")
        function.poll()
        function.send("same")
        invoked = function.poll()
        assert invoked.deleted == invoked.message_ids

    run(body)
    assert calls == ["same"]


def test_invocation_hands_back_at_its_end_what_could_not_start(aws_credentials: None) -> None:
    """The environment's only handler thread is still held by a handler given up on in an earlier invocation: the
    next invocation's record waits for it until the give-up, then is handed back (a copy, visible at once), not
    left listed for the queue's visibility."""
    calls: list[str] = []

    def body(virtual: Virtual) -> None:
        def handle(message: Message) -> None:
            calls.append(message.body)
            if message.body == "stuck":
                virtual.sim.sleep(300)

        function = Lambda(virtual, fast_contract(concurrency=1), handle)
        function.send("stuck")
        function.poll()
        function.send("next")
        started = virtual.sim.monotonic()
        invoked = function.poll()
        assert virtual.sim.monotonic() - started >= TIMEOUT_SECONDS - 5  # it waited for the thread until the give-up
        assert invoked.deleted == invoked.message_ids  # the copy is in the queue: the original is not listed
        assert function.visible() == ["next"]

    run(body)
    assert calls == ["stuck"]


def test_invocation_span_per_attempt_parented_on_the_trace_header_and_exported_before_the_answer(
    aws_credentials: None,
) -> None:
    """Traced: one span per attempt, its parent the record's AWSTraceHeader, exported by the time the function answers
    (a batch processor that would wait an hour: the invocation's export flushes it)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from consumer.runtime.tracing_spans import attempt_tracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000))
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), lambda m: None, tracer=attempt_tracer(provider))
        virtual.sqs.send_message(
            QueueUrl=function.pair.queue_url,
            MessageBody="traced",
            MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": header}},
        )
        function.poll()
        (span,) = exporter.get_finished_spans()
        assert span.parent is not None
        assert (f"{span.context.trace_id:032x}", f"{span.parent.span_id:016x}") == (
            "5759e988bd862e3fe1be46a994272793",
            "53995c3f42cd8ad8",
        )

    run(body)


def test_invocation_of_an_environment_whose_threads_are_all_stuck_ends_the_environment(aws_credentials: None) -> None:
    """Every handler thread still held by a handler given up on earlier: the next invocation ends the environment
    (on_stuck; the process exits STUCK) before it starts anything; a thread that returned frees the environment."""
    stuck: list[float] = []

    def body(virtual: Virtual) -> None:
        def handle(message: Message) -> None:
            if message.body == "stuck":
                virtual.sim.sleep(100)

        function = Lambda(
            virtual, fast_contract(concurrency=1), handle, on_stuck=lambda: stuck.append(virtual.sim.monotonic())
        )
        function.send("stuck")
        function.poll()
        function.send("next")
        function.poll()
        assert len(stuck) == 1
        virtual.sim.sleep(120)  # the stuck handler has returned
        function.send("later")
        function.poll()
        assert len(stuck) == 1

    run(body)


@worker(max_duration=3, concurrency=4, non_retryable=(ValueError,), error_text="omit")
def refuses_values(message: Message) -> None:
    raise ValueError(f"card number {message.body}")


def test_invocation_non_retryable_goes_to_the_dlq_at_once_without_its_text(aws_credentials: None) -> None:
    """A declared non_retryable error moves the message to the DLQ on its first receive; error_text="omit" keeps the
    error's text (a card number here) out of the reason, as in the container."""

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), refuses_values)
        function.send("4111111111111111")
        invoked = function.poll()
        assert invoked.deleted == invoked.message_ids
        (reason,) = function.dead_letters().values()
        assert (reason.startswith("ValueError at "), reason.endswith("(error text omitted)"), "4111" in reason) == (
            True,
            True,
            False,
        )

    run(body)


@worker(max_duration=3, concurrency=4, max_rate=2)
def paced(message: Message) -> None:
    PACED_STARTS.append(message.attempt.clock())


PACED_STARTS: list[float] = []


def test_invocation_max_rate_spaces_the_starts_of_one_environment(aws_credentials: None) -> None:
    """@worker(max_rate=2): four messages of one invocation start half a second apart, though four threads are free."""
    PACED_STARTS.clear()

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), paced)
        function.send("1", "2", "3", "4")
        invoked = function.poll()
        assert len(invoked.deleted) == len(invoked.message_ids)

    run(body)
    gaps = [round(b - a, 2) for a, b in zip(sorted(PACED_STARTS), sorted(PACED_STARTS)[1:], strict=False)]
    assert len(PACED_STARTS) == 4 and all(gap >= 0.5 for gap in gaps), gaps


def test_invocation_async_handler_past_max_duration_is_cancelled_and_listed(aws_credentials: None) -> None:
    """An async def handler past max_duration is cancelled at its deadline (CancelledError at its await): its record
    is listed and the invocation answers then, not after the handler's own 100 s."""
    cancelled: list[str] = []

    async def handle(message: Message) -> None:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            cancelled.append(message.body)
            raise

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(asynchronous=True), handle)
        function.send("slow")
        started = virtual.sim.monotonic()
        invoked = function.poll()
        assert (invoked.deleted, virtual.sim.monotonic() - started < 5) == ([], True)

    run(body)
    assert cancelled == ["slow"]


def test_invocation_answers_only_once_a_hand_back_under_way_is_done(aws_credentials: None) -> None:
    """A record handed back on a handler thread (too little time left to start it: a copy sent, then the original
    deleted) is not listed: the answer waits for that hand-back, since Lambda freezes the environment once the function
    answers, and the original, listed, would come back beside its copy (run twice without the guard)."""
    calls: list[str] = []

    def body(virtual: Virtual) -> None:
        def handle(message: Message) -> None:
            calls.append(message.body)
            virtual.sim.sleep(2.5)  # the next record's turn comes with 2.5 s left before the give-up (max_duration 3 s)

        function = Lambda(virtual, fast_contract(concurrency=1), handle, timeout_seconds=10.0)
        function.send("first", "second")
        virtual.aws.slow = {"sqs": (400.0, 400.0)}  # the copy's send spans the invocation's watch ticks
        invoked = function.poll()
        assert (sorted(invoked.deleted), invoked.failed_whole) == (sorted(invoked.message_ids), None)

    run(body)
    assert calls == ["first"]


def test_invocation_never_calls_a_handler_whose_claim_outlasts_the_give_up(aws_credentials: None) -> None:
    """A claim still under way at the give-up (a table answering in 6 s, the give-up 5 s in): the record is handed
    back at once (a copy), never given up on, and its handler is never called: called after the answer, it would run
    in the frozen environment's next invocation, beside the record's next receive."""
    calls: list[str] = []

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(concurrency=1), lambda m: calls.append(m.body), timeout_seconds=10.0)
        function.worker.idempotency = virtual.dynamodb_store(create_table(virtual.dynamodb))
        function.send("late")
        virtual.aws.slow = {"dynamodb": (3000.0, 3000.0)}
        invoked = function.poll()
        virtual.sim.sleep(15.0)  # the claim has long returned
        assert (invoked.deleted, function.visible()) == (invoked.message_ids, ["late"])

    run(body)
    assert calls == []


def test_invocation_hands_back_a_record_whose_claim_leaves_too_little_time_for_its_call(aws_credentials: None) -> None:
    """A claim that takes 2.4 s (a slow table) of the 5 s before the give-up: the handler would be called with less
    than its max_duration (3 s) left and given up on sooner; the record is handed back at once (a copy) instead, its
    handler never called."""
    calls: list[str] = []

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(concurrency=1), lambda m: calls.append(m.body), timeout_seconds=10.0)
        function.worker.idempotency = virtual.dynamodb_store(create_table(virtual.dynamodb))
        function.send("short")
        virtual.aws.slow = {"dynamodb": (1200.0, 1200.0)}
        invoked = function.poll()
        assert (invoked.deleted, function.visible()) == (invoked.message_ids, ["short"])

    run(body)
    assert calls == []


def test_invocation_answers_when_its_visibility_changes_raise_what_nothing_expects(aws_credentials: None) -> None:
    """Sending the visibility changes raises what no caller expects (a library's bug): the answer still goes back, so
    the poison record moved to the DLQ is deleted, not returned to be moved again; the failed one stays listed."""
    bodies: dict[str, str] = {}

    def handle(message: Message) -> None:
        bodies[message.message_id] = message.body
        raise PoisonMessage("bad") if message.body == "poison" else RuntimeError("try again")

    def crash(**_: Any) -> None:
        raise RuntimeError("a bug in a library")

    def body(virtual: Virtual) -> None:
        function = Lambda(virtual, fast_contract(), handle)
        function.worker.binding.queues.client.meta.events.register(
            "before-call.sqs.ChangeMessageVisibilityBatch", crash
        )
        function.send("poison", "fail")
        invoked = function.poll()
        assert (invoked.failed_whole, [bodies[i] for i in invoked.deleted]) == (None, ["poison"])
        assert function.dead_letters() == {"poison": "bad"}

    run(body)
