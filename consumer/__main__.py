"""``python -m consumer run``: the container's command."""

from consumer.cli import app

if __name__ == "__main__":
    app()
