"""What happens to the data an environment keeps when CloudFormation stops managing it."""

from __future__ import annotations

from aws_cdk import RemovalPolicy

#: Retained data: ``DeletionPolicy: RetainExceptOnCreate`` and ``UpdateReplacePolicy: Retain``. A stack delete, a
#: replacement or a resource dropped from the template keeps the resource and its data, as ``Retain`` does; only
#: the rollback of the operation that created it deletes it, so a failed first deploy leaves no named queue behind
#: for the retry to collide with ("already exists"). "If the stack operation that created the resource is rolled
#: back, CloudFormation deletes the resource. For all other stack operations, such as stack deletion,
#: CloudFormation retains the resource and its contents":
#: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html
#: (aws-cdk-lib's RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE writes exactly that pair).
RETAIN_DATA = RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE


def data_removal_policy(retain: bool) -> RemovalPolicy:
    """:data:`RETAIN_DATA` where an environment keeps its data (cdk.json ``retain_queues``), else ``DESTROY``."""
    return RETAIN_DATA if retain else RemovalPolicy.DESTROY
