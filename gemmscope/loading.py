"""Reading many traces at once: one per rank of a job, each read and attributed in its own worker.

`load` reads each trace and joins its launches (trace_parser.read_trace + launches) in a worker:
in this process for one trace, in a local process pool for several, or on a Dask cluster when
given a scheduler address (the engine Nsight Systems' own multi-report recipes use). A trace that
cannot be read is kept as an error for its rank; it never drops the others.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gemmscope import scratch
from gemmscope.errors import EXIT_INTERRUPTED, InputError
from gemmscope.trace_parser import EnclosingRanges, Trace, launches_with_ranges, read_trace


@dataclass
class LoadedTrace:
    """One trace read and attributed, or why it could not be."""

    path: Path
    trace: Trace | None = None
    launches: pd.DataFrame | None = None
    ranges: EnclosingRanges | None = None  # the NVTX ranges around each of `launches`
    error: str | None = None
    no_kernels: bool = False  # read, but it holds no GPU kernel
    cuda_traced: bool = False  # its CUDA API calls were captured: with no_kernels, the program launched none


def attribute(trace: Trace) -> LoadedTrace:
    """A trace already read, with its launches attributed (or why it has nothing to attribute)."""
    if trace.kernels.empty:
        cuda_traced = bool(trace.meta.get("cuda_api_traced"))
        error = (trace.meta.get("no_kernels")  # a reader that can tell why says so (a CPU-only torch.profiler trace)
                 or (f"{trace.path} ran no GPU kernel: its CUDA calls were captured, and none launched one"
                     if cuda_traced else f"{trace.path} holds no GPU kernels: was it captured with --trace=cuda, on a GPU?"))
        return LoadedTrace(trace.path, error=error, no_kernels=True, cuda_traced=cuda_traced)
    frame, ranges = launches_with_ranges(trace)
    # `frame` holds every kernel with the call that launched it: the trace's own frames of them
    # are let go (a long trace's are hundreds of MB), their columns kept.
    trace = dataclasses.replace(trace, kernels=trace.kernels.iloc[:0].copy(), api_calls=trace.api_calls.iloc[:0].copy())
    return LoadedTrace(trace.path, trace, frame, ranges)


def load_one(path: Path, threads: int = 2) -> LoadedTrace:
    """One trace read (trace_parser.read_trace's `threads`) and attributed."""
    try:
        return attribute(read_trace(path, threads))
    except InputError as exc:
        return LoadedTrace(Path(path), error=str(exc))


def load(paths: Sequence[Path], workers: int | None = None, scheduler: str | None = None) -> list[LoadedTrace]:
    """Every trace of `paths`, in order. `workers`: local processes (default: one per trace, at
    most one per CPU); `scheduler`: a Dask distributed scheduler address, which takes over."""
    paths = [Path(p) for p in paths]
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
    with ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(scratch.folder(),)) as pool:
        # submit, not map: on Ctrl-C map cancels what has not finished, and the pool, finding its
        # workers gone, then fails to set their futures (a traceback from its own thread).
        futures = [pool.submit(load_one, path, threads) for path in paths]
        try:
            return [future.result() for future in futures]
        except BrokenProcessPool:  # a worker was killed (out of memory, a signal): say so, in one line
            raise InputError("a process reading the traces was stopped before it finished "
                             "(out of memory? try --workers 1)") from None


def _start_worker(scratch_folder: Path) -> None:
    """A worker process: the parent's scratch folder (which the parent removes), and Ctrl-C ends
    it at once and quietly: the parent, interrupted too, says so once."""
    scratch.adopt(scratch_folder)
    signal.signal(signal.SIGINT, lambda _signum, _frame: os._exit(EXIT_INTERRUPTED))
