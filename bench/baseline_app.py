"""The synth-time baseline: aws-ecs-patterns' QueueProcessingFargateService with its defaults, one stack.

``python -m bench build`` synthesizes this and our ``app.py`` the same way in one session.
"""

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_ecs_patterns as patterns

if __name__ == "__main__":
    app = cdk.App()
    stack = cdk.Stack(app, "Baseline")
    patterns.QueueProcessingFargateService(
        stack,
        "Service",
        image=ecs.ContainerImage.from_registry("public.ecr.aws/docker/library/python:3.11-slim"),
        memory_limit_mib=512,
    )
    app.synth()
