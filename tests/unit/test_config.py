"""Unit tests for the start-up configuration `consumer run` reads: the region, the handler's start-up check."""

from __future__ import annotations

import pytest

from consumer.declaration import contract_of
from consumer.errors import ConfigurationError
from consumer.runtime.config import load_config, region_of_queue_url, resolve_region
from tests.integration import handlers

LOCAL_URL = "http://127.0.0.1:5000/123456789012/orders"
AWS_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/orders", "eu-west-1"),
        ("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders", "cn-north-1"),
        ("https://ap-southeast-2.queue.amazonaws.com/123456789012/orders", "ap-southeast-2"),
        ("https://queue.amazonaws.com/123456789012/orders", "us-east-1"),
        ("https://SQS.US-GOV-WEST-1.AMAZONAWS.COM/123456789012/orders.fifo", "us-gov-west-1"),
        (LOCAL_URL, None),
        ("https://sqs.eu-west-1.amazonaws.com.evil.example/123456789012/orders", None),
        ("https://vpce-1a2b.sqs.eu-west-1.vpce.amazonaws.com/123456789012/orders", None),
        ("not a url", None),
    ],
)
def test_region_of_queue_url_reads_the_aws_forms_only(url: str, region: str | None) -> None:
    """sqs.<region>.amazonaws.com[.cn] and the legacy queue hosts name their region; anything else names none."""
    assert region_of_queue_url(url) == region


@pytest.mark.parametrize(
    ("environ", "configured", "expected"),
    [
        ({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1"}, "us-east-1", ("eu-west-1", "AWS_REGION")),
        ({"AWS_REGION": "eu-west-1"}, None, ("eu-west-1", "AWS_REGION")),
        ({"AWS_DEFAULT_REGION": "eu-west-1"}, "eu-west-1", ("eu-west-1", "AWS_DEFAULT_REGION")),
        ({"AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-west-1"}, "eu-west-1", ("eu-west-1", "AWS_DEFAULT_REGION")),
        ({}, "eu-west-1", ("eu-west-1", "the AWS config file's region")),
        ({}, None, ("eu-west-1", "QUEUE_URL")),
    ],
    ids=["aws-region-first", "aws-region-only", "default-region", "empty-is-unset", "config-file", "queue-url"],
)
def test_resolve_region_takes_the_standard_sources_first_then_the_queue_url(
    environ: dict[str, str], configured: str | None, expected: tuple[str, str]
) -> None:
    """AWS_REGION, AWS_DEFAULT_REGION, the config file (boto3's session), then the region the queue URL names."""
    assert resolve_region(environ, AWS_URL, configured=configured) == expected


def test_resolve_region_without_any_source_names_the_variable_and_the_url() -> None:
    """No region anywhere and a queue URL that names none: one line saying what to set."""
    with pytest.raises(ConfigurationError) as raised:
        resolve_region({}, LOCAL_URL, configured=None)
    assert str(raised.value) == (
        '"AWS_REGION" must be set (or AWS_DEFAULT_REGION, or a region in the AWS config file),'
        f" because QUEUE_URL names no region: {LOCAL_URL!r}"
    )


def test_resolve_region_refuses_a_queue_url_in_another_region() -> None:
    """A region from the environment that differs from the queue URL's: SQS would say the queue does not exist."""
    with pytest.raises(ConfigurationError) as raised:
        resolve_region({"AWS_DEFAULT_REGION": "us-east-1"}, AWS_URL, configured="us-east-1")
    assert str(raised.value) == (
        '"QUEUE_URL" names region eu-west-1, but AWS_DEFAULT_REGION is us-east-1 (SQS would answer that the'
        f" queue does not exist); make them agree: {AWS_URL!r}"
    )


def test_resolve_region_refuses_a_region_that_is_not_a_region_name() -> None:
    """botocore's own rule for region names, checked before any client is made, naming the variable."""
    with pytest.raises(ConfigurationError) as raised:
        resolve_region({"AWS_REGION": "eu west 1"}, LOCAL_URL, configured=None)
    assert str(raised.value) == "\"AWS_REGION\" must be an AWS region name such as eu-west-1: 'eu west 1'"


def test_load_config_runs_the_handlers_start_up_check_once_with_the_environment() -> None:
    """A handler declared with setup=check: load_config calls check(environ) once; passing, the config loads."""
    handlers.SETUP_CALLS.clear()
    environ = {"QUEUE_URL": LOCAL_URL, "CONSUMER_HANDLER": "tests.integration.handlers:guarded", "HANDLER_TOKEN": "t"}
    config = load_config(environ)
    assert handlers.SETUP_CALLS == [environ]
    assert config.handler is handlers.guarded and config.contract == contract_of(handlers.slow)


def test_load_config_start_up_check_refusing_is_its_configuration_error() -> None:
    """The check's own ConfigurationError is the refusal, unchanged."""
    with pytest.raises(ConfigurationError) as raised:
        load_config({"QUEUE_URL": LOCAL_URL, "CONSUMER_HANDLER": "tests.integration.handlers:guarded"})
    assert str(raised.value) == '"HANDLER_TOKEN" must be set to the downstream\'s token: not set'


def test_load_config_start_up_check_failing_otherwise_names_the_handler() -> None:
    """Any other exception from the check refuses too, in one line naming CONSUMER_HANDLER, the check and the error."""
    spec = "tests.integration.handlers:broken_setup"
    with pytest.raises(ConfigurationError) as raised:
        load_config({"QUEUE_URL": LOCAL_URL, "CONSUMER_HANDLER": spec})
    assert str(raised.value) == (
        '"CONSUMER_HANDLER" names a handler whose start-up check broken_check failed'
        f" (KeyError: 'NOT_SET_ANYWHERE'): {spec!r}"
    )


def test_load_config_start_up_check_calling_sys_exit_refuses_in_one_line() -> None:
    """A check that calls sys.exit() does not end the process silently: it refuses, naming the check."""
    spec = "tests.integration.handlers:exiting_setup"
    with pytest.raises(ConfigurationError) as raised:
        load_config({"QUEUE_URL": LOCAL_URL, "CONSUMER_HANDLER": spec})
    assert str(raised.value) == (
        f'"CONSUMER_HANDLER" names a handler whose start-up check exiting_check failed (SystemExit: 4): {spec!r}'
    )
