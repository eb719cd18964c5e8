"""Unit tests for the worker contract: every bound at both edges, every formula, the env round trip.

Rule for this folder: no network, no CDK, no boto3 calls.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from consumer.contract import WorkerContract
from consumer.declaration import contract_of, load_handler, setup_of, worker
from consumer.errors import ContractDriftError, ContractError
from consumer.limits import DAY, DERIVED_FORMULAS
from consumer.queue_attributes import QueueAttributes


def make(**overrides: object) -> WorkerContract:
    values: dict[str, object] = {"max_duration_seconds": 90}
    values.update(overrides)
    return WorkerContract(**values)  # type: ignore[arg-type]


# (field, lowest valid, highest valid, extra fields that make the edges reachable)
BOUNDS = [
    ("max_duration_seconds", 1, 42_900, {}),
    ("concurrency", 1, 256, {}),
    ("batch_size", 1, 10, {}),
    (
        "max_receive_count",
        2,
        998,
        {"max_duration_seconds": 1, "source_retention_seconds": 5 * DAY, "dlq_retention_seconds": 14 * DAY},
    ),
    ("acceptable_latency_seconds", 1, 43_200, {}),
    ("average_duration_seconds", 1, 90, {}),
    ("retry_backoff_base_seconds", 1, 300, {}),
    ("retry_backoff_max_seconds", 2, 43_200, {}),
    ("stop_timeout_seconds", 6, 120, {}),
    ("max_lease_seconds", 4, 43_200, {}),
    ("source_retention_seconds", 60, 12 * DAY, {"max_duration_seconds": 1, "max_receive_count": 2}),
    ("dlq_retention_seconds", 3 * DAY, 14 * DAY, {"source_retention_seconds": DAY}),
]


@pytest.mark.parametrize(("name", "low", "high", "extra"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_contract_accepts_both_edges(name: str, low: int, high: int, extra: dict) -> None:
    """The lowest and highest allowed value of each field construct a contract."""
    for value in (low, high):
        assert getattr(make(**{**extra, name: value}), name) == value


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "max_duration_seconds",
            0,
            '"max_duration_seconds" must be between 1 and 42900 (SQS\'s 43200 s visibility limit less the 300 s margin): 0',
        ),
        (
            "max_duration_seconds",
            42_901,
            '"max_duration_seconds" must be between 1 and 42900 (SQS\'s 43200 s visibility limit less the 300 s margin): 42901',
        ),
        (
            "concurrency",
            0,
            '"concurrency" must be between 1 and 256 (threads; an async def handler may run up to 4096 coroutines): 0',
        ),
        (
            "concurrency",
            257,
            '"concurrency" must be between 1 and 256 (threads; an async def handler may run up to 4096 coroutines): 257',
        ),
        ("batch_size", 0, '"batch_size" must be between 1 and 10 (SQS receives at most 10 per call): 0'),
        ("batch_size", 11, '"batch_size" must be between 1 and 10 (SQS receives at most 10 per call): 11'),
        (
            "max_receive_count",
            1,
            '"max_receive_count" must be between 2 and 998 (1 would send a message to the DLQ on its first transient'
            " failure; the redrive policy adds 2 backstop receives within SQS's limit of 1000): 1",
        ),
        (
            "max_receive_count",
            999,
            '"max_receive_count" must be between 2 and 998 (1 would send a message to the DLQ on its first transient'
            " failure; the redrive policy adds 2 backstop receives within SQS's limit of 1000): 999",
        ),
        ("acceptable_latency_seconds", 0, '"acceptable_latency_seconds" must be between 1 and 43200: 0'),
        ("acceptable_latency_seconds", 43_201, '"acceptable_latency_seconds" must be between 1 and 43200: 43201'),
        (
            "average_duration_seconds",
            0,
            '"average_duration_seconds" must be between 1 and 90 (it cannot exceed max_duration_seconds): 0',
        ),
        (
            "average_duration_seconds",
            91,
            '"average_duration_seconds" must be between 1 and 90 (it cannot exceed max_duration_seconds): 91',
        ),
        ("retry_backoff_base_seconds", 0, '"retry_backoff_base_seconds" must be between 1 and 43200: 0'),
        ("retry_backoff_base_seconds", 43_201, '"retry_backoff_base_seconds" must be between 1 and 43200: 43201'),
        (
            "retry_backoff_max_seconds",
            1,
            '"retry_backoff_max_seconds" must be between 2 and 43200 (from retry_backoff_base_seconds to SQS\'s 12 h visibility limit): 1',
        ),
        (
            "retry_backoff_max_seconds",
            43_201,
            '"retry_backoff_max_seconds" must be between 2 and 43200 (from retry_backoff_base_seconds to SQS\'s 12 h visibility limit): 43201',
        ),
        (
            "stop_timeout_seconds",
            5,
            '"stop_timeout_seconds" must be between 6 and 120 (Fargate allows at most 120 s; the consumer needs 5 s to flush plus 1 s to drain): 5',
        ),
        (
            "stop_timeout_seconds",
            121,
            '"stop_timeout_seconds" must be between 6 and 120 (Fargate allows at most 120 s; the consumer needs 5 s to flush plus 1 s to drain): 121',
        ),
        (
            "max_lease_seconds",
            3,
            '"max_lease_seconds" must be between 4 and 43200 (4 s leaves the heartbeat a second chance;'
            " SQS's visibility limit is 12 h): 3",
        ),
        (
            "max_lease_seconds",
            43_201,
            '"max_lease_seconds" must be between 4 and 43200 (4 s leaves the heartbeat a second chance;'
            " SQS's visibility limit is 12 h): 43201",
        ),
        (
            "source_retention_seconds",
            59,
            '"source_retention_seconds" must be between 60 and 1209600 (SQS retention is 60 s to 14 days): 59',
        ),
        (
            "source_retention_seconds",
            1_209_601,
            '"source_retention_seconds" must be between 60 and 1209600 (SQS retention is 60 s to 14 days): 1209601',
        ),
        (
            "dlq_retention_seconds",
            59,
            '"dlq_retention_seconds" must be between 60 and 1209600 (SQS retention is 60 s to 14 days): 59',
        ),
        (
            "dlq_retention_seconds",
            1_209_601,
            '"dlq_retention_seconds" must be between 60 and 1209600 (SQS retention is 60 s to 14 days): 1209601',
        ),
    ],
)
def test_contract_rejects_out_of_bounds_with_exact_message(name: str, value: int, message: str) -> None:
    """One past each edge fails, naming the parameter, the rule and the value."""
    with pytest.raises(ContractError) as raised:
        make(**{name: value})
    assert str(raised.value) == message
    assert (raised.value.parameter, raised.value.value) == (name, value)


def test_contract_rejects_retention_gap_below_two_days() -> None:
    """The DLQ must keep messages at least two days longer than the source (172800 s ok, 172799 s not), so the DLQ
    age page (half the gap after a move) comes at least a day before a message can expire."""
    assert make(source_retention_seconds=4 * DAY, dlq_retention_seconds=6 * DAY).dlq_retention_seconds == 6 * DAY
    assert make(source_retention_seconds=4 * DAY, dlq_retention_seconds=6 * DAY).dlq_age_alarm_seconds == DAY
    with pytest.raises(ContractError) as raised:
        make(source_retention_seconds=4 * DAY, dlq_retention_seconds=6 * DAY - 1)
    assert raised.value.parameter == "dlq_retention_seconds"
    assert "must exceed source_retention_seconds (345600) by at least 172800 s" in str(raised.value)


def test_contract_rejects_equal_retentions() -> None:
    """A DLQ that keeps messages no longer than the source is refused."""
    with pytest.raises(ContractError, match='"dlq_retention_seconds" must exceed'):
        make(source_retention_seconds=14 * DAY, dlq_retention_seconds=14 * DAY)


def test_contract_rejects_source_retention_not_above_retry_horizon() -> None:
    """A message must be able to fail max_receive_count times, plus the two backstop receives, before it could expire."""
    horizon = make(max_duration_seconds=1, max_receive_count=5).retry_horizon_seconds
    assert horizon == (5 + 2) * 11 + (2 + 4 + 8 + 16)
    assert make(max_duration_seconds=1, max_receive_count=5, source_retention_seconds=horizon + 1)
    with pytest.raises(ContractError) as raised:
        make(max_duration_seconds=1, max_receive_count=5, source_retention_seconds=horizon)
    assert raised.value.parameter == "source_retention_seconds"
    assert f"retry horizon ({horizon} s" in str(raised.value)


@pytest.mark.parametrize(("max_receive_count", "redrive"), [(2, 4), (5, 7), (998, 1_000)])
def test_contract_redrive_policy_allows_two_backstop_receives(max_receive_count: int, redrive: int) -> None:
    """The queue's maxReceiveCount leaves two receives the consumer never saw before SQS's silent redrive."""
    contract = make(max_duration_seconds=1, max_receive_count=max_receive_count, source_retention_seconds=12 * DAY)
    assert contract.redrive_max_receive_count == redrive


@pytest.mark.parametrize("value", [True, "90", 90.0, None])
def test_contract_rejects_non_integers(value: object) -> None:
    """Booleans, strings and floats are not whole seconds, even when they look like them."""
    with pytest.raises(ContractError, match='"concurrency" must be a whole number'):
        make(concurrency=value)


def test_contract_rejects_content_deduplication_without_fifo() -> None:
    """Content-based deduplication exists only on FIFO queues."""
    with pytest.raises(ContractError, match='"content_based_deduplication" is only allowed on a FIFO pair'):
        make(content_based_deduplication=True)
    assert make(fifo=True, content_based_deduplication=True).content_based_deduplication


def test_contract_rejects_fair_queue_on_fifo() -> None:
    """Fair queueing is a standard-queue feature: on FIFO the group id is the order key (the whole message)."""
    with pytest.raises(ContractError) as raised:
        make(fifo=True, fair_queue=True)
    assert str(raised.value) == (
        '"fair_queue" is only allowed on a standard queue (fifo=False): a FIFO queue\'s MessageGroupId is its order'
        " key: True"
    )
    assert make(fair_queue=True).fair_queue


def test_contract_rejects_a_non_boolean_fair_queue() -> None:
    """fair_queue="yes" is refused, not read as true."""
    with pytest.raises(ContractError, match="\"fair_queue\" must be true or false: 'yes'"):
        make(fair_queue="yes")


def test_worker_fair_queue_names_the_argument_on_fifo() -> None:
    """@worker(fifo=True, fair_queue=True) is refused naming fair_queue, the argument the author wrote."""
    with pytest.raises(ContractError, match='^"fair_queue" is only allowed on a standard queue'):
        worker(max_duration=90, fifo=True, fair_queue=True)


#: The handler-shape fields (batch, async): written only when declared, like fair_queue and idempotent.
SHAPE_KEYS = {"CONSUMER_MAX_BATCH", "CONSUMER_BATCH_WINDOW_SECONDS", "CONSUMER_ASYNCHRONOUS"}


def test_contract_fair_queue_env_only_when_declared() -> None:
    """CONSUMER_FAIR_QUEUE is written only for a worker that declares it (an undeclared one keeps its task
    environment as it was); from_env reads it back, and its absence as False."""
    declared = make(fair_queue=True)
    assert declared.to_env()["CONSUMER_FAIR_QUEUE"] == "true"
    assert set(declared.to_env()) == WorkerContract.env_keys() - {"CONSUMER_IDEMPOTENT"} - SHAPE_KEYS
    assert WorkerContract.from_env(declared.to_env()) == declared
    assert "CONSUMER_FAIR_QUEUE" not in make().to_env()
    assert WorkerContract.from_env(make().to_env()).fair_queue is False


def test_contract_idempotent_env_only_when_declared() -> None:
    """CONSUMER_IDEMPOTENT is written only for a worker that declares it (every other worker keeps its task
    environment byte for byte); from_env reads it back, and its absence as False."""
    declared = make(idempotent=True)
    assert declared.to_env()["CONSUMER_IDEMPOTENT"] == "true"
    assert set(declared.to_env()) == WorkerContract.env_keys() - {"CONSUMER_FAIR_QUEUE"} - SHAPE_KEYS
    assert WorkerContract.from_env(declared.to_env()) == declared
    assert "CONSUMER_IDEMPOTENT" not in make().to_env()
    assert WorkerContract.from_env(make().to_env()).idempotent is False


def test_worker_idempotent_must_be_a_bool() -> None:
    """@worker(idempotent="yes") is refused naming the argument, the rule and the value."""
    with pytest.raises(ContractError, match="^\"idempotent\" must be true or false: 'yes'$"):
        worker(max_duration=90, idempotent="yes")  # type: ignore[arg-type]


def test_contract_is_frozen_and_keyword_only() -> None:
    """A contract cannot be changed after validation, nor built positionally."""
    contract = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        contract.concurrency = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        WorkerContract(90)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("max_duration", "margin", "visibility", "heartbeat", "lease"),
    [
        (1, 10, 11, 2, False),
        (90, 10, 100, 20, False),
        (800, 80, 880, 60, False),
        (810, 81, 891, 60, False),
        (820, 82, 900, 60, True),  # 902 capped: the heartbeat lease starts here
        (7_200, 300, 900, 60, True),
        (42_900, 300, 900, 60, True),
    ],
)
def test_contract_visibility_follows_max_duration(
    max_duration: int, margin: int, visibility: int, heartbeat: int, lease: bool
) -> None:
    """Visibility covers max duration plus margin, capped at the 900 s heartbeat lease."""
    contract = WorkerContract(max_duration_seconds=max_duration, max_receive_count=2)
    assert contract.visibility_margin_seconds == margin
    assert contract.attempt_timeout_seconds == max_duration + margin
    assert contract.visibility_timeout_seconds == visibility
    assert contract.heartbeat_interval_seconds == heartbeat
    assert contract.heartbeat_threshold_seconds == 2 * heartbeat
    assert contract.uses_heartbeat_lease is lease
    assert contract.message_timeout_seconds == max_duration


@pytest.mark.parametrize(
    ("max_lease", "visibility", "heartbeat", "lease"),
    [(4, 4, 1, True), (10, 10, 2, True), (39, 39, 7, True), (40, 40, 8, False), (43_200, 40, 8, False)],
)
def test_contract_declared_max_lease_caps_visibility(
    max_lease: int, visibility: int, heartbeat: int, lease: bool
) -> None:
    """A declared lease shorter than the attempt (30 s + 10 s margin) becomes the visibility, kept alive by the heartbeat."""
    contract = WorkerContract(max_duration_seconds=30, max_lease_seconds=max_lease)
    assert contract.visibility_timeout_seconds == visibility
    assert contract.heartbeat_interval_seconds == heartbeat
    assert contract.uses_heartbeat_lease is lease


def test_worker_decorator_takes_max_lease_as_timedelta() -> None:
    """``max_lease=timedelta(seconds=10)`` reaches the contract as 10 s and into the environment."""

    @worker(max_duration=timedelta(seconds=30), max_lease=timedelta(seconds=10))
    def handle(message: object) -> None: ...

    contract = contract_of(handle)
    assert contract.to_env()["CONSUMER_MAX_LEASE_SECONDS"] == "10"
    assert WorkerContract.from_env(contract.to_env()) == contract


@pytest.mark.parametrize(("max_duration", "stop"), [(1, 6), (90, 95), (115, 120), (116, 120), (3_600, 120)])
def test_contract_stop_timeout_defaults_to_drain_time_capped_at_fargate_limit(max_duration: int, stop: int) -> None:
    """Stop timeout = min(120, max_duration + 5); drain = stop - 5."""
    contract = WorkerContract(max_duration_seconds=max_duration, max_receive_count=2)
    assert (contract.stop_timeout_seconds, contract.drain_timeout_seconds) == (stop, stop - 5)


def test_contract_declared_stop_timeout_wins() -> None:
    """An explicit stop timeout replaces the default."""
    assert make(stop_timeout_seconds=30).drain_timeout_seconds == 25


def test_contract_retry_backoff_doubles_to_its_cap() -> None:
    """Backoff after the n-th receive: base * 2**(n-1), never above the cap."""
    contract = make(retry_backoff_base_seconds=2, retry_backoff_max_seconds=20)
    assert [contract.retry_backoff_seconds(n) for n in range(1, 7)] == [2, 4, 8, 16, 20, 20]
    assert contract.retry_backoff_seconds(10_000) == 20


def test_contract_alarm_thresholds() -> None:
    """DLQ age alarm at half the retention gap; backlog age alarm after three retry cycles."""
    contract = make(acceptable_latency_seconds=60)
    assert contract.dlq_age_alarm_seconds == (14 * DAY - 4 * DAY) // 2
    assert contract.backlog_age_alarm_seconds == 60 + (100 + 2) + (100 + 4) + (100 + 8)
    two_receives = make(acceptable_latency_seconds=60, max_receive_count=2)
    assert two_receives.backlog_age_alarm_seconds == 60 + (100 + 2) + (100 + 4)


def test_contract_scaling_target_and_pollers() -> None:
    """Backlog per task = latency * concurrency / average duration, at least 1."""
    assert (
        make(concurrency=8, acceptable_latency_seconds=60, average_duration_seconds=2).scaling_target_backlog_per_task
        == 240
    )
    assert (
        make(concurrency=1, acceptable_latency_seconds=1, average_duration_seconds=90).scaling_target_backlog_per_task
        == 1
    )
    assert make(concurrency=8).average_duration_seconds == 45
    assert [make(concurrency=c).pollers for c in (1, 10, 11, 40, 41, 256)] == [1, 1, 2, 4, 4, 4]


def test_contract_env_round_trip() -> None:
    """from_env(to_env()) gives back an equal contract, defaults resolved."""
    contract = make(concurrency=8, fifo=True, content_based_deduplication=True, stop_timeout_seconds=60)
    environ = contract.to_env()
    assert set(environ) == WorkerContract.env_keys() - {"CONSUMER_FAIR_QUEUE", "CONSUMER_IDEMPOTENT"} - SHAPE_KEYS
    assert environ["CONSUMER_FIFO"] == "true"
    assert environ["CONSUMER_VISIBILITY_TIMEOUT_SECONDS"] == "100"
    assert WorkerContract.from_env(environ) == contract


def test_contract_env_keys_cover_declared_and_derived() -> None:
    """Every field and every derived value has one CONSUMER_ variable."""
    assert len(WorkerContract.env_keys()) == len(dataclasses.fields(WorkerContract)) + len(DERIVED_FORMULAS)
    assert all(key.startswith("CONSUMER_") for key in WorkerContract.env_keys())


def test_contract_from_env_requires_max_duration() -> None:
    """Without the stack's max duration there is no contract to run."""
    with pytest.raises(ContractError, match='"CONSUMER_MAX_DURATION_SECONDS" must be set'):
        WorkerContract.from_env({})


@pytest.mark.parametrize(
    ("key", "raw", "message"),
    [
        ("CONSUMER_CONCURRENCY", "eight", "\"CONSUMER_CONCURRENCY\" must be a whole number: 'eight'"),
        ("CONSUMER_FIFO", "yes", '"CONSUMER_FIFO" must be "true" or "false": \'yes\''),
    ],
)
def test_contract_from_env_rejects_malformed_values(key: str, raw: str, message: str) -> None:
    """A malformed variable names itself and the raw value."""
    environ = make().to_env() | {key: raw}
    with pytest.raises(ContractError) as raised:
        WorkerContract.from_env(environ)
    assert str(raised.value) == message


def test_contract_from_env_detects_formula_drift() -> None:
    """A derived value the stack wrote that this code derives differently refuses to load."""
    environ = make().to_env() | {"CONSUMER_VISIBILITY_TIMEOUT_SECONDS": "30"}
    with pytest.raises(ContractDriftError) as raised:
        WorkerContract.from_env(environ)
    assert raised.value.parameter == "CONSUMER_VISIBILITY_TIMEOUT_SECONDS"
    assert "differs from 100, the value this image derives" in str(raised.value)


def test_worker_decorator_attaches_contract_and_returns_function() -> None:
    """@worker leaves the function callable as is and records its contract."""

    @worker(max_duration=timedelta(seconds=89, milliseconds=1), concurrency=4, acceptable_latency=30)
    def handle(message: object) -> str:
        return "done"

    assert handle(None) == "done"
    assert contract_of(handle) == WorkerContract(max_duration_seconds=90, concurrency=4, acceptable_latency_seconds=30)


def test_worker_decorator_validates_at_declaration() -> None:
    """A bad declaration fails at import time of the handler, naming the argument as the author wrote it (max_duration, not the field max_duration_seconds)."""
    with pytest.raises(ContractError, match='"max_duration" must be a timedelta or a number of seconds'):
        worker(max_duration="90")
    with pytest.raises(ContractError, match='"max_duration" must be between 1 and 42900'):
        worker(max_duration=timedelta(hours=12))


def test_contract_of_rejects_undeclared_handler() -> None:
    """A plain function has no contract."""
    with pytest.raises(ContractError, match='"handler" must be decorated with @worker'):
        contract_of(lambda message: None)


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        ("consumer.examples.notifications", 'must look like "package.module:function"'),
        ("consumer.examples.notifications:", 'must look like "package.module:function"'),
        ("no.such.module:handle", "names a module that cannot be imported"),
        ("consumer.examples.notifications:missing", "names no function 'missing'"),
        ("consumer.examples.notifications:parse", "must be decorated with @worker"),
    ],
)
def test_load_handler_rejects_bad_specs(spec: str, rule: str) -> None:
    """Each way a handler path can be wrong gets its own message."""
    with pytest.raises(ContractError, match=rule):
        load_handler(spec)


def test_load_handler_returns_declared_example() -> None:
    """The example handler declares 90 s and 8 slots."""
    contract = contract_of(load_handler("consumer.examples.notifications:handle"))
    assert (contract.max_duration_seconds, contract.concurrency) == (90, 8)


@pytest.fixture
def broken_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Importable modules that fail on import: one with a syntax error, one raising, one calling sys.exit()."""
    (tmp_path / "contract_syntax_error.py").write_text("def handle(:\n")
    (tmp_path / "contract_raises_on_import.py").write_text('raise RuntimeError("settings\\nunreadable")\n')
    (tmp_path / "contract_exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_load_handler_module_with_a_syntax_error_is_one_contract_error(broken_modules: Path) -> None:
    """A SyntaxError in the handler's module names the file and line, not a traceback."""
    with pytest.raises(ContractError) as raised:
        load_handler("contract_syntax_error:handle", parameter="CONSUMER_HANDLER")
    path = broken_modules / "contract_syntax_error.py"
    assert str(raised.value) == (
        f'"CONSUMER_HANDLER" names a module with a syntax error ({path}, line 1: invalid syntax):'
        " 'contract_syntax_error:handle'"
    )


@pytest.mark.parametrize(
    ("module", "raised"),
    [
        ("contract_raises_on_import", "RuntimeError when imported (settings unreadable)"),
        ("contract_exits_on_import", "SystemExit when imported (3)"),
    ],
    ids=["exception", "sys.exit"],
)
def test_load_handler_module_raising_on_import_is_one_contract_error(
    broken_modules: Path, module: str, raised: str
) -> None:
    """Any exception at import, sys.exit() included, becomes one line naming its type and message, never an exit."""
    with pytest.raises(ContractError) as error:
        load_handler(f"{module}:handle", parameter="CONSUMER_HANDLER")
    assert str(error.value) == f"\"CONSUMER_HANDLER\" names a module that raised {raised}: '{module}:handle'"


@pytest.mark.parametrize("spec", [".notifications:handle", "..examples.notifications:handle"])
def test_load_handler_relative_module_is_rejected(spec: str) -> None:
    """A relative module has no package to start from: a ContractError, not importlib's TypeError."""
    with pytest.raises(ContractError) as raised:
        load_handler(spec)
    assert str(raised.value) == (
        f'"handler" must name an absolute module ("package.module:function"), not a relative one: {spec!r}'
    )


@pytest.mark.parametrize("spec", ["consumer..examples:handle", "consumer.exa mples:handle", "consumer.:handle"])
def test_load_handler_malformed_module_path_is_rejected(spec: str) -> None:
    """Every dotted part of the module must be a Python identifier."""
    with pytest.raises(ContractError, match='must look like "package.module:function"'):
        load_handler(spec)


def test_configuration_error_names_the_parameter_the_rule_and_the_value() -> None:
    """ConfigurationError, public from consumer, has ContractError's message shape; a ContractError is one."""
    import consumer

    error = consumer.ConfigurationError("NOTIFY_WEBHOOK_URL", "must be set", None)
    assert (str(error), error.parameter, error.rule, error.value) == (
        '"NOTIFY_WEBHOOK_URL" must be set: not set',
        "NOTIFY_WEBHOOK_URL",
        "must be set",
        None,
    )
    assert isinstance(error, ValueError) and issubclass(ContractError, consumer.ConfigurationError)


def test_worker_setup_is_kept_beside_the_contract_and_changes_no_timing() -> None:
    """setup=check is found by setup_of; the contract, its environment and so the drift check are unchanged."""

    def check(environ: object) -> None: ...

    @worker(max_duration=90, concurrency=8, setup=check)
    def with_check(message: object) -> None: ...

    @worker(max_duration=90, concurrency=8)
    def without(message: object) -> None: ...

    assert (setup_of(with_check), setup_of(without)) == (check, None)
    assert contract_of(with_check) == contract_of(without)
    assert contract_of(with_check).to_env() == contract_of(without).to_env()


def test_worker_setup_must_be_callable() -> None:
    """A setup that cannot be called fails at declaration, naming the parameter."""
    with pytest.raises(ContractError) as raised:
        worker(max_duration=90, setup="check")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "\"setup\" must be a function taking the environment (a Mapping[str, str]), or None: 'check'"
    )


# --- queue attributes -------------------------------------------------------


def test_queue_attributes_source_spells_the_derived_values_for_sqs() -> None:
    """The source queue gets the contract's visibility, retention, size limit and redrive policy, as SQS spells them."""
    arn = "arn:aws:sqs:eu-west-1:123456789012:w-dlq"
    assert make(max_receive_count=4).queue_attributes().source.to_sqs(dead_letter_target_arn=arn) == {
        "VisibilityTimeout": "100",
        "MessageRetentionPeriod": str(4 * DAY),
        "MaximumMessageSize": "1040384",
        "RedrivePolicy": '{"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123456789012:w-dlq", "maxReceiveCount": 6}',
    }


def test_queue_attributes_dead_letter_has_its_retention_and_no_visibility_or_redrive() -> None:
    """The DLQ keeps messages for dlq_retention at SQS's full size limit; visibility and redrive stay SQS's."""
    assert make(dlq_retention_seconds=10 * DAY).queue_attributes().dead_letter.to_sqs() == {
        "MessageRetentionPeriod": str(10 * DAY),
        "MaximumMessageSize": "1048576",
    }


@pytest.mark.parametrize("deduplication", [True, False])
def test_queue_attributes_fifo_pair_is_fifo_on_both_sides(deduplication: bool) -> None:
    """A FIFO contract makes both queues FIFO, with its content-based deduplication setting."""
    pair = make(fifo=True, content_based_deduplication=deduplication).queue_attributes()
    expected = {"FifoQueue": "true", "ContentBasedDeduplication": str(deduplication).lower()}
    for attributes in (pair.source.to_sqs(dead_letter_target_arn="arn"), pair.dead_letter.to_sqs()):
        assert {k: attributes[k] for k in expected} == expected


def test_queue_attributes_standard_pair_sets_no_fifo_attribute() -> None:
    """A standard pair carries neither FifoQueue nor ContentBasedDeduplication (SQS knows them on FIFO only)."""
    pair = make().queue_attributes()
    names = set(pair.source.to_sqs(dead_letter_target_arn="arn")) | set(pair.dead_letter.to_sqs())
    assert names & {"FifoQueue", "ContentBasedDeduplication"} == set()


def test_queue_attributes_redrive_without_dlq_arn_is_refused() -> None:
    """A redrive policy cannot be spelled without the DLQ's ARN: the error names the parameter."""
    with pytest.raises(ContractError) as raised:
        QueueAttributes(redrive_max_receive_count=7).to_sqs()
    assert str(raised.value) == '"dead_letter_target_arn" must name the DLQ of a queue with a redrive policy: not set'
