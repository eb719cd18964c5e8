#!/usr/bin/env python3
"""CDK entry point: ``cdk synth`` / ``cdk deploy -c env=prod`` (or ``python app.py``)."""

from infra.app import build_app

if __name__ == "__main__":
    app, _ = build_app()
    app.synth()
