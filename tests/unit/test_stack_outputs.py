"""consumer/stack_outputs.py: how the local tooling finds a stack's workers in its template."""

from __future__ import annotations

from consumer.stack_outputs import WORKER_METADATA_KEY, task_definitions, worker_functions

RESOURCES = {
    "ProviderHandler": {"Type": "AWS::Lambda::Function", "Properties": {}},
    "NotificationsTask": {
        "Type": "AWS::ECS::TaskDefinition",
        "Metadata": {WORKER_METADATA_KEY: "notifications"},
        "Properties": {},
    },
    "WebhooksFunction": {
        "Type": "AWS::Lambda::Function",
        "Metadata": {WORKER_METADATA_KEY: "webhooks"},
        "Properties": {},
    },
}


def test_worker_functions_are_the_functions_naming_a_worker() -> None:
    """A Lambda worker's function names its worker in its metadata; the CDK's custom resource providers do not."""
    assert [name for name, _ in worker_functions(RESOURCES)] == ["webhooks"]


def test_task_definitions_leave_functions_out() -> None:
    """An ECS worker's task definition is found as before, beside a Lambda worker's function."""
    assert [name for name, _ in task_definitions(RESOURCES)] == ["notifications"]
