"""``python -m consumer run``: the container's command; ``python -m consumer --help`` lists the rest."""

from consumer.cli import main

if __name__ == "__main__":
    main()
