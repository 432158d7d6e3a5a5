"""Capturing with torch.profiler instead of nsys, for gemmscope's start-up hook (sitecustomize.py
beside this file): where `gemmscope verify --profiler torch` names a folder (TORCH_TRACE_FOLDER),
each process that imports torch records from then on and, if it used CUDA, writes its trace there
at exit; with `--steps A-B` (STEPS), it records those training steps alone (gemmscope_steps.py):
from a warm-up step before them to the first optimizer step after them, and writes the trace then;
with `--delay/--duration` (TIME_WINDOW), from DELAY seconds after the hook's import for DURATION
seconds, and writes the trace as it stops."""

import atexit
import gzip
import inspect
import os
import shutil
import threading
import time

from gemmscope_protocol import AUDIT, TIME_WINDOW, TORCH_TRACE_FOLDER, parse_time_window, torch_trace_name
from gemmscope_records import launcher_rank, note, on_main_thread_record, profiler_recording
from gemmscope_steps import asked_windows, on_first_mark

# Set where Kineto runs as dynolog's daemon client in the process (KINETO_USE_DAEMON=1).
KINETO_DAEMON = "KINETO_USE_DAEMON"

# The hook's import, at the process's start-up: a time window's DELAY counts from here.
_IMPORTED = time.monotonic()


def start_profiler(torch) -> None:
    """Where gemmscope captures with torch.profiler (TORCH_TRACE_FOLDER names the folder): record
    CPU and CUDA activity with operator shapes, as a user's own torch.profiler run does, from now
    on to the exit (_write_trace), or over the steps STEPS asks (_profile_steps) or the time
    TIME_WINDOW asks (_profile_time_window). A failure costs
    the trace, never the program."""
    folder = os.environ.get(TORCH_TRACE_FOLDER)
    if not folder:
        return
    if os.environ.get(KINETO_DAEMON, "0") not in ("", "0"):
        # one CUPTI client per process: the daemon's (dynolog's `dyno gputrace`) excludes a second
        note(f"Kineto's daemon holds this process's profiling ({KINETO_DAEMON} is set): gemmscope starts no "
             "torch.profiler here; follow the daemon's traces with `gemmscope timeline --follow DIR`")
        return
    windows = asked_windows()
    if windows is not None or os.environ.get(TIME_WINDOW):
        tear_down_cupti_after_window(torch)
    if windows is not None:  # an audit's traces are named by their steps: one per window
        _profile_windows(torch, folder, windows, named_by_steps=bool(os.environ.get(AUDIT)))
        return
    if os.environ.get(TIME_WINDOW):
        _profile_time_window(torch, folder, *parse_time_window(os.environ[TIME_WINDOW]))
        return
    # acc_events: one cycle (no schedule); without it torch warns in every process, in the
    # program's own output, that a cycle's end clears the events
    profiler = _started(torch, accumulate=True)
    if profiler is not None:
        atexit.register(_write_trace, torch, profiler, folder)


# CUDA from which Kineto's teardown of CUPTI is safe with CUDA graphs (torch/profiler/profiler.py keeps
# it off below this version when the program captures graphs)
_TEARDOWN_SAFE_CUDA = (12, 6)


def tear_down_cupti_after_window(torch) -> None:
    """A window stops the profiler while the job goes on, and Kineto leaves CUPTI attached after a
    profiler stops unless TEARDOWN_CUPTI=1 (PyTorch issue 144455): every later step would pay for the
    window. Ask for the teardown where it is safe (CUDA >= 12.6), never over the user's own setting."""
    if "TEARDOWN_CUPTI" in os.environ:
        return
    try:
        cuda = tuple(int(part) for part in (torch.version.cuda or "").split(".")[:2])
    except ValueError:
        return
    if cuda >= _TEARDOWN_SAFE_CUDA:
        os.environ["TEARDOWN_CUPTI"] = "1"


def _started(torch, accumulate: bool = False, schedule=None, on_trace_ready=None):
    """A torch.profiler recording from now on, or None (said on stderr) when it cannot start."""
    try:
        from torch.profiler import ProfilerActivity, profile, supported_activities

        # CUDA where this torch can trace it: asking for it elsewhere only warns
        activities = [a for a in (ProfilerActivity.CPU, ProfilerActivity.CUDA) if a in supported_activities()]
        options = {"acc_events": True} if accumulate and "acc_events" in inspect.signature(profile).parameters else {}
        if schedule is not None:
            options.update(schedule=schedule, on_trace_ready=on_trace_ready)
        profiler = profile(activities=activities, record_shapes=True, **options)
        profiler.start()
        return profiler
    except Exception as exc:
        note(f"torch.profiler could not start ({type(exc).__name__}: {exc}): this process is not captured")
        return None


def _profile_windows(torch, folder: str, windows, named_by_steps: bool) -> None:
    """Each of `windows` (gemmscope_steps.CaptureWindows, steps first..last, in order):
    torch.profiler starts at the first mark of step first-2 with a warm-up step through its
    schedule (from the start, with no schedule, for first <= 1), advances at each step's first
    mark and saves at the first mark of step last+1 (gemmscope_steps.on_first_mark says why those
    bounds hold the steps whole), stopped there, and the next window is waited for; a job that
    ends inside a window writes what it recorded at exit. `named_by_steps`: each trace's name says
    its window's steps (an audit's several)."""
    from torch.profiler import schedule

    state: dict = {"window": windows.at_start, "profiler": None, "written": False, "scheduled": False}

    def save(profiler) -> None:
        state["written"] = True
        steps = state["window"] if named_by_steps else None
        _guarded(lambda: _export(profiler, folder, steps))

    def at_first_mark(n: int) -> None:
        profiler = state["profiler"]
        if profiler is None:
            window = windows.opening(n)
            if window is None:
                return
            first, last = window
            state.update(window=window, scheduled=True, profiler=_started(torch, on_trace_ready=save, schedule=schedule(
                wait=0, warmup=1, active=last - first + 2, repeat=1)))
        elif not state["scheduled"]:
            if n == state["window"][1] + 1:  # no schedule: stopped and saved here
                profiler.stop()
                save(profiler)
        else:
            profiler.step()
            if state["written"]:  # the window's last step is saved: CUPTI goes now, not at exit
                profiler.stop()
        if state["written"]:  # the next window, if any, from a profiler of its own
            state.update(window=None, profiler=None, written=False)

    def at_exit() -> None:
        profiler = state["profiler"]
        if profiler is None or state["written"] or not profiler_recording():
            return
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()  # kernels still running are in the trace too
        except Exception:  # a CUDA error ended the program: what finished is still written
            pass
        profiler.stop()  # with a schedule, this saves what the window recorded (on_trace_ready)
        if not state["written"]:
            save(profiler)

    if state["window"] is not None:  # step 0 runs from the start
        state["profiler"] = _started(torch, accumulate=True)
    on_first_mark(at_first_mark)
    atexit.register(_guarded, at_exit)


def _profile_time_window(torch, folder: str, delay: float, duration: float | None) -> None:
    """From `delay` seconds after the hook's import, for `duration` seconds (to the exit without
    one): torch.profiler starts, and stops with its trace written (_write_trace: a process that
    used no CUDA writes none), at the first record the hook makes on the main thread (a GEMM
    call's, an optimizer step's mark) once each time has come: a profiler started from another
    thread records none of the program's own. A job that ends inside the window writes what it
    recorded at exit; one that ends before it writes nothing."""
    state: dict = {"profiler": None, "closes": None, "done": False}

    def at_record() -> None:
        if state["done"]:
            return
        now = time.monotonic()
        if state["profiler"] is None:
            if now >= _IMPORTED + delay:
                state["profiler"] = _started(torch, accumulate=True)
                state["done"] = state["profiler"] is None
                # from when it records: its first start in a process can take seconds
                state["closes"] = None if duration is None else time.monotonic() + duration
        elif state["closes"] is not None and now >= state["closes"]:
            state["done"] = True
            _write_trace(torch, state["profiler"], folder)

    def at_exit() -> None:
        if state["profiler"] is not None and not state["done"]:
            state["done"] = True
            _write_trace(torch, state["profiler"], folder)

    on_main_thread_record(at_record)
    if threading.current_thread() is threading.main_thread():
        at_record()  # as torch is imported: a window already due opens now
    atexit.register(_guarded, at_exit)


def _guarded(call) -> None:
    try:
        call()
    except Exception as exc:  # never break the program being checked, nor its exit
        note(f"torch.profiler trace not written ({type(exc).__name__}: {exc})")


def used_cuda(torch) -> bool:
    """Looked up at exit: the tests stand a CPU process for one that used CUDA by replacing it."""
    return torch.cuda.is_initialized()


def _write_trace(torch, profiler, folder: str) -> None:
    """At exit: stop the profiler and, in a process that used CUDA, write its trace."""
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
        if cuda_used:
            _export(profiler, folder)
    except Exception as exc:  # never break the program being checked, nor its exit
        note(f"torch.profiler trace not written ({type(exc).__name__}: {exc})")


def _export(profiler, folder: str, steps: tuple[int, int] | None = None) -> None:
    """The trace, gzipped, written through a name gemmscope does not read, so that it appears
    whole or not at all; `steps`: an audit window's, in its name."""
    path = os.path.join(folder, torch_trace_name(os.getpid(), launcher_rank(), steps))
    plain, partial = f"{path}.plain.partial", f"{path}.partial"
    try:
        profiler.export_chrome_trace(plain)
        # level 1: a trace is read once; a long run's is hundreds of MB
        with open(plain, "rb") as source, gzip.open(partial, "wb", compresslevel=1) as target:
            shutil.copyfileobj(source, target, 1 << 20)
        os.chmod(partial, 0o600)  # the trace holds the program's names and shapes: its user's alone
        os.replace(partial, path)
    finally:
        for leftover in (plain, partial):
            if os.path.exists(leftover):
                os.remove(leftover)
