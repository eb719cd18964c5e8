"""The queue pair: source queue, dead-letter queue and the policies between them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, cast

import jsii
from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IValidation

from consumer.contract import WorkerContract
from consumer.limits import SQS_MAX_QUEUE_NAME_CHARS
from consumer.queue_attributes import QueueAttributes, QueuePairAttributes
from infra.removal import RETAIN_DATA

#: Also authorises SendMessageBatch: batch calls need no separate action.
SEND_ACTION = "sqs:SendMessage"


class WorkerQueues(Construct):
    """Source queue + DLQ, wired and timed from a :class:`WorkerContract`.

    * redrive policy: ``maxReceiveCount`` = the contract's ``redrive_max_receive_count`` (the backstop);
    * redrive allow policy on the DLQ naming only the source (``byQueue``);
    * retention from the contract (the DLQ keeps messages longer, validated);
    * visibility timeout from the contract (a lambda worker's from its ``LambdaTarget``: ``attributes``); SSE-SQS and
      TLS enforced on both;
    * maximum message size: the DLQ takes SQS's limit, the source keeps ``DLQ_REASON_HEADROOM_BYTES``
      below it, so the consumer can move a message of any accepted size to the DLQ with its reason;
    * a FIFO pair (both FIFO) when the contract says ``fifo``;
    * optionally, :meth:`restrict_senders`: only named producers (and the consumer) may send to the source, and
      only the consumer to the DLQ.

    Queue names are derived from the stack name (``<stack>-source``,
    ``<stack>-dlq``), or ``name_prefix`` where a stack holds several pairs: the DLQ's redrive allow policy must name the source's ARN,
    and a name known at synth time avoids a source -> DLQ -> source reference
    cycle. A named queue also cannot be silently replaced by a deploy
    (CloudFormation refuses to replace a custom-named resource).

    Attributes: ``queue`` (source), ``dead_letter_queue``, and their names known at synth time,
    ``source_name`` and ``dlq_name`` (for text such as alarm descriptions; tokens are not).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        contract: WorkerContract,
        removal_policy: RemovalPolicy = RETAIN_DATA,
        name_prefix: str | None = None,
        attributes: QueuePairAttributes | None = None,
    ) -> None:
        # name_prefix: what the queue names start with; default the stack's name (one worker per stack).
        # attributes: the pair's attributes, by default the contract's; a lambda worker's are its LambdaTarget's (the
        # source's visibility from the function's timeout), everything else the same, so only that changes in place.
        super().__init__(scope, construct_id)
        self.contract = contract
        #: What the pair is built from: the contract's queue_attributes(), or the Lambda target's.
        self.attributes = attributes or contract.queue_attributes()
        stack = Stack.of(self)
        prefix = name_prefix or stack.stack_name
        suffix = ".fifo" if contract.fifo else ""
        source_name = self.source_name = f"{prefix}-source{suffix}"
        dlq_name = self.dlq_name = f"{prefix}-dlq{suffix}"
        if len(source_name) > SQS_MAX_QUEUE_NAME_CHARS:
            raise ValueError(
                f'"{"name_prefix" if name_prefix else "stack_name"}" must be short enough for a queue name of at most'
                f" {SQS_MAX_QUEUE_NAME_CHARS} characters: {prefix!r}"
            )
        pair = self.attributes
        source_arn = stack.format_arn(service="sqs", resource=source_name)
        source_redrive = pair.source.redrive_max_receive_count
        assert source_redrive is not None  # the contract always gives the source a redrive policy

        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            queue_name=dlq_name,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            redrive_allow_policy=sqs.RedriveAllowPolicy(
                redrive_permission=sqs.RedrivePermission.BY_QUEUE,
                source_queues=[sqs.Queue.from_queue_arn(self, "SourceQueueRef", source_arn)],
            ),
            removal_policy=removal_policy,
            **_queue_props(pair.dead_letter),
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=source_name,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=source_redrive, queue=self.dead_letter_queue),
            removal_policy=removal_policy,
            **_queue_props(pair.source),
        )
        self.node.add_validation(_QueueInvariants(self))

    def admit_source(self, sid: str, service: str, source_arn: str, *, dead_letter: bool = False) -> CfnResource:
        """Let ``service`` (``sns.amazonaws.com``, ``events.amazonaws.com``) send to the source queue on behalf of
        ``source_arn`` only (``aws:SourceArn``: the topic, or the rule, a worker declares), and nothing else; with
        ``dead_letter``, to the DLQ instead: the subscription's or rule's delivery dead-letter queue, where SNS or
        EventBridge moves a delivery it gives up on.

        Returns the queue's ``AWS::SQS::QueuePolicy``: the subscription or rule must depend on it, so that it delivers
        only once the Allow exists (as the CDK's own ``SqsSubscription`` does).
        Call it before :meth:`restrict_senders`, whose deny must leave the declared sources out: pass their ARNs.
        https://docs.aws.amazon.com/sns/latest/dg/subscribe-sqs-queue-to-sns-topic.html (the queue policy step)
        https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-sqs-permissions
        https://docs.aws.amazon.com/sns/latest/dg/sns-configure-dead-letter-queue.html
        https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html
        """
        queue = self.dead_letter_queue if dead_letter else self.queue
        queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                principals=[iam.ServicePrincipal(service)],
                actions=[SEND_ACTION],
                resources=[queue.queue_arn],
                conditions={"ArnEquals": {"aws:SourceArn": source_arn}},
            )
        )
        # The CDK creates the queue's policy on the first statement (a child QueuePolicy; Python has no ``.policy``).
        (policy,) = [c for c in queue.node.children if isinstance(c, sqs.QueuePolicy)]
        return cast(CfnResource, policy.node.default_child)

    def restrict_senders(
        self,
        producers: Sequence[str],
        *,
        consumer: iam.IRole,
        sources: Sequence[str] = (),
        dead_letter_sources: Sequence[str] = (),
    ) -> None:
        """Only ``producers`` (IAM role/user ARNs) and ``consumer`` may send to the source queue; only ``consumer``
        (and the sources of ``dead_letter_sources``) may send to the DLQ.

        The source's policy allows the producers ``sqs:SendMessage`` (a producer in another account needs
        that) and denies it to every other principal, whatever its own IAM policy grants: the message
        attributes the consumer acts on (the idempotency key) are only as trusted as whoever can send.
        ``consumer`` is the consumer's task role, which sends hand-back copies to the source and failed
        messages to the DLQ.

        The DLQ's policy denies ``sqs:SendMessage`` to every principal but ``consumer``: a message planted in the
        DLQ would otherwise reach the source through an operator's ``dlq redrive`` (a named operator's
        credentials), past the producers' list. SQS's own redrive from the source after ``maxReceiveCount`` is
        not a request by any principal: it is governed by the source's redrive policy and the DLQ's redrive
        allow policy (``byQueue``: only this source), not by the DLQ's queue policy, so it keeps working.
        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html
        ("Using policies for dead-letter queues"; SQS moves the message "with its original message ID", and
        such a move is not counted in the DLQ's ``NumberOfMessagesSent``, as a SendMessage would be). A move
        task (``StartMessageMoveTask``) sends on behalf of the principal who started it
        (``aws:CalledViaLast`` ``sqs.amazonaws.com``), so this deny also refuses a move task that targets the
        DLQ, and the source's deny refuses a redrive started by anyone not named.
        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html
        Without a call, same-account IAM alone decides who may send to either queue.

        ``sources`` are the ``aws:SourceArn`` of the declared sources (:meth:`admit_source`). A service sending for
        a topic or rule has no ``aws:PrincipalArn``, and a negated operator on a key the request lacks is true
        (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html,
        "negated matching"), so the deny would refuse them too; with sources it also requires ``aws:SourceArn`` to
        be none of theirs (keys of one condition are ANDed): it applies where the principal is not listed and the
        request does not come from a declared source. ``aws:SourceArn`` is set by AWS services only, never by a caller.
        ``dead_letter_sources`` are those of the sources whose delivery dead-letter queue is the DLQ (admitted with
        ``admit_source(..., dead_letter=True)``): the DLQ's deny leaves them out the same way.
        """
        queue_arn = self.queue.queue_arn
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowProducersToSend",
                principals=[iam.ArnPrincipal(arn) for arn in producers],
                actions=[SEND_ACTION],
                resources=[queue_arn],
            )
        )
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="DenyOtherSenders",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=[SEND_ACTION],
                resources=[queue_arn],
                conditions={
                    "ArnNotEquals": {
                        "aws:PrincipalArn": [*producers, consumer.role_arn],
                        **({"aws:SourceArn": list(sources)} if sources else {}),
                    }
                },
            )
        )
        self.dead_letter_queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="DenySendersButTheConsumer",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=[SEND_ACTION],
                resources=[self.dead_letter_queue.queue_arn],
                conditions={
                    "ArnNotEquals": {
                        "aws:PrincipalArn": [consumer.role_arn],
                        **({"aws:SourceArn": list(dead_letter_sources)} if dead_letter_sources else {}),
                    }
                },
            )
        )


class _QueueProps(TypedDict, total=False):
    """The ``sqs.Queue`` keyword arguments the contract derives; a key left out keeps the CDK's default."""

    visibility_timeout: Duration
    retention_period: Duration
    max_message_size_bytes: int
    fifo: bool
    content_based_deduplication: bool


def _queue_props(attributes: QueueAttributes) -> _QueueProps:
    """The ``sqs.Queue`` props for what the contract derives (the redrive policy aside: it needs the DLQ construct)."""
    props: _QueueProps = {}
    if attributes.visibility_timeout_seconds is not None:
        props["visibility_timeout"] = Duration.seconds(attributes.visibility_timeout_seconds)
    if attributes.message_retention_seconds is not None:
        props["retention_period"] = Duration.seconds(attributes.message_retention_seconds)
    if attributes.maximum_message_bytes is not None:
        props["max_message_size_bytes"] = attributes.maximum_message_bytes
    if attributes.fifo:
        props["fifo"] = True
        props["content_based_deduplication"] = attributes.content_based_deduplication
    return props


@jsii.implements(IValidation)
class _QueueInvariants:
    """Re-checks the contract's invariants on the synthesized resources.

    The contract validates its own numbers; this catches a later edit of the
    L1 resources (an escape hatch, an aspect) that breaks them.
    """

    def __init__(self, queues: WorkerQueues) -> None:
        self._queues = queues

    def validate(self) -> list[str]:
        contract = self._queues.contract
        expected = self._queues.attributes.source
        # A Queue's default child is its CfnQueue; jsii types node.default_child as IConstruct | None.
        source = cast(sqs.CfnQueue, self._queues.queue.node.default_child)
        dlq = cast(sqs.CfnQueue, self._queues.dead_letter_queue.node.default_child)
        stack = Stack.of(self._queues)
        errors = []
        source_retention = stack.resolve(source.message_retention_period)
        dlq_retention = stack.resolve(dlq.message_retention_period)
        if not (Token.is_unresolved(source_retention) or dlq_retention > source_retention):
            errors.append(f"DLQ retention ({dlq_retention} s) must exceed the source queue's ({source_retention} s)")
        visibility = stack.resolve(source.visibility_timeout)
        if visibility != expected.visibility_timeout_seconds:
            errors.append(
                f"source visibility timeout is {visibility} s but the worker contract derives"
                f" {expected.visibility_timeout_seconds} s from max_duration {contract.max_duration_seconds} s"
            )
        redrive = stack.resolve(source.redrive_policy) or {}
        if redrive.get("maxReceiveCount") != expected.redrive_max_receive_count:
            errors.append(
                f"redrive maxReceiveCount is {redrive.get('maxReceiveCount')} but the worker contract derives"
                f" {expected.redrive_max_receive_count} (max_receive_count {contract.max_receive_count} + backstop)"
            )
        return errors
