"""A worker's ``sources`` in ``cdk.json``: the SNS topics and EventBridge rules that feed its queue.

``sources`` is a list under a worker's settings (``<env>.sources`` or ``<env>.workers.<name>.sources``); each entry
is a topic or a rule::

    {"topic_arn": "arn:aws:sns:eu-west-1:123456789012:orders", "filter_policy": {"kind": ["order"]}}
    {"name": "placed", "event_pattern": {"source": ["orders.api"]}, "event_bus": "orders"}

A source's identity is what it names, never its place in the list: a topic's resources derive from its ARN, a rule's
from its required ``name`` (its EventBridge rule is ``<worker's name prefix>-<name>``), so reordering or removing a
source leaves every other one's logical ids, rule name and policy statement as they were.

:func:`parse_sources` checks what needs nothing but the setting itself (shapes, the filter policy SNS would reject);
:func:`check_sources` what needs the stack and the handler's contract too (region, account, FIFO), at synth. Every
refusal is one line naming the setting's full path, the rule and the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from consumer.errors import ContractError

#: Keys of a topic source and of a rule source.
TOPIC_KEYS = ("topic_arn", "raw_message_delivery", "filter_policy", "filter_policy_scope")
RULE_KEYS = ("name", "event_pattern", "event_bus", "message_group_id")
#: At most this many sources per worker. Each adds one statement with one condition to the queue's policy, and SQS
#: takes at most 20 statements and 10 conditions in a policy
#: (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-policies.html). Counting each
#: condition key, the TLS deny takes 1 and the producers' deny 2, which leaves 7. CloudFormation's 500 resources per
#: stack (one subscription or rule per source) are checked by the CDK itself at synth.
MAX_SOURCES = 7
DEFAULT_BUS = "default"

# https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html: a name is 1-256 letters, digits, - and _,
# a FIFO topic's ending in ".fifo".
_TOPIC_ARN = re.compile(
    r"^arn:(?P<partition>aws(?:-cn|-us-gov)?):sns:(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9]+):(?P<account>[0-9]{12}):"
    r"(?P<name>[A-Za-z0-9_-]{1,256}?(?P<fifo>\.fifo)?)$"
)
TOPIC_ARN_RULE = "must be an SNS topic ARN, arn:aws:sns:<region>:<12-digit account>:<topic name>"
# https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_CreateEventBus.html: 1-256 of . - _ / letters and
# digits ("aws." starts only partner buses, which a rule may use too).
_BUS_NAME = re.compile(r"^[A-Za-z0-9._/-]{1,256}$")
_BUS_ARN = re.compile(
    r"^arn:(?P<partition>aws(?:-cn|-us-gov)?):events:(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9]+):(?P<account>[0-9]{12}):"
    r"event-bus/(?P<name>[A-Za-z0-9._/-]{1,256})$"
)
EVENT_BUS_RULE = (
    '"default", an event bus name (letters, digits and . - _ /, at most 256) or an event bus ARN,'
    " arn:aws:events:<region>:<12-digit account>:event-bus/<name>"
)
#: A rule's name: lowercase letters, digits and '-'. Its EventBridge rule is named ``<name prefix>-<name>``, at most 64
#: characters (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html); the shortest prefix,
#: ``SqsWorker-<env>``, takes 11, so no name above 52 can fit (the exact prefix is checked in :func:`check_sources`).
MAX_RULE_NAME_CHARS = 64
MAX_SOURCE_NAME_CHARS = MAX_RULE_NAME_CHARS - len("SqsWorker-x-")
_SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
SOURCE_NAME_RULE = (
    f"must be 1 to {MAX_SOURCE_NAME_CHARS} lowercase letters, digits and '-' (not first), naming the rule within the"
    " worker"
)
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html (MessageGroupId):
# 1-128 of a-z A-Z 0-9 and !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
_MESSAGE_GROUP_ID = re.compile(r"^[A-Za-z0-9!-/:-@\[-`{-~]{1,128}$")

# -- SNS filter policies ------------------------------------------------------------------------------------------
# Every limit below is SNS's, from https://docs.aws.amazon.com/sns/latest/dg/subscription-filter-policy-constraints.html
# ("Filter policy constraints in Amazon SNS"); the operators from
# https://docs.aws.amazon.com/sns/latest/dg/sns-subscription-filter-policies.html and its pages per operator.
FILTER_POLICY_SCOPES = ("MessageAttributes", "MessageBody")
#: "A filter policy can have a maximum of five keys" (for MessageBody: the keys that hold a list of values).
MAX_FILTER_KEYS = 5
#: "The total combination of values in a filter policy must not exceed 150": the product of each list's length.
MAX_FILTER_COMBINATIONS = 150
#: "The maximum size of a filter policy is 256 KB."
MAX_FILTER_POLICY_BYTES = 256 * 1024
#: "For numeric matching, the value can range from -10^9 to 10^9."
MAX_FILTER_NUMBER = 10**9
#: The operators this check knows, each the value it takes. "$or" (and any other) is refused, not passed: it changes
#: how keys and combinations count, and this check does not model it.
_NUMERIC_OPERATORS = ("=", "<", "<=", ">", ">=")
_STRING_OPERATORS = ("prefix", "suffix", "equals-ignore-case", "cidr")


class SourceError(ContractError):
    """A source setting breaks a rule (same message shape as the other settings' errors)."""


@dataclass(frozen=True, kw_only=True)
class TopicSource:
    """An SNS topic subscribed to the worker's queue."""

    path: str
    topic_arn: str
    #: Raw delivery (the default) keeps the publisher's message attributes as SQS message attributes; without it
    #: the queue receives SNS's JSON envelope, which the consumer unwraps (consumer/sources.py).
    raw_message_delivery: bool = True
    filter_policy: Mapping[str, Any] | None = None
    filter_policy_scope: str = "MessageAttributes"

    @property
    def region(self) -> str:
        return self.topic_arn.split(":")[3]

    @property
    def account(self) -> str:
        return self.topic_arn.split(":")[4]

    @property
    def fifo(self) -> bool:
        return self.topic_arn.endswith(".fifo")

    @property
    def name(self) -> str:
        return self.topic_arn.split(":")[5]

    @property
    def located(self) -> tuple[str, str, str] | None:
        """(setting path, region, value) of what places this source in a region: its topic ARN."""
        return f"{self.path}.topic_arn", self.region, self.topic_arn


@dataclass(frozen=True, kw_only=True)
class RuleSource:
    """An EventBridge rule, created by the stack on ``event_bus``, targeting the worker's queue."""

    path: str
    #: Unique per worker: the rule's name (``<name prefix>-<name>``), construct id and policy statement derive from it.
    name: str
    event_pattern: Mapping[str, Any] = field(default_factory=dict)
    #: "default", a bus name, or a bus ARN.
    event_bus: str = DEFAULT_BUS
    #: For a FIFO queue (EventBridge requires one): None means the rule's own group (:meth:`group_id`).
    message_group_id: str | None = None

    @property
    def bus_arn(self) -> re.Match[str] | None:
        return _BUS_ARN.match(self.event_bus)

    @property
    def bus_name(self) -> str:
        arn = self.bus_arn
        return arn["name"] if arn else self.event_bus

    @property
    def located(self) -> tuple[str, str, str] | None:
        """(setting path, region, value) where the bus is an ARN; a bus by name is in the stack's own region."""
        arn = self.bus_arn
        return (f"{self.path}.event_bus", arn["region"], self.event_bus) if arn else None

    def group_id(self) -> str:
        """The message group every event of this rule is sent with to a FIFO queue: one group per rule keeps them
        in the order EventBridge delivers them and runs them one at a time (FIFO's promise for a group)."""
        return self.message_group_id or f"eventbridge-{self.name}"


Source = TopicSource | RuleSource


def parse_sources(path: str, raw: object) -> tuple[Source, ...]:
    """The ``sources`` setting at ``path``: a list of topic and rule sources."""
    if not isinstance(raw, list):
        raise SourceError(path, 'must be a list of sources, {"topic_arn": ...} or {"event_pattern": ...}', raw)
    if not raw:
        raise SourceError(path, "must list at least one source (leave it out for none)", raw)
    if len(raw) > MAX_SOURCES:
        raise SourceError(
            path, f"must list at most {MAX_SOURCES} sources (one queue policy condition each; SQS takes 10)", len(raw)
        )
    sources = tuple(_source(f"{path}[{index}]", entry) for index, entry in enumerate(raw))
    seen: dict[str, str] = {}
    for source in sources:
        if isinstance(source, TopicSource):
            key, where, rule = (
                f"topic {source.topic_arn}",
                f"{source.path}.topic_arn",
                "must name each topic once (SNS keeps one subscription per topic and queue)",
            )
            value = source.topic_arn
        else:
            key, where, rule = (
                f"rule {source.name}",
                f"{source.path}.name",
                "must name each rule once in the worker (the rule's name and resources derive from it)",
            )
            value = source.name
        if key in seen:
            raise SourceError(where, f"{rule}; {seen[key]} names it already", value)
        seen[key] = source.path
    return sources


def _source(path: str, raw: object) -> Source:
    if not isinstance(raw, Mapping) or ("topic_arn" in raw) == ("event_pattern" in raw):
        raise SourceError(path, 'must be an object with either "topic_arn" (SNS) or "event_pattern" (EventBridge)', raw)
    keys = TOPIC_KEYS if "topic_arn" in raw else RULE_KEYS
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise SourceError(
            f"{path}.{unknown[0]}", f"is not a setting of this source (known: {', '.join(keys)})", raw[unknown[0]]
        )
    if "topic_arn" in raw:
        return _topic(path, raw)
    return _rule(path, raw)


def _topic(path: str, raw: Mapping[str, Any]) -> TopicSource:
    arn = raw["topic_arn"]
    if not isinstance(arn, str) or not _TOPIC_ARN.match(arn):
        raise SourceError(f"{path}.topic_arn", TOPIC_ARN_RULE, arn)
    raw_delivery = raw.get("raw_message_delivery", True)
    if not isinstance(raw_delivery, bool):
        raise SourceError(f"{path}.raw_message_delivery", "must be true or false", raw_delivery)
    scope = raw.get("filter_policy_scope", "MessageAttributes")
    if scope not in FILTER_POLICY_SCOPES:
        raise SourceError(f"{path}.filter_policy_scope", f"must be one of {', '.join(FILTER_POLICY_SCOPES)}", scope)
    policy = raw.get("filter_policy")
    if policy is None and "filter_policy_scope" in raw:
        raise SourceError(f"{path}.filter_policy_scope", "needs a filter_policy to scope", scope)
    if policy is not None:
        check_filter_policy(f"{path}.filter_policy", policy, scope)
    return TopicSource(
        path=path,
        topic_arn=arn,
        raw_message_delivery=raw_delivery,
        filter_policy=policy,
        filter_policy_scope=scope,
    )


def _rule(path: str, raw: Mapping[str, Any]) -> RuleSource:
    name = raw.get("name")
    if not isinstance(name, str) or len(name) > MAX_SOURCE_NAME_CHARS or not _SOURCE_NAME.match(name):
        raise SourceError(f"{path}.name", SOURCE_NAME_RULE, name)
    pattern = raw["event_pattern"]
    # A light check, said as such in docs/configuration.md: EventBridge validates the pattern's grammar at deploy
    # (CreateRule's InvalidEventPatternException); synth refuses only what can never be a pattern.
    if not isinstance(pattern, Mapping) or not pattern:
        raise SourceError(
            f"{path}.event_pattern", "must be a non-empty JSON object (an EventBridge event pattern)", pattern
        )
    bus = raw.get("event_bus", DEFAULT_BUS)
    if not isinstance(bus, str) or not (_BUS_ARN.match(bus) or (not bus.startswith("arn:") and _BUS_NAME.match(bus))):
        raise SourceError(f"{path}.event_bus", f"must be {EVENT_BUS_RULE}", bus)
    group = raw.get("message_group_id")
    if group is not None and (not isinstance(group, str) or not _MESSAGE_GROUP_ID.match(group)):
        raise SourceError(
            f"{path}.message_group_id", "must be 1 to 128 letters, digits or punctuation (SQS's MessageGroupId)", group
        )
    return RuleSource(path=path, name=name, event_pattern=dict(pattern), event_bus=bus, message_group_id=group)


def check_sources(
    sources: Sequence[Source],
    *,
    region: str | None,
    account: str | None,
    fifo: bool,
    content_based_deduplication: bool,
    name_prefix: str | None = None,
    earlier: Sequence[Source] = (),
) -> None:
    """Refuse what the stack's environment and the worker's queue make impossible.

    ``region`` / ``account``: the stack's, or None where it is env-agnostic (a token): the region is then checked at
    deploy by the CloudFormation rule :class:`infra.sources.WorkerSources` adds, and the account not at all.
    ``name_prefix``: what the worker's rule names start with (``<name_prefix>-<name>``, at most 64 characters).
    ``earlier``: the sources of the stack's other workers, built before this one: every source of a stack must be
    in one region, whether or not the stack names its region.
    """
    for source in sources:
        if isinstance(source, TopicSource):
            # SNS delivers to an SQS queue in the topic's own region only; another account's topic is allowed
            # (its owner's topic policy must let this account subscribe: docs/security.md).
            if region is not None and source.region != region:
                raise SourceError(
                    f"{source.path}.topic_arn",
                    f"must be in the environment's region {region} (the stack subscribes its queue there)",
                    source.topic_arn,
                )
            if source.fifo != fifo:
                rule = (
                    "must not be a FIFO topic for a standard queue (the handler's contract is not fifo: the topic's"
                    " ordering and deduplication would be lost)"
                    if source.fifo
                    else "must be a FIFO topic (.fifo) for a FIFO queue: SNS subscribes a FIFO queue to FIFO topics only"
                )
                raise SourceError(f"{source.path}.topic_arn", rule, source.topic_arn)
            continue
        if name_prefix is not None and len(f"{name_prefix}-{source.name}") > MAX_RULE_NAME_CHARS:
            raise SourceError(
                f"{source.path}.name",
                f"must leave the rule name {name_prefix}-<name> at most {MAX_RULE_NAME_CHARS} characters (EventBridge's"
                " limit)",
                source.name,
            )
        arn = source.bus_arn
        if arn is not None and region is not None and arn["region"] != region:
            raise SourceError(
                f"{source.path}.event_bus",
                f"must be in the environment's region {region} (a rule lives on a bus of its own region)",
                source.event_bus,
            )
        if arn is not None and account is not None and arn["account"] != account:
            raise SourceError(
                f"{source.path}.event_bus",
                f"must be in the environment's account {account} (the stack creates the rule on the bus, and a rule"
                " is created in the bus's account; have that account's rule target an event bus of this one)",
                source.event_bus,
            )
        if fifo and not content_based_deduplication:
            raise SourceError(
                f"{source.path}.event_pattern",
                "needs content_based_deduplication=True on a FIFO worker: EventBridge sends to a FIFO queue only"
                " with content-based deduplication",
                dict(source.event_pattern),
            )
        if source.message_group_id is not None and not fifo:
            raise SourceError(
                f"{source.path}.message_group_id",
                "is for a FIFO queue only (the handler's contract is not fifo)",
                source.message_group_id,
            )
    check_one_region([*earlier, *sources])


def check_one_region(sources: Sequence[Source]) -> str | None:
    """The one region ``sources`` name (topic and bus ARNs), or None where none names one; refuse a second region.

    Checked whatever the stack's region: an env-agnostic stack would otherwise get two CloudFormation assertions
    that can never both hold, and fail at deploy rather than at synth.
    """
    first: tuple[str, str, str] | None = None
    for source in sources:
        located = source.located
        if located is None:
            continue
        if first is None:
            first = located
        elif located[1] != first[1]:
            raise SourceError(
                located[0],
                f"every source of a stack must be in one region: the stack deploys to one ({first[0]} is in"
                f" {first[1]})",
                located[2],
            )
    return first[1] if first else None


def check_filter_policy(path: str, policy: object, scope: str = "MessageAttributes") -> None:
    """Refuse a filter policy SNS would reject, in one line; and one this check cannot judge ("$or")."""
    if not isinstance(policy, Mapping) or not policy:
        raise SourceError(path, "must be a non-empty JSON object of keys to lists of values", policy)
    size = len(json.dumps(policy, separators=(",", ":")).encode())
    if size > MAX_FILTER_POLICY_BYTES:
        raise SourceError(path, f"must be at most {MAX_FILTER_POLICY_BYTES} bytes (SNS's limit)", size)
    leaves: list[tuple[str, list[Any]]] = []
    _collect(path, policy, scope, leaves, nested=False)
    if len(leaves) > MAX_FILTER_KEYS:
        raise SourceError(path, f"must have at most {MAX_FILTER_KEYS} keys (SNS's limit)", [p for p, _ in leaves])
    combinations = 1
    for _, values in leaves:
        combinations *= len(values)
    if combinations > MAX_FILTER_COMBINATIONS:
        raise SourceError(
            path,
            f"must have at most {MAX_FILTER_COMBINATIONS} combinations of values (SNS multiplies the lengths of its"
            " lists)",
            combinations,
        )


def _collect(
    path: str, policy: Mapping[str, Any], scope: str, leaves: list[tuple[str, list[Any]]], nested: bool
) -> None:
    for key, value in policy.items():
        where = f"{path}.{key}"
        if key.startswith("$"):
            raise SourceError(
                where, "is an operator this check does not implement ($or): it is refused, not passed", value
            )
        if isinstance(value, Mapping):
            if scope != "MessageBody":
                raise SourceError(
                    where, 'must be a list of values: a nested policy needs filter_policy_scope "MessageBody"', value
                )
            if not value:
                raise SourceError(where, "must not be an empty object", value)
            _collect(where, value, scope, leaves, nested=True)
            continue
        if not isinstance(value, list) or not value:
            raise SourceError(where, "must be a non-empty list of values or operators", value)
        for item in value:
            _check_value(where, item)
        leaves.append((where, value))


def _check_value(path: str, item: object) -> None:
    if item is None or isinstance(item, (str, bool)):
        return
    if isinstance(item, (int, float)):
        _check_number(path, item)
        return
    if not isinstance(item, Mapping) or len(item) != 1:
        raise SourceError(path, "must hold strings, numbers, true, false, null or one-operator objects", item)
    ((operator, argument),) = item.items()
    if operator in _STRING_OPERATORS:
        if not isinstance(argument, str) or not argument:
            raise SourceError(path, f'"{operator}" must take a non-empty string', item)
    elif operator == "exists":
        if not isinstance(argument, bool):
            raise SourceError(path, '"exists" must take true or false', item)
    elif operator == "numeric":
        _check_numeric(path, argument)
    elif operator == "anything-but":
        _check_anything_but(path, argument)
    else:
        known = ", ".join((*_STRING_OPERATORS, "exists", "numeric", "anything-but"))
        raise SourceError(path, f"must use an operator this check implements ({known}); others are refused", operator)


def _check_number(path: str, number: object) -> None:
    if isinstance(number, bool) or not isinstance(number, (int, float)) or abs(number) > MAX_FILTER_NUMBER:
        raise SourceError(
            path, f"must hold numbers from -{MAX_FILTER_NUMBER} to {MAX_FILTER_NUMBER} (SNS's range)", number
        )


def _check_numeric(path: str, argument: object) -> None:
    # {"numeric": ["=", 5]}, {"numeric": [">", 0]} or a range {"numeric": [">", 0, "<=", 150]}: a lower bound first.
    if not isinstance(argument, list) or len(argument) not in (2, 4):
        raise SourceError(path, '"numeric" must take [operator, number] or a range [">", a, "<", b]', argument)
    operators, numbers = argument[0::2], argument[1::2]
    if any(op not in _NUMERIC_OPERATORS for op in operators):
        raise SourceError(path, f'"numeric" operators must be one of {", ".join(_NUMERIC_OPERATORS)}', argument)
    for number in numbers:
        _check_number(path, number)
    if len(argument) == 4 and not (
        operators[0] in (">", ">=") and operators[1] in ("<", "<=") and numbers[0] < numbers[1]
    ):
        raise SourceError(
            path, '"numeric" range must be [">" or ">=", low, "<" or "<=", high] with low < high', argument
        )


def _check_anything_but(path: str, argument: object) -> None:
    # {"anything-but": "x"}, a number, a list of either, or {"anything-but": {"prefix": "x"}} (or "suffix").
    if isinstance(argument, str):
        return
    if isinstance(argument, (int, float)) and not isinstance(argument, bool):
        _check_number(path, argument)
        return
    if isinstance(argument, list) and argument:
        for item in argument:
            if not isinstance(item, str):
                _check_number(path, item)
        return
    if isinstance(argument, Mapping) and len(argument) == 1:
        ((operator, value),) = argument.items()
        if operator in ("prefix", "suffix") and isinstance(value, str) and value:
            return
    raise SourceError(
        path,
        '"anything-but" must take a string, a number, a non-empty list of them, or {"prefix"|"suffix": "..."}',
        argument,
    )
