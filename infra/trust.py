"""Who may assume the roles the stack creates: each trusts one AWS service, acting for this account only.

A role trusting a service principal without conditions can be assumed by that service on behalf of anyone's
resources (the cross-service confused deputy): ``aws:SourceAccount`` and ``aws:SourceArn`` in the trust policy
hold it to this account's resources. https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html

The roles and the conditions each service's documentation gives:

* the task role (``ecs-tasks.amazonaws.com``): ``aws:SourceAccount`` this account and ``aws:SourceArn`` any ECS
  resource of this account and region ("Using the aws:SourceArn condition key to specify a specific cluster is not
  currently supported, you should use the wildcard to specify all clusters"),
  https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html;
* the execution role (``ecs-tasks.amazonaws.com`` too): the execution role page's trust policy has no condition
  (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task_execution_IAM_role.html), so it gets only
  ``aws:SourceAccount``, which AWS's own Fargate samples put on an execution role (aws/agent-toolkit-for-aws,
  processing-s3-uploads-with-step-functions: one ``aws:SourceAccount`` trust policy for the execution and the task
  role); a source ARN ECS might not send for it would keep every task from starting;
* the VPC flow log role (``vpc-flow-logs.amazonaws.com``, created by the CDK for ``Vpc.add_flow_log``):
  ``aws:SourceAccount`` this account and ``aws:SourceArn`` a flow log of this account and region (the flow log's
  id is not known before the role exists: the documented wildcard),
  https://docs.aws.amazon.com/vpc/latest/userguide/flow-logs-iam-role.html.

* the role of each custom resource provider the CDK adds itself (``lambda.amazonaws.com``: the function behind
  ``@aws-cdk/aws-ec2:restrictDefaultSecurityGroup``, which strips the rules of the VPC's default security group):
  ``aws:SourceAccount`` this account: Lambda's guide on the execution role says the two keys may go in its trust
  policy (https://docs.aws.amazon.com/lambda/latest/dg/permissions-managed-policies.html, "When a service assumes a
  role in your account, you can include the aws:SourceAccount and aws:SourceArn global condition context keys"), and
  AWS's own samples put ``aws:SourceAccount`` on one (aws/agent-toolkit-for-aws, deploying-custom-domain-rest-api:
  ``lambda-trust-policy.json``); no Lambda page names the source ARN it sends, so none is required (a wrong one
  would fail the deploy).

Not created here: ECS service autoscaling's role is the service-linked role
``AWSServiceRoleForApplicationAutoScaling_ECSService``, imported by ARN; AWS owns its trust policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from aws_cdk import CfnResource, CustomResourceProviderBase, Stack
from aws_cdk import aws_iam as iam
from constructs import IConstruct

ECS_TASKS = "ecs-tasks.amazonaws.com"
VPC_FLOW_LOGS = "vpc-flow-logs.amazonaws.com"
LAMBDA = "lambda.amazonaws.com"
ASSUME_ROLE = "sts:AssumeRole"

Conditions = Mapping[str, Mapping[str, Any]]


def this_account(scope: IConstruct) -> Conditions:
    """``aws:SourceAccount`` is the stack's account."""
    return {"StringEquals": {"aws:SourceAccount": Stack.of(scope).account}}


def from_this_account(scope: IConstruct, service: str, resource: str) -> Conditions:
    """``aws:SourceAccount`` the stack's account and ``aws:SourceArn`` like ``resource`` of ``service`` in the stack's
    account and region (``resource`` may hold ``*``)."""
    stack = Stack.of(scope)
    source_arn = f"arn:{stack.partition}:{service}:{stack.region}:{stack.account}:{resource}"
    return {**this_account(scope), "ArnLike": {"aws:SourceArn": source_arn}}


def ecs_task_principal(scope: IConstruct) -> iam.IPrincipal:
    """ECS tasks of this account and region, as the task role's trusted principal."""
    return iam.ServicePrincipal(ECS_TASKS).with_conditions(dict(from_this_account(scope, "ecs", "*")))


def confine_provider_roles(stack: Stack) -> None:
    """Make the role of every custom resource provider the CDK adds to ``stack`` trust Lambda for this account only.

    The CDK writes each provider's role as a plain ``CfnResource`` (``<provider>/Role``, no ``iam.Role`` and no way
    to pass a principal) trusting ``lambda.amazonaws.com`` unconditioned; the override keeps its logical id.
    """
    for provider in stack.node.find_all():
        if isinstance(provider, CustomResourceProviderBase):
            role = provider.node.find_child("Role")
            if not isinstance(role, CfnResource) or role.cfn_resource_type != "AWS::IAM::Role":
                raise ValueError(f"a custom resource provider without the role the CDK gives it: {provider.node.path}")
            role.add_property_override("AssumeRolePolicyDocument", _trust_document(LAMBDA, this_account(stack)))


def _trust_document(service: str, conditions: Conditions) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": service},
                "Action": ASSUME_ROLE,
                "Condition": {operator: dict(keys) for operator, keys in conditions.items()},
            }
        ],
    }


def confine_trust(role: iam.IRole, service: str, conditions: Conditions) -> None:
    """Make ``role`` (one the CDK created for us) trust ``service`` under ``conditions`` only.

    The CDK creates the execution role and the flow log role with an unconditioned ``ServicePrincipal`` and offers
    no way to pass one; replacing their L1 trust document keeps their construct ids (so their logical ids and
    physical names) and changes nothing else about them.
    """
    resource = cast(iam.CfnRole, role.node.default_child)
    if resource is None:
        raise ValueError(f'"role" must be a role this app creates (an iam.Role), not an imported one: {role.node.path}')
    resource.assume_role_policy_document = _trust_document(service, conditions)
