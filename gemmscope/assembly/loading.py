"""Reading many traces at once: one per rank of a job, each read and attributed in its own worker.

`load` reads each trace and joins its launches (traces.read.read_trace + attribution.launches) in a worker:
in this process for one trace, in a local process pool for several, or on a Dask cluster when
given a scheduler address (the engine Nsight Systems' own multi-report recipes use). A trace that
cannot be read is kept as an error for its rank; it never drops the others.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from gemmscope.assembly.attribution import LoadedTrace, attribute
from gemmscope.common import scratch
from gemmscope.errors import ExitCode, InputError
from gemmscope.traces.read import read_trace


def load_one(path: Path, threads: int = 2) -> LoadedTrace:
    """One trace read (traces.read.read_trace's `threads`) and attributed."""
    try:
        return attribute(read_trace(path, threads))
    except InputError as exc:
        return LoadedTrace(Path(path), error=str(exc))


def load(paths: Sequence[Path], workers: int | None = None, scheduler: str | None = None,
         read: Mapping[Path, LoadedTrace] | None = None) -> list[LoadedTrace]:
    """Every trace of `paths`, in order. `workers`: local processes (default: one per trace, at
    most one per CPU); `scheduler`: a Dask distributed scheduler address, which takes over.
    `read`: traces loaded already (by resolved path: a capture's, read while its program ran on),
    taken as they are."""
    paths = [Path(p) for p in paths]
    read = {Path(p).resolve(): item for p, item in (read or {}).items()}
    if read:
        rest = [p for p in paths if p.resolve() not in read]
        read_now = iter(load(rest, workers, scheduler) if rest else [])
        return [read[p.resolve()] if p.resolve() in read else next(read_now) for p in paths]
    # One trace is read over two threads; several are read side by side by workers,
    # each in one thread (so that --workers N is what uses N CPUs).
    threads = 2 if len(paths) == 1 else 1
    if scheduler is not None:
        try:
            from distributed import Client
        except ImportError:
            raise InputError("--scheduler needs Dask's distributed package: pip install 'gemmscope[cluster]'") from None
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as exc:
            raise InputError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        with client:
            return client.gather(client.map(load_one, [str(p) for p in paths], threads=threads, pure=False))
    workers = min(len(paths), workers or os.cpu_count() or 1)
    if workers <= 1:
        return [load_one(p, threads) for p in paths]
    pool = ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(scratch.folder(),))
    # submit, not map: on Ctrl-C map cancels what has not finished, and the pool, finding its
    # workers gone, then fails to set their futures (a traceback from its own thread).
    futures = [pool.submit(load_one, path, threads) for path in paths]
    try:
        loaded = [future.result() for future in futures]
    except BrokenProcessPool:  # a worker was killed (out of memory, a signal): say so, in one line
        pool.shutdown(wait=False, cancel_futures=True)
        raise InputError("a process reading the traces was stopped before it finished "
                         "(out of memory? try --workers 1)") from None
    except KeyboardInterrupt:
        # The workers are ended, not waited for: one the Ctrl-C ended while it was sending its
        # result leaves the pool's thread waiting for the rest of it forever (the CLI exits
        # without joining it), and one started after the Ctrl-C never got it.
        for worker in multiprocessing.active_children():
            worker.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return loaded


def _start_worker(scratch_folder: Path) -> None:
    """A worker process: the parent's scratch folder (which the parent removes), and Ctrl-C ends
    it at once and quietly: the parent, interrupted too, says so once. Where the parent ignores
    Ctrl-C (started in the background, SIGINT ignored from its start), so does the worker: ended
    alone, it would break the pool and read as a worker lost."""
    scratch.adopt(scratch_folder)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda _signum, _frame: os._exit(ExitCode.INTERRUPTED))
