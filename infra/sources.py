"""A worker's sources: SNS subscriptions and EventBridge rules feeding its queue, each admitted by the queue's policy.

Each source is one resource under ``<worker>/Sources/``: ``Topic<name><hash of the topic ARN>``, an
``AWS::SNS::Subscription`` of the queue to the declared topic, or ``Rule<name><hash of the name>``, an
``AWS::Events::Rule`` named ``<name prefix>-<name>`` the stack creates on the default or a named bus, targeting the
queue. Ids derive from what a source names, never from its place in the list: removing or reordering sources
neither replaces another source's subscription (a replacement's delete of the old logical resource can unsubscribe
the live subscription of the same topic and queue) nor renames a rule. The queue's policy gets one Allow per
source, ``Allow<construct id>``, exactly ``sqs:SendMessage`` for the source's service principal with
``aws:SourceArn`` equal to the topic or the rule (:meth:`infra.queues.WorkerQueues.admit_source`).

Delivery dead-letter queue: the worker's DLQ. A delivery SNS or EventBridge gives up on (a client-side error such as
a 403 or more than 10 message attributes, or retries exhausted) is moved there instead of being dropped, and the
DlqDepth alarm pages. Each subscription has a ``RedrivePolicy`` naming the DLQ (same account and region as the
subscription; FIFO for a FIFO topic: the worker's DLQ is FIFO when the worker is); each rule's target has a
``DeadLetterConfig`` naming it and a ``RetryPolicy`` at EventBridge's defaults (24 hours, 185 attempts), except on
a FIFO worker: EventBridge takes a standard queue only as a target's DLQ, so a FIFO worker's rules have none. The
DLQ's policy gets ``Allow<construct id>`` for each source with a DLQ, the same statement as on the queue.

Order on deploy: each subscription and rule depends on the queue's policy and, where the DLQ is its delivery
dead-letter queue, the DLQ's policy (``DependsOn``), so SNS and EventBridge deliver only once the Allows exist. A
delivery refused with 403 is a client-side error to both, not retried. The rule's ARN in the policy is therefore
built from its known name (not ``Fn::GetAtt``, which would order the rule before the policy). L1 resources are used
on purpose: the CDK's ``SqsSubscription`` and ``targets.SqsQueue`` add an Allow of their own to the queue's policy,
so the policy would hold each source twice, one of them the CDK's to keep in step.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from aws_cdk import ArnFormat, Aws, CfnResource, CfnRule, CfnRuleAssertion, Fn, Stack, Token
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns
from constructs import Construct

from consumer.contract import WorkerContract
from infra.queues import WorkerQueues
from infra.source_settings import RuleSource, Source, SourceError, TopicSource, check_one_region, check_sources
from infra.worker_settings import SettingsError

SNS_PRINCIPAL = "sns.amazonaws.com"
EVENTS_PRINCIPAL = "events.amazonaws.com"
#: The id of the queue in each rule's targets (one target per rule).
RULE_TARGET_ID = "Queue"
#: EventBridge's default retry policy of a target, stated in the template: 24 hours, 185 attempts.
RULE_MAXIMUM_EVENT_AGE_SECONDS = 24 * 60 * 60
RULE_MAXIMUM_RETRY_ATTEMPTS = 185
#: The readable part of a source's construct id (CloudFormation logical ids are alphanumeric, at most 255).
_ID_NAME_CHARS = 32


def source_id(source: Source) -> str:
    """The source's construct id: its kind, its name's letters and digits, and a hash of what identifies it (the
    topic ARN, unique per worker; the rule's name, unique per worker), never its index in the list."""
    kind, key = ("Topic", source.topic_arn) if isinstance(source, TopicSource) else ("Rule", source.name)
    readable = re.sub(r"[^A-Za-z0-9]", "", source.name)[:_ID_NAME_CHARS]
    return f"{kind}{readable}{hashlib.sha256(key.encode()).hexdigest()[:8].upper()}"


class WorkerSources(Construct):
    """The subscriptions and rules of ``sources``, and the queue policy statements admitting exactly them.

    Attributes: ``source_arns`` (each source's ``aws:SourceArn``: the topic ARN or the created rule's ARN built from
    its name, in the order of ``sources``), ``envelope_topics`` (the topics delivering SNS's JSON envelope: raw
    delivery off) and ``has_rules`` (an EventBridge rule targets the queue): what the consumer's environment is told
    (consumer/sources.py); and ``dead_letter_arns`` (the ``aws:SourceArn`` of the sources whose delivery dead-letter
    queue is the worker's DLQ: every topic, and the rules of a standard worker).

    Checked at synth (:func:`infra.source_settings.check_sources`): a topic or bus ARN in another region than the
    stack's or than another source of the stack (this worker's or an earlier one's), a bus in another account, a
    FIFO mismatch, a rule name too long. Where the stack is env-agnostic (its region a token), a CloudFormation rule
    makes the deploy fail before any change in a region other than the sources', naming the setting.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        sources: Sequence[Source],
        queues: WorkerQueues,
        contract: WorkerContract,
        name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        region = None if Token.is_unresolved(stack.region) else stack.region
        account = None if Token.is_unresolved(stack.account) else stack.account
        #: The sources this construct was built from (the next worker's check reads them: one region per stack).
        self.sources = tuple(sources)
        earlier = [
            s for c in stack.node.find_all() if isinstance(c, WorkerSources) and c is not self for s in c.sources
        ]
        try:
            check_sources(
                sources,
                region=region,
                account=account,
                fifo=contract.fifo,
                content_based_deduplication=contract.content_based_deduplication,
                name_prefix=name_prefix,
                earlier=earlier,
            )
        except SourceError as error:
            raise SettingsError(error.parameter, error.rule, error.value) from None
        self.source_arns: list[str] = []
        self.dead_letter_arns: list[str] = []
        self.envelope_topics: list[str] = []
        self.has_rules = False
        queue_arn = queues.queue.queue_arn
        dlq_arn = queues.dead_letter_queue.queue_arn
        for source in sources:
            construct_id = source_id(source)
            if isinstance(source, TopicSource):
                service, arn = SNS_PRINCIPAL, source.topic_arn
                resource: CfnResource = self._subscribe(construct_id, source, queue_arn, dlq_arn)
                dead_letter = True
            else:
                rule_name = f"{name_prefix}-{source.name}"
                service, arn = EVENTS_PRINCIPAL, self._rule_arn(source, rule_name)
                # EventBridge takes a standard queue only as a target's DLQ: a FIFO worker's rules have none.
                dead_letter = not contract.fifo
                resource = self._rule(
                    construct_id, source, rule_name, queue_arn, contract, dlq_arn if dead_letter else None
                )
                self.has_rules = True
            self.source_arns.append(arn)
            # Delivered only once the queue admits it: a 403 is a client-side error SNS and EventBridge drop (or move
            # to the DLQ, which must admit it too).
            resource.add_dependency(queues.admit_source(f"Allow{construct_id}", service, arn))
            if dead_letter:
                self.dead_letter_arns.append(arn)
                resource.add_dependency(queues.admit_source(f"Allow{construct_id}", service, arn, dead_letter=True))
        if region is None:
            self._assert_region(sources)

    def _subscribe(self, construct_id: str, source: TopicSource, queue_arn: str, dlq_arn: str) -> CfnResource:
        policy = source.filter_policy
        filtered = policy is not None
        subscription = sns.CfnSubscription(
            self,
            construct_id,
            protocol="sqs",
            topic_arn=source.topic_arn,
            endpoint=queue_arn,
            raw_message_delivery=source.raw_message_delivery,
            filter_policy=dict(policy) if policy is not None else None,
            filter_policy_scope=source.filter_policy_scope if filtered else None,
            redrive_policy={"deadLetterTargetArn": dlq_arn},
        )
        if not source.raw_message_delivery:
            self.envelope_topics.append(source.topic_arn)
        return subscription

    def _rule_arn(self, source: RuleSource, rule_name: str) -> str:
        """The rule's ARN from its name, known before the rule exists: ``rule/<name>`` on the default bus,
        ``rule/<bus name>/<name>`` on another (the rule resource type of
        https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoneventbridge.html), in the bus
        ARN's partition, region and account where the bus is given by ARN, else the stack's."""
        arn = source.bus_arn
        bus = source.bus_name
        return Stack.of(self).format_arn(
            service="events",
            resource="rule",
            resource_name=rule_name if bus == "default" else f"{bus}/{rule_name}",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            **({"partition": arn["partition"], "region": arn["region"], "account": arn["account"]} if arn else {}),
        )

    def _rule(
        self,
        construct_id: str,
        source: RuleSource,
        rule_name: str,
        queue_arn: str,
        contract: WorkerContract,
        dlq_arn: str | None,
    ) -> CfnResource:
        target = events.CfnRule.TargetProperty(
            id=RULE_TARGET_ID,
            arn=queue_arn,
            sqs_parameters=events.CfnRule.SqsParametersProperty(message_group_id=source.group_id())
            if contract.fifo
            else None,
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(arn=dlq_arn) if dlq_arn else None,
            # EventBridge's defaults, stated: retried for 24 hours and up to 185 times, then to the DLQ (or dropped).
            retry_policy=events.CfnRule.RetryPolicyProperty(
                maximum_event_age_in_seconds=RULE_MAXIMUM_EVENT_AGE_SECONDS,
                maximum_retry_attempts=RULE_MAXIMUM_RETRY_ATTEMPTS,
            ),
        )
        return events.CfnRule(
            self,
            construct_id,
            name=rule_name,
            description=f"{source.path}: events for the queue",
            event_bus_name=None if source.event_bus == "default" else source.event_bus,
            event_pattern=dict(source.event_pattern),
            state="ENABLED",
            targets=[target],
        )

    def _assert_region(self, sources: Sequence[Source]) -> None:
        """An env-agnostic stack's region is known at deploy only: a template rule refuses another region then."""
        region = check_one_region(sources)  # one region at most: check_sources refused a second
        if region is None:
            return
        where, _, value = next(located for s in sources if (located := s.located) is not None)
        CfnRule(
            self,
            "Region",
            assertions=[
                CfnRuleAssertion(
                    assert_=Fn.condition_equals(Aws.REGION, region),
                    assert_description=f"{where} is in {region} ({value}): deploy this stack to {region}",
                )
            ],
        )
