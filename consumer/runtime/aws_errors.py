"""What an AWS error says, read one way for the runtime and the DLQ tool alike."""

from __future__ import annotations

from botocore.exceptions import ClientError

#: How a missing queue's error code is spelled, depending on the protocol and the endpoint
#: (``AWS.SimpleQueueService.NonExistentQueue``, ``QueueDoesNotExist``): a code containing either.
MISSING_QUEUE_CODES = ("NonExistentQueue", "QueueDoesNotExist")


def error_code(error: BaseException) -> str:
    """The AWS error code a ``ClientError`` carries (``"ThrottlingException"``); ``""`` for any other error."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


def is_missing_queue(error: BaseException) -> bool:
    """True when ``error`` is SQS saying the queue does not exist."""
    code = error_code(error)
    return any(marker in code for marker in MISSING_QUEUE_CODES)
