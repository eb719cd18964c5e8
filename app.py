#!/usr/bin/env python3
"""CDK entry point: ``cdk synth`` / ``cdk deploy -c env=prod`` (or ``python app.py``)."""

import sys

from infra.toolchain import use_pinned_node

use_pinned_node()  # before the CDK loads: jsii starts its Node process at import

try:
    import aws_cdk  # noqa: F401
except ModuleNotFoundError:  # `npx cdk ...` outside the venv runs the machine's python3 (cdk.json's app)
    sys.exit(
        f"app.py: the AWS CDK is not installed for {sys.executable}: use `make synth ENV=<env>` (or make diff,"
        " make deploy), or `. .venv/bin/activate` before `npx cdk ...`"
    )

from infra.app import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
