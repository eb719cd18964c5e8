"""Refuse ``make diff``/``make deploy`` in one line when no AWS credentials can be found, before any synthesis.

Without credentials the CDK CLI synthesizes every stack first (a minute or more, cdk-nag included) and then
ends in "Unable to resolve AWS account to use" (twice for a diff), which names neither what is missing nor
how to provide it. ``python -m consumer.local.credentials "make deploy"`` asks botocore's own credential
chain instead, which reads the sources the CLI's SDK reads (environment variables, the shared config and
credentials files with their profiles, SSO, credential processes and role assumption, the ECS task role,
the EC2 instance role): https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html

It only asks whether some source *has* credentials: a profile that assumes a role or signs in with SSO
resolves lazily, so the check never calls STS or SSO, and nothing here calls AWS. An instance role is
looked up at the instance metadata address (which the Makefile leaves enabled for diff and deploy), with
one attempt of :data:`METADATA_TIMEOUT_SECONDS` per request: about 2 s at most where that address hangs,
milliseconds where it refuses. Local operator tooling: it never ships in the image, and ``infra/`` (which
the CDK app imports) never imports botocore.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from consumer.exit_codes import ExitCode

#: What each instance metadata request may take, and how many tries it gets (botocore's defaults, pinned here
#: so the check's cost is the project's: a token request and a role lookup, so about 2 s where the address hangs).
METADATA_TIMEOUT_SECONDS = 1
METADATA_ATTEMPTS = 1
#: botocore's legacy sources the CDK CLI's SDK (JavaScript v3) does not read: credentials found only there would
#: pass this check and still fail the CLI.
NOT_READ_BY_THE_CLI = ("ec2-credentials-file", "boto-config")
#: The two usual ways to provide credentials, and the one that needs no setting.
HOW = (
    "give them either as a profile (aws configure sso once, then AWS_PROFILE=<name>; aws sso login when its"
    " session expires) or as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary"
    " keys) in the environment; on an EC2 instance or in an ECS task, its role counts"
)


class CredentialsMissingError(Exception):
    """No AWS credentials could be found, or a source of them is misconfigured; the message says which."""


def credential_source() -> str:
    """The name of the first source in the chain that has credentials (botocore's ``method``: ``env``,
    ``shared-credentials-file``, ``sso``, ``assume-role``, ``container-role``, ``iam-role``, ...).

    Raises :class:`CredentialsMissingError` when none has any, or when one is misconfigured (a profile that
    does not exist, an access key without its secret).
    """
    # Imported here: the module's import stays light, and nothing else in consumer/local needs botocore's session.
    import botocore.exceptions
    import botocore.session

    session = botocore.session.Session()
    session.set_config_variable("metadata_service_timeout", METADATA_TIMEOUT_SECONDS)
    session.set_config_variable("metadata_service_num_attempts", METADATA_ATTEMPTS)
    try:
        resolver = session.get_component("credential_provider")
        for method in NOT_READ_BY_THE_CLI:
            resolver.remove(method)
        credentials = session.get_credentials()
    except botocore.exceptions.BotoCoreError as error:
        raise CredentialsMissingError(f"AWS credentials cannot be read ({error})") from error
    if credentials is None:
        raise CredentialsMissingError(
            "no AWS credentials found (environment, ~/.aws config and credentials, SSO, ECS task or EC2 instance role)"
        )
    method: str = credentials.method
    return method


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m consumer.local.credentials [WHAT]``: exit 0 quietly when credentials resolve, else one line on
    stderr naming what is missing and how to provide it, and :attr:`ExitCode.CONFIG`. ``WHAT`` (default
    ``cdk``) starts the line: the command that needs them, e.g. ``make deploy``."""
    args = list(sys.argv[1:] if argv is None else argv)
    what = " ".join(args) or "cdk"
    try:
        credential_source()
    except CredentialsMissingError as error:
        print(f"{what}: {error}; {HOW}", file=sys.stderr)
        return ExitCode.CONFIG
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
