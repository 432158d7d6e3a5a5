"""Training steps, for gemmscope's start-up hook (sitecustomize.py beside this file): a mark at
every optimizer step, numbered by training iteration, and, where `gemmscope verify --steps A-B`
asks (STEPS), a capture of those steps alone, GEMM calls recorded only while it is open.

torch's global optimizer step hooks see every ``torch.optim.Optimizer`` subclass (TE's and apex's
fused optimizers, and the torch optimizers Megatron's and accelerate's wrappers step). One training
iteration may step several optimizers (Megatron's chained optimizer steps each inner one): an
iteration ends, and the next begins, when an optimizer that already stepped in it steps again. A
step GradScaler skips (inf/NaN gradients: it does not call the optimizer) is still a step.

The marks are what the readers turn into steps (step N ends at its last mark, begins at the last
mark of N-1). For a capture of steps A..B, the capture opens before step A-1 and closes once step
B+1 has begun: one step early and one late, because one nsys session wraps every rank of a job and
the first rank to close the range would end the others' capture; the marks then say exactly which
launches belong to A..B.
"""

import importlib
import os
import time

from gemmscope_protocol import (
    AUDIT,
    CAPTURE_RANGE,
    STEP_PREFIX,
    STEPS,
    TORCH_TRACE_FOLDER,
    audit_windows,
    format_record,
    parse_audit,
    parse_steps,
)
from gemmscope_records import guarded, mark, note, patch, recording

# Where torch says an optimizer stepped (every torch.optim.Optimizer subclass), and where GradScaler
# skips a step: the entry points under torch this file patches or calls.
OPTIMIZER_STEP_HOOK = "optim.optimizer.register_optimizer_step_post_hook"
GRAD_SCALER_STEP = "amp.GradScaler.step"

# Per process: the iteration being run, and which optimizers stepped in it (by id).
_iteration = [0]
_stepped_in_iteration: set = set()
_optimizer_steps = [0]  # every optimizer step the global hook saw, GradScaler's skipped ones apart
# Called with n at iteration n's first mark, before it is made (capture control: on_first_mark).
_on_first_mark: list = []


def _stepped(torch, optimizer) -> None:
    key = id(optimizer)
    first = not _stepped_in_iteration
    if key in _stepped_in_iteration:
        _iteration[0] += 1
        _stepped_in_iteration.clear()
        first = True
    if first:
        for call in _on_first_mark:
            call(_iteration[0])
    _stepped_in_iteration.add(key)
    mark(torch, format_record(STEP_PREFIX, {"n": _iteration[0]}))


def _patch_grad_scaler(torch) -> None:
    """GradScaler.step skips the optimizer's step on inf/NaN gradients: the iteration still ran."""
    def wrap(original):
        def step(self, optimizer, *args, **kwargs):
            seen = _optimizer_steps[0]
            try:
                return original(self, optimizer, *args, **kwargs)
            finally:
                if _optimizer_steps[0] == seen:  # the optimizer did not step: skipped, or raised
                    try:
                        _stepped(torch, optimizer)
                    except Exception:  # never break the program being checked
                        pass

        step.__wrapped__ = original
        return step

    patch(torch, GRAD_SCALER_STEP, wrap, "the training steps GradScaler skips (inf/NaN gradients)")


def watch_steps(torch) -> None:
    """Marks every optimizer step from now on (torch's global hook, GradScaler's skipped steps)."""
    def after_step(optimizer, _args, _kwargs) -> None:
        _optimizer_steps[0] += 1
        try:
            _stepped(torch, optimizer)
        except Exception as exc:  # never break the program being checked
            note(f"optimizer step not marked ({type(exc).__name__})")

    def register() -> None:
        owner, _, name = OPTIMIZER_STEP_HOOK.rpartition(".")
        getattr(importlib.import_module(f"torch.{owner}"), name)(after_step)

    if not guarded(f"torch.{OPTIMIZER_STEP_HOOK}", torch, "training steps (and so --steps windows)", register):
        return
    _patch_grad_scaler(torch)
    try:  # says the process was watched, so that a trace without steps says it ran no optimizer step
        mark(torch, format_record(STEP_PREFIX, {"watching": "optimizers"}))
    except Exception:  # a torch without NVTX (a CPU build): nothing to mark into
        pass
    windows = asked_windows()
    if windows is not None:
        record_only_in(windows)
    if os.environ.get(STEPS) and not os.environ.get(TORCH_TRACE_FOLDER):
        _capture_with_nsys(torch, *parse_steps(os.environ[STEPS]))


def on_first_mark(call) -> None:
    """`call(n)` at the first mark of iteration n (the end of its first optimizer step), before
    the mark is made. Step n runs from the last mark of n-1 to its own last: a capture holds steps
    A..B whole once it opens by the first mark of A-2 (from the start for A <= 1) and closes at the
    first mark of B+1."""
    _on_first_mark.append(call)


class CaptureWindows:
    """The windows (first, last steps) a process captures, each decided once, at the step's first
    mark where its capture opens (its first step - 2; before any step for first <= 1), and the same
    for every consumer of the marks (the GEMM recording switch, the profiler): given in advance
    (`steps`, in order; an iterator, maybe endless), or every `period_s` of wall time, `window`
    steps from step `first` on, one opening at the first mark once the period has passed since
    the previous opened (time.monotonic, read at the marks: no thread of its own). A window opens
    only after the previous has closed (the first mark of its last step + 1)."""

    def __init__(self, steps=None, period_s=None, window=0, first=0) -> None:
        self._steps = iter(steps) if steps is not None else None
        self._period_s, self._window, self._first = period_s, window, first
        self._next = next(self._steps, None) if self._steps is not None else None
        self._previous = None  # the last window opened
        self._opened_at = None  # when (time.monotonic), by wall time
        self._decided = (None, None)  # (mark, window): the latest decision, for the next consumer
        self.at_start = None
        if self._next is not None and self._next[0] <= 1:  # step 0 runs from the start
            self.at_start = self._previous = self._next
            self._next = next(self._steps, None)

    def opening(self, n: int):
        """The window whose capture opens at the first mark of step `n`, else None."""
        if self._decided[0] != n:
            self._decided = (n, self._decide(n))
        return self._decided[1]

    def _decide(self, n: int):
        if self._previous is not None and n <= self._previous[1] + 1:
            return None
        if self._steps is not None:
            if self._next is None or n != self._next[0] - 2:
                return None
            self._previous, self._next = self._next, next(self._steps, None)
            return self._previous
        if n < self._first - 2:
            return None
        now = time.monotonic()
        if self._opened_at is not None and now - self._opened_at < self._period_s:
            return None
        self._previous, self._opened_at = (n + 2, n + 1 + self._window), now
        return self._previous


def on_capture_windows(windows, opens, closes) -> None:
    """`opens()` where a capture of each of `windows` (CaptureWindows) opens (now for first <= 1,
    else at the first mark of first-2) and `closes()` where it closes (the first mark of last+1):
    on_first_mark says why."""
    current = [windows.at_start]
    if current[0] is not None:
        opens()

    def at_first_mark(n: int) -> None:
        window = current[0]
        if window is None:
            current[0] = windows.opening(n)
            if current[0] is not None:
                opens()
        elif n == window[1] + 1:
            closes()
            current[0] = None

    on_first_mark(at_first_mark)


def on_capture_window(first: int, last: int, opens, closes) -> None:
    """on_capture_windows for one window, steps first..last."""
    on_capture_windows(CaptureWindows([(first, last)]), opens, closes)


# The windows asked, by what asked them: one CaptureWindows for every consumer, so that all open
# and close the same windows (by wall time, a second one would read the clock at other moments).
_asked: dict = {}


def asked_windows():
    """The windows this process captures (CaptureWindows, the same for every caller): `verify
    --steps A-B`'s one (STEPS), an audit's endless ones (AUDIT: every so many steps, or every so
    long), or None for the whole run."""
    asked = (os.environ.get(STEPS), os.environ.get(AUDIT))
    if asked not in _asked:
        _asked[asked] = _windows(*asked)
    return _asked[asked]


def _windows(steps, audit):
    if steps:
        return CaptureWindows([parse_steps(steps)])
    if audit:
        every, period_s, window, first = parse_audit(audit)
        if every is not None:
            return CaptureWindows(audit_windows(every, window, first))
        return CaptureWindows(period_s=period_s, window=window, first=first)
    return None


def record_only_in(windows) -> None:
    """GEMM calls recorded over the captures of `windows` alone, for nsys and torch.profiler alike."""
    def switch(on: bool):
        return lambda: recording.__setitem__(0, on)

    recording[0] = False
    on_capture_windows(windows, switch(True), switch(False))


def _capture_with_nsys(torch, first: int, last: int) -> None:
    """nsys collects CAPTURE_RANGE (`--capture-range=nvtx`): a start/end range, not a push/pop one,
    since it opens and closes in two optimizer steps, around whatever the program pushed between."""
    opened: list = []

    def open_capture() -> None:
        try:
            opened.append(torch.cuda.nvtx.range_start(CAPTURE_RANGE))
        except Exception as exc:  # a torch without NVTX: nothing to capture by, the program runs on
            note(f"the capture of steps {first}-{last} could not open ({type(exc).__name__})")

    def close_capture() -> None:
        if opened:
            torch.cuda.nvtx.range_end(opened.pop())

    on_capture_window(first, last, open_capture, close_capture)
