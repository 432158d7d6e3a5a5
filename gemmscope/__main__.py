"""The `gemmscope` command's entry point (and `python -m gemmscope`).

Importing the CLI's libraries (pandas, matplotlib) takes a moment: Ctrl-C then is handled here,
as the CLI handles it later (one line, exit 130). SIGTERM and SIGHUP become an ordinary exit, so
that the private scratch folder (gemmscope.common.scratch) is removed then too.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from gemmscope.errors import ExitCode


def _exit_on(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def run() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on)
    try:
        with _one_blas_thread():
            import numpy  # noqa: F401  (every command but --help needs it, and it is now that OpenBLAS starts)

        from gemmscope.cli import main
    except KeyboardInterrupt:
        # out at once, as the CLI leaves on Ctrl-C: an interpreter that shuts down normally here, with
        # an import stopped half-way, could end by the signal instead (status -2, seen in 1 of ~30 runs)
        sys.stderr.write("gemmscope: interrupted\n")
        sys.stderr.flush()
        os._exit(ExitCode.INTERRUPTED)
    _collect_less()
    try:
        main()
    finally:
        # Done: a result, or a failure said. A Ctrl-C from here on, during the exit itself, is
        # ignored: it would end a finished run by the signal (status -2, no message).
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """numpy's OpenBLAS starts a thread per CPU as it loads (up to 64), and they spin for work
    before they sleep: a bare `import numpy` on a 16-CPU host used 2.2 s of CPU in 0.35 s. gemmscope
    does no BLAS work worth a thread. OpenBLAS reads OPENBLAS_NUM_THREADS as it loads, so the
    variable is set for that moment only (unless the user set it): the programs verify runs get
    the environment as it was given."""
    given = os.environ.get("OPENBLAS_NUM_THREADS")
    if given is None:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        if given is None:
            del os.environ["OPENBLAS_NUM_THREADS"]


def _collect_less() -> None:
    """What was imported lives to the end of the command: the cyclic garbage collector stops
    looking it over (gc.freeze), and looks over new objects every 50,000 allocations, not 700.
    Reading a trace makes millions of objects (names, rows) that form no cycle, and every look
    went over all those alive: 5 % of analyze's time on a trace of 200 k distinct range names.
    The command's process only: the library leaves its caller's collector as it is."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


if __name__ == "__main__":
    run()
