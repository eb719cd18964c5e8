"""Upgrades that keep data: resources holding messages never get a new logical id; prod retains them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from infra.app import build_app, cdk_json_context
from tests.infra.conftest import Synthesized
from tests.reference import reference_context

#: Logical ids of the resources that hold data or subscriptions, pinned: a change here means
#: CloudFormation would REPLACE the resource, and a replaced queue loses every message in it (a
#: replaced topic, its confirmed subscriptions). Never update these to make a test pass.
PINNED_LOGICAL_IDS = {
    "source queue": "QueuesQueueD811C857",
    "dead-letter queue": "QueuesDeadLetterQueue82AA3FB7",
    "idempotency table": "ConsumerIdempotencyTableBB140E0E",
    "paging topic": "PagingTopicF7F4870D",
    "paging key": "PagingKey83442547",
}


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "demo"])
def test_queue_and_table_logical_ids_are_pinned(reference: dict[str, Synthesized], name: str) -> None:
    """Renaming a construct id would replace the queue (losing its messages): the ids must never change."""
    env = reference[name]
    found = {
        "source queue": env.logical_id(env.stack.queues.queue),
        "dead-letter queue": env.logical_id(env.stack.queues.dead_letter_queue),
        "idempotency table": env.logical_id(env.stack.consumer.idempotency_table),
        "paging topic": env.logical_id(env.stack.paging.topic),
        "paging key": env.logical_id(env.stack.paging.key),
    }
    assert found == PINNED_LOGICAL_IDS


#: Every resource of prod's template before an environment could hold several workers, by logical id:
#: a one-worker environment keeps exactly these, so upgrading to the Worker construct replaces nothing.
PROD_RESOURCES_BEFORE_WORKERS = {
    "QueuesDeadLetterQueue82AA3FB7": "AWS::SQS::Queue",
    "QueuesDeadLetterQueuePolicyCCAD37A7": "AWS::SQS::QueuePolicy",
    "QueuesQueueD811C857": "AWS::SQS::Queue",
    "QueuesQueuePolicyA91E61E7": "AWS::SQS::QueuePolicy",
    "PagingKey83442547": "AWS::KMS::Key",
    "PagingTopicF7F4870D": "AWS::SNS::Topic",
    "PagingTopicPolicy281CF58C": "AWS::SNS::TopicPolicy",
    "PagingEndpointSubscription": "AWS::SNS::Subscription",
    "TicketsTopicC7E9F99F": "AWS::SNS::Topic",
    "TicketsTopicPolicyEE34497F": "AWS::SNS::TopicPolicy",
    "Vpc8378EB38": "AWS::EC2::VPC",
    "VpcPublicSubnet1Subnet5C2D37C4": "AWS::EC2::Subnet",
    "VpcPublicSubnet1RouteTable6C95E38E": "AWS::EC2::RouteTable",
    "VpcPublicSubnet1RouteTableAssociation97140677": "AWS::EC2::SubnetRouteTableAssociation",
    "VpcPublicSubnet1DefaultRoute3DA9E72A": "AWS::EC2::Route",
    "VpcPublicSubnet1EIPD7E02669": "AWS::EC2::EIP",
    "VpcPublicSubnet1NATGateway4D7517AA": "AWS::EC2::NatGateway",
    "VpcPublicSubnet2Subnet691E08A3": "AWS::EC2::Subnet",
    "VpcPublicSubnet2RouteTable94F7E489": "AWS::EC2::RouteTable",
    "VpcPublicSubnet2RouteTableAssociationDD5762D8": "AWS::EC2::SubnetRouteTableAssociation",
    "VpcPublicSubnet2DefaultRoute97F91067": "AWS::EC2::Route",
    "VpcPublicSubnet2EIP3C605A87": "AWS::EC2::EIP",
    "VpcPublicSubnet2NATGateway9182C01D": "AWS::EC2::NatGateway",
    "VpcPrivateSubnet1Subnet536B997A": "AWS::EC2::Subnet",
    "VpcPrivateSubnet1RouteTableB2C5B500": "AWS::EC2::RouteTable",
    "VpcPrivateSubnet1RouteTableAssociation70C59FA6": "AWS::EC2::SubnetRouteTableAssociation",
    "VpcPrivateSubnet1DefaultRouteBE02A9ED": "AWS::EC2::Route",
    "VpcPrivateSubnet2Subnet3788AAA1": "AWS::EC2::Subnet",
    "VpcPrivateSubnet2RouteTableA678073B": "AWS::EC2::RouteTable",
    "VpcPrivateSubnet2RouteTableAssociationA89CAD56": "AWS::EC2::SubnetRouteTableAssociation",
    "VpcPrivateSubnet2DefaultRoute060D2087": "AWS::EC2::Route",
    "VpcIGWD7BA715C": "AWS::EC2::InternetGateway",
    "VpcVPCGWBF912B6E": "AWS::EC2::VPCGatewayAttachment",
    "VpcFlowLogIAMRole6A475D41": "AWS::IAM::Role",
    "VpcFlowLogIAMRoleDefaultPolicy406FB995": "AWS::IAM::Policy",
    "VpcFlowLogLogGroup7B5C56B9": "AWS::Logs::LogGroup",
    "VpcFlowLog8FF33A73": "AWS::EC2::FlowLog",
    "ClusterEB0386A7": "AWS::ECS::Cluster",
    "ConsumerIdempotencyTableBB140E0E": "AWS::DynamoDB::Table",
    "ConsumerTaskRoleA73879CF": "AWS::IAM::Role",
    "ConsumerTaskRoleDefaultPolicy2B66DE99": "AWS::IAM::Policy",
    "ConsumerTaskDefinition15934FC1": "AWS::ECS::TaskDefinition",
    "ConsumerTaskDefinitionExecutionRole454258BE": "AWS::IAM::Role",
    "ConsumerTaskDefinitionExecutionRoleDefaultPolicyE23C85D6": "AWS::IAM::Policy",
    "ConsumerLogs7B9AAC61": "AWS::Logs::LogGroup",
    "ConsumerService6A611E3B": "AWS::ECS::Service",
    "ConsumerServiceSecurityGroup92D9723A": "AWS::EC2::SecurityGroup",
    "ConsumerScalableTargetF2B23CCC": "AWS::ApplicationAutoScaling::ScalableTarget",
    "ConsumerBacklogPerTaskScaling1E7CA1FF": "AWS::ApplicationAutoScaling::ScalingPolicy",
    "AlarmsDlqDepth0E4523BF": "AWS::CloudWatch::Alarm",
    "AlarmsDlqNewArrivalsF5F386D4": "AWS::CloudWatch::Alarm",
    "AlarmsDlqAge9139D289": "AWS::CloudWatch::Alarm",
    "AlarmsBacklogAge4C641D03": "AWS::CloudWatch::Alarm",
    "AlarmsStalledBacklogLate060B5085": "AWS::CloudWatch::Alarm",
    "AlarmsStalledNothingDeletedC891C7AC": "AWS::CloudWatch::Alarm",
    "AlarmsStalledNoRunningTasks36DABAE3": "AWS::CloudWatch::Alarm",
    "AlarmsConsumerStalled8567B859": "AWS::CloudWatch::CompositeAlarm",
    "Dashboard7A714131": "AWS::CloudWatch::Dashboard",
}


#: Resources prod gained since, each added beside the ones above (none of those changed id or type).
PROD_RESOURCES_ADDED = {
    # DownstreamUnavailable: an outage held behind the consumer's circuit reaches no DLQ alarm, so this one pages.
    "AlarmsDownstreamUnavailable39FBC6CC": "AWS::CloudWatch::Alarm",
    # DlqExpiring pages on the DLQ's oldest message (DlqAge above, kept as its input without actions: an
    # Alarm cannot become a CompositeAlarm under one logical id) or the DLQ holding messages hour after hour.
    "AlarmsDlqExpiringCEA29B4F": "AWS::CloudWatch::CompositeAlarm",
    "AlarmsDlqHeldLong6CCBEF54": "AWS::CloudWatch::Alarm",
    # Gateway endpoints, free, so the idempotency table's calls and ECR's image layers skip NAT data. Only
    # routes are added to the route tables: no subnet, route table or NAT gateway is replaced (below).
    "VpcDynamoDbEndpoint564903D1": "AWS::EC2::VPCEndpoint",
    "VpcS3Endpoint4A3DE4B5": "AWS::EC2::VPCEndpoint",
    # restrictDefaultSecurityGroup strips the VPC's default security group (Security Hub EC2.2) through a
    # custom resource, and the stack holds the CDK's provider for it (its function and role).
    "VpcRestrictDefaultSecurityGroupCustomResourceC73DA2BE": "Custom::VpcRestrictDefaultSG",
    "CustomVpcRestrictDefaultSGCustomResourceProviderRole26592FE0": "AWS::IAM::Role",
    "CustomVpcRestrictDefaultSGCustomResourceProviderHandlerDC833E5E": "AWS::Lambda::Function",
}


def test_prod_keeps_every_logical_id_and_type_it_had_before_workers(prod: Synthesized) -> None:
    """The Worker construct ("Default" for the first worker) keeps every prod resource under the logical id a stack
    deployed before it holds; the only other resources are PROD_RESOURCES_ADDED."""
    found = {logical_id: resource["Type"] for logical_id, resource in prod.json["Resources"].items()}
    assert found == PROD_RESOURCES_BEFORE_WORKERS | PROD_RESOURCES_ADDED


#: prod's subnets: a new address or zone would replace the subnet (and with it what runs in it).
PROD_SUBNETS = {
    "VpcPublicSubnet1Subnet5C2D37C4": ("10.0.0.0/18", 0),
    "VpcPublicSubnet2Subnet691E08A3": ("10.0.64.0/18", 1),
    "VpcPrivateSubnet1Subnet536B997A": ("10.0.128.0/18", 0),
    "VpcPrivateSubnet2Subnet3788AAA1": ("10.0.192.0/18", 1),
}


def test_prod_subnets_keep_their_addresses_and_zones(prod: Synthesized) -> None:
    """The VPC's layout with NAT is the CDK's default, as deployed stacks hold it: each subnet keeps CIDR and zone."""
    found = {
        logical_id: (subnet["Properties"]["CidrBlock"], subnet["Properties"]["AvailabilityZone"]["Fn::Select"][0])
        for logical_id, subnet in prod.resources("AWS::EC2::Subnet").items()
    }
    assert found == PROD_SUBNETS


def test_prod_service_security_group_keeps_its_description(prod: Synthesized) -> None:
    """CDK describes the group by its construct path; a changed GroupDescription would replace the group."""
    group = prod.json["Resources"]["ConsumerServiceSecurityGroup92D9723A"]["Properties"]
    assert group["GroupDescription"] == "SqsWorker-prod/Consumer/Service/SecurityGroup"


def test_data_removal_policy_per_environment(reference: dict[str, Synthesized]) -> None:
    """Where an environment sets retain_queues, every worker's queues, table and logs and the topics' key survive a
    stack delete or a replacement (RetainExceptOnCreate, UpdateReplacePolicy Retain) but not the rollback of the
    deploy that created them; elsewhere the stack's deletion destroys them (Delete)."""
    for name, env in reference.items():
        expected = ("RetainExceptOnCreate", "Retain") if env.stack.settings.retain_queues else ("Delete", "Delete")
        constructs = [env.stack.paging.key]
        for worker in env.stack.workers.values():
            constructs += [worker.queues.queue, worker.queues.dead_letter_queue, worker.consumer.idempotency_table]
            constructs += [worker.consumer.log_group]
        for construct in constructs:
            resource = env.json["Resources"][env.logical_id(construct)]
            found = (resource["DeletionPolicy"], resource["UpdateReplacePolicy"])
            assert found == expected, (name, construct.node.path)


#: Flags cdk.json sets apart from the recommended ones decided together (the rest of its @aws-cdk keys: adopted
#: silently, FLAGS_LEFT or FLAGS_ADOPTED_WITH_CHANGES).
FLAGS_BEFORE_THE_DECISION = {
    "@aws-cdk/core:checkSecretUsage",
    "@aws-cdk/aws-iam:minimizePolicies",
    "@aws-cdk/core:target-partitions",
}
#: Recommended flags left at their default (false in cdk.json), each because it changes a resource or can
#: fail a synth that passes today: docs/upgrades.md says why.
FLAGS_LEFT = {
    "@aws-cdk/core:annotationsInValidationReport",
    "@aws-cdk/aws-ecs:disableExplicitDeploymentControllerForCircuitBreaker",
    "@aws-cdk/aws-ecs:removeEmptyLoadBalancers",
    "@aws-cdk/core:enableAdditionalMetadataCollection",
    "@aws-cdk/core:validateAgainstDefaultRules",
}
#: Recommended flags adopted on purpose though they change templates, each with its change
#: (docs/upgrades.md): the test below allows exactly these differences and nothing else.
FLAGS_ADOPTED_WITH_CHANGES = {
    # Security Hub EC2.2: a VPC's default security group allows all traffic among its members and all egress. Each
    # VPC the stack creates gets a custom resource removing those rules, and the stack the provider behind it.
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup",
    # It writes no empty DeploymentConfiguration.Alarms block (some partitions refuse one: aws-cdk#26574);
    # deployment alarms a service is given are written as without it.
    "@aws-cdk/aws-ecs:removeDefaultDeploymentAlarm",
}
#: What restrictDefaultSecurityGroup adds to a stack that creates its VPC (the reference environments all do).
DEFAULT_SECURITY_GROUP_RESOURCES = {
    k: v for k, v in PROD_RESOURCES_ADDED.items() if k.startswith(("VpcRestrictDefault", "CustomVpcRestrictDefault"))
}
#: The block removeDefaultDeploymentAlarm stops writing into each service's DeploymentConfiguration.
EMPTY_DEPLOYMENT_ALARMS = {"AlarmNames": [], "Enable": False, "Rollback": False}
#: What the CDK CLI adds to the context on deploy: CDKMetadata (version reporting) is then compared too.
CLI_CONTEXT = {
    "aws:cdk:enable-path-metadata": True,
    "aws:cdk:enable-asset-metadata": True,
    "aws:cdk:version-reporting": True,
}


def templates(outdir: Path, context: dict[str, Any]) -> dict[str, Any]:
    """Every environment's template, synthesized with exactly ``context`` (cdk.json is not merged in); compared, not
    validated (the reference's synthesis runs CloudFormation's validation: tests/infra/conftest.py)."""
    app, _ = build_app(cdk.App(outdir=str(outdir), context=context, builtin_cloud_formation_validation=False))
    app.synth()
    return {path.name: json.loads(path.read_text()) for path in sorted(outdir.glob("*.template.json"))}


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], set[str], dict[str, Any]]:
    """cdk.json's flags over the reference environments (with the CLI's version reporting on), the decided flags
    (every @aws-cdk key but FLAGS_BEFORE_THE_DECISION), and every environment's template synthesized with them."""
    context = {
        **cdk_json_context(),
        **CLI_CONTEXT,
        **reference_context(),
    }
    added = {key for key in context if key.startswith("@aws-cdk")} - FLAGS_BEFORE_THE_DECISION
    return context, added, templates(tmp_path_factory.mktemp("with"), context)


def test_feature_flags_in_cdk_json_change_no_template(
    flagged: tuple[dict[str, Any], set[str], dict[str, Any]], tmp_path: Path
) -> None:
    """The recommended flags cdk.json adopted silently leave every environment's template as it is without them (logical
    ids, properties, CDKMetadata): adopting them replaces or changes nothing deployed; the five left stay off."""
    context, added, with_flags = flagged
    assert {key for key in added if context[key] is False} == FLAGS_LEFT
    assert {key for key in FLAGS_ADOPTED_WITH_CHANGES if context[key] is True} == FLAGS_ADOPTED_WITH_CHANGES
    silent = added - FLAGS_ADOPTED_WITH_CHANGES
    without = templates(tmp_path, {k: v for k, v in context.items() if k not in silent})
    assert len(with_flags) == 4
    assert with_flags == without


def test_flags_adopted_with_changes_change_only_what_upgrades_md_says(
    flagged: tuple[dict[str, Any], set[str], dict[str, Any]], tmp_path: Path
) -> None:
    """restrictDefaultSecurityGroup adds the custom resource stripping the created VPC's default security group and
    its provider (function, role); removeDefaultDeploymentAlarm drops each service's empty deployment-alarms block;
    nothing else changes but CDKMetadata (the constructs used). No resource is removed or replaced."""
    context, _, with_flags = flagged
    without = templates(tmp_path, {k: v for k, v in context.items() if k not in FLAGS_ADOPTED_WITH_CHANGES})
    for name, template in with_flags.items():
        before, after = without[name]["Resources"], template["Resources"]
        added = {k: r["Type"] for k, r in after.items() if k not in before}
        assert (name, added) == (name, DEFAULT_SECURITY_GROUP_RESOURCES)
        assert set(before) <= set(after), name
        changed = {k for k in before if before[k] != after[k]} - {"CDKMetadata"}
        services = {k for k, r in before.items() if r["Type"] == "AWS::ECS::Service"}
        assert changed == services, name
        for key in services:
            deployment = before[key]["Properties"]["DeploymentConfiguration"]
            assert deployment.pop("Alarms") == EMPTY_DEPLOYMENT_ALARMS
            assert before[key] == after[key], (name, key)
        assert {k: v for k, v in without[name].items() if k != "Resources"} == {
            k: v for k, v in template.items() if k != "Resources"
        }


#: What a deployed stack holds, by logical id: its type and the names CloudFormation gives it, and its outputs.
#: tests/infra/deployed/ keeps them for the reference prod (one worker) and demo (two: notifications, then reports)
#: as the release before worker identities synthesized them (infra/identities.py); regenerate never.
DEPLOYED = Path(__file__).parent / "deployed"
NAME_PROPERTIES = (
    "QueueName",
    "TableName",
    "AlarmName",
    "ServiceName",
    "LogGroupName",
    "TopicName",
    "DashboardName",
    "Family",
    "PolicyName",
)


def held(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each resource's type and names, by logical id (CDK's metadata resource left out)."""
    return {
        logical_id: {"Type": r["Type"], **{k: v for k, v in r.get("Properties", {}).items() if k in NAME_PROPERTIES}}
        for logical_id, r in template["Resources"].items()
        if r["Type"] != "AWS::CDK::Metadata"
    }


@pytest.mark.parametrize("name", ["prod", "demo"])
def test_a_deployed_stack_keeps_every_logical_id_and_name(reference: dict[str, Synthesized], name: str) -> None:
    """A stack the release before identities deployed, one worker (prod) or two (demo), synthesizes every resource
    it held under the same logical id, type and names, and every output it had: upgrading replaces nothing. The VPC's
    own resources (``Vpc...``) are left out: an environment's network settings (NAT) change them on purpose."""
    deployed = json.loads((DEPLOYED / f"{name}.json").read_text())
    kept = {k: v for k, v in deployed["resources"].items() if not k.startswith("Vpc")}
    now = held(reference[name].json)
    assert {k: now.get(k) for k in kept} == kept
    assert set(deployed["outputs"]) <= set(reference[name].json["Outputs"])


def test_reordering_workers_moves_no_resource(reference: dict[str, Synthesized], tmp_path: Path) -> None:
    """demo's workers reversed, once its identities are recorded (workers.lock.json, as a synth writes it): every
    resource keeps its logical id, type and names, and every output its name."""
    from infra.identities import LOCK_FILE, IdentityLock
    from infra.worker_settings import CONTEXT_KEY

    environments = reference_context()[CONTEXT_KEY]
    lock = IdentityLock(tmp_path / LOCK_FILE)
    lock.record("demo", reference["demo"].stack.settings.workers)
    demo = environments["demo"]
    demo["workers"] = dict(reversed(list(demo["workers"].items())))
    assert list(demo["workers"])[0] != next(iter(reference["demo"].stack.workers))  # really another order
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {CONTEXT_KEY: environments}}))
    context = {**cdk_json_context(), CONTEXT_KEY: environments, "env": "demo"}
    out = tmp_path / "out"
    app, _ = build_app(cdk.App(outdir=str(out), context=context, builtin_cloud_formation_validation=False), lock=lock)
    app.synth()
    reversed_demo = json.loads((out / "SqsWorker-demo.template.json").read_text())
    assert held(reversed_demo) == held(reference["demo"].json)
    assert reversed_demo["Outputs"].keys() == reference["demo"].json["Outputs"].keys()
