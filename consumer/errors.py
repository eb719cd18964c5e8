"""The errors of the public API: a setting or a contract value that breaks a rule.

Each names the parameter, the rule and the value. The public facade, ``consumer``, exports ConfigurationError and
ContractError for handlers; everything else imports them from here.
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "ContractDriftError", "ContractError"]


class ConfigurationError(ValueError):
    """A setting breaks a rule, so the consumer must not start; the message names the parameter, the rule and the value.

    Raise it from a handler's start-up check (``@worker(..., setup=check)``) to refuse to start;
    ``python -m consumer run`` exits 2 with this one line. A value of ``None`` means nothing was
    received (an unset variable) and reads "not set".

    Example::

        >>> print(ConfigurationError("CONSUMER_LOG_LEVEL", "must be one of DEBUG, INFO", "LOUD"))
        "CONSUMER_LOG_LEVEL" must be one of DEBUG, INFO: 'LOUD'
        >>> print(ConfigurationError("QUEUE_URL", "must be set to the source queue's URL", None))
        "QUEUE_URL" must be set to the source queue's URL: not set
    """

    def __init__(self, parameter: str, rule: str, value: object) -> None:
        self.parameter = parameter
        self.rule = rule
        self.value = value
        super().__init__(f'"{parameter}" {rule}: {"not set" if value is None else repr(value)}')


class ContractError(ConfigurationError):
    """A contract value breaks a rule; the message names the parameter, the rule and the value.

    Example::

        >>> from consumer.contract import WorkerContract
        >>> WorkerContract(max_duration_seconds=90, max_receive_count=1)
        Traceback (most recent call last):
        ...
        consumer.errors.ContractError: "max_receive_count" must be between 2 and 998 ...: 1
    """


class ContractDriftError(ContractError):
    """Two places that must agree on a contract value do not (e.g. the stack and the image)."""
