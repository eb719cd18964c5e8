"""The chaos suite's parts that need no network: fault shapes, fault plans, the corpus, the stream's accounting."""

from __future__ import annotations

import json

import pytest
from botocore.parsers import create_parser
from botocore.retries.standard import RetryContext, ThrottledRetryableChecker, TransientRetryableChecker

from bench.chaos_accounting import KINDS, PLACES, account_stream, stream_failures
from bench.chaos_stream import IdempotentDownstream, build_stream
from bench.corpus import fifo_cases, standard_cases
from bench.proxy import ERROR_AFTER, ERROR_BEFORE, THROTTLE_BEFORE, FaultPlan, error_body
from consumer.examples.notifications import parse
from consumer.local.harness import Planned
from consumer.message import PoisonMessage

POISON_RECORD = {"kind": "poison", "reason": "body is not JSON: Expecting value"}


def parsed_error(kind: str) -> tuple[dict, int]:
    """The injected error as botocore's SQS (JSON protocol, query-compatible) parser reads it."""
    status, headers, body = error_body(kind, "ReceiveMessage")
    parser = create_parser("json")
    response = {"status_code": status, "headers": {k.lower(): v for k, v in headers.items()}, "body": body}
    return parser.parse(response, None), status


def retry_context(kind: str) -> RetryContext:
    parsed, status = parsed_error(kind)

    class Response:
        status_code = status

    return RetryContext(attempt_number=1, operation_model=None, parsed_response=parsed, http_response=Response())


def test_error_body_throttle_is_request_throttled_for_botocore() -> None:
    """An injected throttle parses as code RequestThrottled (from x-amzn-query-error), HTTP 400."""
    parsed, status = parsed_error(THROTTLE_BEFORE)
    assert (status, parsed["Error"]["Code"]) == (400, "RequestThrottled")


def test_error_body_throttle_is_classified_as_throttling() -> None:
    """botocore's standard retry mode treats the injected throttle as a throttling error."""
    assert ThrottledRetryableChecker().is_retryable(retry_context(THROTTLE_BEFORE)) is True


@pytest.mark.parametrize("kind", [ERROR_BEFORE, ERROR_AFTER])
def test_error_body_500_is_internal_error_and_transient(kind: str) -> None:
    """Both injected 500s parse as InternalError and are retried as transient, not as throttling."""
    parsed, status = parsed_error(kind)
    context = retry_context(kind)
    assert (status, parsed["Error"]["Code"]) == (500, "InternalError")
    assert TransientRetryableChecker().is_retryable(context) is True
    assert ThrottledRetryableChecker().is_retryable(context) is False


@pytest.mark.parametrize("field", ["throttle_before", "error_before", "error_after"])
@pytest.mark.parametrize("value", [-0.01, 1.01])
def test_fault_plan_rejects_a_probability_outside_0_1(field: str, value: float) -> None:
    """Each probability is checked at both edges, naming the field and the value."""
    with pytest.raises(ValueError, match=rf'"{field}" must be between 0 and 1: {value}'):
        FaultPlan(**{field: value})


def test_fault_plan_rejects_probabilities_adding_past_1() -> None:
    """The three kinds share one draw, so their sum must stay at most 1."""
    with pytest.raises(ValueError, match="must add up to at most 1"):
        FaultPlan(throttle_before=0.5, error_before=0.3, error_after=0.3)


def test_corpus_has_at_least_20_distinct_kinds() -> None:
    """The issue asks for at least 20 kinds of bad input; names are unique."""
    names = [case.name for case in standard_cases() + fifo_cases()]
    assert len(set(names)) == len(names)
    assert len(standard_cases()) >= 20


def test_corpus_every_standard_case_is_poison_to_the_handler() -> None:
    """Each standard case makes the notifications parser raise PoisonMessage (never a retry)."""
    for case in standard_cases():
        with pytest.raises(PoisonMessage):
            parse(case.body)


def test_corpus_bodies_use_only_characters_sqs_accepts() -> None:
    """No body carries a character SendMessage would refuse (so a send failure is never a corpus result)."""
    for case in standard_cases() + fifo_cases():
        bad = [c for c in case.body if not (c in "\t\n\r" or " " <= c <= "\ud7ff" or "\ue000" <= c <= "\ufffd")]
        assert all(c >= "\U00010000" for c in bad), case.name


def test_corpus_max_size_body_is_exactly_the_maximum() -> None:
    """The max-size case is exactly the queue's maximum, in bytes (ASCII)."""
    (case,) = [c for c in standard_cases(2048) if c.name == "max_size_body"]
    assert len(case.body.encode("utf-8")) == 2048


def test_corpus_fifo_good_neighbours_are_valid_events() -> None:
    """The FIFO cases expected to be applied parse as valid events with their own event id."""
    for case in fifo_cases():
        if case.expect == "applied":
            assert parse(case.body)["event_id"] == case.event_id


def test_build_stream_has_every_kind_and_the_requested_count() -> None:
    """The stream holds ``count`` events with each kind at least once, reproducibly."""
    stream = build_stream(40, seed=1)
    assert len(stream) == 40 and {p.kind for p in stream} == set(KINDS)
    assert stream == build_stream(40, seed=1)


def test_build_stream_rejects_fewer_messages_than_kinds() -> None:
    """Fewer events than kinds cannot hold one of each: the error names the parameter and value."""
    with pytest.raises(ValueError, match=rf'"messages" must be at least {len(KINDS)}'):
        build_stream(len(KINDS) - 1, seed=1)


def test_downstream_applies_a_key_once_and_counts_repeats() -> None:
    """Three requests with one key: one application, three raw deliveries from their senders."""
    downstream = IdempotentDownstream()
    statuses = [downstream.respond("k", f"/notify/{sender}") for sender in ("c1", "c2", "c2")]
    applied, deliveries = downstream.snapshot()
    assert statuses == [200, 200, 200]
    assert (applied, [d.sender for d in deliveries["k"]]) == ({"k"}, ["c1", "c2", "c2"])


def test_downstream_flaky_key_fails_its_first_delivery_only() -> None:
    """A flaky key gets 503 once, then 200; a rejected key always 422 and is never applied."""
    downstream = IdempotentDownstream(reject={"r"}, flaky={"f"})
    assert [downstream.answer("f", "c1"), downstream.answer("f", "c1")] == [503, 200]
    assert [downstream.answer("r", "c1"), downstream.answer("r", "c2")] == [422, 422]
    assert downstream.snapshot()[0] == {"f"}


def test_error_body_is_json_with_the_sqs_type() -> None:
    """The body carries SQS's namespaced __type and a message naming the chaos proxy."""
    _, headers, body = error_body(THROTTLE_BEFORE, "SendMessage")
    assert json.loads(body)["__type"] == "com.amazonaws.sqs#RequestThrottled"
    assert headers["x-amzn-query-error"] == "RequestThrottled;Sender"


def test_account_stream_tells_faults_casualties_from_wrong_places() -> None:
    """A good event in the DLQ with a reason is counted, not failed; a malformed one applied is misplaced."""
    plan = [Planned(f"evt-chaos-{i}", kind, "{}") for i, kind in enumerate(("good", "good", "malformed", "good"))]
    dlq = {"evt-chaos-1": [POISON_RECORD], "evt-chaos-3": [None]}
    a = account_stream(plan, PLACES, {"evt-chaos-0", "evt-chaos-2"}, dlq, 0, 0, {p.event_id for p in plan})
    assert (a["applied_once"], a["good_in_dlq_with_reason"], a["misplaced"]) == (2, 2, ["evt-chaos-2"])
    assert (a["lost"], a["dlq_without_reason"], a["dlq_reasons"]) == (
        [],
        ["evt-chaos-3"],
        {"poison: body is not JSON": 1, "no reason (SQS redrive)": 1},
    )
    assert stream_failures(a, {"unexplained": []}) == [
        "1 events in a wrong place: ['evt-chaos-2']",
        "1 events in the DLQ without a reason (SQS's silent redrive): ['evt-chaos-3']",
    ]


def test_account_stream_an_event_nowhere_is_lost_and_fails_the_run() -> None:
    """Neither applied nor in the DLQ: lost, and the verdict names it."""
    plan = [Planned("evt-chaos-0", "good", "{}")]
    a = account_stream(plan, PLACES, set(), {}, 0, 0, {"evt-chaos-0"})
    assert stream_failures(a, {"unexplained": []}) == ["1 events lost: ['evt-chaos-0']"]
