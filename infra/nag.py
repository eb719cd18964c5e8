"""cdk-nag v3 wiring: AwsSolutions checks on every synth, acknowledgements with real reasons."""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

MIN_REASON_LENGTH = 40
PACK = "AwsSolutions"


def enable_nag(app: App) -> None:
    """Run the AwsSolutions pack on every synth; an unacknowledged finding fails ``app.synth()``."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge one finding on ``scope`` (and below) with a reason a reviewer can check."""
    if len(reason) < MIN_REASON_LENGTH:
        raise ValueError(
            f'"reason" must be at least {MIN_REASON_LENGTH} characters and say why {finding} is acceptable: {reason!r}'
        )
    # The id as cdk-nag prints it: "Acknowledge with 'AwsSolutions::AwsSolutions-ECS2'".
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{PACK}::{finding}", reason=reason))
