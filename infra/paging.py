"""The paging topic: where every alarm of one environment sends its ALARM and OK notifications."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.removal import RETAIN_DATA

CLOUDWATCH_PRINCIPAL = "cloudwatch.amazonaws.com"


def alarm_conditions(scope: Construct, alarm_names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Conditions admitting CloudWatch only on behalf of the named alarms of this account and region.

    Without them any account's alarm could publish through ``cloudwatch.amazonaws.com`` (the confused
    deputy): https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html. The alarms are
    named exactly, not by a ``<stack>-*`` pattern, which would also admit the alarms of a sibling
    environment whose name extends this one's (``dev-2`` for ``dev``).
    """
    stack = Stack.of(scope)
    alarms = [
        stack.format_arn(
            service="cloudwatch", resource="alarm", resource_name=name, arn_format=ArnFormat.COLON_RESOURCE_NAME
        )
        for name in alarm_names
    ]
    return {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnEquals": {"aws:SourceArn": alarms}}


class PagingTopic(Construct):
    """An SNS topic encrypted with its own KMS key (or a sibling topic's ``key``), TLS enforced, with subscribers.

    CloudWatch may publish to it (and use its key) on behalf of the alarms :meth:`admit_alarms` names
    only, in this account; nothing else may. Until then no alarm can notify it.

    The key is a customer-managed one on purpose: CloudWatch alarms cannot
    publish to a topic encrypted with the AWS-managed ``alias/aws/sns`` key,
    because that key's policy cannot be changed to admit ``cloudwatch.amazonaws.com``.
    https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger

    Attributes: ``topic``, ``key``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        emails: Sequence[str] = (),
        https_endpoints: Sequence[str] = (),
        removal_policy: RemovalPolicy = RETAIN_DATA,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._owns_key = key is None
        if key is None:
            key = kms.Key(
                self,
                "Key",
                description="Encrypts the SQS worker's paging topic; CloudWatch alarms may use it",
                enable_key_rotation=True,
                removal_policy=removal_policy,
            )
        self.key = key
        self.topic = sns.Topic(self, "Topic", master_key=self.key, enforce_ssl=True)
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        for url in https_endpoints:
            self.topic.add_subscription(subscriptions.UrlSubscription(url, protocol=sns.SubscriptionProtocol.HTTPS))

    def admit_alarms(self, alarm_names: Sequence[str]) -> None:
        """Let CloudWatch publish to this topic, and use its key if it is this topic's own, for exactly these alarms.

        ``enforce_ssl`` attaches a topic policy holding only the TLS deny, and a topic policy replaces
        SNS's default one: without this statement CloudWatch may not publish and every alarm action
        fails. CloudWatch also encrypts what it publishes with the topic's key, under the same source
        conditions: https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger and
        https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services
        """
        conditions = alarm_conditions(self, alarm_names)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisStacksAlarmsToPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=conditions,
            )
        )
        if self._owns_key:
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowThisStacksAlarmsToEncrypt",
                    principals=[iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],
                    conditions=conditions,
                )
            )
