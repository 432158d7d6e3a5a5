"""Capturing with torch.profiler instead of nsys, for gemmscope's start-up hook (sitecustomize.py
beside this file): where `gemmscope verify --profiler torch` names a folder (TORCH_TRACE_FOLDER),
each process that imports torch records from then on and, if it used CUDA, writes its trace there
at exit."""

import atexit
import gzip
import inspect
import os
import shutil

from gemmscope_protocol import TORCH_TRACE_FOLDER, torch_trace_name
from gemmscope_records import launcher_rank, note, profiler_recording


def start_profiler(torch) -> None:
    """Where gemmscope captures with torch.profiler (TORCH_TRACE_FOLDER names the folder): record
    CPU and CUDA activity with operator shapes from now on, as a user's own torch.profiler run
    does, and write the trace at exit (_write_trace). A failure costs the trace, never the program."""
    folder = os.environ.get(TORCH_TRACE_FOLDER)
    if not folder:
        return
    try:
        from torch.profiler import ProfilerActivity, profile, supported_activities

        # CUDA where this torch can trace it: asking for it elsewhere only warns
        activities = [a for a in (ProfilerActivity.CPU, ProfilerActivity.CUDA) if a in supported_activities()]
        # acc_events: one cycle (no schedule) either way; without it torch warns in every
        # process, in the program's own output, that a cycle's end clears the events
        accumulate = {"acc_events": True} if "acc_events" in inspect.signature(profile).parameters else {}
        profiler = profile(activities=activities, record_shapes=True, **accumulate)
        profiler.start()
    except Exception as exc:
        note(f"torch.profiler could not start ({type(exc).__name__}: {exc}): this process is not captured")
        return
    atexit.register(_write_trace, torch, profiler, folder)


def used_cuda(torch) -> bool:
    """Looked up at exit: the tests stand a CPU process for one that used CUDA by replacing it."""
    return torch.cuda.is_initialized()


def _write_trace(torch, profiler, folder: str) -> None:
    """At exit: stop the profiler and, in a process that used CUDA, write its trace, gzipped,
    through a name gemmscope does not read, so that a trace appears whole or not at all."""
    path = os.path.join(folder, torch_trace_name(os.getpid(), launcher_rank()))
    plain, partial = f"{path}.plain.partial", f"{path}.partial"
    try:
        cuda_used = used_cuda(torch)
        if not profiler_recording():
            # a profiler the program starts itself ends this one: its own traces are the ones to read
            if cuda_used:
                note("torch.profiler was stopped by the program (does it run torch.profiler itself? Then check "
                      "its traces with gemmscope verify --trace): no trace written")
            return
        if cuda_used:
            try:
                torch.cuda.synchronize()  # kernels still running are in the trace too
            except Exception:  # a CUDA error ended the program: what finished is still written
                pass
        profiler.stop()
        if not cuda_used:
            return
        profiler.export_chrome_trace(plain)
        # level 1: a trace is read once; a long run's is hundreds of MB
        with open(plain, "rb") as source, gzip.open(partial, "wb", compresslevel=1) as target:
            shutil.copyfileobj(source, target, 1 << 20)
        os.replace(partial, path)
    except Exception as exc:  # never break the program being checked, nor its exit
        note(f"torch.profiler trace not written ({type(exc).__name__}: {exc})")
    finally:
        for leftover in (plain, partial):
            if os.path.exists(leftover):
                os.remove(leftover)
