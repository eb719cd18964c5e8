"""The permissions tier: what AWS will allow and refuse, proven offline on the synthesized templates.

moto enforces no IAM, resource or KMS key policy. Here every environment of the repository's cdk.json, whatever a
team made of it (and the contract/settings variants below, which change policies), is synthesized, resolved to concrete ARNs in a fake
account (tests/infra/resolve.py) and evaluated with a real policy evaluator, @cloud-copilot/iam-simulate
(identity, resource and key policies together). The scenarios are the tables of tests/infra/permission_rows.py, bound per worker
(``env`` for a one-worker environment, ``env/worker`` where there are several); the task role's rows come
from tests/infra/runtime_calls.json, which the integration tier keeps equal to what the runtime really
calls, and each of them is refused on every other worker's queues and table. Every role of every template is
assumed through its trust policy (who may: its service, for this stack only). The tier's own tools are tested in
tests/infra/test_permission_tools.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import EXISTING_VPC_AND_CLUSTER, Synthesized, synthesize_once
from tests.infra.permission_rows import PRODUCERS, Evaluated, bind, evaluate_bound, runtime_rows, worker_labels
from tests.infra.permissions import (
    DEFAULT_ENDPOINT_POLICY,
    TASK_ID,
    Bindings,
    evaluate,
    load_runtime_calls,
    mismatches,
    trust_problems,
)
from tests.infra.resolve import FAKE_ACCOUNT
from tests.reference import REPORT_JOB, repository_environments

#: Variants whose policies a cdk.json may not have: one worker with an SSM secret paging to tickets, a FIFO pair, tasks
#: in public subnets (no NAT: the gateway endpoints on the public route tables), a handler idempotent by itself (no
#: table: every DynamoDB call refused), an existing VPC and cluster, named producers with Secrets Manager secrets, a
#: worker on Lambda alone and beside an ECS worker with named producers (the function's role sends, the other worker's
#: roles are refused its queues and logs), and two workers each with secrets of its own, so each execution role is
#: refused the other's. The tests that pin bindings read these, never cdk.json.
VARIANTS: dict[str, dict[str, Any]] = {
    "solo": {
        "handler": "consumer.examples.notifications:handle",
        "pages_to_tickets": True,
        "secrets": {"NOTIFY_WEBHOOK_URL": "ssm:/sqs-worker/solo/notify-webhook-url"},
    },
    "fifo": {"handler": "tests.infra.handlers:ordered"},
    "nonat": {"handler": "consumer.examples.notifications:handle", "nat_gateways": 0},
    "guardless": {"handler": "tests.infra.handlers:upserts"},
    "shared": {"handler": "consumer.examples.notifications:handle", **EXISTING_VPC_AND_CLUSTER},
    "senders": {
        "handler": "consumer.examples.notifications:handle",
        "producers": PRODUCERS,
        "secrets": {
            "NOTIFY_WEBHOOK_URL": "secretsmanager:team/notify-Ab12Cd#url",
            "PARTNER_KEY": f"secretsmanager:arn:aws:secretsmanager:eu-west-1:{FAKE_ACCOUNT}:secret:team/partner-Xy34Zw",
        },
    },
    "function": {"handler": "consumer.examples.notifications:handle", "target": "lambda"},
    "functions": {
        "producers": PRODUCERS,
        "workers": {
            "notifications": {
                "handler": "consumer.examples.notifications:handle",
                "secrets": {"NOTIFY_WEBHOOK_URL": "ssm:/sqs-worker/functions/notify-webhook-url"},
            },
            "invoices": {"handler": "tests.team_handlers:invoices", "target": "lambda"},
        },
    },
    "teams": {
        "workers": {
            "notifications": {
                "handler": "consumer.examples.notifications:handle",
                "secrets": {"NOTIFY_WEBHOOK_URL": "ssm:/sqs-worker/teams/notify-webhook-url"},
            },
            "reports": {
                "handler": REPORT_JOB,
                "secrets": {
                    "REPORTS_STORE_URL": "ssm:/sqs-worker/teams/reports-store-url",
                    "REPORTS_SIGNING_KEY": "secretsmanager:team/reports-Ef56Gh#key",
                },
            },
        }
    },
}


REPOSITORY: dict[str, Any] = repository_environments()
assert not set(REPOSITORY) & set(VARIANTS), (
    f"cdk.json names an environment the permissions tier's variants use ({sorted(set(REPOSITORY) & set(VARIANTS))}):"
    " rename the variant in tests/infra/test_permissions.py"
)
ALL_ENVIRONMENTS: dict[str, Any] = {**REPOSITORY, **VARIANTS}
#: Every worker of every environment and variant, as the tests name them.
ENVIRONMENTS = [label for env, s in ALL_ENVIRONMENTS.items() for label in worker_labels(env, s.get("workers", {}))]
#: The workers that share their stack with another worker.
SHARING = [label for label in ENVIRONMENTS if "/" in label]


def _on_lambda(label: str) -> bool:
    environment, _, worker = label.partition("/")
    raw = ALL_ENVIRONMENTS[environment]
    return bool((raw["workers"][worker] if worker else raw).get("target") == "lambda")


#: The workers with "target": "lambda" (a function: no execution role, the function role's own rows) and the others.
FUNCTIONS = [label for label in ENVIRONMENTS if _on_lambda(label)]
TASKS = [label for label in ENVIRONMENTS if not _on_lambda(label)]


@pytest.fixture(scope="module")
def bound(tmp_path_factory: pytest.TempPathFactory, repository: dict[str, Synthesized]) -> dict[str, Bindings]:
    """Every worker of every environment (the session's synthesis of cdk.json) and variant (synthesized once, one
    app), resolved to concrete ARNs."""
    variants = synthesize_once(tmp_path_factory, {CONTEXT_KEY: VARIANTS})
    return bind({**repository, **variants})


@pytest.fixture(scope="module")
def evaluated(bound: dict[str, Bindings]) -> Evaluated:
    """Every scenario of every worker, evaluated in one batch."""
    return evaluate_bound(bound, ALL_ENVIRONMENTS)


def check(evaluated: dict, environment: str, category: str) -> None:
    results = evaluated[(environment, category)]
    assert results, f"{environment}: no {category} scenario was evaluated"
    wrong = mismatches([s for s, _ in results], {s: a for s, a in results})
    assert not wrong, f"{len(wrong)} of {len(results)} {category} requests answered wrongly:\n" + "\n".join(wrong)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_cloudwatch_can_page_through_every_alarm_action(evaluated: dict, environment: str) -> None:
    """CloudWatch may publish every alarm's ALARM/OK action and use the topic's key; other accounts' alarms may not."""
    check(evaluated, environment, "paging")


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_task_role_allows_every_call_the_runtime_makes(evaluated: dict, environment: str) -> None:
    """Each call in tests/infra/runtime_calls.json is allowed to the task role over TLS, refused over HTTP."""
    check(evaluated, environment, "runtime")


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_what_must_be_refused_is_refused(evaluated: dict, environment: str) -> None:
    """Anonymous and other-account senders, the task role deleting or reconfiguring queues, other queues and tables."""
    check(evaluated, environment, "refused")


@pytest.mark.parametrize("environment", SHARING)
def test_no_worker_reaches_another_workers_queues_table_secrets_or_logs(evaluated: dict, environment: str) -> None:
    """Every call the runtime makes on its own queues and table is refused on each other worker's, and so are
    the other's DLQ, secrets and log stream."""
    check(evaluated, environment, "other-workers")


@pytest.mark.parametrize("environment", TASKS)
def test_execution_role_pulls_the_image_and_writes_logs_only(evaluated: dict, environment: str) -> None:
    """The execution role pulls the asset image and writes its log stream; nothing broader."""
    check(evaluated, environment, "execution-role")


@pytest.mark.parametrize("environment", FUNCTIONS)
def test_function_role_serves_its_mapping_and_writes_its_logs_only(evaluated: dict, environment: str) -> None:
    """A lambda worker's role lets its event source mapping receive, delete and return messages and its function
    write its own log group; no GetQueueUrl, no task, no image pull, no other queue or log group."""
    check(evaluated, environment, "function-role")


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_only_named_producers_and_the_consumer_send_where_producers_are_named(
    evaluated: dict, environment: str
) -> None:
    """With "producers", the named principals and the task role send to the source, only the task role to the DLQ, and a
    move task sends for whoever started it (a named operator redrives, nobody moves into the DLQ); without, IAM decides."""
    check(evaluated, environment, "senders")


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_sqs_redrive_reaches_each_dlq_from_its_own_source_only(bound: dict[str, Bindings], environment: str) -> None:
    """SQS's move after maxReceiveCount is no principal's request, so no policy row can evaluate it: the source's
    redrive policy names the worker's DLQ, whose redrive allow policy admits that source alone (byQueue), and the
    DLQ's queue policy only denies (no statement of it could admit another sender)."""
    bindings = bound[environment]
    source, dlq = (bindings.resource_of(bindings.resources[name]) for name in ("source", "dlq"))
    assert source.properties["RedrivePolicy"]["deadLetterTargetArn"] == dlq.attributes["Arn"]
    assert dlq.properties["RedriveAllowPolicy"] == {
        "redrivePermission": "byQueue",
        "sourceQueueArns": [source.attributes["Arn"]],
    }
    policy = bindings.resource_policy(dlq.attributes["Arn"])
    assert policy is not None and {s["Effect"] for s in policy["Statement"]} == {"Deny"}


@pytest.mark.parametrize("environment", list(ALL_ENVIRONMENTS))
def test_each_role_is_assumed_by_its_service_for_this_stack_only(evaluated: dict, environment: str) -> None:
    """Every role of the stack: its service with this stack's source assumes it; the same service for another
    account's resource, another service, an admin of this account, another account and anonymous cannot."""
    check(evaluated, environment, "trust")


@pytest.mark.parametrize("environment", list(ALL_ENVIRONMENTS))
def test_every_role_trusts_known_services_only(bound: dict[str, Bindings], environment: str) -> None:
    """No trust policy admits a principal the tier does not evaluate: one Allow of sts:AssumeRole to known services."""
    template = next(b.template for label, b in bound.items() if label.split("/")[0] == environment)
    assert trust_problems(template) == []


def test_secrets_are_bound_where_the_container_declares_them(bound: dict[str, Bindings]) -> None:
    """An SSM parameter and the variant's Secrets Manager secrets are what the secret rows evaluate."""
    assert bound["solo"].secrets == {
        "ssm": [f"arn:aws:ssm:eu-west-1:{FAKE_ACCOUNT}:parameter/sqs-worker/solo/notify-webhook-url"],
        "secretsmanager": [],
    }
    # ECS requests the ValueFrom without its ":<json key>:<stage>:<version>" tail, nothing appended.
    assert bound["senders"].secrets["secretsmanager"] == [
        f"arn:aws:secretsmanager:eu-west-1:{FAKE_ACCOUNT}:secret:team/notify-Ab12Cd",
        f"arn:aws:secretsmanager:eu-west-1:{FAKE_ACCOUNT}:secret:team/partner-Xy34Zw",
    ]
    # Each worker's own, so each execution role's rows name only its secrets and the other's are refused.
    assert bound["teams/notifications"].secrets == {
        "ssm": [f"arn:aws:ssm:eu-west-1:{FAKE_ACCOUNT}:parameter/sqs-worker/teams/notify-webhook-url"],
        "secretsmanager": [],
    }
    assert bound["teams/reports"].secrets == {
        "ssm": [f"arn:aws:ssm:eu-west-1:{FAKE_ACCOUNT}:parameter/sqs-worker/teams/reports-store-url"],
        "secretsmanager": [f"arn:aws:secretsmanager:eu-west-1:{FAKE_ACCOUNT}:secret:team/reports-Ef56Gh"],
    }


def test_runtime_calls_file_names_known_resources_and_says_why_a_call_is_skipped() -> None:
    """Every listed call names a resource the tier can bind; one not made on AWS says why."""
    for call in load_runtime_calls():
        assert call["resource"] in {"source", "dlq", "idempotency-table", "task", "*"}, call
        if call.get("deployed", True) is False:
            assert len(call.get("why", "")) >= 40, f"{call['operation']} is skipped without a reason"


def test_tier_binds_the_resources_the_stack_really_uses(bound: dict[str, Bindings]) -> None:
    """A one-worker stack's bindings name its queues, its cluster's tasks and every alarm action (all to tickets
    where pages go to tickets)."""
    dev, shared = bound["solo"], bound["shared"]
    assert dev.resources["source"] == "arn:aws:sqs:eu-west-1:111122223333:SqsWorker-solo-source"
    assert dev.resources["dlq"] == "arn:aws:sqs:eu-west-1:111122223333:SqsWorker-solo-dlq"
    assert shared.resources["task"] == "arn:aws:ecs:eu-west-1:111122223333:task/platform/" + TASK_ID
    actions = dev.alarm_actions()
    assert len({alarm for alarm, _, _ in actions}) == 6  # five metric alarms with actions and the composite
    assert [topic.split(":")[-1].split("-")[2] for topic in {topic for _, topic, _ in actions}] == [
        "TicketsTopicC7E9F99F"
    ]


def test_tier_binds_each_worker_to_its_own_resources_and_every_alarm_once(bound: dict[str, Bindings]) -> None:
    """Two workers each bind their own queues, table and roles, and together every alarm action of the stack."""
    first, second = bound["teams/notifications"], bound["teams/reports"]
    assert first.resources["source"] == "arn:aws:sqs:eu-west-1:111122223333:SqsWorker-teams-source"
    assert second.resources["source"] == "arn:aws:sqs:eu-west-1:111122223333:SqsWorker-teams-reports-source"
    assert second.resources["dlq"] == "arn:aws:sqs:eu-west-1:111122223333:SqsWorker-teams-reports-dlq"
    for key in ("idempotency-table", "log-stream"):
        assert first.resources[key] != second.resources[key]
    assert first.task_role.name != second.task_role.name
    assert first.execution_role.name != second.execution_role.name
    assert first.siblings == [second] and second.siblings == [first]
    alarms = [{alarm for alarm, _, _ in b.alarm_actions()} for b in (first, second)]
    assert not alarms[0] & alarms[1]
    template = first.template
    with_actions = {
        a.attributes["Arn"]
        for kind in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
        for a in template.of_type(kind)
        if a.properties.get("AlarmActions") or a.properties.get("OKActions")
    }
    assert alarms[0] | alarms[1] == with_actions


def test_task_calls_to_dynamodb_and_s3_go_through_the_gateway_endpoints_of_its_subnets(
    bound: dict[str, Bindings],
) -> None:
    """Behind NAT or without it, the task's subnets route DynamoDB and S3 through the stack's gateway endpoints, and
    the guard's calls are evaluated under their policy (AWS's default, full access); an existing VPC's are unknown."""
    for label in ("solo", "nonat"):
        endpoints = bound[label].endpoints
        assert sorted(endpoints) == ["dynamodb", "s3"], label
        (policy,) = bound[label].endpoint_policies("task-role", "dynamodb:PutItem")
        assert policy == {"name": endpoints["dynamodb"].logical_id, "policy": DEFAULT_ENDPOINT_POLICY}
    assert bound["solo"].endpoint_policies("admin-role/admin", "dynamodb:PutItem") == []  # not from the task
    assert bound["solo"].endpoint_policies("task-role", "sqs:ReceiveMessage") == []  # no SQS gateway endpoint
    assert bound["shared"].endpoints == {}


def test_an_endpoint_policy_leaving_out_the_table_would_fail_the_runtime_s_calls(bound: dict[str, Bindings]) -> None:
    """The tier answers as AWS would under a DynamoDB endpoint policy that admits only another table: every call of
    the idempotency guard is refused, and nothing else the runtime calls changes."""
    solo = bound["solo"]
    template = copy.deepcopy(solo.template)
    endpoint = template.resources[solo.endpoints["dynamodb"].logical_id]
    endpoint.properties["PolicyDocument"] = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "dynamodb:*", "Resource": solo.resources["other-table"]}
        ],
    }
    narrowed = Bindings("solo", template, solo.owned)
    scenarios = narrowed.scenarios("runtime", runtime_rows())

    answers = dict(zip(scenarios, evaluate(scenarios), strict=True))

    guard = {s.action for s in scenarios if s.action.startswith("dynamodb:")}
    assert guard and {s.action for s in scenarios if not s.matches(answers[s])} == guard
