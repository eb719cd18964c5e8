"""The operator's DLQ tool (``python -m consumer dlq``): inspect, export, import, redrive, purge.
Ships in the image for ECS Exec; typer and rich only in ``commands`` and ``progress`` (the presentation),
the logic in ``queues``, ``redrive`` and ``files`` on the parts in ``passes`` and ``records``."""
