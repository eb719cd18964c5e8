"""The runtime's errors speak the contract's shape, '"parameter" rule: value', naming what the user set."""

from __future__ import annotations

import pytest

from consumer.contract import WorkerContract
from consumer.errors import ConfigurationError, ContractDriftError, ContractError
from consumer.runtime.config import check_declaration, load_config
from consumer.runtime.idempotency import InMemoryStore
from consumer.runtime.protection import ScaleInProtection


@pytest.mark.parametrize(
    ("key", "owner", "lease_seconds", "expected"),
    [
        ("", "a", 30, "\"key\" must be a non-empty string: ''"),
        ("k", "", 30, "\"owner\" must be a non-empty string: ''"),
        ("k", "a", 0, '"lease_seconds" must be positive: 0'),
    ],
    ids=["key", "owner", "lease"],
)
def test_idempotency_claim_names_the_bad_argument(key: str, owner: str, lease_seconds: int, expected: str) -> None:
    """A bad claim says which argument, what rule and the value it got."""
    with pytest.raises(ValueError) as raised:
        InMemoryStore().claim(key, owner=owner, lease_seconds=lease_seconds)
    assert str(raised.value) == expected


@pytest.mark.parametrize("minutes", [0, 2881])
def test_protection_expiry_outside_the_agent_limits_names_it(minutes: int) -> None:
    """Both edges of ExpiresInMinutes are refused with the parameter, the bounds and the value."""
    with pytest.raises(ValueError) as raised:
        ScaleInProtection("http://127.0.0.1:9", expires_in_minutes=minutes)
    assert str(raised.value) == f'"expires_in_minutes" must be within 1..2880 (the ECS agent\'s limits): {minutes}'


def test_protection_timeout_must_be_positive() -> None:
    """A zero agent timeout is refused with the parameter and the value."""
    with pytest.raises(ValueError) as raised:
        ScaleInProtection("http://127.0.0.1:9", timeout_seconds=0)
    assert str(raised.value) == '"timeout_seconds" must be positive: 0'


def test_an_unset_variable_reads_not_set() -> None:
    """Nothing received is "not set", never a stray ': None'."""
    with pytest.raises(ConfigurationError) as raised:
        load_config({"CONSUMER_HANDLER": "consumer.examples.notifications:handle"})
    assert str(raised.value) == '"QUEUE_URL" must be set to the source queue\'s URL: not set'


def test_a_contract_variable_out_of_bounds_is_named_as_the_variable() -> None:
    """CONSUMER_MAX_DURATION_SECONDS=-5 is reported as that variable and its text, not as the field."""
    environ = {**WorkerContract(max_duration_seconds=90).to_env(), "CONSUMER_MAX_DURATION_SECONDS": "-5"}
    with pytest.raises(ContractError) as raised:
        WorkerContract.from_env(environ)
    assert str(raised.value) == (
        '"CONSUMER_MAX_DURATION_SECONDS" must be between 1 and 42900'
        " (SQS's 43200 s visibility limit less the 300 s margin): '-5'"
    )


def test_a_hand_edited_max_duration_is_named_when_the_derived_values_disagree() -> None:
    """A max duration changed by hand in a stack's environment names the input, not only the derived value."""
    environ = {**WorkerContract(max_duration_seconds=90).to_env(), "CONSUMER_MAX_DURATION_SECONDS": "60"}
    with pytest.raises(ContractDriftError) as raised:
        WorkerContract.from_env(environ)
    assert raised.value.parameter == "CONSUMER_ATTEMPT_TIMEOUT_SECONDS"
    assert "derives from CONSUMER_MAX_DURATION_SECONDS=60" in str(raised.value)
    assert "changed by hand" in str(raised.value)


def test_a_declaration_that_differs_from_the_stack_names_the_worker_argument() -> None:
    """@worker(max_duration=60) against a stack built for 90 names max_duration, as the handler's author wrote it."""
    with pytest.raises(ContractDriftError) as raised:
        check_declaration(WorkerContract(max_duration_seconds=60), WorkerContract(max_duration_seconds=90))
    assert raised.value.parameter == "CONSUMER_MAX_DURATION_SECONDS"
    assert "(max_duration: stack 90, handler 60, average_duration: stack 45, handler 30," in str(raised.value)
