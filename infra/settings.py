"""Per-environment settings from ``cdk.json`` (context key ``sqs-worker:environments``).

Every key is checked: an unknown key, a wrong type or a value out of range
fails synth with the setting's full path, the rule and the value, so a typo is
never silently ignored.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consumer.contract import (
    BINDING_KEYS,
    DAY,
    ContractError,
    WorkerContract,
    check_int,
    contract_of,
    load_handler,
)
from consumer.limits import MIN_RETENTION_GAP_SECONDS

CONTEXT_KEY = "sqs-worker:environments"
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

# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-tasks-services.html#fargate-tasks-size
FARGATE_MEMORY_MIB: dict[int, range] = {
    256: range(512, 2048 + 1, 512),
    512: range(1024, 4096 + 1, 1024),
    1024: range(2048, 8192 + 1, 1024),
    2048: range(4096, 16384 + 1, 1024),
    4096: range(8192, 30720 + 1, 1024),
    8192: range(16384, 61440 + 1, 4096),
    16384: range(32768, 122880 + 1, 8192),
}
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
MAX_TASKS_LIMIT = 100
_EMAIL = re.compile(rf"^{_EMAIL_LOCAL}@{_EMAIL_DOMAIN}$")
_ENV_NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
_ENV_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_HTTPS = re.compile(r"^https://\S+$")
# https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html (naming constraints)
_SSM_PARAMETER = re.compile(r"^/?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+){0,14}$")
# https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html
_SECRET_NAME_CHARACTERS = r"[A-Za-z0-9/_+=.@-]{1,512}"
_SECRET_NAME = re.compile(rf"^{_SECRET_NAME_CHARACTERS}$")
# Secrets Manager ends every secret's ARN with "-" and six random letters or digits, and ECS reads a secret only
# by that complete ARN: given a partial one, it requests the partial ARN, which no grant matches
# (https://github.com/aws/aws-cdk/issues/18555). So a secret is named with its suffix.
_SECRET_FULL_NAME = rf"{_SECRET_NAME_CHARACTERS}-[A-Za-z0-9]{{6}}"
_SECRET_COMPLETE_NAME = re.compile(rf"^{_SECRET_FULL_NAME}$")
_SECRET_COMPLETE_ARN = re.compile(
    r"^arn:aws(?:-[a-z]+)*:secretsmanager:[a-z]{2,}(?:-[a-z]+)+-[0-9]+:[0-9]{12}:secret:"
    rf"(?P<name>{_SECRET_FULL_NAME})$"
)
#: What separates a Secrets Manager secret from a JSON key in "secrets": "#", because an ARN is full of ":" (and
#: ECS's ValueFrom itself adds ":<json key>:<stage>:<version>"), while no secret name or ARN can hold "#".
SECRET_JSON_KEY_SEPARATOR = "#"
_JSON_KEY = re.compile(r"^[^:\s]+$")
# What aws:PrincipalArn holds for a role (also when a session of it calls) or a user: no wildcard, no session.
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html#condition-keys-principalarn
_PRINCIPAL_ARN = re.compile(
    r"^arn:aws(?:-cn|-us-gov)?:iam::[0-9]{12}:(?:role|user)/(?:[A-Za-z0-9_+=,.@-]+/)*[A-Za-z0-9_+=,.@-]+$"
)
PRODUCER_RULE = (
    "must be an IAM role or user ARN, arn:aws:iam::<12-digit account>:role/NAME or :user/NAME (a path is"
    " allowed, a wildcard is not; for an assumed-role session name its role)"
)
SECRET_SOURCE_RULE = (
    'must be "ssm:<parameter name>", "secretsmanager:<secret name>-<6-character suffix>" or'
    ' "secretsmanager:<complete secret ARN>", a secret optionally followed by "#<json key>"'
)
#: How to find what ECS needs: the complete ARN (its last part is the complete name).
_FIND_COMPLETE_ARN = "aws secretsmanager describe-secret --secret-id {name} --query ARN"
#: A handler_environment name containing one of these looks like a secret. handler_environment is plain
#: text in the task definition (anyone with ecs:DescribeTaskDefinition reads it), so such a value must
#: come through ``secrets`` instead. A false positive is renamed or moved to ``secrets``; it never passes.
#: WEBHOOK: a webhook URL usually carries its token (Slack's, the notifications example's NOTIFY_WEBHOOK_URL).
SECRET_NAME_MARKERS = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "TOKEN",
    "CREDENTIAL",
    "PRIVATE_KEY",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "WEBHOOK",
)
SECRET_LIKE_RULE = (
    f"must not hold secrets: a name containing {', '.join(SECRET_NAME_MARKERS)} is refused because these"
    ' values are plain text in the task definition; declare it in "secrets" (ssm:/path or secretsmanager:name-XXXXXX)'
)


class SettingsError(ContractError):
    """A ``cdk.json`` setting breaks a rule (same message shape as :class:`ContractError`)."""


@dataclass(frozen=True, kw_only=True)
class ExistingVpc:
    """An existing VPC to run in, described without a lookup so synth stays offline."""

    vpc_id: str
    availability_zones: tuple[str, ...]
    private_subnet_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class SecretSource:
    """Where one container secret is read at task start (``secrets``): an SSM parameter, or a Secrets Manager
    secret, whole or one key of its JSON value."""

    service: str  # "ssm" or "secretsmanager"
    #: The parameter's name; a secret's complete name, ending in the "-" and six characters of its ARN.
    name: str
    json_key: str | None = None
    #: The secret's complete ARN where the setting gives one; else the secret is in the stack's account and region.
    arn: str | None = None


@dataclass(frozen=True, kw_only=True)
class EnvironmentSettings:
    """One environment's settings; see the README's "Deploy per environment" for each key."""

    name: str
    handler: str
    account: str | None = None
    region: str | None = None
    min_tasks: int = 1
    max_tasks: int = 2
    cpu: int = 256
    memory_mib: int = 512
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
    handler_environment: Mapping[str, str] = field(default_factory=dict)
    #: Container variables read at task start from SSM Parameter Store or Secrets Manager.
    secrets: Mapping[str, SecretSource] = field(default_factory=dict)
    #: The only principals (besides the consumer's task role) allowed to send to the source; () = IAM decides.
    producers: tuple[str, ...] = ()

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

    def contract(self) -> WorkerContract:
        """The handler's declared contract with this environment's retention applied."""
        try:
            declared = contract_of(load_handler(self.handler, parameter=self._path("handler")))
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

    def _path(self, key: str) -> str:
        return f"{CONTEXT_KEY}.{self.name}.{key}"


_FIELDS = {f.name for f in dataclasses.fields(EnvironmentSettings)} - {
    "name",
    "paging_emails",
    "paging_https",
    "ticket_emails",
    "ticket_https",
}
_KNOWN_KEYS = sorted(_FIELDS | {"paging", "tickets"})


def parse_environment(name: str, raw: object) -> EnvironmentSettings:
    """Validate one environment's raw ``cdk.json`` mapping."""
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
    if "handler" not in raw:
        raise SettingsError(f"{prefix}.handler", 'must be set to "package.module:function"', None)

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

    min_tasks = integer(
        "min_tasks",
        1,
        1,
        MAX_TASKS_LIMIT,
        " (backlog-per-task scaling divides by running tasks, so it cannot scale out from zero)",
    )
    max_tasks = integer("max_tasks", max(2, min_tasks), min_tasks, MAX_TASKS_LIMIT, " (from min_tasks)")
    cpu = raw.get("cpu", 256)
    if cpu not in FARGATE_MEMORY_MIB or isinstance(cpu, bool):
        raise SettingsError(path("cpu"), f"must be one of Fargate's CPU sizes {sorted(FARGATE_MEMORY_MIB)}", cpu)
    memory = raw.get("memory_mib", FARGATE_MEMORY_MIB[cpu][0])
    allowed = FARGATE_MEMORY_MIB[cpu]
    if isinstance(memory, bool) or memory not in allowed:
        raise SettingsError(
            path("memory_mib"),
            f"must be {allowed.start}..{allowed.stop - 1} in steps of {allowed.step} for cpu {cpu}",
            memory,
        )
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
    reserved = WorkerContract.env_keys() | BINDING_KEYS
    handler_environment = _variables(path("handler_environment"), raw.get("handler_environment", {}), reserved)
    secret_like = [key for key in handler_environment if any(m in key for m in SECRET_NAME_MARKERS)]
    if secret_like:
        raise SettingsError(path("handler_environment"), SECRET_LIKE_RULE, secret_like[0])
    secrets = _parse_secrets(path("secrets"), raw.get("secrets", {}), reserved, handler_environment)
    producers = strings("producers", raw.get("producers", []), _PRINCIPAL_ARN, PRODUCER_RULE)
    if "producers" in raw and not producers:
        raise SettingsError(
            path("producers"), "must list at least one role or user ARN (leave it out to let IAM alone decide)", []
        )

    source_retention = integer("source_retention_days", 4, 1, 13)
    dlq_retention = raw.get("dlq_retention_days", 14)
    # The user writes days, so the relation is checked and said in days before the bound, which alone
    # ("between 2 and 14: 1") would hide that the DLQ must outlive the source.
    if type(dlq_retention) is int and dlq_retention < source_retention + RETENTION_GAP_DAYS:
        raise SettingsError(
            path("dlq_retention_days"),
            f"must exceed source_retention_days ({source_retention}) by at least {RETENTION_GAP_DAYS} day,"
            " because a message keeps its original enqueue time in the DLQ and would expire there before anyone acts",
            dlq_retention,
        )
    dlq_retention = integer("dlq_retention_days", 14, 2, 14)

    settings = EnvironmentSettings(
        name=name,
        handler=text("handler") or "",
        account=text("account"),
        region=text("region"),
        min_tasks=min_tasks,
        max_tasks=max_tasks,
        cpu=cpu,
        memory_mib=memory,
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
        handler_environment=handler_environment,
        secrets=secrets,
        producers=producers,
    )
    if settings.require_paging and settings.pages_to_tickets:
        raise SettingsError(
            path("pages_to_tickets"), "must be false where alarms must page someone (prod, or require_paging)", True
        )
    settings.contract()  # fail here, with the setting's path, if retention and handler disagree
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


def _variables(path: str, raw: object, reserved: frozenset[str], values: str = "string values") -> dict[str, str]:
    """Container variables: UPPER_CASE names to strings, none of them one the stack writes itself."""
    if not isinstance(raw, Mapping):
        raise SettingsError(path, f"must map UPPER_CASE names to {values}", raw)
    for key, value in raw.items():
        # Only the name is shown: the value may be a secret.
        if not (isinstance(key, str) and _ENV_VAR.match(key)) or not isinstance(value, str):
            raise SettingsError(path, f"must map UPPER_CASE names to {values}", key)
    owned = sorted(set(raw) & reserved)
    if owned:
        raise SettingsError(path, "must not set variables the stack writes itself", ", ".join(owned))
    return dict(raw)


def _parse_secrets(
    path: str, raw: object, reserved: frozenset[str], handler_environment: Mapping[str, str]
) -> dict[str, SecretSource]:
    sources = _variables(path, raw, reserved, values='"ssm:..." or "secretsmanager:..." sources')
    repeated = sorted(set(sources) & set(handler_environment))
    if repeated:
        raise SettingsError(path, "must not repeat a handler_environment name (one source per variable)", repeated[0])
    return {name: _secret_source(f"{path}.{name}", source) for name, source in sources.items()}


def _secret_source(path: str, source: str) -> SecretSource:
    service, _, rest = source.partition(":")
    if service == "ssm":
        if not _SSM_PARAMETER.match(rest):
            raise SettingsError(
                path,
                f"{SECRET_SOURCE_RULE}; a parameter name is letters, digits, _ . - in at most 15 /-separated levels",
                source,
            )
        return SecretSource(service=service, name=rest)
    if service != "secretsmanager":
        raise SettingsError(path, SECRET_SOURCE_RULE, source)
    secret, separator, json_key = rest.partition(SECRET_JSON_KEY_SEPARATOR)
    if separator and not _JSON_KEY.match(json_key):
        raise SettingsError(path, f"{SECRET_SOURCE_RULE}; a JSON key is not empty and has no ':' or spaces", source)
    key = json_key or None
    if secret.startswith("arn:"):
        complete = _SECRET_COMPLETE_ARN.match(secret)
        if complete is None:
            raise SettingsError(
                path,
                f"{SECRET_SOURCE_RULE}; a complete ARN is arn:aws:secretsmanager:<region>:<12-digit account>:secret:"
                "<name>-<6 letters or digits>, as Secrets Manager shows it: " + _FIND_COMPLETE_ARN.format(name="NAME"),
                source,
            )
        return SecretSource(service=service, name=complete["name"], json_key=key, arn=secret)
    if ":" in secret:
        raise SettingsError(path, f"{SECRET_SOURCE_RULE}; a JSON key follows '#', not ':'", source)
    if _SECRET_COMPLETE_NAME.match(secret):
        return SecretSource(service=service, name=secret, json_key=key)
    if _SECRET_NAME.match(secret):
        raise SettingsError(
            path,
            "must name the secret completely, with the '-' and six letters or digits its ARN ends with (ECS reads"
            " a secret only by its complete ARN; a partial one is refused access at task start): find it with "
            + _FIND_COMPLETE_ARN.format(name=secret),
            source,
        )
    raise SettingsError(
        path, f"{SECRET_SOURCE_RULE}; a secret name is 1 to 512 letters, digits and / _ + = . @ -", source
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


def load_environments(context: Mapping[str, Any], selected: str | None = None) -> list[EnvironmentSettings]:
    """All environments from the context, or only ``selected`` (``cdk synth -c env=prod``)."""
    raw = context.get(CONTEXT_KEY)
    if not isinstance(raw, Mapping) or not raw:
        raise SettingsError(CONTEXT_KEY, "must be an object with one entry per environment in cdk.json", raw)
    if selected is not None:
        if selected not in raw:
            raise SettingsError("env", f"must be one of the environments in cdk.json ({', '.join(raw)})", selected)
        return [parse_environment(selected, raw[selected])]
    return [parse_environment(name, value) for name, value in raw.items()]
