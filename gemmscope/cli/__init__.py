"""The `gemmscope` command: a thin click layer over the library. `main` is the command group
(cli.group); the modules of its commands register them on it when imported here."""

from gemmscope.cli import tools, traces, watch, whatif  # noqa: F401  (each registers its commands on main)
from gemmscope.cli.group import EXAMPLE_RUN, EXAMPLE_TRACE, main

__all__ = ["EXAMPLE_RUN", "EXAMPLE_TRACE", "main"]
