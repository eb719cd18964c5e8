"""The runtime's argument errors speak the contract's shape: '"parameter" rule: value'."""

from __future__ import annotations

import pytest

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
