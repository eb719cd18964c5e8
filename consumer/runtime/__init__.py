"""What the container runs: the consumer loop, its configuration, acknowledgements, idempotency,\nscale-in protection, observability and the DLQ message format. Imports neither ops nor local."""
