"""The permissions tier for a worker's sources: who may send to its queues, evaluated by @cloud-copilot/iam-simulate on
the resolved templates (tests/infra/permissions.py), as AWS evaluates a service principal's request.

SNS delivers to an SQS queue as ``sns.amazonaws.com`` with ``aws:SourceArn`` the topic and ``aws:SourceAccount`` the
topic's owner; EventBridge as ``events.amazonaws.com`` with ``aws:SourceArn`` the rule. Neither request has an
``aws:PrincipalArn``: the producers' deny must still let the declared sources through (infra/queues.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import synthesize_once
from tests.infra.permission_rows import PARAMETERS, bind
from tests.infra.permissions import (
    ALLOWED,
    DENIED,
    EXPLICITLY_DENIED,
    OTHER_ACCOUNT,
    Bindings,
    Row,
    Scenario,
    evaluate,
    mismatches,
)
from tests.infra.resolve import FAKE_ACCOUNT, FAKE_REGION

SNS, EVENTS = "sns.amazonaws.com", "events.amazonaws.com"
HANDLER = "consumer.examples.notifications:handle"
TOPIC = f"arn:aws:sns:{FAKE_REGION}:{FAKE_ACCOUNT}:orders"
PARTNER_TOPIC = f"arn:aws:sns:{FAKE_REGION}:{OTHER_ACCOUNT}:partner-orders"
#: A topic of this account and one of another account that no worker declares.
OTHER_TOPIC = f"arn:aws:sns:{FAKE_REGION}:{FAKE_ACCOUNT}:someone-elses-topic"
OTHER_ACCOUNT_TOPIC = f"arn:aws:sns:{FAKE_REGION}:{OTHER_ACCOUNT}:orders"
OTHER_RULE = f"arn:aws:events:{FAKE_REGION}:{FAKE_ACCOUNT}:rule/someone-elses-rule"
PRODUCER = "orders-api"
PRODUCER_ARN = f"arn:aws:iam::{FAKE_ACCOUNT}:role/{PRODUCER}"
SOURCES: list[dict[str, Any]] = [
    {"topic_arn": TOPIC, "filter_policy": {"kind": ["order"]}},
    {"topic_arn": PARTNER_TOPIC, "raw_message_delivery": False},
    {"name": "placed", "event_pattern": {"source": ["orders.api"]}},
    {"name": "billing", "event_pattern": {"source": ["billing"]}, "event_bus": "billing"},
]
#: Sources alone (IAM decides for principals), sources beside producers, and two workers of which one has sources.
VARIANTS: dict[str, dict[str, Any]] = {
    "fed": {"handler": HANDLER, "sources": SOURCES},
    "fedsenders": {"handler": HANDLER, "sources": SOURCES, "producers": [PRODUCER_ARN]},
    "fedteams": {
        "workers": {
            "plain": {"handler": HANDLER},
            "orders": {
                "handler": HANDLER,
                "sources": [{"topic_arn": TOPIC}, {"name": "placed", "event_pattern": {"source": ["x"]}}],
            },
        }
    },
}
assert PARAMETERS  # the same deploy-time values as the main tier's
#: Each worker's scenarios with the evaluator's answers.
Evaluated = dict[str, list[tuple[Scenario, str | None]]]


def topic(arn: str) -> dict[str, str]:
    """The context SNS's delivery carries for ``arn``."""
    return {"aws:SourceArn": arn, "aws:SourceAccount": arn.split(":")[4]}


def rule(arn: str) -> dict[str, str]:
    return {"aws:SourceArn": arn, "aws:SourceAccount": arn.split(":")[4]}


def rule_arns(bindings: Bindings) -> list[str]:
    """The ARNs of the rules this worker's stack created for it (the resolved template's, in source order)."""
    rules = [r for r in bindings.template.of_type("AWS::Events::Rule") if r.logical_id in bindings.owned]
    return [r.attributes["Arn"] for r in sorted(rules, key=lambda r: r.name)]


def source_rows(bindings: Bindings, topics: list[str], producers: bool) -> list[Row]:
    """Who may send to this worker's queues, with its declared ``topics`` and the rules of its template."""
    # The queue, and the DLQ as each source's delivery dead-letter queue (these workers are standard: rules too):
    # SNS and EventBridge send to both; no other topic, rule or principal may.
    rows: list[Row] = []
    for queue, why in (("source", ""), ("dlq", "'s delivery DLQ")):
        rows += [Row(SNS, "sqs:SendMessage", queue, topic(arn), ALLOWED, f"a declared topic{why}") for arn in topics]
        rows += [
            Row(EVENTS, "sqs:SendMessage", queue, rule(arn), ALLOWED, f"a created rule{why}")
            for arn in rule_arns(bindings)
        ]
        rows += [
            Row(SNS, "sqs:SendMessage", queue, topic(OTHER_TOPIC), DENIED, "a topic no worker declares"),
            Row(SNS, "sqs:SendMessage", queue, topic(OTHER_ACCOUNT_TOPIC), DENIED, "another account's topic"),
            Row(EVENTS, "sqs:SendMessage", queue, rule(OTHER_RULE), DENIED, "a rule the stack did not create"),
            Row(SNS, "sqs:SendMessage", queue, {}, DENIED, "SNS with no source: not a declared topic"),
            # What another worker of the stack declares feeds that worker only.
            *[
                Row(SNS, "sqs:SendMessage", queue, topic(TOPIC), DENIED, "another worker's topic")
                for _ in [0]
                if TOPIC not in topics
            ],
            *[
                Row(EVENTS, "sqs:SendMessage", queue, rule(arn), DENIED, "another worker's rule")
                for sibling in bindings.siblings
                for arn in rule_arns(sibling)
            ],
        ]
    rows += [
        # A declared topic's delivery over plain HTTP is refused by the TLS deny (SNS never does so).
        *[
            Row(
                SNS,
                "sqs:SendMessage",
                "source",
                {**topic(arn), "aws:SecureTransport": "false"},
                EXPLICITLY_DENIED,
                "TLS",
            )
            for arn in topics[:1]
        ],
        Row("task-role", "sqs:SendMessage", "dlq", {}, ALLOWED, "the consumer moves failed messages to the DLQ"),
        Row("task-role", "sqs:SendMessage", "source", {}, ALLOWED, "the consumer hands messages back"),
        Row("other-account/partner", "sqs:SendMessage", "source", {}, DENIED, "another account, not named"),
    ]
    if producers:
        rows += [
            Row(PRODUCER_ARN, "sqs:SendMessage", "source", {}, ALLOWED, "a named producer"),
            Row(PRODUCER_ARN, "sqs:SendMessage", "dlq", {}, EXPLICITLY_DENIED, "a producer sends to the source only"),
            Row("admin-role/admin", "sqs:SendMessage", "source", {}, EXPLICITLY_DENIED, "not named: denied"),
            # A principal of this account cannot make its request look like a source's: aws:SourceArn is set by
            # services only, so an unlisted role's request never carries one (row: the deny still applies).
            Row("admin-role/admin", "sqs:SendMessage", "dlq", {}, EXPLICITLY_DENIED, "only the consumer"),
        ]
    else:
        rows.append(
            Row("admin-role/admin", "sqs:SendMessage", "source", {}, ALLOWED, "no producers named: IAM decides")
        )
    return rows


def declared_topics(settings: dict[str, Any]) -> list[str]:
    return [s["topic_arn"] for s in settings.get("sources", []) if "topic_arn" in s]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Evaluated:
    bound = bind(synthesize_once(tmp_path_factory, {CONTEXT_KEY: VARIANTS}))
    scenarios: dict[str, list[Scenario]] = {}
    for label, bindings in bound.items():
        environment, _, worker = label.partition("/")
        settings = VARIANTS[environment]
        settings = settings["workers"][worker] if worker else settings
        rows = source_rows(bindings, declared_topics(settings), producers="producers" in VARIANTS[environment])
        scenarios[label] = bindings.scenarios("sources", rows)
    flat = [s for found in scenarios.values() for s in found]
    answers = dict(zip(flat, evaluate(flat), strict=True))
    return {label: [(s, answers[s]) for s in found] for label, found in scenarios.items()}


@pytest.mark.parametrize("worker", ["fed", "fedsenders", "fedteams/orders", "fedteams/plain"])
def test_only_the_declared_topics_and_created_rules_send_as_services(evaluated: Evaluated, worker: str) -> None:
    """Each declared topic and created rule may send to the source and to the DLQ (its delivery dead-letter queue);
    any other topic, rule or account may not; with producers, the named one still sends to the source only and an
    unnamed principal is still denied."""
    results = evaluated[worker]
    assert results
    wrong = mismatches([s for s, _ in results], {s: a for s, a in results})
    assert not wrong, f"{len(wrong)} of {len(results)} requests answered wrongly:\n" + "\n".join(wrong)


def test_every_flow_was_evaluated(evaluated: Evaluated) -> None:
    """The rows really exercised each kind of source: 2 topics + 2 rules allowed on the fed workers, none on plain."""

    def allowed(worker: str, principal: str, queue: str = "-source") -> int:
        return sum(
            s.expected == ALLOWED and s.principal == principal and s.resource.endswith(queue)
            for s, _ in evaluated[worker]
        )

    assert [allowed("fedsenders", SNS), allowed("fedsenders", EVENTS)] == [2, 2]
    assert [allowed("fedsenders", SNS, "-dlq"), allowed("fedsenders", EVENTS, "-dlq")] == [2, 2]
    assert [allowed("fedteams/orders", SNS), allowed("fedteams/orders", EVENTS)] == [1, 1]
    assert [allowed("fedteams/plain", SNS), allowed("fedteams/plain", EVENTS)] == [0, 0]
