"""Infrastructure half: CDK constructs and stacks built from the worker contract.

Imports ``consumer.contract`` (standard library only) and the handler modules
it names, never the consumer's boto3 runtime.
"""
