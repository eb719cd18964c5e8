"""The permissions tier's tables and how they are bound: the requests each role must be allowed or refused (paging,
what must be refused, the execution role, the runtime's calls from tests/infra/runtime_calls.json, the senders,
other workers' resources), every worker of a synthesized environment bound to concrete ARNs, and every scenario of
the bound workers evaluated in one batch. tests/infra/test_permissions.py asserts the answers; the variants' and
the team edits' tiers (tests/infra/test_permissions_*.py, tests/edits) bind and evaluate with the same tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import CfnElement, Stack

from infra.function import MAPPING_SOURCE_ACTIONS
from infra.worker import Worker
from tests.infra.conftest import Synthesized
from tests.infra.permissions import (
    ALLOWED,
    DENIED,
    EXPLICITLY_DENIED,
    NO_ACTION,
    OTHER_ACCOUNT,
    SIBLING,
    Bindings,
    Row,
    Scenario,
    evaluate,
    load_runtime_calls,
    trust_scenarios,
)
from tests.infra.resolve import FAKE_ACCOUNT, resolve_template

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


def worker_labels(environment: str, workers: Mapping[str, Any]) -> list[str]:
    """How the tests name each worker: the environment alone where it has one worker (ids as always)."""
    return [f"{environment}/{name}" for name in workers] if len(workers) > 1 else [environment]


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


#: A lambda worker's role (the rows' ``task-role``): its event source mapping's calls on the source
#: (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html) and its own log group's streams, and
#: nothing the CDK's SqsEventSource grant would add (GetQueueUrl), a managed policy would give, or a task needs.
FUNCTION_ROLE: list[Row] = [
    *[
        Row("task-role", action, "source", {}, ALLOWED, "the event source mapping receives, deletes and returns")
        for action in MAPPING_SOURCE_ACTIONS
    ],
    Row("task-role", "logs:CreateLogStream", "log-stream", {}, ALLOWED, "Lambda opens an environment's stream"),
    Row("task-role", "logs:PutLogEvents", "log-stream", {}, ALLOWED, "the function's logs and EMF metrics"),
    Row("task-role", "logs:PutLogEvents", "other-log-stream", {}, DENIED, "only its own log group"),
    Row("task-role", "logs:CreateLogStream", "other-log-stream", {}, DENIED, "only its own log group"),
    Row("task-role", "sqs:GetQueueUrl", "source", {}, DENIED, "the mapping is given the queue's ARN"),
    Row("task-role", "ecs:UpdateTaskProtection", "task", {}, DENIED, "a function has no task"),
    Row("task-role", "ecr:BatchGetImage", "asset-repository", {}, DENIED, "Lambda pulls the image, not the function"),
    Row("task-role", "sqs:SendMessage", "other-queue", {}, DENIED, "no other queue"),
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
        if bindings.function is not None:  # no execution role: the function role's own rows instead
            del categories["execution-role"]
            categories["function-role"] = FUNCTION_ROLE
        for category, rows in categories.items():
            scenarios += bindings.scenarios(category, rows)
    for environment, template in templates.items():  # roles per stack: the flow log role is no worker's
        scenarios += trust_scenarios(environment, "trust", template)
    answers = evaluate(scenarios)
    grouped: Evaluated = {}
    for scenario, answer in zip(scenarios, answers, strict=True):
        grouped.setdefault((scenario.environment, scenario.category), []).append((scenario, answer))
    return grouped
