"""The operator's DLQ tool (``python -m consumer dlq``): inspect, export, import, redrive, purge.\nShips in the image for ECS Exec; typer and rich only in ``commands``."""
