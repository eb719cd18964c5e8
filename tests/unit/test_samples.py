"""Sample messages a handler declares (``@worker(samples=...)``) and what the local tools make of them: the plan
``local send`` and the demo send, the body built for a handler that declares none, and the demo's accounting of a
worker it has no mix for (from the consumers' logs, keyed by the trace id it sends each event under)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import consumer
from consumer import ContractError, PoisonMessage, Sample, worker
from consumer.declaration import SAMPLE_MAX_BYTES, contract_of, samples_of
from consumer.examples import demo, notifications
from consumer.local.demo_lane import DEAD_LETTERED, DELIVERED, EITHER, account
from consumer.local.demo_samples import SamplesLane, plan_for, samples_mix, trace_id_for, traceparent_for
from consumer.local.harness import Planned
from consumer.local.manual import samples_for
from consumer.local.samples import BUILT, POISON, SAMPLE, built_body, plan_samples
from consumer.local.stack import LocalProvisioningError
from consumer.runtime.observability import trace_context
from tests import team_handlers

TASK = {"QUEUE_URL": "q", "DLQ_URL": "d", "CONSUMER_STOP_TIMEOUT_SECONDS": "35"}
POISON_REASON = {"kind": "poison", "reason": "invoice lacks invoice_id"}
INVOICES = {"CONSUMER_HANDLER": "tests.team_handlers:invoices"}
LEDGER = {"CONSUMER_HANDLER": "tests.team_handlers:ledger"}


# --------------------------------------------------------------------------- the declaration


def test_samples_are_kept_beside_the_contract_as_samples() -> None:
    """A string is Sample(body); a Sample keeps its poison mark; the contract (every timing, the environment) is the
    one the same declaration without samples gives."""

    @worker(max_duration=30, samples=("a", Sample("b", poison=True)))
    def handle(message: object) -> None: ...

    @worker(max_duration=30)
    def plain(message: object) -> None: ...

    assert samples_of(handle) == (Sample("a"), Sample("b", poison=True))
    assert (samples_of(plain), contract_of(handle).to_env()) == ((), contract_of(plain).to_env())
    assert consumer.Sample is Sample


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (
            '{"id": 1}',
            '"samples" must be a tuple of message bodies (str) or Sample(body, poison=True), such as'
            ' (\'{"id": "1"}\',): \'{"id": 1}\'',
        ),
        (
            ({"id": 1},),
            '"samples" must be a tuple of message bodies (str) or Sample(body, poison=True), such as'
            " ('{\"id\": \"1\"}',); entry 0 is not one: {'id': 1}",
        ),
        (
            ("a", Sample("b", poison="yes")),  # type: ignore[arg-type]
            '"samples" must be a tuple of message bodies (str) or Sample(body, poison=True), such as'
            " ('{\"id\": \"1\"}',); entry 1 is not one: Sample(body='b', poison='yes')",
        ),
        (("",), "\"samples\" must hold non-empty bodies (SQS sends none); entry 0 is empty: ''"),
        (
            ("ok", "nul\x00here"),
            "\"samples\" must hold only characters SQS accepts in a message body; entry 1 has U+0000: 'nul\\x00here'",
        ),
        (
            ("\ufffe",),
            "\"samples\" must hold only characters SQS accepts in a message body; entry 0 has U+FFFE: '\\ufffe'",
        ),
    ],
)
def test_worker_refuses_samples_sqs_would_not_deliver_as_declared(samples: object, message: str) -> None:
    """At decoration, one line naming samples, the rule (and the entry) and the value."""
    with pytest.raises(ContractError) as raised:
        worker(max_duration=30, samples=samples)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_worker_sample_size_is_bounded_at_the_source_limit_less_the_tools_attributes() -> None:
    """A body of SAMPLE_MAX_BYTES (UTF-8) is accepted, one byte more refused; the allowed characters' edges pass."""
    worker(max_duration=30, samples=("x" * SAMPLE_MAX_BYTES, "\t\n\r \ud7ff\ue000\ufffd\U0010ffff"))
    with pytest.raises(ContractError) as raised:
        worker(max_duration=30, samples=("é" + "x" * (SAMPLE_MAX_BYTES - 1),))
    assert str(raised.value).startswith(
        f'"samples" must hold bodies of at most {SAMPLE_MAX_BYTES} bytes; entry 0 has {SAMPLE_MAX_BYTES + 1}: \'éxx'
    )


def test_example_handler_samples_are_what_it_processes_and_refuses() -> None:
    """The notifications example's samples (the demo declaration's too): each valid one passes its schema check, each
    poison one is refused; the first poison one names the channel rule (what `local send --poison` shows)."""
    assert samples_of(demo.handle) == samples_of(notifications.handle) == notifications.SAMPLES
    reasons = []
    for sample in notifications.SAMPLES:
        if not sample.poison:
            notifications.parse(sample.body)
            continue
        with pytest.raises(PoisonMessage) as raised:
            notifications.parse(sample.body)
        reasons.append(raised.value.reason)
    assert reasons[0] == 'schema check failed at properties/channel: enum ["email", "sms", "push"]'
    assert len(reasons) == 2


# --------------------------------------------------------------------------- the local tools' plan


def test_plan_samples_cycles_through_the_declared_ones_with_a_new_event_id_each() -> None:
    """`local send --count 3` of the valid samples: in declared order, again from the first, ids never repeated."""
    declared = (Sample("a"), Sample("p", poison=True), Sample("b"))
    plan = plan_samples(declared, 3, prefix="evt-local", poison=False, handler="h")
    again = plan_samples(declared, 3, prefix="evt-local", poison=False, handler="h")
    assert [(p.kind, p.body) for p in plan] == [(SAMPLE, "a"), (SAMPLE, "b"), (SAMPLE, "a")]
    assert [(p.kind, p.body) for p in plan_samples(declared, 1, prefix="x", poison=True, handler="h")] == [
        (POISON, "p")
    ]
    assert len({p.event_id for p in plan + again}) == 6


def test_plan_samples_for_the_demo_sends_each_declared_sample_at_least_once() -> None:
    """poison=None (the demo): every sample, poison ones included, even when fewer messages were asked for."""
    declared = (Sample("a"), Sample("p", poison=True), Sample("b"))
    assert [p.body for p in plan_samples(declared, 1, prefix="x", poison=None, handler="h")] == ["a", "p", "b"]
    assert Counter(p.kind for p in plan_samples(declared, 6, prefix="x", poison=None, handler="h")) == {
        SAMPLE: 4,
        POISON: 2,
    }


def test_plan_samples_without_declared_samples_builds_a_body_from_each_event_id() -> None:
    """No samples: a JSON object carrying the event id, kind "built"; --poison is refused naming the handler."""
    plan = plan_samples((), 2, prefix="evt-local", poison=False, handler="workers.invoices:handle")
    assert [json.loads(p.body) for p in plan] == [{"id": p.event_id} for p in plan]
    assert {p.kind for p in plan} == {BUILT} and built_body("e-1") == '{"id": "e-1"}'
    with pytest.raises(Exception) as raised:
        plan_samples((), 1, prefix="evt-local", poison=True, handler="workers.invoices:handle")
    assert str(raised.value) == (
        '"--poison" needs a sample the handler refuses: workers.invoices:handle declares none (Sample(body,'
        " poison=True) in its @worker(samples=...)); send a body of your own with --body TEXT"
    )


def test_local_send_samples_are_the_handlers_own_for_any_handler() -> None:
    """`local send` loads the worker's handler and sends what it declares: a team's handler, never a name the
    framework knows."""
    valid = samples_for(INVOICES, 2, poison=False)
    poison = samples_for(INVOICES, 1, poison=True)
    assert [p.body for p in valid.plan] == list(team_handlers.INVOICE_SAMPLES[:2])
    assert [p.body for p in poison.plan] == ['{"total": "1.00"}']
    assert (valid.built, valid.outcome.startswith("the consumer logs message_processed for each")) == (None, True)
    assert poison.outcome.startswith("the consumer logs message_moved_to_dlq for each")


def test_local_send_without_declared_samples_says_it_built_the_body_and_how_to_declare() -> None:
    """A handler declaring none gets a built body, and the note names the handler, the body and the declaration."""
    samples = samples_for(LEDGER, 1, poison=False)
    (planned,) = samples.plan
    assert samples.built == (
        f'tests.team_handlers:ledger declares no samples, so each body was built from its event id ({{"id":'
        f' "{planned.event_id}"}}): declare @worker(samples=...) next to the handler'
        " (docs/handlers.md#sample-messages-samples) to send what it expects"
    )
    assert "or message_moved_to_dlq if the handler refuses it" in samples.outcome


def test_local_send_names_a_handler_that_does_not_load() -> None:
    """A handler that cannot be imported: the loader's one line, naming CONSUMER_HANDLER."""
    with pytest.raises(LocalProvisioningError) as raised:
        samples_for({"CONSUMER_HANDLER": "tests.no_such_module:handle"}, 1, poison=False)
    assert str(raised.value).startswith('"CONSUMER_HANDLER" names a module that cannot be imported')


# --------------------------------------------------------------------------- the demo's lane for any worker


def test_demo_traceparent_is_one_the_consumer_reads_with_the_events_trace_id() -> None:
    """The header the demo sends each event with is valid W3C trace context; the consumer logs its trace id, which
    names the event."""
    header = traceparent_for("invoices-demo-1a2b3c4d-000")
    context = trace_context({"traceparent": {"DataType": "String", "StringValue": header}}, {})
    assert context == {"traceparent": header, "trace_id": trace_id_for("invoices-demo-1a2b3c4d-000")}
    assert trace_id_for("a") != trace_id_for("b")


def test_demo_plan_for_a_worker_carries_its_samples_each_with_its_trace_header() -> None:
    """At least --samples messages, every declared sample among them, each sent with the event's traceparent."""
    plan, note = plan_for("invoices", INVOICES, 4)
    assert note is None
    assert Counter(p.kind for p in plan) == {SAMPLE: 3, POISON: 1}
    assert all(p.traceparent == traceparent_for(p.event_id) for p in plan)
    built, built_note = plan_for("ledger", LEDGER, 2)
    assert {p.kind for p in built} == {BUILT}
    assert built_note == (
        "ledger: tests.team_handlers:ledger declares no samples, so the demo built each body: declare"
        " @worker(samples=...) next to the handler (docs/handlers.md#sample-messages-samples)"
    )


def lane_of(plan: list[Planned], tmp_path: Path) -> SamplesLane:
    return SamplesLane("invoices", plan, TASK | INVOICES, None, tmp_path)


def logged(lane: SamplesLane, event_id: str, event: str, times: int = 1) -> None:
    """What reading the consumers' logs counts for a message sent under ``event_id``'s trace."""
    lane.fleet.traces.setdefault(trace_id_for(event_id), Counter())[event] += times


def test_samples_lane_counts_processed_events_from_the_consumers_logs(tmp_path: Path) -> None:
    """Deliveries are the message_processed lines per event (a second one a duplicate); lines of traces the plan
    does not hold, and DLQ moves, are not deliveries."""
    plan = [Planned("e-0", SAMPLE, "{}"), Planned("e-1", SAMPLE, "{}"), Planned("e-2", POISON, "{}")]
    lane = lane_of(plan, tmp_path)
    logged(lane, "e-0", "message_processed", 2)
    logged(lane, "e-2", "message_moved_to_dlq")
    logged(lane, "stranger", "message_processed")
    assert (lane.successes(), lane.delivered()) == ({"e-0": 2}, {"e-0"})
    assert lane.mix.kinds[SAMPLE].place == DELIVERED and lane.mix.kinds[POISON].place == DEAD_LETTERED


def test_samples_lane_is_settled_only_with_every_event_in_one_place_and_the_source_empty(tmp_path: Path) -> None:
    """Processed or in the DLQ, each declared one where it belongs, nothing left in the source."""
    plan = [Planned("e-0", SAMPLE, "{}"), Planned("e-1", POISON, "{}"), Planned("e-2", BUILT, "{}")]
    lane = lane_of(plan, tmp_path)
    logged(lane, "e-0", "message_processed")
    lane.depths = (0, 1, 2)  # e-1 and e-2 in the DLQ, a copy of something still in flight
    assert lane.settled() is False
    lane.depths = (0, 0, 1)  # e-2 neither processed nor dead-lettered yet
    assert lane.settled() is False
    lane.depths = (0, 0, 2)
    assert lane.settled() is True


def test_account_built_events_balance_in_either_place_but_only_one() -> None:
    """A built body's place is the handler's call: processed once or in the DLQ both balance; both places, or
    neither, do not; a declared sample in the DLQ is misplaced."""
    plan = [Planned("b-0", BUILT, "{}"), Planned("b-1", BUILT, "{}")]
    mix = samples_mix(plan + [Planned("s-0", SAMPLE, "{}")]).kinds
    assert mix[BUILT].place == EITHER
    balanced = account(plan, mix, {"b-0": 1}, {"b-1": POISON_REASON}, 0)
    assert (balanced.balanced, balanced.misplaced) == (True, [])
    both = account(plan, mix, {"b-0": 1, "b-1": 1}, {"b-1": POISON_REASON}, 0)
    assert (both.balanced, both.in_two_places) == (False, ["b-1"])
    neither = account(plan, mix, {"b-0": 1}, {}, 0)
    assert (neither.balanced, neither.lost) == (False, ["b-1"])
    wrong = account([Planned("s-0", SAMPLE, "{}")], mix, {}, {"s-0": POISON_REASON}, 0)
    assert (wrong.balanced, wrong.misplaced) == (False, ["s-0"])


def test_a_samples_lane_counts_handler_runs_not_skipped_copies() -> None:
    """An event whose message SQS handed out twice: the copy the idempotency guard recognised as done logs
    duplicate_skipped and message_processed, and is no second run of the handler (no duplicate side effect); an event
    processed twice without a skip is one, and a skipped copy alone is no delivery."""
    from types import SimpleNamespace

    lane = SamplesLane.__new__(SamplesLane)
    lane._events = {"t-once": "e1", "t-copy": "e2", "t-twice": "e3", "t-skipped": "e4"}
    lane.fleet = SimpleNamespace(  # type: ignore[assignment]
        traces={
            "t-once": Counter(message_processed=1),
            "t-copy": Counter(message_processed=2, duplicate_skipped=1),
            "t-twice": Counter(message_processed=2),
            "t-skipped": Counter(message_processed=1, duplicate_skipped=1),
            "t-elsewhere": Counter(message_processed=1),
        }
    )
    assert lane.successes() == {"e1": 1, "e2": 1, "e3": 2}
