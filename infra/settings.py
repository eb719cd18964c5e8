"""Per-environment settings from ``cdk.json`` (context key ``sqs-worker:environments``).

Every key is checked: an unknown key, a wrong type or a value out of range
fails synth with the setting's full path, the rule and the value, so a typo is
never silently ignored.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from consumer.contract import WorkerContract, check_int
from consumer.declaration import contract_of, load_handler
from consumer.errors import ContractError
from consumer.lambda_target import LambdaTarget
from consumer.limits import DAY, MIN_RETENTION_GAP_SECONDS
from infra.capacity_settings import ZERO_NEEDS_INSIGHTS
from infra.identities import IdentityLock, Record, resolve
from infra.tracing_settings import TracingSettings, check_tracing_variables, parse_tracing
from infra.worker_settings import (
    CONTEXT_KEY,
    DEFAULT_WORKER_NAME,
    LAMBDA,
    POLLER_KEYS,
    WORKER_KEYS,
    SecretSource,
    SettingsError,
    WorkerSettings,
    check_worker_name,
    lambda_target_of,
    parse_worker,
)

#: The contract's minimum DLQ-over-source retention gap, in the unit cdk.json's settings use.
RETENTION_GAP_DAYS = MIN_RETENTION_GAP_SECONDS // DAY
#: Environments that must page someone: a placeholder subscription fails synth, and without a committed
#: subscription the stack takes one at deploy (PAGING_ENDPOINT_PARAMETER).
PAGING_REQUIRED_ENVIRONMENTS = frozenset({"prod"})
#: A host that can never receive a page: the documentation domains example.com/.org/.net and their
#: subdomains, and the reserved top-level domains .example, .test, .invalid and .localhost (RFC 2606,
#: RFC 6761). Where paging is required a subscription to one fails synth; elsewhere it earns a warning.
PLACEHOLDER_HOST = r"(?:[^\s@/?#:]*\.)?(?:example\.(?:com|org|net)|example|test|invalid|localhost)"
#: Where paging is required and cdk.json commits no subscription, the stack takes one at deploy from this parameter.
PAGING_ENDPOINT_PARAMETER = "PagingEndpoint"
#: The hosts PLACEHOLDER_HOST matches, in words: where paging is required, no subscription may be on one.
PLACEHOLDER_DOMAINS = (
    "example.com/.org/.net, their subdomains and the reserved .example, .test, .invalid and .localhost domains"
)
PLACEHOLDER_RULE = (
    f"must reach someone where paging is required (prod, or require_paging): {PLACEHOLDER_DOMAINS} are placeholders"
)
# No ":" in the local part: "mailto:oncall@corp.io" or "HTTPS://x@corp.io" is not an address SNS can mail.
_EMAIL_LOCAL = r"[^@\s:]+"
_EMAIL_DOMAIN = r"[^@\s/]+\.[^@\s/]+"  # no "/": a URL is never read as an address
#: The deploy-time PagingEndpoint parameter's AllowedPattern (a Java regular expression on AWS; this
#: subset, scoped flags included, reads the same in Python): an email address or an https:// URL, neither on a
#: placeholder host. Hosts match in any case, the scheme only in lower case: the stack picks the subscription's
#: protocol by looking for "https://" (CloudFormation has no lower-case function), so "HTTPS://..." would be
#: subscribed as an email address and refused by SNS mid-deploy.
PAGING_ENDPOINT_PATTERN = (
    rf"(?i)^(?:{_EMAIL_LOCAL}@(?!{PLACEHOLDER_HOST}$){_EMAIL_DOMAIN}"
    rf"|(?-i:https://)(?!(?:[^/?#@\s]*@)?{PLACEHOLDER_HOST}(?:[:/?#]|$))\S+)$"
)
#: The PagingEndpoint parameter's ConstraintDescription: what CloudFormation says when a value breaks the pattern.
PAGING_ENDPOINT_RULE = (
    "must be an email address (no ':' before the '@') or an https:// URL (the scheme in lower case),"
    f" not on a placeholder: {PLACEHOLDER_DOMAINS}"
)

# Values CloudWatch Logs accepts for a log group's retention.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
_EMAIL = re.compile(rf"^{_EMAIL_LOCAL}@{_EMAIL_DOMAIN}$")
_ENV_NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
_HTTPS = re.compile(r"^https://\S+$")
# What aws:PrincipalArn holds for a role (also when a session of it calls) or a user: no wildcard, no session.
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html#condition-keys-principalarn
_PRINCIPAL_ARN = re.compile(
    r"^arn:aws(?:-cn|-us-gov)?:iam::[0-9]{12}:(?:role|user)/(?:[A-Za-z0-9_+=,.@-]+/)*[A-Za-z0-9_+=,.@-]+$"
)
PRODUCER_RULE = (
    "must be an IAM role or user ARN, arn:aws:iam::<12-digit account>:role/NAME or :user/NAME (a path is"
    " allowed, a wildcard is not; for an assumed-role session name its role)"
)


@dataclass(frozen=True, kw_only=True)
class ExistingVpc:
    """An existing VPC to run in, described without a lookup so synth stays offline."""

    vpc_id: str
    availability_zones: tuple[str, ...]
    private_subnet_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class EnvironmentSettings:
    """One environment's settings; see the README's "Deploy per environment" for each key."""

    name: str
    #: The environment's workers, identities resolved: the one holding "default" (the stack's unprefixed resources),
    #: if any, first; the others in cdk.json's order (infra/identities.py).
    workers: tuple[WorkerSettings, ...]
    account: str | None = None
    region: str | None = None
    source_retention_days: int = 4
    dlq_retention_days: int = 14
    log_retention_days: int = 30
    retain_queues: bool = True
    require_paging: bool = False
    paging_emails: tuple[str, ...] = ()
    paging_https: tuple[str, ...] = ()
    ticket_emails: tuple[str, ...] = ()
    ticket_https: tuple[str, ...] = ()
    #: Send page-level alarms to the ticket topic too (a low-urgency environment such as dev).
    pages_to_tickets: bool = False
    #: Where alarm descriptions point for their runbook sections (``<runbook_url>#<section>``).
    runbook_url: str = "docs/runbook.md"
    nat_gateways: int = 1
    vpc: ExistingVpc | None = None
    cluster_name: str | None = None
    #: The only principals (besides the consumer's task role) allowed to send to the source; () = IAM decides.
    producers: tuple[str, ...] = ()
    #: Traces in X-Ray through a collector sidecar per task (docs/deploy.md, "Traces in X-Ray"); None: no sidecar.
    tracing: TracingSettings | None = None

    @property
    def stack_name(self) -> str:
        return stack_name_of(self.name)

    @property
    def has_subscription(self) -> bool:
        """cdk.json commits at least one paging subscription."""
        return bool(self.paging_emails or self.paging_https)

    @property
    def paging_from_parameter(self) -> bool:
        """Paging is required and cdk.json commits no subscription: the PagingEndpoint parameter supplies it."""
        return self.require_paging and not self.has_subscription

    @property
    def first_worker(self) -> WorkerSettings:
        """The worker holding the stack's unprefixed resources (the only one in the ``handler`` form), or else the
        first listed."""
        return self.workers[0]

    # The first worker's knobs, as a one-worker environment has always named them.
    @property
    def handler(self) -> str:
        return self.first_worker.handler

    @property
    def min_tasks(self) -> int:
        return self.first_worker.min_tasks

    @property
    def max_tasks(self) -> int:
        return self.first_worker.max_tasks

    @property
    def cpu(self) -> int:
        return self.first_worker.cpu

    @property
    def memory_mib(self) -> int:
        return self.first_worker.memory_mib

    @property
    def handler_environment(self) -> Mapping[str, str]:
        return self.first_worker.handler_environment

    @property
    def secrets(self) -> Mapping[str, SecretSource]:
        """Every worker's secret sources (the report lists their variable names)."""
        return {name: source for worker in self.workers for name, source in worker.secrets.items()}

    def contract(self, worker: WorkerSettings | None = None) -> WorkerContract:
        """``worker``'s (default: the first worker's) declared contract with this environment's retention applied."""
        worker = worker or self.first_worker
        try:
            declared = contract_of(load_handler(worker.handler, parameter=f"{worker.path}.handler"))
        except ContractError as error:
            raise SettingsError(error.parameter, error.rule, error.value) from error
        try:
            return dataclasses.replace(
                declared,
                source_retention_seconds=self.source_retention_days * DAY,
                dlq_retention_seconds=self.dlq_retention_days * DAY,
            )
        except ContractError as error:
            setting = "source_retention_days" if "source" in error.parameter else "dlq_retention_days"
            raise SettingsError(
                self._path(setting), f"is rejected by the worker contract ({error})", getattr(self, setting)
            ) from error

    def lambda_target(self, worker: WorkerSettings) -> LambdaTarget | None:
        """A lambda worker's :class:`LambdaTarget` (None for an ECS worker); what Lambda cannot honour is one
        :class:`SettingsError` naming the setting: the worker's own (``max_tasks``, ``memory_mib``,
        ``provisioned_pollers``), the environment's ``source_retention_days``, or else its ``target``, with the
        handler's declared value the rule is about."""
        if worker.target != LAMBDA:
            return None
        contract = self.contract(worker)
        try:
            return lambda_target_of(worker, contract)
        except ContractError as error:
            if error.parameter in ("max_tasks", "memory_mib"):
                raise SettingsError(f"{worker.path}.{error.parameter}", error.rule, error.value) from error
            if error.parameter == "provisioned_pollers":
                pollers = dict(zip(POLLER_KEYS, worker.provisioned_pollers or (), strict=False))
                raise SettingsError(f"{worker.path}.provisioned_pollers", error.rule, pollers) from error
            if error.parameter == "source_retention_seconds":
                raise SettingsError(
                    self._path("source_retention_days"),
                    f"is too short for lambda worker {worker.name}: {error.parameter} {error.rule}",
                    self.source_retention_days,
                ) from error
            raise SettingsError(
                f"{worker.path}.target",
                f'cannot be "{LAMBDA}" for {worker.handler}: its @worker declaration\'s {error.parameter} {error.rule}',
                error.value,
            ) from error

    def _path(self, key: str) -> str:
        return f"{CONTEXT_KEY}.{self.name}.{key}"


_FIELDS = {f.name for f in dataclasses.fields(EnvironmentSettings)} - {
    "name",
    "paging_emails",
    "paging_https",
    "ticket_emails",
    "ticket_https",
}
_KNOWN_KEYS = sorted(_FIELDS | {"paging", "tickets", *WORKER_KEYS})
#: The most workers one environment supports: every limit it meets is checked by tests/infra/test_workers.py.
#: - CloudFormation: 500 resources per stack; a worker adds 26 (queues and policies 4, table, task and execution
#:   roles and policies 4, task definition, log group, service, security group, scaling target and policy,
#:   11 alarms), the shared VPC (its DynamoDB and S3 gateway endpoints, and the custom resource stripping its default
#:   security group with the CDK's provider for it, function and role, included), cluster, topics, key and dashboard
#:   37: 17 workers make 479, which leaves 21 for producers, subscriptions and grants; 18 would make 505:
#:   https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html
#:   Sources, wake-ups and tracing add more: infra/limits.py counts what a configuration builds and refuses it past 500.
#: - CloudWatch: 100 alarms in one alarm status widget (the dashboard's "any worker paging" view holds each
#:   worker's 6 notifying alarms, in as many widgets as that takes) and 500 widgets per dashboard (13 per worker):
#:   https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_limits.html
#:   https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CloudWatch-Dashboard-Body-Structure.html
#: - A composite alarm's rule is at most 10,240 characters: each worker has its own ConsumerStalled over its own
#:   three inputs and its own DlqExpiring over its own two, so no rule grows with the worker count.
MAX_WORKERS = 17


def _workers(prefix: str, raw: Mapping[str, Any]) -> tuple[WorkerSettings, ...]:
    """The ``workers`` form (``{name: {handler, ...}}``), or the top-level ``handler`` form: one worker."""
    if "workers" not in raw:
        return (parse_worker(DEFAULT_WORKER_NAME, prefix, raw),)
    workers = raw["workers"]
    path = f"{prefix}.workers"
    # A per-worker key beside "workers" would leave unsaid which worker it is for.
    beside = [key for key in WORKER_KEYS if key in raw]
    if beside:
        raise SettingsError(
            f"{prefix}.{beside[0]}",
            f'is a per-worker setting: with "workers" set it goes under each worker (workers.<name>.{beside[0]})',
            raw[beside[0]],
        )
    if not isinstance(workers, Mapping) or not workers:
        raise SettingsError(path, 'must be an object of workers, {"<name>": {"handler": ...}, ...}', workers)
    if len(workers) > MAX_WORKERS:
        raise SettingsError(
            path, f"must list at most {MAX_WORKERS} workers (CloudFormation's and CloudWatch's limits)", len(workers)
        )
    parsed = []
    for name, worker in workers.items():
        check_worker_name(f"{path}.{name}", name)
        if not isinstance(worker, Mapping):
            raise SettingsError(f"{path}.{name}", "must be an object of worker settings", worker)
        unknown = sorted(set(worker) - set(WORKER_KEYS))
        if unknown:
            raise SettingsError(
                f"{path}.{name}.{unknown[0]}",
                f"is not a per-worker setting (known: {', '.join(WORKER_KEYS)})",
                worker[unknown[0]],
            )
        parsed.append(parse_worker(name, f"{path}.{name}", worker))
    return tuple(parsed)


def parse_environment(name: str, raw: object, recorded: Record | None = None) -> EnvironmentSettings:
    """Validate one environment's raw ``cdk.json`` mapping; its workers' identities resolved and checked against
    ``recorded`` (infra/identities.py; None: the environment was never recorded)."""
    prefix = f"{CONTEXT_KEY}.{name}"
    if not _ENV_NAME.match(name):
        raise SettingsError(prefix, "environment names must be lowercase letters, digits and '-', at most 20", name)
    if not isinstance(raw, Mapping):
        raise SettingsError(prefix, "must be an object of settings", raw)
    unknown = sorted(set(raw) - set(_KNOWN_KEYS))
    if unknown:
        raise SettingsError(
            f"{prefix}.{unknown[0]}", f"is not a known setting (known: {', '.join(_KNOWN_KEYS)})", raw[unknown[0]]
        )
    workers = resolve(name, stack_name_of(name), _workers(prefix, raw), recorded)

    def path(key: str) -> str:
        return f"{prefix}.{key}"

    def text(key: str, default: str | None = None) -> str | None:
        value = raw.get(key, default)
        if value is not None and (not isinstance(value, str) or not value):
            raise SettingsError(path(key), "must be a non-empty string", value)
        return value

    def integer(key: str, default: int, low: int, high: int, why: str = "") -> int:
        try:
            return check_int(path(key), raw.get(key, default), low, high, why)
        except ContractError as error:
            raise SettingsError(error.parameter, error.rule, error.value) from None

    def boolean(key: str, default: bool) -> bool:
        value = raw.get(key, default)
        if not isinstance(value, bool):
            raise SettingsError(path(key), "must be true or false", value)
        return value

    def strings(key: str, value: object, pattern: re.Pattern[str] | None, rule: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SettingsError(path(key), "must be a list of strings", value)
        for item in value:
            if pattern is not None and not pattern.match(item):
                raise SettingsError(path(key), rule, item)
        return tuple(value)

    log_retention = raw.get("log_retention_days", 30)
    if isinstance(log_retention, bool) or log_retention not in LOG_RETENTION_DAYS:
        raise SettingsError(
            path("log_retention_days"), f"must be one of CloudWatch's {LOG_RETENTION_DAYS}", log_retention
        )

    require_paging = boolean("require_paging", False) or name in PAGING_REQUIRED_ENVIRONMENTS

    def subscriptions(key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        value = raw.get(key, {})
        if not isinstance(value, Mapping) or set(value) - {"emails", "https"}:
            raise SettingsError(path(key), 'must be an object with "emails" and/or "https" lists', value)
        emails = strings(f"{key}.emails", value.get("emails", []), _EMAIL, "must be an email address")
        https = strings(f"{key}.https", value.get("https", []), _HTTPS, "must be an https:// URL")
        if key == "paging" and require_paging:
            for kind, endpoints in (("emails", emails), ("https", https)):
                for endpoint in endpoints:
                    if is_placeholder(endpoint):
                        raise SettingsError(path(f"{key}.{kind}"), _placeholder_rule(name), endpoint)
        return emails, https

    emails, https = subscriptions("paging")
    ticket_emails, ticket_https = subscriptions("tickets")
    runbook_url = text("runbook_url", "docs/runbook.md") or ""
    if not (runbook_url.startswith("https://") or runbook_url == "docs/runbook.md") or "#" in runbook_url:
        raise SettingsError(
            path("runbook_url"),
            'must be an https:// URL of docs/runbook.md (no "#"), or "docs/runbook.md"',
            runbook_url,
        )

    vpc = _parse_vpc(path("vpc"), raw.get("vpc"))
    cluster_name = text("cluster_name")
    if cluster_name is not None and vpc is None:
        raise SettingsError(path("cluster_name"), "needs an existing vpc too (the cluster lives in it)", cluster_name)
    if cluster_name is not None:
        # What an existing cluster publishes and which capacity providers it has are unknown here.
        for worker in workers:
            if worker.min_tasks == 0:
                raise SettingsError(f"{worker.path}.min_tasks", f"must be at least 1{ZERO_NEEDS_INSIGHTS}", 0)
            if worker.spot is not None:
                raise SettingsError(
                    f"{worker.path}.spot",
                    "needs a cluster the stack creates (leave out cluster_name): an existing cluster's capacity"
                    " providers are unknown, and the stack associates FARGATE_SPOT only with its own",
                    cluster_name,
                )
    producers = strings("producers", raw.get("producers", []), _PRINCIPAL_ARN, PRODUCER_RULE)
    if "producers" in raw and not producers:
        raise SettingsError(
            path("producers"), "must list at least one role or user ARN (leave it out to let IAM alone decide)", []
        )

    source_retention = integer("source_retention_days", 4, 1, 14 - RETENTION_GAP_DAYS)
    dlq_retention = raw.get("dlq_retention_days", 14)
    # The user writes days, so the relation is checked and said in days before the bound, which alone
    # ("between 2 and 14: 1") would hide that the DLQ must outlive the source.
    if type(dlq_retention) is int and dlq_retention < source_retention + RETENTION_GAP_DAYS:
        raise SettingsError(
            path("dlq_retention_days"),
            f"must exceed source_retention_days ({source_retention}) by at least {RETENTION_GAP_DAYS} days,"
            " because a message keeps its original enqueue time in the DLQ, and the DLQ age page (half the gap after"
            " a move) must come at least a day before it can expire",
            dlq_retention,
        )
    dlq_retention = integer("dlq_retention_days", 14, 1 + RETENTION_GAP_DAYS, 14)

    settings = EnvironmentSettings(
        name=name,
        workers=workers,
        account=text("account"),
        region=text("region"),
        source_retention_days=source_retention,
        dlq_retention_days=dlq_retention,
        log_retention_days=log_retention,
        retain_queues=boolean("retain_queues", True),
        require_paging=require_paging,
        paging_emails=emails,
        paging_https=https,
        ticket_emails=ticket_emails,
        ticket_https=ticket_https,
        pages_to_tickets=boolean("pages_to_tickets", False),
        runbook_url=runbook_url,
        nat_gateways=integer("nat_gateways", 1, 0, 3),
        vpc=vpc,
        cluster_name=cluster_name,
        producers=producers,
        tracing=parse_tracing(path("tracing"), raw["tracing"]) if "tracing" in raw else None,
    )
    if settings.require_paging and settings.pages_to_tickets:
        raise SettingsError(
            path("pages_to_tickets"), "must be false where alarms must page someone (prod, or require_paging)", True
        )
    for worker in workers:  # fail here, with the setting's path, if retention and a handler disagree
        for key in ("handler_environment", "secrets"):
            check_tracing_variables(settings.tracing, f"{worker.path}.{key}", getattr(worker, key))
        settings.contract(worker)
        settings.lambda_target(worker)
    return settings


def is_placeholder(endpoint: str) -> bool:
    """True for an email address or https:// URL on a placeholder host: the PagingEndpoint parameter's own rule."""
    return re.fullmatch(PAGING_ENDPOINT_PATTERN, endpoint) is None


def stack_name_of(environment: str) -> str:
    """The stack an environment deploys as (``cdk deploy SqsWorker-prod``)."""
    return f"SqsWorker-{environment}"


def _placeholder_rule(name: str) -> str:
    return (
        f"{PLACEHOLDER_RULE}; leave paging out of cdk.json and give the real address at deploy:"
        f' make deploy ENV={name} CDK_ARGS="--parameters'
        f' {stack_name_of(name)}:{PAGING_ENDPOINT_PARAMETER}=oncall@yourco.com"'
    )


def _parse_vpc(path: str, raw: object) -> ExistingVpc | None:
    if raw is None:
        return None
    keys = {"vpc_id", "availability_zones", "private_subnet_ids"}
    if not isinstance(raw, Mapping) or set(raw) != keys:
        raise SettingsError(path, f"must be an object with exactly {sorted(keys)}", raw)
    if not isinstance(raw["vpc_id"], str) or not raw["vpc_id"].startswith("vpc-"):
        raise SettingsError(f"{path}.vpc_id", 'must be a VPC id ("vpc-...")', raw["vpc_id"])
    zones, subnets = raw["availability_zones"], raw["private_subnet_ids"]
    for key, value in (("availability_zones", zones), ("private_subnet_ids", subnets)):
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise SettingsError(f"{path}.{key}", "must be a non-empty list of strings", value)
    if len(zones) != len(subnets):
        raise SettingsError(
            f"{path}.private_subnet_ids", f"must list one subnet per availability zone ({len(zones)})", subnets
        )
    return ExistingVpc(vpc_id=raw["vpc_id"], availability_zones=tuple(zones), private_subnet_ids=tuple(subnets))


def load_environments(
    context: Mapping[str, Any], selected: str | None = None, lock: IdentityLock | None = None
) -> list[EnvironmentSettings]:
    """All environments from the context, or only ``selected`` (``cdk synth -c env=prod``), each checked against
    ``lock``'s record where one is given (infra/identities.py)."""
    raw = context.get(CONTEXT_KEY)
    if not isinstance(raw, Mapping) or not raw:
        raise SettingsError(CONTEXT_KEY, "must be an object with one entry per environment in cdk.json", raw)
    if selected is not None:
        if selected not in raw:
            raise SettingsError("env", f"must be one of the environments in cdk.json ({', '.join(raw)})", selected)
        return [parse_environment(selected, raw[selected], lock.recorded(selected) if lock else None)]
    return [parse_environment(name, value, lock.recorded(name) if lock else None) for name, value in raw.items()]
