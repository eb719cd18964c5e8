"""Unit tests for a worker's ``sources`` in cdk.json: each refusal is one line naming the setting's full path, the rule
and the value; the filter policies SNS documents pass, and the ones it would reject do not."""

from __future__ import annotations

from typing import Any

import pytest

from infra.settings import parse_environment
from infra.source_settings import (
    RuleSource,
    SourceError,
    TopicSource,
    check_filter_policy,
    check_one_region,
    check_sources,
    parse_sources,
)
from infra.worker_settings import CONTEXT_KEY, SettingsError

HANDLER = "consumer.examples.notifications:handle"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:orders"
PATH = f"{CONTEXT_KEY}.prod.workers.orders.sources"


def error_for(sources: Any, **worker: Any) -> str:
    raw = {"workers": {"orders": {"handler": HANDLER, "sources": sources, **worker}}}
    with pytest.raises(SettingsError) as raised:
        parse_environment("prod", {**raw, "paging": {"emails": ["oncall@corp.io"]}})
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_sources_parse_into_topics_and_rules_with_their_defaults() -> None:
    """A topic delivers raw by default with attribute scope; a rule is on the default bus, its group its name's."""
    raw = {"handler": HANDLER, "sources": [{"topic_arn": TOPIC}, {"name": "placed", "event_pattern": {"a": [1]}}]}
    (worker,) = parse_environment("dev", raw).workers
    topic, rule = worker.sources
    assert topic == TopicSource(path=f"{CONTEXT_KEY}.dev.sources[0]", topic_arn=TOPIC)
    assert topic.raw_message_delivery and topic.region == "eu-west-1" and topic.account == "123456789012"
    assert isinstance(rule, RuleSource) and rule.event_bus == "default" and rule.group_id() == "eventbridge-placed"
    assert parse_environment("dev", {"handler": HANDLER}).workers[0].sources == ()


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ({"topic_arn": TOPIC}, f'"{PATH}" must be a list of sources'),
        ([], f'"{PATH}" must list at least one source (leave it out for none): []'),
        ([{"name": str(i), "event_pattern": {"a": [i]}} for i in range(8)], f'"{PATH}" must list at most 7 sources'),
        (
            [{"topic_arn": TOPIC}, {"topic_arn": TOPIC}],
            f'"{PATH}[1].topic_arn" must name each topic once (SNS keeps one subscription per topic and queue);'
            f" {PATH}[0] names it already: {TOPIC!r}",
        ),
        (
            [{"name": "placed", "event_pattern": {"a": [1]}}, {"name": "placed", "event_pattern": {"b": [1]}}],
            f'"{PATH}[1].name" must name each rule once in the worker (the rule\'s name and resources derive from it);'
            f" {PATH}[0] names it already: 'placed'",
        ),
        ([{"event_pattern": {"a": [1]}}], f"\"{PATH}[0].name\" must be 1 to 52 lowercase letters, digits and '-'"),
        ([{"name": "Placed", "event_pattern": {"a": [1]}}], f'"{PATH}[0].name" must be 1 to 52 lowercase'),
        ([{"name": "-placed", "event_pattern": {"a": [1]}}], f'"{PATH}[0].name" must be 1 to 52 lowercase'),
        ([{"name": "order_placed", "event_pattern": {"a": [1]}}], f'"{PATH}[0].name" must be 1 to 52 lowercase'),
        ([{"name": "x" * 53, "event_pattern": {"a": [1]}}], f'"{PATH}[0].name" must be 1 to 52 lowercase'),
        ([{}], f'"{PATH}[0]" must be an object with either "topic_arn" (SNS) or "event_pattern" (EventBridge)'),
        ([{"topic_arn": TOPIC, "event_pattern": {"a": [1]}}], f'"{PATH}[0]" must be an object with either'),
        ([{"topic_arn": TOPIC, "event_bus": "x"}], f'"{PATH}[0].event_bus" is not a setting of this source'),
        (
            [{"topic_arn": "arn:aws:sqs:eu-west-1:123456789012:orders"}],
            f'"{PATH}[0].topic_arn" must be an SNS topic ARN, arn:aws:sns:<region>:<12-digit account>:<topic name>:'
            " 'arn:aws:sqs:eu-west-1:123456789012:orders'",
        ),
        ([{"topic_arn": "arn:aws:sns:eu-west-1:1234:orders"}], f'"{PATH}[0].topic_arn" must be an SNS topic ARN'),
        ([{"topic_arn": f"{TOPIC}*"}], f'"{PATH}[0].topic_arn" must be an SNS topic ARN'),
        ([{"topic_arn": TOPIC, "raw_message_delivery": "yes"}], f'"{PATH}[0].raw_message_delivery" must be true'),
        (
            [{"topic_arn": TOPIC, "filter_policy": {"a": ["b"]}, "filter_policy_scope": "Body"}],
            f'"{PATH}[0].filter_policy_scope" must be one of MessageAttributes, MessageBody',
        ),
        (
            [{"topic_arn": TOPIC, "filter_policy_scope": "MessageBody"}],
            f'"{PATH}[0].filter_policy_scope" needs a filter_policy to scope',
        ),
        ([{"name": "r", "event_pattern": {}}], f'"{PATH}[0].event_pattern" must be a non-empty JSON object'),
        ([{"name": "r", "event_pattern": "source=x"}], f'"{PATH}[0].event_pattern" must be a non-empty JSON object'),
        ([{"name": "r", "event_pattern": {"a": [1]}, "event_bus": "arn:aws:sns:x"}], f'"{PATH}[0].event_bus" must be'),
        ([{"name": "r", "event_pattern": {"a": [1]}, "event_bus": "bad name"}], f'"{PATH}[0].event_bus" must be'),
        (
            [{"name": "r", "event_pattern": {"a": [1]}, "message_group_id": ""}],
            f'"{PATH}[0].message_group_id" must be 1 to 128 letters, digits or punctuation',
        ),
    ],
)
def test_each_malformed_source_is_refused_in_one_line(sources: Any, message: str) -> None:
    assert error_for(sources).startswith(message)


def test_filter_policy_errors_name_the_full_path_of_the_key() -> None:
    message = error_for([{"topic_arn": TOPIC, "filter_policy": {"store": {"name": ["x"]}}}])
    assert message.startswith(f'"{PATH}[0].filter_policy.store" must be a list of values: a nested policy needs')


@pytest.mark.parametrize("variable", ["CONSUMER_SNS_ENVELOPE_TOPICS", "CONSUMER_EVENTBRIDGE_EVENTS"])
def test_handler_environment_may_not_set_the_variables_the_sources_write(variable: str) -> None:
    message = error_for([{"topic_arn": TOPIC}], handler_environment={variable: "x"})
    assert message == (
        f'"{CONTEXT_KEY}.prod.workers.orders.handler_environment" must not set variables the stack writes itself:'
        f" '{variable}'"
    )


# -- SNS filter policies: the documented examples pass ---------------------------------------------------------------
# https://docs.aws.amazon.com/sns/latest/dg/sns-subscription-filter-policies.html and its pages per operator.
DOCUMENTED = [
    {"store": ["example_corp"], "event": [{"anything-but": "order_cancelled"}], "customer_interests": ["rugby"]},
    {"price_usd": [{"numeric": [">=", 100]}]},
    {"price_usd": [{"numeric": [">", 0, "<=", 150]}]},
    {"customer_interests": [{"prefix": "bas"}]},
    {"customer_interests": [{"suffix": "ball"}]},
    {"customer_interests": [{"equals-ignore-case": "tennis"}]},
    {"customer_interests": [{"anything-but": ["rugby", "tennis"]}]},
    {"customer_interests": [{"anything-but": {"prefix": "bas"}}]},
    {"store": [{"exists": True}]},
    {"source_ip": [{"cidr": "10.0.0.0/24"}]},
    # https://docs.aws.amazon.com/sns/latest/dg/subscription-filter-policy-constraints.html: 3 x 1 x 2 = 6.
    {"key_a": ["value_one", "value_two", "value_three"], "key_b": ["value_one"], "key_c": ["value_one", "value_two"]},
]


@pytest.mark.parametrize("policy", DOCUMENTED)
def test_documented_filter_policies_pass(policy: dict[str, Any]) -> None:
    check_filter_policy("p", policy)


def test_nested_policy_passes_in_message_body_scope() -> None:
    check_filter_policy("p", {"store": {"name": ["example_corp"], "city": [{"prefix": "Se"}]}}, "MessageBody")


@pytest.mark.parametrize(
    ("policy", "scope", "message"),
    [
        ({}, "MessageAttributes", '"p" must be a non-empty JSON object'),
        # "A filter policy can have a maximum of five keys."
        ({f"k{i}": ["v"] for i in range(6)}, "MessageAttributes", '"p" must have at most 5 keys'),
        (
            {"a": {"b": ["1"], "c": {"d": ["1"], "e": ["1"], "f": ["1"], "g": ["1"], "h": ["1"]}}},
            "MessageBody",
            '"p" must have at most 5 keys',
        ),
        # "The total combination of values ... must not exceed 150": 13 x 12 = 156.
        (
            {"a": [str(i) for i in range(13)], "b": [str(i) for i in range(12)]},
            "MessageAttributes",
            '"p" must have at most 150 combinations',
        ),
        # Attribute-based filtering takes no nested policy.
        ({"a": {"b": ["1"]}}, "MessageAttributes", '"p.a" must be a list of values: a nested policy needs'),
        # "The value can range from -10^9 to 10^9."
        ({"a": [{"numeric": [">", 2_000_000_000]}]}, "MessageAttributes", '"p.a" must hold numbers from -1000000000'),
        ({"a": [3_000_000_000]}, "MessageAttributes", '"p.a" must hold numbers from -1000000000'),
        ({"a": [{"numeric": ["!=", 1]}]}, "MessageAttributes", '"p.a" "numeric" operators must be one of'),
        ({"a": [{"numeric": ["<", 5, ">", 1]}]}, "MessageAttributes", '"p.a" "numeric" range must be'),
        ({"a": [{"numeric": [">", 5, "<", 1]}]}, "MessageAttributes", '"p.a" "numeric" range must be'),
        ({"a": [{"prefix": ""}]}, "MessageAttributes", '"p.a" "prefix" must take a non-empty string'),
        ({"a": [{"exists": "yes"}]}, "MessageAttributes", '"p.a" "exists" must take true or false'),
        ({"a": [{"anything-but": {"wildcard": "x*"}}]}, "MessageAttributes", '"p.a" "anything-but" must take'),
        ({"a": [{"prefix": "x", "suffix": "y"}]}, "MessageAttributes", '"p.a" must hold strings, numbers'),
        ({"a": [["nested", "list"]]}, "MessageAttributes", '"p.a" must hold strings, numbers'),
        ({"a": []}, "MessageAttributes", '"p.a" must be a non-empty list'),
        ({"a": "b"}, "MessageAttributes", '"p.a" must be a non-empty list'),
        # Not implemented here, so refused rather than passed.
        ({"a": [{"wildcard": "x*"}]}, "MessageAttributes", '"p.a" must use an operator this check implements'),
        (
            {"source": ["aws.cloudwatch"], "$or": [{"a": ["1"]}, {"b": ["2"]}]},
            "MessageAttributes",
            '"p.$or" is an operator this check does not implement',
        ),
        # "The maximum size of a filter policy is 256 KB."
        ({"a": ["x" * 300_000]}, "MessageAttributes", '"p" must be at most 262144 bytes'),
    ],
)
def test_filter_policies_sns_would_reject_are_refused(policy: dict[str, Any], scope: str, message: str) -> None:
    with pytest.raises(SourceError) as raised:
        check_filter_policy("p", policy, scope)
    assert str(raised.value).startswith(message)


# -- what needs the stack and the contract: region, account, FIFO ----------------------------------------------------


def sources(*raw: dict[str, Any]) -> tuple[Any, ...]:
    return parse_sources("s", list(raw))


def refusal(parsed: tuple[Any, ...], **environment: Any) -> str:
    arguments = {"region": "eu-west-1", "account": "123456789012", "fifo": False, "content_based_deduplication": False}
    with pytest.raises(SourceError) as raised:
        check_sources(parsed, **{**arguments, **environment})
    return str(raised.value)


def test_a_topic_in_another_region_is_refused_another_account_is_not() -> None:
    assert refusal(sources({"topic_arn": TOPIC}), region="us-east-1") == (
        f'"s[0].topic_arn" must be in the environment\'s region us-east-1 (the stack subscribes its queue there): {TOPIC!r}'
    )
    check_sources(
        sources({"topic_arn": "arn:aws:sns:eu-west-1:444455556666:partner"}),
        region="eu-west-1",
        account="123456789012",
        fifo=False,
        content_based_deduplication=False,
    )
    # Env-agnostic stack: no region to compare at synth (a template rule checks it at deploy).
    check_sources(
        sources({"topic_arn": TOPIC}), region=None, account=None, fifo=False, content_based_deduplication=False
    )


def test_a_bus_in_another_region_or_account_is_refused() -> None:
    bus = "arn:aws:events:us-east-1:123456789012:event-bus/orders"
    assert refusal(sources({"name": "r", "event_pattern": {"a": [1]}, "event_bus": bus})).startswith(
        '"s[0].event_bus" must be in the environment\'s region eu-west-1'
    )
    other = "arn:aws:events:eu-west-1:444455556666:event-bus/orders"
    assert refusal(sources({"name": "r", "event_pattern": {"a": [1]}, "event_bus": other})).startswith(
        '"s[0].event_bus" must be in the environment\'s account 123456789012'
    )


def test_sources_of_two_regions_are_refused_whatever_the_stacks_region() -> None:
    """An env-agnostic stack (region None) too: the second region's source is named, with the first's setting."""
    bus = "arn:aws:events:us-east-1:123456789012:event-bus/orders"
    two = sources({"topic_arn": TOPIC}, {"name": "r", "event_pattern": {"a": [1]}, "event_bus": bus})
    assert refusal(two, region=None, account=None) == (
        '"s[1].event_bus" every source of a stack must be in one region: the stack deploys to one (s[0].topic_arn is'
        f" in eu-west-1): {bus!r}"
    )
    # Another worker's sources, built before: the stack's first region holds for this worker too.
    other = parse_sources("t", [{"topic_arn": "arn:aws:sns:us-east-1:123456789012:orders"}])
    assert refusal(sources({"topic_arn": TOPIC}), region=None, account=None, earlier=other).startswith(
        '"s[0].topic_arn" every source of a stack must be in one region: the stack deploys to one (t[0].topic_arn is'
        " in us-east-1)"
    )
    # A bus by name is in the stack's own region: it names none.
    assert check_one_region(sources({"topic_arn": TOPIC}, {"name": "r", "event_pattern": {"a": [1]}})) == "eu-west-1"
    assert check_one_region(sources({"name": "r", "event_pattern": {"a": [1]}, "event_bus": "orders"})) is None


def test_a_rule_name_too_long_for_the_worker_prefix_is_refused() -> None:
    """``<name prefix>-<name>`` is the EventBridge rule's name: at most 64 characters."""
    long = sources({"name": "x" * 40, "event_pattern": {"a": [1]}})
    assert refusal(long, name_prefix="SqsWorker-production-orders") == (
        '"s[0].name" must leave the rule name SqsWorker-production-orders-<name> at most 64 characters'
        f" (EventBridge's limit): {'x' * 40!r}"
    )
    check_sources(
        long, region=None, account=None, fifo=False, content_based_deduplication=False, name_prefix="SqsWorker-dev"
    )


def test_fifo_mismatches_are_refused() -> None:
    assert refusal(sources({"topic_arn": f"{TOPIC}.fifo"})).startswith(
        '"s[0].topic_arn" must not be a FIFO topic for a standard queue'
    )
    assert refusal(sources({"topic_arn": TOPIC}), fifo=True, content_based_deduplication=True).startswith(
        '"s[0].topic_arn" must be a FIFO topic (.fifo) for a FIFO queue'
    )
    assert refusal(sources({"name": "r", "event_pattern": {"a": [1]}}), fifo=True).startswith(
        '"s[0].event_pattern" needs content_based_deduplication=True on a FIFO worker'
    )
    assert refusal(sources({"name": "r", "event_pattern": {"a": [1]}, "message_group_id": "g"})).startswith(
        '"s[0].message_group_id" is for a FIFO queue only'
    )
    check_sources(
        sources(
            {"topic_arn": f"{TOPIC}.fifo"}, {"name": "r", "event_pattern": {"a": [1]}, "message_group_id": "orders"}
        ),
        region="eu-west-1",
        account="123456789012",
        fifo=True,
        content_based_deduplication=True,
    )


def test_report_says_who_may_send_with_sources() -> None:
    """`python -m infra.report`'s "who may send": the producers and each worker's topics and rules."""
    from infra.report import settings_rows

    fed = {"handler": HANDLER, "sources": [{"topic_arn": TOPIC}, {"name": "r", "event_pattern": {"a": [1]}}]}
    assert (
        settings_rows(parse_environment("dev", fed))["who may send"] == "1 topic, 1 rule (IAM decides for principals)"
    )
    senders = {**fed, "producers": ["arn:aws:iam::123456789012:role/orders-api"]}
    assert settings_rows(parse_environment("dev", senders))["who may send"] == "1 producers + consumer, 1 topic, 1 rule"
    assert settings_rows(parse_environment("dev", {"handler": HANDLER}))["who may send"] == "IAM decides"
