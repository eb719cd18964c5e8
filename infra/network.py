"""The VPC an environment's stack creates: subnets, NAT gateways or none, gateway endpoints and the flow log.

Where the stack creates its VPC (cdk.json sets no ``vpc``):

* ``nat_gateways`` 1..3: the CDK's default layout, a public and a private subnet in each of two zones, the NAT
  gateways in the public ones; the tasks run in the private subnets without a public IP;
* ``nat_gateways`` 0: the two public subnets only, at the addresses the default layout gives them (so switching a
  deployed environment to 0 keeps them); the tasks run there with a public IP, since only a public IP reaches the
  internet gateway, and their security group admits nothing inbound (docs/deploy.md, "No NAT");
* gateway endpoints for DynamoDB and S3 on every subnet's route table, free of charge: the idempotency table's calls
  and the image layers ECR serves from S3 then cross neither a NAT gateway (no data processing charge) nor the
  internet. They carry AWS's default endpoint policy (full access): the task role's own policy is what limits the
  task, and a narrower endpoint policy would also cut off a team's handler from its own tables and buckets
  (tests/infra/test_permissions.py evaluates every DynamoDB call of the task role under it);
* the VPC flow log (all traffic) into a log group kept ``log_retention_days``, like the workers' logs.

An existing VPC (``vpc``) is used as it is: its routes, endpoints and flow logs are its owner's.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs

from infra.settings import EnvironmentSettings
from infra.trust import VPC_FLOW_LOGS, confine_trust, from_this_account

#: The gateway endpoints every VPC the stack creates gets, by construct id (ids are a contract: tests/infra/
#: test_upgrades.py). https://docs.aws.amazon.com/vpc/latest/privatelink/gateway-endpoints.html
GATEWAY_ENDPOINTS = {
    "DynamoDbEndpoint": ec2.GatewayVpcEndpointAwsService.DYNAMODB,
    "S3Endpoint": ec2.GatewayVpcEndpointAwsService.S3,
}
#: The subnets of a VPC without NAT: the default layout's public subnets (its /16 split in four /18s, the public
#: ones first), so switching nat_gateways to 0 removes the private subnets and the NAT gateways and keeps these.
PUBLIC_ONLY = [ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=18)]
MAX_AZS = 2


def environment_vpc(scope: Stack, settings: EnvironmentSettings, removal: RemovalPolicy) -> ec2.IVpc:
    """The environment's VPC under ``scope`` as construct ``Vpc``: the existing one it names, or a new one."""
    if settings.vpc is not None:
        return ec2.Vpc.from_vpc_attributes(
            scope,
            "Vpc",
            vpc_id=settings.vpc.vpc_id,
            availability_zones=list(settings.vpc.availability_zones),
            private_subnet_ids=list(settings.vpc.private_subnet_ids),
        )
    vpc = ec2.Vpc(
        scope,
        "Vpc",
        max_azs=MAX_AZS,
        nat_gateways=settings.nat_gateways,
        # The CDK's default layout where there is NAT: the subnets a deployed stack with NAT gateways holds.
        subnet_configuration=None if settings.nat_gateways else PUBLIC_ONLY,
    )
    for endpoint_id, service in GATEWAY_ENDPOINTS.items():
        vpc.add_gateway_endpoint(endpoint_id, service=service)
    flow_log = vpc.add_flow_log("FlowLog")
    # The CDK creates this log group with RemovalPolicy.RETAIN (plain Retain, kept even by a rolled-back create) and
    # two years' retention; it holds the environment's traffic records, so it follows the environment's data policy
    # and keeps them as long as the environment keeps its logs.
    assert flow_log.log_group is not None  # the default destination is a log group the CDK creates
    flow_log.log_group.apply_removal_policy(removal)
    cast(logs.CfnLogGroup, flow_log.log_group.node.default_child).retention_in_days = settings.log_retention_days
    # The CDK created the flow log's role with an unconditioned trust: this account's flow logs only (trust.py).
    assert flow_log.iam_role is not None  # a CloudWatch Logs destination always has one
    confine_trust(flow_log.iam_role, VPC_FLOW_LOGS, from_this_account(scope, "ec2", "vpc-flow-log/*"))
    return vpc
