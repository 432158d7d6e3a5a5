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
        record_only_in(asked_windows())  # an iterator of its own: each consumer walks the windows
    if os.environ.get(STEPS) and not os.environ.get(TORCH_TRACE_FOLDER):
        _capture_with_nsys(torch, *parse_steps(os.environ[STEPS]))


def on_first_mark(call) -> None:
    """`call(n)` at the first mark of iteration n (the end of its first optimizer step), before
    the mark is made. Step n runs from the last mark of n-1 to its own last: a capture holds steps
    A..B whole once it opens by the first mark of A-2 (from the start for A <= 1) and closes at the
    first mark of B+1."""
    _on_first_mark.append(call)


def on_capture_windows(windows, opens, closes) -> None:
    """`opens()` where a capture of each of `windows` ((first, last) steps, in order; an iterator,
    maybe endless) opens (now for first <= 1, else at the first mark of first-2) and `closes()`
    where it closes (the first mark of last+1): on_first_mark says why. Windows come at least three
    steps apart (gemmscope_protocol.parse_audit), so that one closes before the next opens."""
    windows = iter(windows)
    current = [next(windows, None)]
    if current[0] is not None and current[0][0] <= 1:  # step 0 runs from the start
        opens()

    def at_first_mark(n: int) -> None:
        window = current[0]
        if window is None:
            return
        if n == window[0] - 2:
            opens()
        elif n == window[1] + 1:
            closes()
            current[0] = next(windows, None)

    on_first_mark(at_first_mark)


def on_capture_window(first: int, last: int, opens, closes) -> None:
    """on_capture_windows for one window, steps first..last."""
    on_capture_windows([(first, last)], opens, closes)


def asked_windows():
    """The windows this process captures: `verify --steps A-B`'s one (STEPS), an audit's endless
    ones (AUDIT), or None for the whole run."""
    if os.environ.get(STEPS):
        return [parse_steps(os.environ[STEPS])]
    if os.environ.get(AUDIT):
        return audit_windows(*parse_audit(os.environ[AUDIT]))
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
