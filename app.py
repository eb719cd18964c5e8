#!/usr/bin/env python3
"""CDK entry point: ``cdk synth`` / ``cdk deploy -c env=prod`` (or ``python app.py``)."""

import sys

from infra.toolchain import use_pinned_node

use_pinned_node()  # before the CDK loads: jsii starts its Node process at import

from infra.app import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
