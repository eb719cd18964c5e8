"""The paging topic: where every alarm of one environment sends its ALARM and OK notifications."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.alarms import alarm_name

CLOUDWATCH_PRINCIPAL = "cloudwatch.amazonaws.com"


def this_stacks_alarms(scope: Construct) -> dict[str, dict[str, str]]:
    """Conditions admitting CloudWatch only on behalf of this account's alarms named for this stack.

    Without them any account's alarm could publish through ``cloudwatch.amazonaws.com`` (the confused
    deputy): https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html
    """
    stack = Stack.of(scope)
    alarms = stack.format_arn(
        service="cloudwatch",
        resource="alarm",
        resource_name=alarm_name(stack.stack_name, "*"),
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    return {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": alarms}}


class PagingTopic(Construct):
    """An SNS topic encrypted with its own KMS key (or a sibling topic's ``key``), TLS enforced, with subscribers.

    CloudWatch may publish to it on behalf of this stack's alarms only (this account, names
    ``<stack>-*``, see :func:`infra.alarms.alarm_name`); nothing else may.

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
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if key is None:
            key = kms.Key(
                self,
                "Key",
                description="Encrypts the SQS worker's paging topic; CloudWatch alarms may use it",
                enable_key_rotation=True,
                removal_policy=removal_policy,
            )
            # CloudWatch encrypts what it publishes to the topic with this key, under the same source
            # conditions as the topic's own statement: https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services
            key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowThisStacksAlarmsToEncrypt",
                    principals=[iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],
                    conditions=this_stacks_alarms(self),
                )
            )
        self.key = key
        self.topic = sns.Topic(self, "Topic", master_key=self.key, enforce_ssl=True)
        # enforce_ssl attaches a topic policy holding only the TLS deny, and a topic policy replaces SNS's
        # default one: without this statement CloudWatch may not publish and every alarm action fails.
        # https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisStacksAlarmsToPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=this_stacks_alarms(self),
            )
        )
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        for url in https_endpoints:
            self.topic.add_subscription(subscriptions.UrlSubscription(url, protocol=sns.SubscriptionProtocol.HTTPS))
