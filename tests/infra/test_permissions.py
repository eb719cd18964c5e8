"""The permissions tier: what AWS will allow and refuse, proven offline on the synthesized templates.

moto enforces no IAM, resource or KMS key policy. Here every environment of the repository's cdk.json, whatever a
team made of it (and the contract/settings variants below, which change policies), is synthesized, resolved to concrete ARNs in a fake
account (tests/infra/resolve.py) and evaluated with a real policy evaluator, @cloud-copilot/iam-simulate
(identity, resource and key policies together). The scenarios are the tables below, bound per worker
(``env`` for a one-worker environment, ``env/worker`` where there are several); the task role's rows come
from tests/infra/runtime_calls.json, which the integration tier keeps equal to what the runtime really
calls, and each of them is refused on every other worker's queues and table. Every role of every template is
assumed through its trust policy (who may: its service, for this stack only). The tier's own tools are tested in
tests/infra/test_permission_tools.py.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk import CfnElement, Stack

from infra.settings import CONTEXT_KEY
from infra.worker import Worker
from tests.infra.conftest import EXISTING_VPC_AND_CLUSTER, Synthesized, synthesize_once
from tests.infra.permissions import (
    ALLOWED,
    DEFAULT_ENDPOINT_POLICY,
    DENIED,
    EXPLICITLY_DENIED,
    NO_ACTION,
    OTHER_ACCOUNT,
    SIBLING,
    TASK_ID,
    Bindings,
    Row,
    Scenario,
    evaluate,
    load_runtime_calls,
    mismatches,
    trust_problems,
    trust_scenarios,
)
from tests.infra.resolve import FAKE_ACCOUNT, resolve_template
from tests.reference import REPORT_JOB, repository_environments

CLOUDWATCH = "cloudwatch.amazonaws.com"
#: A producer of this account, one of another account and the operator who redrives, as "producers" names them.
PRODUCER = "orders-api"
PARTNER = "partner"
OPERATOR = "sqs-worker-operator"
PRODUCERS = [
    f"arn:aws:iam::{FAKE_ACCOUNT}:role/{PRODUCER}",
    f"arn:aws:iam::{OTHER_ACCOUNT}:role/{PARTNER}",
    f"arn:aws:iam::{FAKE_ACCOUNT}:role/{OPERATOR}",
]
#: Variants whose policies a cdk.json may not have: one worker with an SSM secret paging to tickets, a FIFO pair, tasks
#: in public subnets (no NAT: the gateway endpoints on the public route tables), a handler idempotent by itself (no
#: table: every DynamoDB call refused), an existing VPC and cluster, named producers with Secrets Manager secrets, and
#: two workers each with secrets of its own, so each execution role is refused the other's. The tests that pin
#: bindings read these, never cdk.json.
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


def worker_labels(environment: str, workers: Mapping[str, Any]) -> list[str]:
    """How the tests name each worker: the environment alone where it has one worker (ids as always)."""
    return [f"{environment}/{name}" for name in workers] if len(workers) > 1 else [environment]


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
#: Deploy-time values of the templates' CloudFormation parameters (a parameter without a default and
#: without a value here fails the resolver, naming it): prod's paging address is given at deploy.
PARAMETERS: dict[str, str] = {"PagingEndpoint": "oncall@yourco.com"}

THIS_ALARM = {"aws:SourceAccount": "{account}", "aws:SourceArn": "{alarm}"}
OTHER_ACCOUNTS_ALARM = {"aws:SourceAccount": OTHER_ACCOUNT, "aws:SourceArn": "{other_account_alarm}"}
OTHER_APPS_ALARM = {"aws:SourceAccount": "{account}", "aws:SourceArn": "{other_app_alarm}"}
#: An alarm of an environment whose name extends this one's (dev-2 for dev): a name prefix would admit it.
SIBLING_ALARM = {"aws:SourceAccount": "{account}", "aws:SourceArn": "{sibling_alarm}"}
PLAIN_HTTP = {"aws:SecureTransport": "false"}

#: CloudWatch delivering every alarm's ALARM and OK notifications ({alarm} -> {topic}, encrypted with {key}),
#: and nobody else's. https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger
PAGING: list[Row] = [
    Row(CLOUDWATCH, "sns:Publish", "{topic}", THIS_ALARM, ALLOWED, "an alarm of this stack notifies its topic"),
    Row(CLOUDWATCH, "kms:GenerateDataKey", "{key}", THIS_ALARM, ALLOWED, "publishing to the encrypted topic"),
    Row(CLOUDWATCH, "kms:Decrypt", "{key}", THIS_ALARM, ALLOWED, "publishing to the encrypted topic"),
    Row(CLOUDWATCH, "sns:Publish", "{topic}", OTHER_ACCOUNTS_ALARM, DENIED, "confused deputy: another account"),
    Row(CLOUDWATCH, "kms:GenerateDataKey", "{key}", OTHER_ACCOUNTS_ALARM, DENIED, "confused deputy: another account"),
    Row(CLOUDWATCH, "sns:Publish", "{topic}", OTHER_APPS_ALARM, DENIED, "an alarm that is not this stack's"),
    Row(CLOUDWATCH, "kms:Decrypt", "{key}", OTHER_APPS_ALARM, DENIED, "an alarm that is not this stack's"),
    Row(CLOUDWATCH, "sns:Publish", "{topic}", SIBLING_ALARM, DENIED, "a sibling environment's alarm"),
    Row(CLOUDWATCH, "kms:GenerateDataKey", "{key}", SIBLING_ALARM, DENIED, "a sibling environment's alarm"),
    Row(CLOUDWATCH, "sns:Publish", "{topic}", {**THIS_ALARM, **PLAIN_HTTP}, EXPLICITLY_DENIED, "TLS enforced"),
    Row("anonymous", "sns:Publish", "{any_topic}", {}, DENIED, "nobody unsigned pages"),
    Row("other-account", "sns:Publish", "{any_topic}", {}, DENIED, "another account cannot page"),
]

#: What must be refused whatever the task does. Resources: tests/infra/permissions.py Bindings.resources.
REFUSED: list[Row] = [
    Row("anonymous", "sqs:SendMessage", "source", {}, DENIED, "nobody unsigned sends work"),
    Row("anonymous", "sqs:SendMessage", "dlq", {}, DENIED, "nobody unsigned writes the DLQ"),
    Row("anonymous", "sqs:ReceiveMessage", "source", {}, DENIED, "nobody unsigned reads work"),
    Row("other-account", "sqs:SendMessage", "source", {}, DENIED, "another account, even with sqs:* of its own"),
    Row("other-account", "sqs:SendMessage", "dlq", {}, DENIED, "another account, even with sqs:* of its own"),
    Row("other-account", "sqs:ReceiveMessage", "source", {}, DENIED, "another account reads nothing"),
    Row("other-account", "sqs:ReceiveMessage", "dlq", {}, DENIED, "another account reads nothing"),
    *[
        Row("task-role", action, queue, {}, DENIED, "the consumer never deletes, purges or reconfigures a queue")
        for queue in ("source", "dlq")
        for action in (
            "sqs:DeleteQueue",
            "sqs:PurgeQueue",
            "sqs:SetQueueAttributes",
            "sqs:AddPermission",
            "sqs:RemovePermission",
            "sqs:TagQueue",
        )
    ],
    Row("task-role", "sqs:ReceiveMessage", "dlq", {}, DENIED, "the DLQ is the operator's to read"),
    Row("task-role", "sqs:DeleteMessage", "dlq", {}, DENIED, "the DLQ is the operator's to empty"),
    Row("task-role", "sqs:StartMessageMoveTask", "dlq", {}, DENIED, "redrive is the operator's"),
    Row("task-role", "sqs:ReceiveMessage", "other-queue", {}, DENIED, "no other queue"),
    Row("task-role", "sqs:SendMessage", "other-queue", {}, DENIED, "no other queue"),
    Row("task-role", "sqs:SendMessage", "other-account-queue", {}, DENIED, "no other account's queue"),
    Row("task-role", "dynamodb:GetItem", "other-table", {}, DENIED, "no other table"),
    Row("task-role", "dynamodb:PutItem", "other-table", {}, DENIED, "no other table"),
    Row("task-role", "dynamodb:DeleteTable", "idempotency-table", {}, DENIED, "the table is the stack's"),
    Row("task-role", "dynamodb:UpdateTable", "idempotency-table", {}, DENIED, "the table is the stack's"),
    Row("task-role", "dynamodb:Scan", "idempotency-table", {}, DENIED, "the guard reads one key at a time"),
    Row("task-role", "ecs:UpdateTaskProtection", "other-task", {}, DENIED, "only this cluster's tasks"),
]

#: The execution role: ECS pulls the image and writes the log stream with it; nothing else.
EXECUTION_ROLE: list[Row] = [
    Row("execution-role", "ecr:GetAuthorizationToken", "*", {}, ALLOWED, "ECR login (no resource-level scope)"),
    Row("execution-role", "ecr:BatchGetImage", "asset-repository", {}, ALLOWED, "pulling the image asset"),
    Row("execution-role", "ecr:GetDownloadUrlForLayer", "asset-repository", {}, ALLOWED, "pulling the image asset"),
    Row("execution-role", "ecr:BatchCheckLayerAvailability", "asset-repository", {}, ALLOWED, "pulling the image"),
    Row("execution-role", "logs:CreateLogStream", "log-stream", {}, ALLOWED, "the awslogs driver"),
    Row("execution-role", "logs:PutLogEvents", "log-stream", {}, ALLOWED, "the awslogs driver"),
    Row("execution-role", "ecr:PutImage", "asset-repository", {}, DENIED, "pull only, never push"),
    Row("execution-role", "ecr:BatchGetImage", "other-repository", {}, DENIED, "only the asset repository"),
    Row("execution-role", "logs:PutLogEvents", "other-log-stream", {}, DENIED, "only its own log group"),
    Row("execution-role", "ssm:GetParameters", "{ssm_parameter}", {}, ALLOWED, "ECS reads the declared secret"),
    Row("execution-role", "secretsmanager:GetSecretValue", "{secretsmanager_secret}", {}, ALLOWED, "a declared secret"),
    Row("task-role", "ssm:GetParameters", "{ssm_parameter}", {}, DENIED, "secrets reach the task as variables only"),
    Row("task-role", "secretsmanager:GetSecretValue", "{secretsmanager_secret}", {}, DENIED, "as variables only"),
    Row("execution-role", "secretsmanager:GetSecretValue", "any-secret", {}, DENIED, "no secret it was not given"),
    Row("execution-role", "ssm:GetParameters", "any-parameter", {}, DENIED, "no parameter it was not given"),
    Row("execution-role", "kms:Decrypt", "other-key", {}, DENIED, "no key it was not given"),
    Row("execution-role", "sqs:ReceiveMessage", "source", {}, DENIED, "the task role consumes, not this one"),
    Row("execution-role", "dynamodb:GetItem", "idempotency-table", {}, DENIED, "the task role's table"),
]


def runtime_rows() -> list[Row]:
    """The task role making every call the runtime makes (over TLS), and each queue call refused over HTTP."""
    rows = []
    for call in load_runtime_calls():
        if call["action"] == NO_ACTION or call.get("deployed", True) is False:
            continue
        why = f"the runtime calls {call['operation']}"
        rows.append(Row("task-role", call["action"], call["resource"], {}, ALLOWED, why))
        if call["resource"] in ("source", "dlq"):
            rows.append(Row("task-role", call["action"], call["resource"], PLAIN_HTTP, EXPLICITLY_DENIED, "TLS only"))
    return rows


#: A message move task (``dlq redrive``'s native path) calls SQS for whoever started it, through SQS:
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html
MOVE_TASK = {
    "aws:CalledViaFirst": "sqs.amazonaws.com",
    "aws:CalledViaLast": "sqs.amazonaws.com",
    "aws:ViaAWSService": "true",
}
#: Where "producers" is set: the named producers (of any account) send, the consumer requeues, nobody else sends,
#: not even an admin of this account; the DLQ takes messages from the consumer alone, so nothing planted there
#: reaches the source through a named operator's redrive. Elsewhere IAM alone decides who of this account sends.
#: SQS's own move after maxReceiveCount is no principal's request: the redrive allow policy governs it
#: (test_sqs_redrive_reaches_each_dlq_from_its_own_source_only).
SENDERS: list[Row] = [
    Row(f"role/{PRODUCER}", "sqs:SendMessage", "source", {}, ALLOWED, "a named producer of this account"),
    Row(f"other-account/{PARTNER}", "sqs:SendMessage", "source", {}, ALLOWED, "a named producer of another account"),
    Row("task-role", "sqs:SendMessage", "source", {}, ALLOWED, "the consumer requeues hand-backs"),
    Row("admin-role/admin", "sqs:SendMessage", "source", {}, EXPLICITLY_DENIED, "not named, even with sqs:*"),
    Row(f"role/{PRODUCER}", "sqs:ReceiveMessage", "source", {}, DENIED, "a producer only sends"),
    Row(f"role/{PRODUCER}", "sqs:SendMessage", "source", PLAIN_HTTP, EXPLICITLY_DENIED, "TLS only"),
    Row("task-role", "sqs:SendMessage", "dlq", {}, ALLOWED, "the consumer moves failed messages with their reason"),
    Row("admin-role/admin", "sqs:SendMessage", "dlq", {}, EXPLICITLY_DENIED, "nobody plants a message to redrive"),
    Row(f"role/{PRODUCER}", "sqs:SendMessage", "dlq", {}, EXPLICITLY_DENIED, "a producer sends to the source only"),
    Row(f"other-account/{PARTNER}", "sqs:SendMessage", "dlq", {}, EXPLICITLY_DENIED, "a producer, to the source only"),
    Row(f"admin-role/{OPERATOR}", "sqs:SendMessage", "dlq", {}, EXPLICITLY_DENIED, "dlq import --to dlq: refused"),
    Row(f"admin-role/{OPERATOR}", "sqs:StartMessageMoveTask", "dlq", {}, ALLOWED, "a named operator redrives"),
    Row(f"admin-role/{OPERATOR}", "sqs:ReceiveMessage", "dlq", MOVE_TASK, ALLOWED, "the move task reads the DLQ"),
    Row(f"admin-role/{OPERATOR}", "sqs:DeleteMessage", "dlq", MOVE_TASK, ALLOWED, "the move task empties the DLQ"),
    Row(f"admin-role/{OPERATOR}", "sqs:SendMessage", "source", MOVE_TASK, ALLOWED, "the move task delivers"),
    Row("admin-role/admin", "sqs:SendMessage", "source", MOVE_TASK, EXPLICITLY_DENIED, "redrive by one not named"),
    Row("admin-role/admin", "sqs:SendMessage", "dlq", MOVE_TASK, EXPLICITLY_DENIED, "a move task into the DLQ"),
]
#: The same admin where no producers are named: same-account IAM decides (documented default), for both queues.
SENDERS_UNRESTRICTED: list[Row] = [
    Row("admin-role/admin", "sqs:SendMessage", "source", {}, ALLOWED, "no producers named: IAM decides"),
    Row("admin-role/admin", "sqs:SendMessage", "dlq", {}, ALLOWED, "no producers named: IAM decides"),
    Row("admin-role/admin", "sqs:SendMessage", "source", MOVE_TASK, ALLOWED, "no producers named: IAM decides"),
]


def sender_rows(producers: list[str]) -> list[Row]:
    """Who may send to the source of an environment naming ``producers`` (cdk.json's setting, any list)."""
    if not producers:
        return SENDERS_UNRESTRICTED
    if producers == PRODUCERS:
        return SENDERS
    named = [Row(arn, "sqs:SendMessage", "source", {}, ALLOWED, "a producer cdk.json names") for arn in producers]
    to_dlq = [
        Row(arn, "sqs:SendMessage", "dlq", {}, EXPLICITLY_DENIED, "a producer, to the source only") for arn in producers
    ]
    # The rows that name no producer of the variant's own: the consumer's sends, and an admin's, plain or by redrive.
    anyone = [row for row in SENDERS if row.principal in ("task-role", "admin-role/admin")]
    return [*named, *to_dlq, *anyone]


def other_worker_rows() -> list[Row]:
    """Each worker's roles on every other worker of its stack: the runtime's calls on the other's queues and
    table, its DLQ read, its secrets and its log stream, all refused (a grant leaking across workers fails)."""
    calls = {(c["action"], c["resource"]) for c in load_runtime_calls() if c["action"] != NO_ACTION}
    calls.add(("sqs:ReceiveMessage", "dlq"))  # the other worker's failed messages are its operator's
    rows = [
        Row("task-role", action, SIBLING + resource, {}, DENIED, f"another worker's {resource}")
        for action, resource in sorted(calls)
        if resource in ("source", "dlq", "idempotency-table")
    ]
    return [
        *rows,
        Row("execution-role", "ssm:GetParameters", SIBLING + "{ssm_parameter}", {}, DENIED, "another worker's secret"),
        Row(
            "execution-role",
            "secretsmanager:GetSecretValue",
            SIBLING + "{secretsmanager_secret}",
            {},
            DENIED,
            "another worker's secret",
        ),
        Row("task-role", "ssm:GetParameters", SIBLING + "{ssm_parameter}", {}, DENIED, "another worker's secret"),
        Row("execution-role", "logs:PutLogEvents", SIBLING + "log-stream", {}, DENIED, "another worker's log group"),
    ]


CATEGORIES = {"paging": PAGING, "refused": REFUSED, "execution-role": EXECUTION_ROLE}


def owned_logical_ids(worker: Worker) -> set[str]:
    """The logical ids of every CloudFormation resource under ``worker``'s construct."""
    stack = Stack.of(worker)
    return {stack.get_logical_id(c) for c in worker.node.find_all() if isinstance(c, CfnElement)}


def bind(synthesized: Mapping[str, Synthesized]) -> dict[str, Bindings]:
    """Every worker of every synthesized environment, resolved to concrete ARNs and bound, labelled as
    :func:`worker_labels` names them."""
    bound: dict[str, Bindings] = {}
    for name, env in synthesized.items():
        template = resolve_template(env.json, stack_name=env.stack.stack_name, parameters=PARAMETERS)
        labels = worker_labels(name, env.stack.workers)
        workers = {
            label: Bindings(label, template, owned_logical_ids(worker))
            for label, worker in zip(labels, env.stack.workers.values(), strict=True)
        }
        for bindings in workers.values():
            bindings.siblings = [other for other in workers.values() if other is not bindings]
        bound.update(workers)
    return bound


Evaluated = dict[tuple[str, str], list[tuple[Scenario, str | None]]]


def evaluate_bound(bound: Mapping[str, Bindings], environments: Mapping[str, Any]) -> Evaluated:
    """Every scenario of every bound worker, evaluated in one batch, grouped by (worker label, category);
    ``environments`` are the raw settings the stacks came from (who may send follows their producers)."""
    scenarios: list[Scenario] = []
    templates = {}
    for bindings in bound.values():
        environment = bindings.environment.split("/")[0]
        templates[environment] = bindings.template
        senders = sender_rows(environments[environment].get("producers", []))
        categories = {**CATEGORIES, "runtime": runtime_rows(), "senders": senders, "other-workers": other_worker_rows()}
        for category, rows in categories.items():
            scenarios += bindings.scenarios(category, rows)
    for environment, template in templates.items():  # roles per stack: the flow log role is no worker's
        scenarios += trust_scenarios(environment, "trust", template)
    answers = evaluate(scenarios)
    grouped: Evaluated = {}
    for scenario, answer in zip(scenarios, answers, strict=True):
        grouped.setdefault((scenario.environment, scenario.category), []).append((scenario, answer))
    return grouped


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


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_execution_role_pulls_the_image_and_writes_logs_only(evaluated: dict, environment: str) -> None:
    """The execution role pulls the asset image and writes its log stream; nothing broader."""
    check(evaluated, environment, "execution-role")


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
