"""One worker's settings in ``cdk.json``: its handler, target, tasks, size, variables and secrets.

An environment lists them either at its top level (one worker, today's form) or under ``workers``
(``{name: {...}}``, several); both forms go through :func:`parse_worker`, so a rule and its error read the
same in both, with the setting's full path.

A worker runs where its ``target`` says: ``"ecs"`` (the default: a Fargate service, infra/service.py) or
``"lambda"`` (a function behind an SQS event source mapping, infra/function.py, its settings derived by
:class:`consumer.lambda_target.LambdaTarget`). On a lambda worker ``memory_mib`` is the function's memory (Lambda's
128..10,240 MiB), ``max_tasks`` the ECS fleet whose concurrent handler calls the mapping keeps to (its
MaximumConcurrency) and ``architecture`` the function's; a setting with no meaning there (:data:`ECS_ONLY_KEYS`:
``min_tasks``, ``cpu``, ``spot``) or no safe form (``secrets``) is refused in one line when the worker declares it,
never dropped. ``provisioned_pollers`` is a lambda worker's only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from consumer.contract import BINDING_KEYS, QUEUE_ARN_ENV, WorkerContract, check_int
from consumer.declaration import load_handler, max_rate_of
from consumer.errors import ContractError
from consumer.lambda_target import LAMBDA_MAX_MEMORY_MIB, LAMBDA_MIN_MEMORY_MIB, LambdaTarget
from consumer.sources import EVENTBRIDGE_EVENTS_ENV, SNS_ENVELOPE_TOPICS_ENV
from infra.capacity_settings import DEFAULT_ARCHITECTURE, CapacityError, SpotSettings, check_architecture, parse_spot
from infra.source_settings import Source, SourceError, parse_sources

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
MAX_TASKS_LIMIT = 100
#: Fargate CPU units in one vCPU (1024 units = 1 vCPU:
#: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task_definition_parameters.html#task_size): as much as
#: one consumer process keeps busy with Python code (docs/configuration.md, "More than one core"; measured in
#: docs/evidence/BENCHMARKS.md, the CPU-bound cell). Fargate bills per vCPU and per GB
#: (https://aws.amazon.com/fargate/pricing/), so two tasks of 1 vCPU cost what one of 2 vCPU does.
ONE_PROCESS_CPU_UNITS = 1024


def beyond_one_process(cpu: int) -> str | None:
    """What a task of ``cpu`` units gives that its one consumer process cannot use, in one sentence; None when one
    process can use all of it."""
    if cpu <= ONE_PROCESS_CPU_UNITS:
        return None
    return (
        f"cpu {cpu} is {cpu / ONE_PROCESS_CPU_UNITS:g} vCPU, but the task runs one consumer process, and Python runs"
        f" its code on one core at a time: a handler busy in Python code uses {ONE_PROCESS_CPU_UNITS} of it. Declare"
        f" cpu {ONE_PROCESS_CPU_UNITS} and raise max_tasks instead (Fargate bills vCPU and memory linearly: two tasks"
        " of 1 vCPU cost what one of 2 vCPU does); keep it only for a handler that spends its time outside the"
        " interpreter (native code that releases it, such as NumPy)"
    )


def check_task_size(
    cpu: object, memory: object, cpu_parameter: str = "cpu", memory_parameter: str = "memory_mib"
) -> tuple[int, int]:
    """``(cpu, memory)`` if Fargate runs a task of that size (memory None: the smallest for ``cpu``); else a
    :class:`SettingsError` naming the parameter, Fargate's rule and the value."""
    if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu not in FARGATE_MEMORY_MIB:
        raise SettingsError(cpu_parameter, f"must be one of Fargate's CPU sizes {sorted(FARGATE_MEMORY_MIB)}", cpu)
    allowed = FARGATE_MEMORY_MIB[cpu]
    memory = allowed[0] if memory is None else memory
    if not isinstance(memory, int) or isinstance(memory, bool) or memory not in allowed:
        raise SettingsError(
            memory_parameter,
            f"must be {allowed.start}..{allowed.stop - 1} in steps of {allowed.step} for cpu {cpu}",
            memory,
        )
    return cpu, memory


_ENV_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")
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

#: Where cdk.json's context holds the environments.
CONTEXT_KEY = "sqs-worker:environments"
#: ``target``'s values: an ECS service on Fargate (the default), or a Lambda function fed by an SQS event source mapping.
ECS, LAMBDA = "ecs", "lambda"
TARGETS = (ECS, LAMBDA)
TARGET_RULE = f'must be "{ECS}" (a Fargate service) or "{LAMBDA}" (a function behind an SQS event source mapping)'
#: The per-worker settings with no meaning on Lambda, each with why: declared on a lambda worker, refused.
ECS_ONLY_KEYS = {
    "min_tasks": "Lambda starts and stops execution environments itself, from none when the queue is empty",
    "cpu": "Lambda gives a function CPU in proportion to its memory_mib",
    "spot": "Fargate Spot is an ECS capacity provider",
}
#: Why ``secrets`` is refused on a lambda worker: ECS reads a secret into the container at task start, where only the
#: execution role sees it; Lambda has no such injection (a variable's value is stored in the function's configuration,
#: shown to anyone allowed lambda:GetFunctionConfiguration), and the runtime reads no secret store itself.
#: https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html
LAMBDA_SECRETS_RULE = (
    "must be left out on a lambda worker: Lambda cannot read a secret into a variable as ECS does (a function's"
    " variables are plain in its configuration, shown by lambda:GetFunctionConfiguration); read it from SSM or"
    ' Secrets Manager in the handler, or keep the worker on "target": "ecs"'
)
#: Variable names Lambda sets itself and refuses in a function's configuration (and any AWS_LAMBDA_ one); its API
#: also takes only names that start with a letter (Environment, Key Pattern ``[a-zA-Z]([a-zA-Z0-9_])+``).
#: https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars-runtime.html
#: https://docs.aws.amazon.com/lambda/latest/api/API_Environment.html
LAMBDA_RESERVED_VARIABLES = frozenset(
    {
        "_HANDLER",
        "_X_AMZN_TRACE_ID",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_EXECUTION_ENV",
        "AWS_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "LAMBDA_TASK_ROOT",
        "LAMBDA_RUNTIME_DIR",
        "TZ",
    }
)
LAMBDA_RESERVED_PREFIX = "AWS_LAMBDA_"
POLLER_KEYS = ("minimum", "maximum")
#: The per-worker keys: at an environment's top level (one worker) or under ``workers.<name>``.
WORKER_KEYS = (
    "handler",
    "target",
    "min_tasks",
    "max_tasks",
    "cpu",
    "memory_mib",
    "architecture",
    "spot",
    "handler_environment",
    "secrets",
    "sources",
    "identity",
    "provisioned_pollers",
)
#: The variables the stack writes for a worker's sources (consumer/sources.py): never a handler_environment name.
SOURCE_ENV_KEYS = frozenset({SNS_ENVELOPE_TOPICS_ENV, EVENTBRIDGE_EVENTS_ENV})
#: The name of the one worker an environment declares with a top-level ``handler``.
DEFAULT_WORKER_NAME = "default"
#: At most 20 characters, lowercase words of letters and digits joined by single "-", each word starting with a
#: letter: it fits a queue name (``SqsWorker-<env>-<worker>-source.fifo`` within SQS's 80 characters for a 20-character
#: environment name), and the PascalCase output prefix (``order-emails`` -> ``OrderEmails``) is then one per name.
WORKER_NAME_MAX_CHARS = 20
_WORKER_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*$")
WORKER_NAME_RULE = (
    f"must be at most {WORKER_NAME_MAX_CHARS} characters: lowercase words of letters and digits joined by single"
    " '-', each word starting with a letter"
).format(WORKER_NAME_MAX_CHARS=WORKER_NAME_MAX_CHARS)


class SettingsError(ContractError):
    """A ``cdk.json`` setting breaks a rule (same message shape as :class:`ContractError`)."""


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
class WorkerSettings:
    """One worker's settings: the handler it runs and the knobs of its own fleet.

    What :class:`infra.worker.Worker` takes as ``settings``: :func:`parse_worker` builds it from cdk.json, validated
    with each setting's path; a team's own app builds it by hand, and the construct checks it again (docs/construct.md
    lists the defaults). ``identity`` and ``path`` are cdk.json's only: the stack picks the construct id by the one
    and names errors by the other.
    """

    name: str
    handler: str
    #: Where it runs: :data:`ECS` (a Fargate service) or :data:`LAMBDA` (a function behind an event source mapping).
    target: str = ECS
    min_tasks: int = 1
    max_tasks: int = 2
    cpu: int = 256
    memory_mib: int = 512
    #: "x86_64" or "arm64" (Graviton): the task's CPU architecture and the image's platform.
    architecture: str = DEFAULT_ARCHITECTURE
    #: The tasks beyond an on-demand base on Fargate Spot (infra/capacity_settings.py); None: all on-demand.
    spot: SpotSettings | None = None
    handler_environment: Mapping[str, str] = field(default_factory=dict)
    #: Container variables read at task start from SSM Parameter Store or Secrets Manager.
    secrets: Mapping[str, SecretSource] = field(default_factory=dict)
    #: The SNS topics and EventBridge rules that feed its queue (infra/source_settings.py); () = none.
    sources: tuple[Source, ...] = ()
    #: Whose resources it holds (infra/identities.py): "default" for the stack's unprefixed ones, or a worker's name;
    #: None until resolved where cdk.json does not declare it.
    identity: str | None = None
    #: A lambda worker's ``(minimum, maximum)`` provisioned event pollers; None: on-demand polling, its concurrency
    #: kept to MaximumConcurrency.
    provisioned_pollers: tuple[int, int] | None = None
    #: Where these keys live in cdk.json (``...<env>`` or ``...<env>.workers.<name>``), for errors.
    path: str = ""


#: A name ending so would give its stack outputs another's names: worker ``dead-letter``'s ``DeadLetterQueueUrl`` is
#: the unprefixed worker's DLQ output, ``x-dead-letter``'s ``XDeadLetterQueueUrl`` worker ``x``'s.
OUTPUT_CLASHING_ENDING = "dead-letter"


def check_worker_name(path: str, name: object) -> str:
    """``name`` if it follows :data:`WORKER_NAME_RULE`, else a :class:`SettingsError` naming ``path``."""
    if not isinstance(name, str) or len(name) > WORKER_NAME_MAX_CHARS or not _WORKER_NAME.match(name):
        raise SettingsError(path, WORKER_NAME_RULE, name)
    if name == OUTPUT_CLASHING_ENDING or name.endswith(f"-{OUTPUT_CLASHING_ENDING}"):
        raise SettingsError(
            path,
            f'must not end in "{OUTPUT_CLASHING_ENDING}": its stack outputs (<Name>QueueUrl, ...) would take the'
            " names of another worker's DLQ outputs (<Name>DeadLetterQueueUrl)",
            name,
        )
    return name


def parse_worker(name: str, prefix: str, raw: Mapping[str, object]) -> WorkerSettings:
    """Validate the per-worker keys (:data:`WORKER_KEYS`) of ``raw``, whose settings live at ``prefix``."""

    def path(key: str) -> str:
        return f"{prefix}.{key}"

    def integer(key: str, default: int, low: int, high: int, why: str = "") -> int:
        try:
            return check_int(path(key), raw.get(key, default), low, high, why)
        except ContractError as error:
            raise SettingsError(error.parameter, error.rule, error.value) from None

    handler = raw.get("handler")
    if handler is None:
        raise SettingsError(path("handler"), 'must be set to "package.module:function"', None)
    if not isinstance(handler, str) or not handler:
        raise SettingsError(path("handler"), "must be a non-empty string", handler)
    target = raw.get("target", ECS)
    if target not in TARGETS:
        raise SettingsError(path("target"), TARGET_RULE, target)
    on_lambda = target == LAMBDA
    if on_lambda:
        declared = [key for key in ECS_ONLY_KEYS if key in raw]
        if declared:
            key = declared[0]
            raise SettingsError(
                path(key), f"is an ECS setting, refused on a lambda worker: {ECS_ONLY_KEYS[key]}", raw[key]
            )
        secrets = raw.get("secrets")
        if secrets:  # only the names: a source may say more than its owner wants printed
            raise SettingsError(
                path("secrets"), LAMBDA_SECRETS_RULE, sorted(secrets) if isinstance(secrets, Mapping) else secrets
            )
    elif "provisioned_pollers" in raw:
        raise SettingsError(
            path("provisioned_pollers"),
            f'is a lambda worker\'s setting (its event source mapping\'s pollers): needs "target": "{LAMBDA}"',
            raw["provisioned_pollers"],
        )
    # 0: scale to zero, woken by infra/scaling.py's wake-up policy when messages wait.
    min_tasks = integer("min_tasks", 1, 0, MAX_TASKS_LIMIT)
    max_tasks = integer(
        "max_tasks", max(2, min_tasks), max(1, min_tasks), MAX_TASKS_LIMIT, " (from min_tasks, and at least 1)"
    )
    if on_lambda:
        cpu = 256  # unused: a function has no task size
        memory = integer("memory_mib", 512, LAMBDA_MIN_MEMORY_MIB, LAMBDA_MAX_MEMORY_MIB, " (Lambda's function memory)")
    else:
        cpu, memory = check_task_size(raw.get("cpu", 256), raw.get("memory_mib"), path("cpu"), path("memory_mib"))
    try:
        architecture = check_architecture(path("architecture"), raw.get("architecture", DEFAULT_ARCHITECTURE))
        spot = (
            parse_spot(path("spot"), raw["spot"], architecture=architecture, max_tasks=max_tasks)
            if "spot" in raw
            else None
        )
    except CapacityError as error:
        raise SettingsError(error.parameter, error.rule, error.value) from None
    reserved = WorkerContract.env_keys() | BINDING_KEYS | SOURCE_ENV_KEYS | ({QUEUE_ARN_ENV} if on_lambda else set())
    handler_environment = _variables(path("handler_environment"), raw.get("handler_environment", {}), reserved)
    secret_like = [key for key in handler_environment if any(m in key for m in SECRET_NAME_MARKERS)]
    if secret_like:
        raise SettingsError(path("handler_environment"), SECRET_LIKE_RULE, secret_like[0])
    if on_lambda:
        check_lambda_variables(path("handler_environment"), handler_environment)
    secrets = _parse_secrets(path("secrets"), raw.get("secrets", {}), reserved, handler_environment)
    try:
        sources = parse_sources(path("sources"), raw["sources"]) if "sources" in raw else ()
    except SourceError as error:
        raise SettingsError(error.parameter, error.rule, error.value) from None
    identity = check_worker_name(path("identity"), raw["identity"]) if "identity" in raw else None
    pollers = (
        _parse_pollers(path("provisioned_pollers"), raw["provisioned_pollers"])
        if on_lambda and "provisioned_pollers" in raw
        else None
    )
    return WorkerSettings(
        name=name,
        handler=handler,
        target=target,
        provisioned_pollers=pollers,
        identity=identity,
        min_tasks=min_tasks,
        max_tasks=max_tasks,
        cpu=cpu,
        memory_mib=memory,
        architecture=architecture,
        spot=spot,
        handler_environment=handler_environment,
        secrets=secrets,
        sources=sources,
        path=prefix,
    )


def check_lambda_variables(path: str, names: Mapping[str, str]) -> None:
    """Refuse a variable name Lambda sets itself (:data:`LAMBDA_RESERVED_VARIABLES`, ``AWS_LAMBDA_*``) or that does not
    start with a letter, as Lambda's API would at deploy."""
    for name in names:
        if name in LAMBDA_RESERVED_VARIABLES or name.startswith(LAMBDA_RESERVED_PREFIX):
            raise SettingsError(path, "must not set a variable Lambda sets itself (reserved on a lambda worker)", name)
        if not name[:1].isalpha():
            raise SettingsError(
                path, "must name variables starting with a letter on a lambda worker (Lambda's rule)", name
            )


def _parse_pollers(path: str, raw: object) -> tuple[int, int]:
    """``{"minimum": N, "maximum": M}`` as ``(N, M)``; the bounds are :class:`LambdaTarget`'s to check."""
    if not isinstance(raw, Mapping) or sorted(raw) != sorted(POLLER_KEYS):
        raise SettingsError(path, 'must be an object {"minimum": N, "maximum": M} of event pollers', raw)
    for key in POLLER_KEYS:
        if isinstance(raw[key], bool) or not isinstance(raw[key], int):
            raise SettingsError(f"{path}.{key}", "must be a whole number of event pollers", raw[key])
    return raw["minimum"], raw["maximum"]


def lambda_target_of(settings: WorkerSettings, contract: WorkerContract) -> LambdaTarget:
    """A lambda worker's :class:`LambdaTarget`: its contract, ``max_tasks``, ``memory_mib``, ``provisioned_pollers``
    and its handler's ``max_rate`` (declared beside the contract); the target's :class:`ContractError` if Lambda
    cannot honour them."""
    return LambdaTarget(
        contract=contract,
        max_tasks=settings.max_tasks,
        memory_mib=settings.memory_mib,
        provisioned_pollers=settings.provisioned_pollers,
        max_rate=max_rate_of(load_handler(settings.handler)),
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
