"""A worker's sources: SNS subscriptions and EventBridge rules feeding its queue, each admitted by the queue's policy.

Each source is one resource under ``<worker>/Sources/Source<index>`` (a deterministic logical id per worker and
source index): an ``AWS::SNS::Subscription`` of the queue to the declared topic, or an ``AWS::Events::Rule`` the
stack creates, on the default or a named bus, targeting the queue. The queue's policy gets one Allow per source,
exactly ``sqs:SendMessage`` for the source's service principal with ``aws:SourceArn`` equal to the topic or the
rule (:meth:`infra.queues.WorkerQueues.admit_source`). L1 resources are used on purpose: the CDK's
``SqsSubscription`` and ``targets.SqsQueue`` add an Allow of their own to the queue's policy (an SqsSubscription
also a dependency on it), so the policy would hold each source twice, one of them the CDK's to keep in step.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, CfnRule, CfnRuleAssertion, Fn, Stack, Token
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns
from constructs import Construct

from consumer.contract import WorkerContract
from infra.queues import WorkerQueues
from infra.source_settings import RuleSource, Source, SourceError, TopicSource, check_sources
from infra.worker_settings import SettingsError

SNS_PRINCIPAL = "sns.amazonaws.com"
EVENTS_PRINCIPAL = "events.amazonaws.com"
#: The id of the queue in each rule's targets (one target per rule).
RULE_TARGET_ID = "Queue"
#: EventBridge rule names are at most 64 characters
#: (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html).
MAX_RULE_NAME_CHARS = 64


class WorkerSources(Construct):
    """The subscriptions and rules of ``sources``, and the queue policy statements admitting exactly them.

    Attributes: ``source_arns`` (each source's ``aws:SourceArn``: the topic ARN or the created rule's ARN, in the
    order of ``sources``), ``envelope_topics`` (the topics delivering SNS's JSON envelope: raw delivery off) and
    ``has_rules`` (an EventBridge rule targets the queue): what the consumer's environment is told
    (consumer/sources.py).

    Checked at synth (:func:`infra.source_settings.check_sources`): a topic or bus ARN in another region than the
    stack's, a bus in another account, a FIFO mismatch. Where the stack is env-agnostic (its region a token), a
    CloudFormation rule makes the deploy fail before any change in a region other than the sources'.
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
        try:
            check_sources(
                sources,
                region=region,
                account=account,
                fifo=contract.fifo,
                content_based_deduplication=contract.content_based_deduplication,
            )
        except SourceError as error:
            raise SettingsError(error.parameter, error.rule, error.value) from None
        self.source_arns: list[str] = []
        self.envelope_topics: list[str] = []
        self.has_rules = False
        queue_arn = queues.queue.queue_arn
        for source in sources:
            if isinstance(source, TopicSource):
                arn = self._subscribe(source, queue_arn)
                queues.admit_source(f"AllowTopic{source.index}", SNS_PRINCIPAL, arn)
            else:
                arn = self._rule(source, queue_arn, contract, name_prefix)
                queues.admit_source(f"AllowRule{source.index}", EVENTS_PRINCIPAL, arn)
                self.has_rules = True
            self.source_arns.append(arn)
        if region is None:
            self._assert_region(sources)

    def _subscribe(self, source: TopicSource, queue_arn: str) -> str:
        policy = source.filter_policy
        filtered = policy is not None
        sns.CfnSubscription(
            self,
            f"Source{source.index}",
            protocol="sqs",
            topic_arn=source.topic_arn,
            endpoint=queue_arn,
            raw_message_delivery=source.raw_message_delivery,
            filter_policy=dict(policy) if policy is not None else None,
            filter_policy_scope=source.filter_policy_scope if filtered else None,
        )
        if not source.raw_message_delivery:
            self.envelope_topics.append(source.topic_arn)
        return source.topic_arn

    def _rule(self, source: RuleSource, queue_arn: str, contract: WorkerContract, name_prefix: str) -> str:
        name = f"{name_prefix}-source-{source.index}"
        if len(name) > MAX_RULE_NAME_CHARS:  # the worker and environment names' limits keep it within 64
            raise ValueError(f'"name_prefix" must leave an EventBridge rule name of at most 64 characters: {name!r}')
        target = events.CfnRule.TargetProperty(
            id=RULE_TARGET_ID,
            arn=queue_arn,
            sqs_parameters=events.CfnRule.SqsParametersProperty(message_group_id=source.group_id())
            if contract.fifo
            else None,
        )
        rule = events.CfnRule(
            self,
            f"Source{source.index}",
            name=name,
            description=f"{source.path}: events for the queue",
            event_bus_name=None if source.event_bus == "default" else source.event_bus,
            event_pattern=dict(source.event_pattern),
            state="ENABLED",
            targets=[target],
        )
        return rule.attr_arn

    def _assert_region(self, sources: Sequence[Source]) -> None:
        """An env-agnostic stack's region is known at deploy only: a template rule refuses another region then."""
        regions = sorted(
            {s.region for s in sources if isinstance(s, TopicSource)}
            | {arn["region"] for s in sources if isinstance(s, RuleSource) and (arn := s.bus_arn) is not None}
        )
        if not regions:
            return
        CfnRule(
            self,
            "Region",
            assertions=[
                CfnRuleAssertion(
                    assert_=Fn.condition_equals(Aws.REGION, region),
                    assert_description=f"The worker's sources are in {region}: deploy this stack to {region}",
                )
                for region in regions
            ],
        )
