"""Template properties of the synthesized stacks: queues, alarms, topic, task, IAM, scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match

from consumer.contract import BINDING_KEYS, WorkerContract
from consumer.local.image import TASK_PLATFORM
from consumer.local.task import TaskContainer
from infra.capacity_settings import WAKE_UP_SECONDS
from infra.network import GATEWAY_ENDPOINTS
from infra.service import (
    CONTAINER_COMMAND,
    DEAD_LETTER_QUEUE_ACTIONS,
    IDEMPOTENCY_TABLE_ACTIONS,
    SOURCE_QUEUE_ACTIONS,
    TASK_PROTECTION_ACTIONS,
)
from tests.infra.conftest import Synthesized

ROOT = Path(__file__).resolve().parents[2]


def get_att(logical_id: str, attribute: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, attribute]}


def queue_props(env: Synthesized, construct: Any) -> dict[str, Any]:
    return env.json["Resources"][env.logical_id(construct)]["Properties"]


def container(env: Synthesized, worker: str | None = None) -> dict[str, Any]:
    return env.container(worker)


def test_every_reference_environment_synthesizes(reference: dict[str, Synthesized]) -> None:
    """dev, staging, prod and demo each produce a template with a source queue, a DLQ and a service per worker:
    one worker in dev, staging and prod, two in demo (the notifications example and a slow report job)."""
    assert list(reference) == ["dev", "staging", "prod", "demo"]
    for env in reference.values():
        workers = 2 if env.stack.settings.name == "demo" else 1
        env.template.resource_count_is("AWS::SQS::Queue", 2 * workers)
        env.template.resource_count_is("AWS::ECS::Service", workers)
    assert list(reference["demo"].stack.workers) == ["notifications", "reports"]
    reports = {e["Name"]: e["Value"] for e in reference["demo"].container("reports")["Environment"]}
    assert reports["CONSUMER_HANDLER"] == "tests.reference:report_job"


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "demo"])
def test_dlq_retention_exceeds_source_retention(reference: dict[str, Synthesized], name: str) -> None:
    """The DLQ keeps messages longer than the source, with the retention from the environment's settings."""
    env = reference[name]
    source = queue_props(env, env.stack.queues.queue)
    dlq = queue_props(env, env.stack.queues.dead_letter_queue)
    settings = env.stack.settings
    assert source["MessageRetentionPeriod"] == settings.source_retention_days * 86_400
    assert dlq["MessageRetentionPeriod"] == settings.dlq_retention_days * 86_400
    assert dlq["MessageRetentionPeriod"] > source["MessageRetentionPeriod"]


def test_source_queue_keeps_headroom_below_the_dlqs_message_size(dev: Synthesized) -> None:
    """The DLQ takes SQS's 1 MiB; the source 8 KiB less, so a maximum-size message still moves with its reason."""
    source = queue_props(dev, dev.stack.queues.queue)
    dlq = queue_props(dev, dev.stack.queues.dead_letter_queue)
    assert (source["MaximumMessageSize"], dlq["MaximumMessageSize"]) == (1_040_384, 1_048_576)


def test_redrive_policy_uses_contract_max_receive_count(dev: Synthesized) -> None:
    """SQS's redrive is the backstop: the contract's max receive count (5) plus two receives the consumer never saw."""
    source = queue_props(dev, dev.stack.queues.queue)
    assert source["RedrivePolicy"] == {
        "deadLetterTargetArn": get_att(dev.logical_id(dev.stack.queues.dead_letter_queue), "Arn"),
        "maxReceiveCount": 7,
    }


def test_dlq_redrive_allow_policy_names_only_the_source(dev: Synthesized) -> None:
    """Only the source queue may use the DLQ (byQueue), named by its ARN."""
    policy = queue_props(dev, dev.stack.queues.dead_letter_queue)["RedriveAllowPolicy"]
    assert policy["redrivePermission"] == "byQueue"
    (arn,) = policy["sourceQueueArns"]
    assert arn["Fn::Join"][1][-1] == ":SqsWorker-dev-source"
    assert queue_props(dev, dev.stack.queues.queue)["QueueName"] == "SqsWorker-dev-source"


def test_visibility_timeout_is_the_contracts(dev: Synthesized) -> None:
    """The example handler's 90 s max duration gives a 100 s visibility timeout."""
    assert queue_props(dev, dev.stack.queues.queue)["VisibilityTimeout"] == 100


def test_declared_max_lease_becomes_the_visibility_and_reaches_the_task(
    reference: dict[str, Synthesized],
) -> None:
    """The demo handler's 10 s max_lease (30 s max duration) sets the queue's visibility and the task's env."""
    demo = reference["demo"]
    assert queue_props(demo, demo.stack.queues.queue)["VisibilityTimeout"] == 10
    environment = {e["Name"]: e["Value"] for e in container(demo)["Environment"]}
    assert (environment["CONSUMER_MAX_LEASE_SECONDS"], environment["CONSUMER_VISIBILITY_TIMEOUT_SECONDS"]) == (
        "10",
        "10",
    )
    assert environment["CONSUMER_MAX_DURATION_SECONDS"] == "30"


def test_queues_encrypted_and_tls_enforced(dev: Synthesized) -> None:
    """Both queues use SSE-SQS and deny any request not made over TLS."""
    for construct in (dev.stack.queues.queue, dev.stack.queues.dead_letter_queue):
        assert queue_props(dev, construct)["SqsManagedSseEnabled"] is True
        dev.template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": dev.logical_id(construct)}],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Action": "sqs:*",
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            )
                        ]
                    )
                },
            },
        )


def alarm_on(env: Synthesized, metric: str, queue: Any) -> dict[str, Any]:
    matches = [
        a["Properties"]
        for a in env.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == metric
        and a["Properties"]["Dimensions"]
        == [{"Name": "QueueName", "Value": get_att(env.logical_id(queue), "QueueName")}]
    ]
    assert len(matches) == 1, f"expected one {metric} alarm on {queue.node.path}, found {len(matches)}"
    return matches[0]


def test_dlq_depth_alarm_pages_on_one_message_within_a_minute(prod: Synthesized) -> None:
    """One DLQ message, visible or in flight, or one move the consumer counted, breaches a 60 s period; one such
    minute in 20 pages (ALARM and OK to the paging topic), so OK comes 20 minutes after the DLQ empties."""
    alarm = prod.json["Resources"][prod.logical_id(prod.stack.alarms.dlq_depth)]["Properties"]
    topic = [{"Ref": prod.logical_id(prod.stack.paging.topic)}]
    by_id = {m["Id"]: m for m in alarm["Metrics"]}
    assert by_id.pop("expr_1")["Expression"] == "FILL(visible, 0) + FILL(hidden, 0) + FILL(moved, 0)"
    names = {i: (m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Period"]) for i, m in by_id.items()}
    assert names == {
        "visible": ("ApproximateNumberOfMessagesVisible", 60),
        "hidden": ("ApproximateNumberOfMessagesNotVisible", 60),
        "moved": ("dead_lettered", 60),
    }
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (20, 1)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"
    assert (alarm["AlarmActions"], alarm["OKActions"]) == (topic, topic)


def test_dlq_age_alarm_fires_before_expiry(reference: dict[str, Synthesized]) -> None:
    """The DLQ age page (either input) comes at half the retention gap, at least a day before a message moved at the
    end of its source retention can expire; only the composite notifies."""
    for env in reference.values():
        oldest = alarm_on(env, "ApproximateAgeOfOldestMessage", env.stack.queues.dead_letter_queue)
        held = env.json["Resources"][env.logical_id(env.stack.alarms.dlq_expiring_inputs[1])]["Properties"]
        composite = env.json["Resources"][env.logical_id(env.stack.alarms.dlq_expiring)]["Properties"]
        gap = (env.stack.settings.dlq_retention_days - env.stack.settings.source_retention_days) * 86_400
        assert oldest["Threshold"] == env.stack.contract.dlq_age_alarm_seconds == gap // 2
        assert oldest["ComparisonOperator"] == "GreaterThanThreshold"
        assert held["EvaluationPeriods"] * 3_600 == gap // 2
        assert gap - gap // 2 >= 86_400
        page_topic = env.stack.tickets.topic if env.stack.settings.pages_to_tickets else env.stack.paging.topic
        assert composite["OKActions"] == composite["AlarmActions"] == [{"Ref": env.logical_id(page_topic)}]
        assert "OKActions" not in oldest and "OKActions" not in held


def test_backlog_age_alarm_detects_a_stalled_consumer(dev: Synthesized) -> None:
    """The source's oldest message beyond the contract's threshold for 3 minutes raises a ticket; the reference dev
    scales to zero (min_tasks 0), so the threshold allows the wake-up too."""
    alarm = dev.json["Resources"][dev.logical_id(dev.stack.alarms.backlog_age)]["Properties"]
    assert alarm["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert dev.stack.settings.workers[0].min_tasks == 0
    assert alarm["Threshold"] == dev.stack.contract.backlog_age_alarm_seconds + WAKE_UP_SECONDS == 374 + 1140
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["Period"]) == (3, 3, 60)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": dev.logical_id(dev.stack.tickets.topic)}]


def test_paging_topic_encrypted_with_a_key_cloudwatch_can_use(dev: Synthesized) -> None:
    """The topic uses its own rotated KMS key whose policy admits CloudWatch for this stack's alarms; TLS is enforced.

    What these policies allow and refuse is evaluated in tests/infra/test_permissions.py.
    """
    key_id = dev.logical_id(dev.stack.paging.key)
    dev.template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": get_att(key_id, "Arn")})
    dev.template.has_resource_properties(
        "AWS::KMS::Key",
        {
            "EnableKeyRotation": True,
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                                "Effect": "Allow",
                                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                                "Resource": "*",
                                "Condition": {
                                    "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                                    "ArnEquals": {"aws:SourceArn": Match.any_value()},
                                },
                            }
                        )
                    ]
                )
            },
        },
    )
    dev.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            }
        },
    )


def test_topics_and_key_admit_exactly_the_alarms_that_notify(dev: Synthesized) -> None:
    """Both topic policies and the key policy name every alarm with actions by its ARN, and no other."""
    alarms = [
        *dev.resources("AWS::CloudWatch::Alarm").values(),
        *dev.resources("AWS::CloudWatch::CompositeAlarm").values(),
    ]
    notifying = sorted(
        a["Properties"].get("AlarmName") or a["Properties"]["CompositeAlarmName"]
        for a in alarms
        if a["Properties"].get("AlarmActions")
    )
    # The reference dev scales to zero: its wake-up alarm's one action is the wake-up step policy, no topic.
    wake_up = dev.logical_id(dev.stack.consumer.scaling.wake_up)
    notifying.remove(f"{dev.stack.stack_name}-WakeUp")
    (wake_up_alarm,) = [a for a in alarms if a["Properties"]["AlarmName"] == f"{dev.stack.stack_name}-WakeUp"]
    assert wake_up_alarm["Properties"]["AlarmActions"] == [{"Ref": wake_up}]
    assert "OKActions" not in wake_up_alarm["Properties"]
    assert len(notifying) == 6
    policies = [p["Properties"]["PolicyDocument"] for p in dev.resources("AWS::SNS::TopicPolicy").values()]
    policies.append(dev.json["Resources"][dev.logical_id(dev.stack.paging.key)]["Properties"]["KeyPolicy"])
    for policy in policies:
        (statement,) = [s for s in policy["Statement"] if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
        arns = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
        # Each ARN is arn:<partition>:cloudwatch:<region>:<account>:alarm:<name>, joined from pseudo parameters.
        assert sorted(arn["Fn::Join"][1][-1].removeprefix(":alarm:") for arn in arns) == notifying
    assert len(policies) == 3


def test_subscriptions_come_from_cdk_json(reference: dict[str, Synthesized]) -> None:
    """prod commits no subscription: its one is the deploy-time PagingEndpoint; dev has no subscription."""
    prod, dev = reference["prod"], reference["dev"]
    prod.template.resource_count_is("AWS::SNS::Subscription", 1)
    prod.template.has_resource_properties("AWS::SNS::Subscription", {"Endpoint": {"Ref": "PagingEndpoint"}})
    dev.template.resource_count_is("AWS::SNS::Subscription", 0)


def test_shipped_environments_synthesize_without_warnings(reference: dict[str, Synthesized]) -> None:
    """No warning on an unmodified checkout: dev and staging page nobody by design (docs/deploy.md), prod takes
    its subscription at deploy; a warning that fires on every synth would teach users to ignore warnings."""
    for name, env in reference.items():
        assert Annotations.from_stack(env.stack).find_warning("*", Match.any_value()) == [], name


def test_container_runs_the_consumer_as_non_root_with_read_only_root(dev: Synthesized) -> None:
    """Command, user, read-only root file system and a writable /tmp."""
    definition = container(dev)
    assert definition["Command"] == CONTAINER_COMMAND == ["python", "-m", "consumer", "run"]
    assert definition["User"] == "10001:10001"
    assert definition["ReadonlyRootFilesystem"] is True
    assert definition["MountPoints"] == [{"ContainerPath": "/tmp", "ReadOnly": False, "SourceVolume": "tmp"}]


def test_container_stop_timeout_is_the_contracts(dev: Synthesized) -> None:
    """ECS waits the contract's stop timeout (95 s for a 90 s handler) before SIGKILL."""
    assert container(dev)["StopTimeout"] == dev.stack.contract.stop_timeout_seconds == 95


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "demo"])
def test_container_health_check_is_the_liveness_check_timed_by_each_workers_contract(
    reference: dict[str, Synthesized], name: str
) -> None:
    """Every worker's container runs `python -m consumer health` (exec form) at its contract's interval and start
    period, within ECS's bounds, so ECS replaces a task whose poll loop or heartbeat stalled."""
    env = reference[name]
    for worker, built in env.stack.workers.items():
        contract = built.contract
        expected = {
            "Command": ["CMD", "python", "-m", "consumer", "health"],
            "Interval": contract.health_check_interval_seconds,
            "Timeout": 5,
            "Retries": 3,
            "StartPeriod": 60,
        }
        assert env.container(worker)["HealthCheck"] == expected, (name, worker)
        assert 5 <= expected["Interval"] <= 300 and expected["Interval"] < contract.poll_stall_seconds


def test_prod_health_check_interval_is_half_the_shortest_stall(prod: Synthesized) -> None:
    """prod's 90 s handler: heartbeat 20 s + 8 s of agent calls + 10 s = 38 s, the poll allowance 118 s + 10 s =
    128 s: checked every 19 s, so a stalled task goes within about 38 + 3 x 19 s."""
    assert prod.container()["HealthCheck"]["Interval"] == 19
    assert (prod.stack.contract.heartbeat_stall_seconds, prod.stack.contract.poll_stall_seconds) == (38, 128)


def test_container_environment_is_contract_plus_bindings(dev: Synthesized) -> None:
    """Keys equal the contract's to_env() keys plus the bindings (queue URLs, handler, table, task role id) and dev's handler_environment (its dry run)."""
    environment = {e["Name"]: e["Value"] for e in container(dev)["Environment"]}
    # CONSUMER_FAIR_QUEUE, CONSUMER_IDEMPOTENT and the batch and async shapes' fields are written only when a worker
    # declares them (dev's does not).
    unwritten = {
        "CONSUMER_FAIR_QUEUE",
        "CONSUMER_IDEMPOTENT",
        "CONSUMER_MAX_BATCH",
        "CONSUMER_BATCH_WINDOW_SECONDS",
        "CONSUMER_ASYNCHRONOUS",
    }
    assert set(environment) == WorkerContract.env_keys() - unwritten | BINDING_KEYS | {"NOTIFY_DRY_RUN"}
    assert environment["NOTIFY_DRY_RUN"] == "true"
    for key, value in dev.stack.contract.to_env().items():
        assert environment[key] == value
    assert WorkerContract.from_env(environment) == dev.stack.contract
    assert environment["QUEUE_URL"] == {"Ref": dev.logical_id(dev.stack.queues.queue)}
    assert environment["DLQ_URL"] == {"Ref": dev.logical_id(dev.stack.queues.dead_letter_queue)}
    assert environment["CONSUMER_HANDLER"] == "consumer.examples.notifications:handle"
    assert environment["CONSUMER_IDEMPOTENCY_TABLE"] == {"Ref": dev.logical_id(dev.stack.consumer.idempotency_table)}
    # The RoleId SQS records as the SenderId of the copies the consumer requeues (it trusts only those).
    assert environment["CONSUMER_TASK_ROLE_ID"] == get_att(dev.logical_id(dev.stack.consumer.task_role), "RoleId")


def test_idempotency_table_expires_records_and_keeps_backups(dev: Synthesized) -> None:
    """Partition key pk, TTL on expires_at (what DynamoDBStore writes), on-demand, PITR on."""
    dev.template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        },
    )


def test_log_retention_from_settings(reference: dict[str, Synthesized]) -> None:
    """The consumer's log group keeps logs as long as the settings say (7 d dev, 365 d prod)."""
    for name, days in (("dev", 7), ("prod", 365)):
        env = reference[name]
        assert (
            env.json["Resources"][env.logical_id(env.stack.consumer.log_group)]["Properties"]["RetentionInDays"] == days
        )


def test_task_role_has_exactly_the_consumer_actions(dev: Synthesized) -> None:
    """Source: receive/delete/extend/get attributes/send (hand-backs); DLQ: send; table: item CRUD and the batched
    completions; tasks: protection."""
    role_ref = {"Ref": dev.logical_id(dev.stack.consumer.task_role)}
    policies = [
        p["Properties"] for p in dev.resources("AWS::IAM::Policy").values() if role_ref in p["Properties"]["Roles"]
    ]
    assert len(policies) == 1
    role = dev.json["Resources"][dev.logical_id(dev.stack.consumer.task_role)]["Properties"]
    assert "ManagedPolicyArns" not in role and "Policies" not in role
    statements = policies[0]["PolicyDocument"]["Statement"]
    actions = {}
    for statement in statements:
        assert statement["Effect"] == "Allow"
        granted = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        actions[str(statement["Resource"])] = sorted(granted)
    source_arn = str(get_att(dev.logical_id(dev.stack.queues.queue), "Arn"))
    dlq_arn = str(get_att(dev.logical_id(dev.stack.queues.dead_letter_queue), "Arn"))
    assert (
        actions.pop(source_arn)
        == sorted(SOURCE_QUEUE_ACTIONS)
        == [
            "sqs:ChangeMessageVisibility",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:ReceiveMessage",
            "sqs:SendMessage",
        ]
    )
    assert actions.pop(dlq_arn) == list(DEAD_LETTER_QUEUE_ACTIONS) == ["sqs:SendMessage"]
    table_arn = str(get_att(dev.logical_id(dev.stack.consumer.idempotency_table), "Arn"))
    assert (
        actions.pop(table_arn)
        == sorted(IDEMPOTENCY_TABLE_ACTIONS)
        == [
            "dynamodb:BatchWriteItem",
            "dynamodb:DeleteItem",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        ]
    )
    ((protection_resource, protection_actions),) = actions.items()
    assert protection_actions == sorted(TASK_PROTECTION_ACTIONS)
    assert ":task/" in protection_resource and dev.logical_id(dev.stack.consumer.cluster) in protection_resource


def test_cluster_has_container_insights(dev: Synthesized) -> None:
    """Container Insights is on (RunningTaskCount feeds the scaling policy)."""
    dev.template.has_resource_properties(
        "AWS::ECS::Cluster", {"ClusterSettings": [{"Name": "containerInsights", "Value": "enabled"}]}
    )


def test_service_rolls_back_at_full_health(dev: Synthesized) -> None:
    """100 % minimum healthy, deployment circuit breaker with rollback."""
    dev.template.has_resource_properties(
        "AWS::ECS::Service",
        {
            "DeploymentConfiguration": Match.object_like(
                {"MinimumHealthyPercent": 100, "DeploymentCircuitBreaker": {"Enable": True, "Rollback": True}}
            ),
        },
    )


def subnets(env: Synthesized, *, public: bool) -> dict[str, dict[str, Any]]:
    """The environment's public (MapPublicIpOnLaunch) or private subnets, by logical id."""
    found = env.resources("AWS::EC2::Subnet").items()
    return {k: s["Properties"] for k, s in found if bool(s["Properties"].get("MapPublicIpOnLaunch")) is public}


def task_network(env: Synthesized) -> dict[str, Any]:
    (service,) = env.resources("AWS::ECS::Service").values()
    network: dict[str, Any] = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    return network


def test_tasks_behind_nat_run_in_private_subnets_without_a_public_ip(prod: Synthesized) -> None:
    """prod (two NAT gateways): the tasks reach SQS through NAT from private subnets, no public IP."""
    network = task_network(prod)

    assert network["AssignPublicIp"] == "DISABLED"
    assert sorted(s["Ref"] for s in network["Subnets"]) == sorted(subnets(prod, public=False)) != []
    prod.template.resource_count_is("AWS::EC2::NatGateway", 2)


def test_tasks_without_nat_run_in_public_subnets_with_a_public_ip_and_admit_nothing(dev: Synthesized) -> None:
    """dev (nat_gateways 0): no NAT gateway, no Elastic IP, no private subnet; the tasks get a public IP in the public
    subnets, and their security group has no inbound rule, so nothing can reach them."""
    network = task_network(dev)

    assert network["AssignPublicIp"] == "ENABLED"
    assert sorted(s["Ref"] for s in network["Subnets"]) == sorted(subnets(dev, public=True))
    assert subnets(dev, public=False) == {}
    for kind in ("AWS::EC2::NatGateway", "AWS::EC2::EIP", "AWS::EC2::SecurityGroupIngress"):
        dev.template.resource_count_is(kind, 0)
    ((group, _),) = [g["Fn::GetAtt"] for g in network["SecurityGroups"]]
    assert "SecurityGroupIngress" not in dev.json["Resources"][group]["Properties"]
    assert dev.stack.consumer.public_ip is True


def test_going_without_nat_keeps_the_public_subnets(reference: dict[str, Synthesized]) -> None:
    """dev without NAT has exactly staging's public subnets (same logical ids, addresses and zones), so switching a
    deployed environment's nat_gateways to 0 removes the private subnets and NAT gateways and replaces no subnet."""

    def addresses(env: Synthesized) -> dict[str, tuple[str, Any]]:
        return {k: (s["CidrBlock"], s["AvailabilityZone"]) for k, s in subnets(env, public=True).items()}

    assert addresses(reference["dev"]) == addresses(reference["staging"])
    assert sorted(addresses(reference["dev"])) == ["VpcPublicSubnet1Subnet5C2D37C4", "VpcPublicSubnet2Subnet691E08A3"]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_gateway_endpoints_reach_dynamodb_and_s3_from_every_subnet(
    reference: dict[str, Synthesized], name: str
) -> None:
    """A gateway endpoint for DynamoDB and one for S3 (ECR's image layers) on every route table, with AWS's default
    (full access) policy: the idempotency table's calls and image pulls skip the NAT gateway's data charge, and the
    task role's own policy still decides what the task may do."""
    env = reference[name]
    tables = sorted(env.resources("AWS::EC2::RouteTable"))
    endpoints = env.resources("AWS::EC2::VPCEndpoint")
    vpc = env.stack.node.find_child("Vpc")

    assert sorted(endpoints) == sorted(env.logical_id(vpc.node.find_child(i)) for i in GATEWAY_ENDPOINTS)
    for endpoint in endpoints.values():
        properties = endpoint["Properties"]
        assert properties["VpcEndpointType"] == "Gateway"
        assert sorted(r["Ref"] for r in properties["RouteTableIds"]) == tables
        assert "PolicyDocument" not in properties
    services = sorted(e["Properties"]["ServiceName"]["Fn::Join"][1][-1] for e in endpoints.values())
    assert services == [".dynamodb", ".s3"]


@pytest.mark.parametrize(("name", "days"), [("dev", 7), ("prod", 365)])
def test_flow_log_records_all_traffic_for_the_environment_s_log_retention(
    reference: dict[str, Synthesized], name: str, days: int
) -> None:
    """The flow log keeps its records as long as the environment keeps its logs (the CDK's default was 731 days)."""
    env = reference[name]
    (flow_log,) = env.resources("AWS::EC2::FlowLog").values()
    group = env.json["Resources"][flow_log["Properties"]["LogGroupName"]["Ref"]]

    assert (flow_log["Properties"]["TrafficType"], group["Properties"]["RetentionInDays"]) == ("ALL", days)


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_scaling_tracks_backlog_per_task(reference: dict[str, Synthesized], name: str) -> None:
    """Target tracking on visible messages / running tasks, target from the contract, bounds from the settings."""
    env = reference[name]
    (target,) = env.resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (
        env.stack.settings.min_tasks,
        env.stack.settings.max_tasks,
    )
    assert "AWSServiceRoleForApplicationAutoScaling_ECSService" in str(target["Properties"]["RoleARN"])
    (policy,) = [  # the one target tracking policy (a min_tasks 0 worker also has its wake-up step policy)
        p
        for p in env.resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
        if p["Properties"]["PolicyType"] == "TargetTrackingScaling"
    ]
    config = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert policy["Properties"]["PolicyType"] == "TargetTrackingScaling"
    assert config["TargetValue"] == env.stack.contract.scaling_target_backlog_per_task == 240
    metrics = {m["Id"]: m for m in config["CustomizedMetricSpecification"]["Metrics"]}
    assert metrics["backlogPerTask"] == {
        "Expression": "backlog / tasks",
        "Id": "backlogPerTask",
        "Label": "Backlog per task",
        "ReturnData": True,
    }
    backlog = metrics["backlog"]["MetricStat"]["Metric"]
    assert (backlog["Namespace"], backlog["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert backlog["Dimensions"] == [
        {"Name": "QueueName", "Value": get_att(env.logical_id(env.stack.queues.queue), "QueueName")}
    ]
    tasks = metrics["tasks"]["MetricStat"]["Metric"]
    assert (tasks["Namespace"], tasks["MetricName"]) == ("ECS/ContainerInsights", "RunningTaskCount")
    assert {d["Name"] for d in tasks["Dimensions"]} == {"ClusterName", "ServiceName"}


def test_outputs_expose_queue_urls(dev: Synthesized) -> None:
    """Operators and the DLQ tooling find the queues from the stack's outputs."""
    outputs = dev.json["Outputs"]
    assert outputs["QueueUrl"]["Value"] == {"Ref": dev.logical_id(dev.stack.queues.queue)}
    assert outputs["DeadLetterQueueUrl"]["Value"] == {"Ref": dev.logical_id(dev.stack.queues.dead_letter_queue)}
    assert {"PagingTopicArn", "ClusterName", "ServiceName"} <= set(outputs)


def test_image_asset_ships_the_runtime_and_the_team_package_without_local_tooling(dev: Synthesized) -> None:
    """The build context `cdk deploy` sends (the repository root through its .dockerignore) holds the runtime,
    the team package and their locks, and leaves out what needs moto or a cdk.out, tests and the rest of the
    repository; the container tier checks the built image itself where an engine runs."""
    task = TaskContainer.from_assembly(dev.outdir, dev.stack.stack_name)
    shipped = {str(p.relative_to(task.asset_directory)) for p in task.asset_directory.rglob("*") if p.is_file()}
    assert task.dockerfile == "consumer/Dockerfile"
    assert {
        ".dockerignore",
        "consumer/Dockerfile",
        "consumer/requirements.lock",
        "consumer/cli.py",
        "consumer/runtime/consumer.py",
        "consumer/ops/commands.py",
        "consumer/examples/demo.py",
        "consumer/examples/requirements.lock",
        "workers/requirements.lock",
    } <= shipped
    # Every module of the team package, whatever the team put there (workers/tests aside).
    team_package = {str(p.relative_to(ROOT)) for p in (ROOT / "workers").rglob("*.py") if "tests" not in p.parts}
    assert team_package <= shipped
    assert {p.split("/")[0] for p in shipped} == {".dockerignore", "consumer", "workers"}
    assert [p for p in shipped if p.startswith("consumer/local/") or "/tests/" in p] == []
    assert [p for p in shipped if "__pycache__" in p or p.endswith(".pyc")] == []


def test_image_is_built_for_the_task_platform_whatever_machine_deploys(dev: Synthesized) -> None:
    """An arm64 laptop must not push an arm64 image to X86_64 Fargate (the task would fail with exec format error)."""
    task = TaskContainer.from_assembly(dev.outdir, dev.stack.stack_name)
    (definition,) = dev.resources("AWS::ECS::TaskDefinition").values()
    assert definition["Properties"]["RuntimePlatform"]["CpuArchitecture"] == "X86_64"
    assert task.platform == TASK_PLATFORM == "linux/amd64"


def test_the_synth_report_shows_the_backlog_age_alarm_at_the_threshold_it_compares(
    reference: dict[str, Synthesized],
) -> None:
    """`python -m infra.report`'s "backlog age alarm" is each worker's BacklogAge threshold, the wake-up included
    where the worker scales to zero (dev: it was the contract's 374 s while the alarm compared 1514 s)."""
    from infra.report import contract_cell

    for name, env in reference.items():
        for worker in env.stack.settings.workers:
            built = env.stack.workers[worker.name]
            threshold = env.json["Resources"][env.logical_id(built.alarms.backlog_age)]["Properties"]["Threshold"]
            cell = contract_cell(worker, built.contract, "backlog_age_alarm_seconds")
            assert cell.startswith(f"{threshold} s"), (name, worker.name, cell)
