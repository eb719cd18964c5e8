"""The chaos suite's fleets per handler shape (issue #27), without a network: the batch and async handlers' outcomes
per downstream answer, each fleet's share of the run's records, the DLQ reason kinds a fleet must end with, the
SIGKILLs taking the fleets in turn, and the per-fleet report."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench import chaos_handlers
from bench.chaos_accounting import (
    ChaosResult,
    consumer_endings,
    corpus_checks,
    dlq_kinds,
    expected_dlq_kinds,
    kind_failures,
    sort_dlq,
)
from bench.chaos_evidence import Delivery, ReceiveLog
from bench.chaos_fleet import Supervisor
from bench.chaos_handlers import DownstreamFailed, DownstreamRejected, async_handle, batch_handle, error_of
from bench.chaos_lanes import ASYNC, BATCH, THREADS, Lane, partition, receives_of
from bench.chaos_report import fleet_rows, sections
from bench.chaos_stream import IdempotentDownstream, build_stream
from bench.corpus import Case
from consumer import ConfigurationError, Message, PoisonMessage
from consumer.declaration import contract_of, non_retryable_of
from consumer.examples.demo import handle as demo_handle
from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local.harness import Planned, sample_event
from tests.unit.support import receive_answer

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:9/notify/batch-c1"
GOOD, FLAKY, REJECTED = (json.dumps(sample_event(f"evt-batch-0000{n}", n)) for n in range(3))


def message(body: str, number: int = 0) -> Message:
    return Message(body=body, message_id=f"m-{number}", receipt_handle=f"r-{number}")


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WEBHOOK_URL_ENV, URL)


def answers() -> dict[str, int]:
    """The chaos downstream's answer per event: good 200, flaky 503, rejected 422."""
    return {"evt-batch-00000": 200, "evt-batch-00001": 503, "evt-batch-00002": 422}


@pytest.mark.parametrize(
    ("status", "expected"),
    [(200, None), (204, None), (422, DownstreamRejected), (404, DownstreamRejected), (503, DownstreamFailed)]
    + [(408, DownstreamFailed), (429, DownstreamFailed), (500, DownstreamFailed)],
)
def test_error_of_maps_an_answer_to_its_outcome(status: int, expected: type[Exception] | None) -> None:
    """2xx applied; a 4xx but 408 and 429 rejected for good; anything else a retry."""
    error = error_of(status)
    assert (type(error) if error is not None else None) is expected


def test_both_handlers_declare_rejection_non_retryable_and_the_demo_timings() -> None:
    """A rejected event goes to the DLQ at once (kind non_retryable); both fleets' leases, receives and backoffs are
    the demo's, so one quiet time and one evidence reading hold for every fleet."""
    batch, coroutines = contract_of(batch_handle), contract_of(async_handle)
    assert non_retryable_of(batch_handle) == non_retryable_of(async_handle) == (DownstreamRejected,)
    assert (batch.max_batch, batch.asynchronous, coroutines.max_batch, coroutines.asynchronous) == (
        10,
        False,
        None,
        True,
    )
    demo = contract_of(demo_handle)
    for contract in (batch, coroutines):
        assert contract.visibility_timeout_seconds == demo.visibility_timeout_seconds
        assert contract.max_receive_count == demo.max_receive_count
        assert contract.retry_backoff_max_seconds == demo.retry_backoff_max_seconds


def test_the_handlers_refuse_to_start_without_the_downstream() -> None:
    """The start-up check: no URL, no consumer (it would fail every event)."""
    with pytest.raises(ConfigurationError, match=WEBHOOK_URL_ENV):
        chaos_handlers.webhook_url({})


def test_batch_handler_reports_each_message_by_its_downstream_answer(
    webhook: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch, four outcomes: malformed poison with the parser's reason, good succeeded, flaky failed with a
    retryable error, rejected failed with the declared non-retryable one; each message reported exactly once. The
    valid events go to the downstream in one call."""
    seen: list[tuple[str, list[str]]] = []

    def deliver_all(url: str, events: list[dict[str, Any]]) -> dict[str, Exception | None]:
        seen.append((url, [event["event_id"] for event in events]))
        return {event["event_id"]: error_of(answers()[event["event_id"]]) for event in events}

    monkeypatch.setattr(chaos_handlers, "deliver_all", deliver_all)
    batch = [message("not json", 0), message(GOOD, 1), message(FLAKY, 2), message(REJECTED, 3)]
    result = batch_handle(batch)
    outcomes = [result.outcome(m) for m in batch]
    assert len(result) == 4 and all(reported for reported, _ in outcomes)
    errors = [error for _, error in outcomes]
    assert isinstance(errors[0], PoisonMessage) and errors[0].reason.startswith("body is not JSON")
    assert errors[1] is None
    assert isinstance(errors[2], DownstreamFailed) and isinstance(errors[3], DownstreamRejected)
    assert seen == [(URL, [f"evt-batch-0000{n}" for n in range(3)])]  # the malformed one never reached it


def test_batch_handler_reports_a_downstream_it_cannot_reach_as_a_retry(webhook: None) -> None:
    """Nothing listens at the URL (port 9, discard): the event fails with a retryable error, never succeeds."""
    result = batch_handle([one := message(GOOD)])
    reported, error = result.outcome(one)
    assert reported and isinstance(error, DownstreamFailed)


def test_the_downstream_answers_a_bulk_call_per_event_as_calls_of_their_own() -> None:
    """One bulk call: each key answered and recorded (sender, status) as a single call would be: a flaky key 503 the
    first time, a rejected one 422, the others applied once."""
    downstream = IdempotentDownstream(reject={"r"}, flaky={"f"})
    assert downstream.answer_many(["g", "f", "r"], "batch-c1") == {"g": 200, "f": 503, "r": 422}
    assert downstream.answer_many(["f", "g"], "batch-c2") == {"f": 200, "g": 200}
    applied, deliveries = downstream.snapshot()
    assert applied == {"g", "f"}
    assert {k: [(d.sender, d.status) for d in v] for k, v in deliveries.items()} == {
        "g": [("batch-c1", 200), ("batch-c2", 200)],
        "f": [("batch-c1", 503), ("batch-c2", 200)],
        "r": [("batch-c1", 422)],
    }


@pytest.fixture
def mock_downstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[httpx.Request]]:
    """The async handler's client on an httpx MockTransport answering as the chaos downstream does."""
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(answers()[request.headers["Idempotency-Key"]])

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    monkeypatch.setattr(chaos_handlers, "_client", lambda: client)
    yield requests


def test_async_handler_raises_what_each_answer_means(webhook: None, mock_downstream: list[httpx.Request]) -> None:
    """Awaited on the event loop: good returns, flaky raises a retryable error, rejected the non-retryable one, a
    malformed body PoisonMessage before any call; each call POSTs the event with its Idempotency-Key."""

    async def outcome(body: str) -> BaseException | None:
        try:
            await async_handle(message(body))
        except Exception as error:  # noqa: BLE001 (the outcome under test)
            return error
        return None

    async def all_four() -> list[BaseException | None]:
        return [await outcome(body) for body in ("not json", GOOD, FLAKY, REJECTED)]

    poison, good, flaky, rejected = asyncio.run(all_four())
    assert isinstance(poison, PoisonMessage) and good is None
    assert isinstance(flaky, DownstreamFailed) and isinstance(rejected, DownstreamRejected)
    assert [(str(r.url), r.headers["Idempotency-Key"]) for r in mock_downstream] == [
        (URL, f"evt-batch-0000{n}") for n in range(3)
    ]
    assert json.loads(mock_downstream[0].content)["event_id"] == "evt-batch-00000"


# --------------------------------------------------------------------------- each fleet's share of the records


@dataclass
class FakeProcess:
    signals: list[int] = field(default_factory=list)

    def send_signal(self, signal: int) -> None:
        self.signals.append(signal)

    def wait(self) -> int:
        return -9


@dataclass
class FakeConsumer:
    number: int
    ready: bool = True
    asked_to_stop: bool = False
    process: FakeProcess = field(default_factory=FakeProcess)


class FakeFleet:
    """Stands in for a Fleet: its consumers, each alive until SIGKILLed; start() adds one."""

    def __init__(self) -> None:
        self.environment: dict[str, str] = {}
        self.processes: list[FakeConsumer] = []

    def alive(self) -> list[FakeConsumer]:
        return [c for c in self.processes if not c.process.signals]

    def start(self) -> FakeConsumer:
        self.processes.append(FakeConsumer(len(self.processes) + 1))
        return self.processes[-1]


class Producing:
    """is_set() for ``kills`` checks, then not: the kill loop's stop."""

    def __init__(self, kills: int) -> None:
        self.left = 2 * kills + 1  # the loop asks before its sleep and after it

    def is_set(self) -> bool:
        self.left -= 1
        return self.left > 0


def test_sigkills_take_each_fleet_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six kills over three fleets: two each, in turn, recorded by label, each victim replaced in its own fleet."""
    monkeypatch.setattr("bench.chaos_fleet.time.sleep", lambda _: None)
    fleets = [FakeFleet(), FakeFleet(), FakeFleet()]
    supervisor = Supervisor("http://127.0.0.1:1/notify", random.Random(1), Producing(6), 1e18)  # type: ignore[arg-type]
    for fleet, prefix, size in zip(fleets, ("c", "batch-c", "async-c"), (4, 2, 2), strict=True):
        for _ in range(size):
            supervisor.start(fleet, prefix)  # type: ignore[arg-type]
    supervisor.kill_loop(fleets, 1.0)  # type: ignore[arg-type]
    prefixes = [label.rstrip("0123456789") for label in supervisor.killed]
    assert prefixes == ["c", "batch-c", "async-c"] * 2
    assert [len(f.processes) for f in fleets] == [6, 4, 4]  # each kill replaced in its fleet
    assert fleets[1].environment["AWS_SDK_UA_APP_ID"].startswith("batch-c")


def lane(shape: Any, plan: list[Planned] | None = None) -> Lane:
    return Lane(shape, contract_of(batch_handle), 2, plan or [], 10.0, "q", "d", None)  # type: ignore[arg-type]


def test_each_fleet_owns_its_labels_events_and_canaries() -> None:
    """Labels by prefix and number only (c1 is not batch-c1's); events by prefix, canaries by name."""
    threads, batch = lane(THREADS), lane(BATCH)
    batch.canaries = ["evt-canary-batch-0"]
    assert [threads.labelled(x) for x in ("c1", "c12", "batch-c1", "fifo-c1", None)] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert [batch.labelled(x) for x in ("batch-c3", "c3", "async-c3")] == [True, False, False]
    assert batch.owns("evt-batch-00007") and batch.owns("evt-canary-batch-0") and not batch.owns("evt-chaos-00007")


def test_partition_gives_each_fleet_its_deliveries_and_the_rest_to_the_thread_fleet() -> None:
    """A key goes to the declared fleet owning it; anything else (the FIFO corpus too) to the thread fleet's."""
    lanes = [lane(THREADS), lane(BATCH), lane(ASYNC)]
    d = [Delivery("x", 1.0, 200)]
    found = partition({"evt-chaos-1": d, "evt-batch-1": d, "evt-async-1": d, "evt-fifo-mid-1": d}, lanes)
    assert {name: sorted(keys) for name, keys in found.items()} == {
        "standard": ["evt-chaos-1", "evt-fifo-mid-1"],
        "batch": ["evt-batch-1"],
        "async": ["evt-async-1"],
    }


def test_receives_of_a_fleet_are_its_consumers_only() -> None:
    """One proxy record, three fleets: each view holds its own consumers' receives (the thread fleet's: every label
    no other fleet claims, the FIFO consumer's too), with the acks of what they received."""
    log = ReceiveLog()
    for sender, message_id in (("c1", "m1"), ("batch-c1", "m2"), ("async-c2", "m3"), ("fifo-c1", "m4")):
        log(receive_answer(sender, message_id, 1, 1.0))
    lanes = [lane(THREADS), lane(BATCH), lane(ASYNC)]
    views = {one.name: receives_of(log, one, lanes) for one in lanes}
    assert {name: sorted(r.sender or "" for r in view.receives) for name, view in views.items()} == {
        "standard": ["c1", "fifo-c1"],
        "batch": ["batch-c1"],
        "async": ["async-c2"],
    }
    assert views["batch"].of_message("m2")[0].handle == "handle-m2-1" and views["batch"].of_message("m1") == []


# --------------------------------------------------------------------------- the reason kinds


def test_dlq_kinds_count_each_event_kinds_reason_kinds() -> None:
    """Copies with a reason are counted by event kind and reason kind; copies without one are not (counted apart)."""
    plan = [Planned("e0", "malformed", ""), Planned("e1", "rejected", ""), Planned("e2", "good", "")]
    by_event = {"e0": [{"kind": "poison"}, {"kind": "poison"}], "e1": [{"kind": "non_retryable"}, None], "e2": [None]}
    assert dlq_kinds(plan, by_event) == {"malformed": {"poison": 2}, "rejected": {"non_retryable": 1}}


@pytest.mark.parametrize(
    ("rejected_kind", "kinds", "failure"),
    [
        ("non_retryable", {"rejected": {"non_retryable": 3}, "malformed": {"poison": 2}}, None),
        ("non_retryable", {"rejected": {"exhausted": 1}}, "rejected events dead-lettered with the wrong reason kind"),
        ("poison", {"rejected": {"poison": 1}, "good": {"exhausted": 1, "unattempted": 1}}, None),
        ("poison", {"good": {"poison": 1}}, "good events dead-lettered with the wrong reason kind: 1 poison"),
        ("poison", {"malformed": {"exhausted": 2}}, "malformed events dead-lettered with the wrong reason kind"),
    ],
)
def test_kind_failures_name_an_event_kind_ending_with_the_wrong_reason(
    rejected_kind: str, kinds: dict[str, dict[str, int]], failure: str | None
) -> None:
    """A rejected event must end as its fleet's handler classifies a 422; a malformed one poison; a good one only
    with its retries exhausted (or unattempted): anything else is a handler or runtime that misclassified it."""
    failures = kind_failures(kinds, expected_dlq_kinds(rejected_kind))
    assert failures == [] if failure is None else failures[0].startswith(failure)


def test_consumer_endings_are_read_per_fleet_by_label() -> None:
    """batch-c1 SIGKILLed, c1 SIGTERMed: each fleet's consumer is judged by its own label, and a failure names it."""

    @dataclass
    class Ended:
        number: int
        final_exit_code: int | None
        stopped_in_rounded: float | None = 0.2

    @dataclass
    class Named:
        processes: list[Ended]

    threads, batch = Named([Ended(1, 0)]), Named([Ended(1, -9), Ended(2, 1)])
    labels = {id(threads): "c", id(batch): "batch-c"}
    consumers, failures = consumer_endings(
        [("standard", threads), ("batch", batch)],  # type: ignore[list-item]
        lambda fleet, number: f"{labels[id(fleet)]}{number}",
        {"batch-c1": 3.0},
        [],
    )
    assert [(c["fleet"], c["number"], c["ended_by"]) for c in consumers] == [
        ("standard", 1, "SIGTERM"),
        ("batch", 1, "SIGKILL"),
        ("batch", 2, "SIGTERM"),
    ]
    assert failures == ["consumer batch-c2 exited 1 after SIGTERM"]


def test_build_stream_gives_each_fleet_its_own_event_ids() -> None:
    """The batch fleet's stream: its own prefix, every kind present."""
    stream = build_stream(40, seed=6, prefix="evt-batch-")
    assert all(p.event_id.startswith("evt-batch-") for p in stream)
    assert {p.kind for p in stream} == {"good", "flaky", "malformed", "rejected"}


# --------------------------------------------------------------------------- the report


def test_the_report_has_a_column_per_fleet_and_a_verdict_per_fleet() -> None:
    """The stored run's per-fleet table: one column per fleet, each with a verdict, the thread fleet first."""
    stored = ChaosResult.from_json(json.loads((ROOT / "docs" / "evidence" / "bench" / "chaos.json").read_text()))
    rows = fleet_rows(stored)
    assert all(len(row) == 2 + len(stored.fleets) for row in rows)
    assert set(stored.fleets) == {"batch", "async"}
    assert rows[-1][0] == "verdict" and all(cell == "OK" for cell in rows[-1][1:]) == stored.ok
    assert sections(stored)["fleets"].splitlines()[0] == "| figure | standard | batch | async |"


def test_a_failed_fleet_is_named_in_its_own_column() -> None:
    """A batch fleet's failure shows in the batch column only, without its prefix."""
    stored = ChaosResult.from_json(json.loads((ROOT / "docs" / "evidence" / "bench" / "chaos.json").read_text()))
    stored.failures = ["batch fleet: 1 events lost: ['evt-batch-00001']"]
    verdicts = fleet_rows(stored)[-1]
    assert verdicts[1:] == ["OK", "FAILED: 1 events lost: ['evt-batch-00001']", "OK"]


def test_a_corpus_case_is_judged_by_its_first_dead_lettering() -> None:
    """Moved with its reason at receive 1, then again at receive 2 (its delete landed after its lease): the case
    passed at its first receive; one first moved at receive 2 fails."""
    corpus = {"m1": Case("json_null", "null", "null"), "m2": Case("json_number", "42", "42")}

    def copy(message_id: str, count: int) -> tuple[dict[str, Any], dict[str, Any]]:
        return {}, {"kind": "poison", "reason": "x", "original_message_id": message_id, "receive_count": count}

    _, found, unknown = sort_dlq([copy("m1", 2), copy("m1", 1), copy("m2", 2)], corpus, "evt-chaos-")
    checks, failures = corpus_checks(corpus.values(), found)
    assert ([c["receive_count"] for c in checks], unknown) == ([1, 2], 0)
    assert [c["ok"] for c in checks] == [True, False] and failures[0].startswith("corpus json_number")
