"""The benchmark harness's own arithmetic and configuration, without an endpoint."""

from __future__ import annotations

from bench import subject
from consumer.limits import SQS_CLIENT


def test_bench_subject_client_is_configured_as_the_container_configures_its_own() -> None:
    """Every implementation gets the container's timeouts and retries, with a pool for its threads."""
    config = subject.client_config_for(64)
    assert (config.connect_timeout, config.read_timeout) == (SQS_CLIENT.connect_seconds, SQS_CLIENT.read_seconds)
    assert config.retries == {"mode": "standard", "total_max_attempts": SQS_CLIENT.max_attempts}
    assert config.max_pool_connections == 74


def test_bench_subject_client_pool_has_room_beyond_the_threads() -> None:
    """One thread still gets the 10 spare connections the consumer's own poller and acknowledger use."""
    assert subject.client_config_for(1).max_pool_connections == 11
