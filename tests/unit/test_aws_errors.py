"""The one reading of an AWS error's code, shared by the runtime and the DLQ tool."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from consumer.runtime.aws_errors import error_code, is_missing_queue


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "GetQueueAttributes")


def test_error_code_reads_a_client_errors_code() -> None:
    """A ClientError's code is what the response's Error.Code says."""
    assert error_code(client_error("ThrottlingException")) == "ThrottlingException"


def test_error_code_is_empty_for_a_client_error_without_one() -> None:
    """A response without an Error member gives "" rather than a KeyError."""
    assert error_code(ClientError({}, "ReceiveMessage")) == ""


def test_error_code_is_empty_for_other_errors() -> None:
    """A network error (no AWS answer) has no code."""
    assert error_code(EndpointConnectionError(endpoint_url="http://127.0.0.1:1")) == ""


@pytest.mark.parametrize("code", ["AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"])
def test_is_missing_queue_knows_both_spellings(code: str) -> None:
    """SQS spells a missing queue two ways, depending on protocol and endpoint."""
    assert is_missing_queue(client_error(code)) is True


def test_is_missing_queue_is_false_for_other_codes() -> None:
    """Access denied is not a missing queue."""
    assert is_missing_queue(client_error("AccessDenied")) is False
