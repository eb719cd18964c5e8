"""A worker's sources in the template: SNS subscriptions and EventBridge rules, the queue policy admitting exactly them,
the consumer told what they deliver, and nothing at all without them. The permissions tier evaluates the policy:
tests/infra/test_permissions_sources.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from consumer.sources import EVENTBRIDGE_EVENTS_ENV, SNS_ENVELOPE_TOPICS_ENV
from infra.settings import CONTEXT_KEY, SettingsError
from tests.infra.checks import check_nag
from tests.infra.conftest import Synthesized, standalone_worker, synthesize
from tests.infra.resolve import FAKE_ACCOUNT, FAKE_REGION
from tests.reference import reference_context

HANDLER = "consumer.examples.notifications:handle"
PRODUCER = f"arn:aws:iam::{FAKE_ACCOUNT}:role/orders-api"
#: A topic of this account and one of another account (cross-account subscriptions are allowed).
TOPIC = f"arn:aws:sns:{FAKE_REGION}:{FAKE_ACCOUNT}:orders"
PARTNER_TOPIC = f"arn:aws:sns:{FAKE_REGION}:444455556666:partner-orders"
FIFO_TOPIC = f"arn:aws:sns:{FAKE_REGION}:{FAKE_ACCOUNT}:orders.fifo"
FILTER = {"kind": ["order", "refund"], "amount": [{"numeric": [">", 0]}]}
PATTERN = {"source": ["orders.api"], "detail-type": ["OrderPlaced"]}
#: Sources of each kind: a filtered raw topic, a topic delivering the envelope, a rule on the default bus and one
#: on a named bus.
SOURCES: list[dict[str, Any]] = [
    {"topic_arn": TOPIC, "filter_policy": FILTER},
    {"topic_arn": PARTNER_TOPIC, "raw_message_delivery": False},
    {"event_pattern": PATTERN},
    {"event_pattern": {"source": ["billing"]}, "event_bus": "billing"},
]
#: Variants: sources alone, sources beside producers, a FIFO worker, and two workers of which one has sources.
VARIANTS: dict[str, dict[str, Any]] = {
    "fed": {"handler": HANDLER, "sources": SOURCES},
    "fedsenders": {"handler": HANDLER, "sources": SOURCES, "producers": [PRODUCER]},
    "fedfifo": {
        "handler": "tests.infra.handlers:ordered",
        "sources": [{"topic_arn": FIFO_TOPIC}, {"event_pattern": PATTERN}],
    },
    "fedteams": {
        "workers": {
            "plain": {"handler": HANDLER},
            "orders": {"handler": HANDLER, "sources": [{"topic_arn": TOPIC}, {"event_pattern": PATTERN}]},
        }
    },
}


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    return synthesize(tmp_path_factory.mktemp("cdk.out"), {CONTEXT_KEY: VARIANTS})


def queue_policy(env: Synthesized, worker: str | None = None) -> list[dict[str, Any]]:
    """The statements of the source queue's policy of ``worker`` (default the first)."""
    queues = env.stack.workers[worker].queues if worker else env.stack.queues
    queue_id = env.logical_id(queues.queue)
    (policy,) = [
        p for p in env.resources("AWS::SQS::QueuePolicy").values() if {"Ref": queue_id} in p["Properties"]["Queues"]
    ]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def environment_of(env: Synthesized, worker: str | None = None) -> dict[str, str]:
    return {e["Name"]: e["Value"] for e in env.container(worker).get("Environment", [])}


def test_each_topic_is_subscribed_with_raw_delivery_by_default_and_its_filter(fed: dict[str, Synthesized]) -> None:
    """One sqs subscription per topic: raw delivery unless turned off, the filter policy and its scope as declared."""
    env = fed["fed"]
    subscriptions = sorted(
        (
            s["Properties"]
            for s in env.resources("AWS::SNS::Subscription").values()
            if s["Properties"]["Protocol"] == "sqs"
        ),
        key=lambda p: p["TopicArn"],
    )
    queue = {"Fn::GetAtt": [env.logical_id(env.stack.queues.queue), "Arn"]}
    assert subscriptions == [
        {
            "Protocol": "sqs",
            "TopicArn": TOPIC,
            "Endpoint": queue,
            "RawMessageDelivery": True,
            "FilterPolicy": FILTER,
            "FilterPolicyScope": "MessageAttributes",
        },
        {"Protocol": "sqs", "TopicArn": PARTNER_TOPIC, "Endpoint": queue, "RawMessageDelivery": False},
    ]


def test_each_rule_targets_the_queue_on_its_bus_with_its_pattern(fed: dict[str, Synthesized]) -> None:
    """One rule per EventBridge source, named per worker and index, on the default or the named bus."""
    env = fed["fed"]
    rules = {r["Properties"]["Name"]: r["Properties"] for r in env.resources("AWS::Events::Rule").values()}
    queue = {"Fn::GetAtt": [env.logical_id(env.stack.queues.queue), "Arn"]}
    assert sorted(rules) == ["SqsWorker-fed-source-2", "SqsWorker-fed-source-3"]
    default, named = rules["SqsWorker-fed-source-2"], rules["SqsWorker-fed-source-3"]
    assert default["EventPattern"] == PATTERN and "EventBusName" not in default
    assert named["EventBusName"] == "billing"
    for rule in (default, named):
        assert rule["State"] == "ENABLED"
        assert rule["Targets"] == [{"Arn": queue, "Id": "Queue"}]


def test_logical_ids_are_per_worker_and_source_index(fed: dict[str, Synthesized]) -> None:
    """The first worker keeps its ids' form (Sources/Source<i>); another worker's start with its name."""
    first = {k for k in fed["fed"].json["Resources"] if k.startswith("SourcesSource")}
    assert sorted(k[: len("SourcesSource0")] for k in first) == [f"SourcesSource{i}" for i in range(4)]
    teams = fed["fedteams"].json["Resources"]
    assert sorted(k[: len("ordersSourcesSource0")] for k in teams if "SourcesSource" in k) == [
        "ordersSourcesSource0",
        "ordersSourcesSource1",
    ]


def test_queue_policy_holds_exactly_one_allow_per_source(fed: dict[str, Synthesized]) -> None:
    """Each source: one Allow of sqs:SendMessage to its service principal, aws:SourceArn exactly the topic or rule;
    nothing broader, no duplicate (the CDK's own subscription and target helpers are not used)."""
    env = fed["fed"]
    rules = {r["Properties"]["Name"]: k for k, r in env.resources("AWS::Events::Rule").items()}
    allows = [s for s in queue_policy(env) if s["Effect"] == "Allow"]
    assert allows == [
        {
            "Sid": sid,
            "Effect": "Allow",
            "Principal": {"Service": service},
            "Action": "sqs:SendMessage",
            "Resource": {"Fn::GetAtt": [env.logical_id(env.stack.queues.queue), "Arn"]},
            "Condition": {"ArnEquals": {"aws:SourceArn": source}},
        }
        for sid, service, source in (
            ("AllowTopic0", "sns.amazonaws.com", TOPIC),
            ("AllowTopic1", "sns.amazonaws.com", PARTNER_TOPIC),
            ("AllowRule2", "events.amazonaws.com", {"Fn::GetAtt": [rules["SqsWorker-fed-source-2"], "Arn"]}),
            ("AllowRule3", "events.amazonaws.com", {"Fn::GetAtt": [rules["SqsWorker-fed-source-3"], "Arn"]}),
        )
    ]


def test_deny_of_other_senders_leaves_out_the_declared_sources(fed: dict[str, Synthesized]) -> None:
    """With producers, the deny applies only where the principal is unlisted and aws:SourceArn is no source's."""
    env = fed["fedsenders"]
    (deny,) = [s for s in queue_policy(env) if s.get("Sid") == "DenyOtherSenders"]
    condition = deny["Condition"]["ArnNotEquals"]
    assert condition["aws:PrincipalArn"][0] == PRODUCER
    rules = sorted(env.resources("AWS::Events::Rule"))
    assert condition["aws:SourceArn"][:2] == [TOPIC, PARTNER_TOPIC]
    assert sorted(arn["Fn::GetAtt"][0] for arn in condition["aws:SourceArn"][2:]) == rules


def test_consumer_is_told_which_topics_send_envelopes_and_that_rules_send_events(fed: dict[str, Synthesized]) -> None:
    """CONSUMER_SNS_ENVELOPE_TOPICS lists the raw-delivery-off topics only; CONSUMER_EVENTBRIDGE_EVENTS with a rule."""
    environment = environment_of(fed["fed"])
    assert environment[SNS_ENVELOPE_TOPICS_ENV] == PARTNER_TOPIC
    assert environment[EVENTBRIDGE_EVENTS_ENV] == "true"
    # Raw delivery everywhere: no envelope variable; the worker without sources gets neither.
    orders, plain = environment_of(fed["fedteams"], "orders"), environment_of(fed["fedteams"], "plain")
    assert SNS_ENVELOPE_TOPICS_ENV not in orders and orders[EVENTBRIDGE_EVENTS_ENV] == "true"
    assert not {SNS_ENVELOPE_TOPICS_ENV, EVENTBRIDGE_EVENTS_ENV} & set(plain)


def test_fifo_rule_sends_with_its_message_group(fed: dict[str, Synthesized]) -> None:
    """EventBridge needs a message group for a FIFO queue: one per rule, so its events keep their order."""
    (rule,) = fed["fedfifo"].resources("AWS::Events::Rule").values()
    (target,) = rule["Properties"]["Targets"]
    assert target["SqsParameters"] == {"MessageGroupId": "eventbridge-source-1"}
    (subscription,) = fed["fedfifo"].resources("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["TopicArn"] == FIFO_TOPIC


def test_env_agnostic_stack_asserts_the_sources_region_at_deploy(fed: dict[str, Synthesized]) -> None:
    """Without a region at synth, the template's Rules refuse a deploy to another region than the topics'."""
    rules = fed["fed"].json["Rules"]
    (assertion,) = [a for name, rule in rules.items() if name.startswith("SourcesRegion") for a in rule["Assertions"]]
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, FAKE_REGION]}


def test_nag_is_clean_with_sources(fed: dict[str, Synthesized]) -> None:
    """cdk-nag's AwsSolutions pack leaves no open finding and needs no new acknowledgement with sources."""
    for env in fed.values():
        check_nag(env)


def test_without_sources_every_template_is_byte_identical(tmp_path: Path) -> None:
    """The reference environments (no sources) synthesize exactly as before: nothing of this feature is written."""
    for env in synthesize(tmp_path, reference_context()).values():
        assert "SourcesSource" not in json.dumps(env.json) and not env.resources("AWS::Events::Rule")
        assert not [s for s in env.resources("AWS::SNS::Subscription").values() if s["Properties"]["Protocol"] == "sqs"]
        for worker in env.stack.workers:
            for statement in queue_policy(env, worker):
                assert not statement.get("Sid", "").startswith(("AllowTopic", "AllowRule"))
                assert "aws:SourceArn" not in json.dumps(statement)
        assert not [name for name in env.json.get("Rules", {}) if "Sources" in name]
        assert not {SNS_ENVELOPE_TOPICS_ENV, EVENTBRIDGE_EVENTS_ENV} & set(environment_of(env))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"region": "us-east-1", "sources": [{"topic_arn": TOPIC}]},
            f'"{CONTEXT_KEY}.wrong.sources[0].topic_arn" must be in the environment\'s region us-east-1',
        ),
        (
            {"sources": [{"topic_arn": FIFO_TOPIC}]},
            f'"{CONTEXT_KEY}.wrong.sources[0].topic_arn" must not be a FIFO topic for a standard queue',
        ),
        (
            {"handler": "tests.infra.handlers:ordered", "sources": [{"topic_arn": TOPIC}]},
            f'"{CONTEXT_KEY}.wrong.sources[0].topic_arn" must be a FIFO topic (.fifo) for a FIFO queue',
        ),
    ],
)
def test_synth_refuses_a_source_in_another_region_or_a_fifo_mismatch(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    """Synth stops in one line naming the setting's full path, the rule and the value."""
    with pytest.raises(SettingsError) as raised:
        synthesize(tmp_path, {CONTEXT_KEY: {"wrong": {"handler": HANDLER, **settings}}})
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("variable", [SNS_ENVELOPE_TOPICS_ENV, EVENTBRIDGE_EVENTS_ENV])
@pytest.mark.parametrize("option", ["handler_environment", "secrets"])
def test_the_construct_refuses_a_caller_setting_the_sources_variables(variable: str, option: str) -> None:
    """Called directly (a team's app, no cdk.json), the variables the sources write are the construct's own."""
    from infra.worker_settings import SecretSource

    plain = {variable: "x"} if option == "handler_environment" else None
    secrets = {variable: SecretSource(service="ssm", name="/x")} if option == "secrets" else None
    with pytest.raises(ValueError) as refused:
        standalone_worker(HANDLER, "orders", handler_environment=plain, secrets=secrets)
    assert str(refused.value) == f'"{option}" must not set variables the construct sets: {variable}'
