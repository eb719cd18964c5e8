"""Helpers the multi-worker infra tests share: the settings every such environment starts from, a template's
resources of one type, and the dashboard's body parsed."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.conftest import Synthesized

SHARED = {"retain_queues": False, "pages_to_tickets": True, "source_retention_days": 1, "dlq_retention_days": 7}


def of_type(env: Synthesized, resource_type: str) -> dict[str, dict[str, Any]]:
    return env.resources(resource_type)


def dashboard_body(env: Synthesized) -> dict[str, Any]:
    """The dashboard's body with every CloudFormation token replaced by a plain word, parsed."""
    (dashboard,) = of_type(env, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    parsed: dict[str, Any] = json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))
    return parsed
