"""The team's own handlers, outside the framework: each module declares one ``@worker`` handler.

An environment deploys one with ``"handler": "workers.<module>:handle"`` in cdk.json. The package and its
dependencies (``requirements.txt``, locked in ``requirements.lock`` by ``make lock``) go into the consumer image
beside the runtime (``.dockerignore``, ``consumer/Dockerfile``); its tests (``tests/``) do not.
"""
