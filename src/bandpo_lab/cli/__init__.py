"""The ``bandpo`` command line. Each subcommand lives in its own module with ``add_arguments(parser)`` and
``run(args) -> int``; ``main.py`` imports it only when that subcommand runs."""
