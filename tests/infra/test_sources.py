"""A worker's sources in the template: SNS subscriptions and EventBridge rules, the queue policy admitting exactly them,
the consumer told what they deliver, and nothing at all without them. The permissions tier evaluates the policy:
tests/infra/test_permissions_sources.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from consumer.sources import EVENTBRIDGE_EVENTS_ENV, SNS_ENVELOPE_TOPICS_ENV
from infra.worker_settings import CONTEXT_KEY, SettingsError
from tests.infra.checks import check_nag
from tests.infra.conftest import Synthesized, standalone_worker, synthesize, synthesize_once
from tests.infra.resolve import FAKE_ACCOUNT, FAKE_REGION

HANDLER = "consumer.examples.notifications:handle"
PRODUCER = f"arn:aws:iam::{FAKE_ACCOUNT}:role/orders-api"
#: A topic of this account and one of another account (cross-account subscriptions are allowed).
TOPIC = f"arn:aws:sns:{FAKE_REGION}:{FAKE_ACCOUNT}:orders"
PARTNER_TOPIC = f"arn:aws:sns:{FAKE_REGION}:444455556666:partner-orders"
FIFO_TOPIC = f"arn:aws:sns:{FAKE_REGION}:{FAKE_ACCOUNT}:orders.fifo"
#: A topic and a bus of another region than every other source's.
US_TOPIC = f"arn:aws:sns:us-east-1:{FAKE_ACCOUNT}:orders"
US_BUS = f"arn:aws:events:us-east-1:{FAKE_ACCOUNT}:event-bus/orders"
FILTER = {"kind": ["order", "refund"], "amount": [{"numeric": [">", 0]}]}
PATTERN = {"source": ["orders.api"], "detail-type": ["OrderPlaced"]}
#: Sources of each kind: a filtered raw topic, a topic delivering the envelope, a rule on the default bus and one
#: on a named bus.
SOURCES: list[dict[str, Any]] = [
    {"topic_arn": TOPIC, "filter_policy": FILTER},
    {"topic_arn": PARTNER_TOPIC, "raw_message_delivery": False},
    {"name": "placed", "event_pattern": PATTERN},
    {"name": "billing", "event_pattern": {"source": ["billing"]}, "event_bus": "billing"},
]
#: Variants: sources alone, the same sources reordered, sources beside producers, a FIFO worker, and two workers of
#: which one has sources.
VARIANTS: dict[str, dict[str, Any]] = {
    "fed": {"handler": HANDLER, "sources": SOURCES},
    "fedreordered": {"handler": HANDLER, "sources": [SOURCES[3], SOURCES[1], SOURCES[0]]},
    "fedsenders": {"handler": HANDLER, "sources": SOURCES, "producers": [PRODUCER]},
    "fedfifo": {
        "handler": "tests.infra.handlers:ordered",
        "sources": [{"topic_arn": FIFO_TOPIC}, {"name": "placed", "event_pattern": PATTERN}],
    },
    "fedteams": {
        "workers": {
            "plain": {"handler": HANDLER},
            "orders": {
                "handler": HANDLER,
                "sources": [{"topic_arn": TOPIC}, {"name": "placed", "event_pattern": PATTERN}],
            },
        }
    },
}


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    return synthesize_once(tmp_path_factory, {CONTEXT_KEY: VARIANTS})


def policy_id(env: Synthesized, *, dead_letter: bool = False) -> str:
    """The logical id of the first worker's source queue's (or DLQ's) policy."""
    queues = env.stack.queues
    queue_id = env.logical_id(queues.dead_letter_queue if dead_letter else queues.queue)
    (found,) = [
        k for k, p in env.resources("AWS::SQS::QueuePolicy").items() if {"Ref": queue_id} in p["Properties"]["Queues"]
    ]
    return found


def queue_policy(env: Synthesized, worker: str | None = None, *, dead_letter: bool = False) -> list[dict[str, Any]]:
    """The statements of the source queue's (or DLQ's) policy of ``worker`` (default the first)."""
    queues = env.stack.workers[worker].queues if worker else env.stack.queues
    queue_id = env.logical_id(queues.dead_letter_queue if dead_letter else queues.queue)
    (policy,) = [
        p for p in env.resources("AWS::SQS::QueuePolicy").values() if {"Ref": queue_id} in p["Properties"]["Queues"]
    ]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def dlq_arn(env: Synthesized) -> dict[str, Any]:
    return {"Fn::GetAtt": [env.logical_id(env.stack.queues.dead_letter_queue), "Arn"]}


def environment_of(env: Synthesized, worker: str | None = None) -> dict[str, str]:
    return {e["Name"]: e["Value"] for e in env.container(worker).get("Environment", [])}


def test_each_topic_is_subscribed_with_raw_delivery_by_default_and_its_filter(fed: dict[str, Synthesized]) -> None:
    """One sqs subscription per topic: raw delivery unless turned off, the filter policy and its scope as declared,
    and the worker's DLQ as its delivery dead-letter queue (RedrivePolicy)."""
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
    redrive = {"deadLetterTargetArn": dlq_arn(env)}
    assert subscriptions == [
        {
            "Protocol": "sqs",
            "TopicArn": TOPIC,
            "Endpoint": queue,
            "RawMessageDelivery": True,
            "FilterPolicy": FILTER,
            "FilterPolicyScope": "MessageAttributes",
            "RedrivePolicy": redrive,
        },
        {
            "Protocol": "sqs",
            "TopicArn": PARTNER_TOPIC,
            "Endpoint": queue,
            "RawMessageDelivery": False,
            "RedrivePolicy": redrive,
        },
    ]


def test_each_rule_targets_the_queue_on_its_bus_with_its_pattern(fed: dict[str, Synthesized]) -> None:
    """One rule per EventBridge source, named per worker and its name, on the default or the named bus; its target
    moves what it gives up on (EventBridge's default retries: 24 hours, 185 attempts) to the worker's DLQ."""
    env = fed["fed"]
    rules = {r["Properties"]["Name"]: r["Properties"] for r in env.resources("AWS::Events::Rule").values()}
    queue = {"Fn::GetAtt": [env.logical_id(env.stack.queues.queue), "Arn"]}
    assert sorted(rules) == ["SqsWorker-fed-billing", "SqsWorker-fed-placed"]
    default, named = rules["SqsWorker-fed-placed"], rules["SqsWorker-fed-billing"]
    assert default["EventPattern"] == PATTERN and "EventBusName" not in default
    assert named["EventBusName"] == "billing"
    for rule in (default, named):
        assert rule["State"] == "ENABLED"
        assert rule["Targets"] == [
            {
                "Arn": queue,
                "Id": "Queue",
                "DeadLetterConfig": {"Arn": dlq_arn(env)},
                "RetryPolicy": {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185},
            }
        ]


def source_ids(env: Synthesized) -> dict[str, str]:
    """Each source resource's logical id, keyed by what it names: the topic ARN, or the rule's name unprefixed."""
    prefix = f"{env.stack.stack_name}-"
    ids = {r["Properties"]["TopicArn"]: k for k, r in env.resources("AWS::SNS::Subscription").items()}
    return ids | {
        r["Properties"]["Name"].removeprefix(prefix): k for k, r in env.resources("AWS::Events::Rule").items()
    }


def test_logical_ids_derive_from_the_topic_or_the_rule_name(fed: dict[str, Synthesized]) -> None:
    """The first worker's ids are Sources/Topic<name><hash> and Sources/Rule<name><hash>; another worker's start with
    its name."""
    assert {k: v[: -len("0123ABCD") * 2] for k, v in source_ids(fed["fed"]).items()} == {
        TOPIC: "SourcesTopicorders",
        PARTNER_TOPIC: "SourcesTopicpartnerorders",
        "placed": "SourcesRuleplaced",
        "billing": "SourcesRulebilling",
    }
    teams = fed["fedteams"].json["Resources"]
    assert sorted(k[: -len("0123ABCD") * 2] for k in teams if k.startswith("ordersSources")) == [
        "ordersSourcesRuleplaced",
        "ordersSourcesTopicorders",
    ]


def test_reordering_or_removing_sources_keeps_every_id_name_and_statement(fed: dict[str, Synthesized]) -> None:
    """The same sources reordered, one removed: every remaining subscription and rule keeps its logical id, every
    rule its name, every Allow its sid and condition (CloudFormation replaces nothing, renames no rule)."""
    before, after = fed["fed"], fed["fedreordered"]
    kept = source_ids(after)
    assert sorted(kept) == sorted([TOPIC, PARTNER_TOPIC, "billing"])
    assert kept == {k: v for k, v in source_ids(before).items() if k in kept}

    def allows(env: Synthesized) -> dict[str, str]:
        text = json.dumps([s for s in queue_policy(env) if s["Effect"] == "Allow"])
        return {s["Sid"]: json.dumps(s["Condition"]).replace(env.stack.stack_name, "<stack>") for s in json.loads(text)}

    assert allows(after) == {sid: c for sid, c in allows(before).items() if sid in allows(after)}
    assert len(allows(after)) == 3


def test_subscriptions_and_rules_are_created_after_the_policy_admitting_them(fed: dict[str, Synthesized]) -> None:
    """Each subscription and rule DependsOn the queue's policy, and the DLQ's where the DLQ is its delivery
    dead-letter queue (not a FIFO worker's rule): SNS and EventBridge drop a delivery refused with 403, so none may
    be delivered before its Allows exist. The policies name each rule by its ARN built from the rule's name, never
    Fn::GetAtt (which would order the rule before the policy)."""
    for label in ("fed", "fedsenders", "fedfifo"):
        env = fed[label]
        queue_policy_id, dlq_policy_id = policy_id(env), policy_id(env, dead_letter=True)
        subscriptions, rules = env.resources("AWS::SNS::Subscription"), env.resources("AWS::Events::Rule")
        assert subscriptions and rules
        for logical_id, resource in (subscriptions | rules).items():
            depends = resource.get("DependsOn", [])
            assert queue_policy_id in depends, f"{label}: {logical_id} must depend on {queue_policy_id}"
            if logical_id in subscriptions or label != "fedfifo":
                assert dlq_policy_id in depends, f"{label}: {logical_id} must depend on {dlq_policy_id}"
            else:
                assert dlq_policy_id not in depends, f"{label}: {logical_id} has no DLQ to wait for"
        for policy in (queue_policy_id, dlq_policy_id):
            text = json.dumps(env.json["Resources"][policy])
            assert not [k for k in rules if k in text], f"{label}: {policy} names a rule"


def test_queue_policy_holds_exactly_one_allow_per_source(fed: dict[str, Synthesized]) -> None:
    """Each source: one Allow of sqs:SendMessage to its service principal, aws:SourceArn exactly the topic or rule;
    nothing broader, no duplicate (the CDK's own subscription and target helpers are not used)."""
    env = fed["fed"]
    ids = source_ids(env)
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
            (f"Allow{ids[TOPIC][len('Sources') : -8]}", "sns.amazonaws.com", TOPIC),
            (f"Allow{ids[PARTNER_TOPIC][len('Sources') : -8]}", "sns.amazonaws.com", PARTNER_TOPIC),
            (
                f"Allow{ids['placed'][len('Sources') : -8]}",
                "events.amazonaws.com",
                rule_arn("rule/SqsWorker-fed-placed"),
            ),
            (
                f"Allow{ids['billing'][len('Sources') : -8]}",
                "events.amazonaws.com",
                rule_arn("rule/billing/SqsWorker-fed-billing"),
            ),
        )
    ]


def test_dlq_policy_holds_exactly_one_allow_per_source_with_a_delivery_dlq(fed: dict[str, Synthesized]) -> None:
    """The DLQ admits each source that has it as its delivery dead-letter queue, as the queue does: every topic, and
    a standard worker's rules; a FIFO worker's rule has no DLQ and no Allow on it."""
    for label, expected in (
        (
            "fed",
            [
                TOPIC,
                PARTNER_TOPIC,
                rule_arn("rule/SqsWorker-fed-placed"),
                rule_arn("rule/billing/SqsWorker-fed-billing"),
            ],
        ),
        ("fedfifo", [FIFO_TOPIC]),
    ):
        env = fed[label]
        allows = [s for s in queue_policy(env, dead_letter=True) if s["Effect"] == "Allow"]
        queue_allows = {json.dumps(s["Condition"]): s for s in queue_policy(env) if s["Effect"] == "Allow"}
        assert [a["Condition"]["ArnEquals"]["aws:SourceArn"] for a in allows] == expected, label
        for allow in allows:
            # The same statement as the queue's, on the DLQ.
            same = queue_allows[json.dumps(allow["Condition"])]
            assert allow == same | {"Resource": dlq_arn(env)}, label


def test_dlq_deny_leaves_out_the_sources_with_a_delivery_dlq(fed: dict[str, Synthesized]) -> None:
    """With producers, the DLQ's deny applies only where the principal is not the consumer and aws:SourceArn is no
    source's: SNS and EventBridge can move what they give up on to the DLQ, nobody else can send."""
    env = fed["fedsenders"]
    (deny,) = [s for s in queue_policy(env, dead_letter=True) if s.get("Sid") == "DenySendersButTheConsumer"]
    condition = deny["Condition"]["ArnNotEquals"]
    assert condition["aws:PrincipalArn"] == [{"Fn::GetAtt": [env.logical_id(env.stack.consumer.task_role), "Arn"]}]
    assert condition["aws:SourceArn"] == [
        TOPIC,
        PARTNER_TOPIC,
        rule_arn("rule/SqsWorker-fedsenders-placed"),
        rule_arn("rule/billing/SqsWorker-fedsenders-billing"),
    ]


def rule_arn(resource: str) -> dict[str, Any]:
    """A rule's ARN in an env-agnostic stack's template, as the CDK's format_arn joins it."""
    pseudo = [{"Ref": "AWS::Partition"}, ":events:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"}]
    return {"Fn::Join": ["", ["arn:", *pseudo, f":{resource}"]]}


def test_deny_of_other_senders_leaves_out_the_declared_sources(fed: dict[str, Synthesized]) -> None:
    """With producers, the deny applies only where the principal is unlisted and aws:SourceArn is no source's."""
    env = fed["fedsenders"]
    (deny,) = [s for s in queue_policy(env) if s.get("Sid") == "DenyOtherSenders"]
    condition = deny["Condition"]["ArnNotEquals"]
    assert condition["aws:PrincipalArn"][0] == PRODUCER
    assert condition["aws:SourceArn"] == [
        TOPIC,
        PARTNER_TOPIC,
        rule_arn("rule/SqsWorker-fedsenders-placed"),
        rule_arn("rule/billing/SqsWorker-fedsenders-billing"),
    ]


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
    assert target["SqsParameters"] == {"MessageGroupId": "eventbridge-placed"}
    (subscription,) = fed["fedfifo"].resources("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["TopicArn"] == FIFO_TOPIC


def test_fifo_worker_rule_has_no_delivery_dlq_and_its_topic_the_fifo_dlq(fed: dict[str, Synthesized]) -> None:
    """EventBridge takes a standard queue only as a target's DLQ: a FIFO worker's rule has none. Its FIFO topic's
    subscription names the worker's DLQ, FIFO as SNS requires for a FIFO topic."""
    env = fed["fedfifo"]
    (rule,) = env.resources("AWS::Events::Rule").values()
    (target,) = rule["Properties"]["Targets"]
    assert "DeadLetterConfig" not in target
    (subscription,) = env.resources("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["RedrivePolicy"] == {"deadLetterTargetArn": dlq_arn(env)}
    assert env.stack.queues.dlq_name.endswith(".fifo")


def test_env_agnostic_stack_asserts_the_sources_region_at_deploy(fed: dict[str, Synthesized]) -> None:
    """Without a region at synth, the template's Rules refuse a deploy to another region than the topics', naming the
    setting that placed them there."""
    rules = fed["fed"].json["Rules"]
    (assertion,) = [a for name, rule in rules.items() if name.startswith("SourcesRegion") for a in rule["Assertions"]]
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, FAKE_REGION]}
    assert assertion["AssertDescription"] == (
        f"{CONTEXT_KEY}.fed.sources[0].topic_arn is in {FAKE_REGION} ({TOPIC}): deploy this stack to {FAKE_REGION}"
    )


def test_nag_is_clean_with_sources(fed: dict[str, Synthesized]) -> None:
    """cdk-nag's AwsSolutions pack leaves no open finding and needs no new acknowledgement with sources."""
    for env in fed.values():
        check_nag(env)


def test_without_sources_every_template_is_byte_identical(reference: dict[str, Synthesized]) -> None:
    """The reference environments (no sources) write nothing of this feature: no sources topic, rule or SQS
    subscription."""
    for env in reference.values():
        assert "SourcesTopic" not in json.dumps(env.json) and not env.resources("AWS::Events::Rule")
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
        # No region set: two regions among the sources could never both hold at deploy.
        (
            {"sources": [{"topic_arn": TOPIC}, {"name": "us", "event_pattern": PATTERN, "event_bus": US_BUS}]},
            f'"{CONTEXT_KEY}.wrong.sources[1].event_bus" every source of a stack must be in one region: the stack'
            f" deploys to one ({CONTEXT_KEY}.wrong.sources[0].topic_arn is in {FAKE_REGION}): {US_BUS!r}",
        ),
        (
            {
                "workers": {
                    "a": {"handler": HANDLER, "sources": [{"topic_arn": TOPIC}]},
                    "b": {"handler": HANDLER, "sources": [{"topic_arn": US_TOPIC}]},
                }
            },
            f'"{CONTEXT_KEY}.wrong.workers.b.sources[0].topic_arn" every source of a stack must be in one region',
        ),
        (
            {"sources": [{"name": "x" * 50, "event_pattern": PATTERN}]},
            f'"{CONTEXT_KEY}.wrong.sources[0].name" must leave the rule name SqsWorker-wrong-<name> at most 64',
        ),
    ],
)
def test_synth_refuses_a_source_in_another_region_or_a_fifo_mismatch(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    """Synth stops in one line naming the setting's full path, the rule and the value."""
    with pytest.raises(SettingsError) as raised:
        synthesize(
            tmp_path,
            {CONTEXT_KEY: {"wrong": {"handler": HANDLER, **settings} if "workers" not in settings else settings}},
        )
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("variable", [SNS_ENVELOPE_TOPICS_ENV, EVENTBRIDGE_EVENTS_ENV])
@pytest.mark.parametrize("option", ["handler_environment", "secrets"])
def test_the_construct_refuses_a_caller_setting_the_sources_variables(variable: str, option: str) -> None:
    """Called directly (a team's app, no cdk.json), the variables the sources write are the construct's own."""
    from infra.worker_settings import SecretSource

    plain = {variable: "x"} if option == "handler_environment" else {}
    secrets = {variable: SecretSource(service="ssm", name="/x")} if option == "secrets" else {}
    with pytest.raises(ValueError) as refused:
        standalone_worker(HANDLER, "orders", handler_environment=plain, secrets=secrets)
    assert str(refused.value) == f'"{option}" must not set variables the construct sets: {variable}'
