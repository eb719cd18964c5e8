"""The bare loop, the yardstick: ``python bench/peers/bare.py`` (``QUEUE_URL``; the endpoint from ``AWS_ENDPOINT_URL``).

One thread: ``receive_message(MaxNumberOfMessages=10, WaitTimeSeconds=20)``, then one ``delete_message_batch`` of
what it received. A default boto3 client, no hooks, no logging, no handler: what SQS's two calls per ten messages
cost one interpreter, and nothing else. Not a consumer to run (a crash mid-batch strands the batch); the floor
every consumer's CPU per message is held against. Stops on SIGTERM (the default action).
"""

from __future__ import annotations

import os

import boto3


def main() -> None:
    queue_url = os.environ["QUEUE_URL"]
    sqs = boto3.client("sqs")
    while True:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=20).get(
            "Messages", []
        )
        if messages:
            sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
            )


if __name__ == "__main__":
    main()
