"""Evaluate a template's CloudWatch alarms on minute-by-minute series, as AWS documents it (``python -m infra.alarms``).

Operator and CI tooling, not shipped in the image: no CDK, no endpoint, no AWS account.
"""
