"""Capturing a command's run (`gemmscope.capture`, what `verify -- COMMAND` runs): the command
under nsys with TE's NVTX ranges on, or with torch.profiler started in each of its processes,
gemmscope's hook on in both; the traces it left to read (`gemmscope.Analysis(captured)`), and how
it ended.

    captured = gemmscope.capture(["python", "train.py"], window=gemmscope.CaptureWindow(steps=(20, 22)))
    gemmscope.Analysis(captured, expect="fp8-block").check.state

What is said while it runs (the stages, a failed command with its last stderr lines, what the
window holds) goes to `say` (default: stderr); the program's own output goes to stderr as it
comes, so that stdout holds only what gemmscope prints of the result.
"""

from __future__ import annotations

import importlib
import os
import queue
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemmscope.autocast_hook import gemmscope_protocol
from gemmscope.common import scratch
from gemmscope.common.sinks import terminal_lines
from gemmscope.errors import InputError

if TYPE_CHECKING:
    from gemmscope.assembly.attribution import LoadedTrace

# What a command can be captured with: nsys, or torch.profiler inside each of its processes.
PROFILERS = ("nsys", "torch")
# How many stages `verify -- COMMAND` goes through, each announced on one line (the third, the
# check, is the caller's).
STAGES = 3
# A job that ended before the steps asked for: the same words, and exit code, for both profilers.
_NOT_REACHED = "the command ended before training step {first} (steps are its optimizer steps, from 0)"
# A job that ended before --delay's window opened: likewise.
_NOT_OPENED = ("the command ended before the capture window opened ({delay:g} s after the start): nothing was "
               "collected; give a shorter --delay")


def say_on_stderr(line: str) -> None:
    print(terminal_lines(line), file=sys.stderr, flush=True)


def progress(stage: int, what: str, say: Callable[[str], None] = say_on_stderr) -> None:
    say(f"gemmscope: [{stage}/{STAGES}] {what}")


@dataclass(frozen=True)
class CaptureWindow:
    """What part of the run is collected: the first instance of an NVTX range (`nvtx_range`;
    "cudaProfilerApi": from the program's first cudaProfilerStart to its Stop), from `delay_s`
    after the start, for `duration_s`; or training steps `steps` (A, B), inclusive, from 0: the
    optimizer steps gemmscope's hook marks, a window of its own. None of them: the whole run."""

    nvtx_range: str | None = None
    delay_s: float | None = None
    duration_s: float | None = None
    steps: tuple[int, int] | None = None
    # an audit: (every, window), `window` training steps every `every` steps (a number), or every
    # `every` of wall time (a period with its unit: "30m"), from step
    # gemmscope_protocol.AUDIT_FIRST_STEP on, each captured and judged as a window of its own
    audit: tuple[int | str, int] | None = None

    def __post_init__(self) -> None:
        from gemmscope.profilers import nsys_runner

        nsys_runner.check_window(self.nvtx_range, self.delay_s, self.duration_s)
        if self.steps is not None and self.timed_or_ranged:
            raise InputError("--steps is a capture window of its own: give it, or --capture-range / --delay / "
                             "--duration, not both")
        if self.audit is not None:
            if self.steps is not None or self.timed_or_ranged:
                raise InputError("--every captures windows of its own: not with --steps, --capture-range, --delay "
                                 "or --duration")
            try:
                gemmscope_protocol.parse_audit(gemmscope_protocol.format_audit(*self.audit))
            except ValueError as exc:
                raise InputError(f"--every {self.audit[0]} --window {self.audit[1]}: {exc}") from None

    @property
    def timed_or_ranged(self) -> bool:
        """A window nsys collects by (a range, a delay, a duration), not by steps."""
        return any(v is not None for v in (self.nvtx_range, self.delay_s, self.duration_s))

    def nsys_window(self) -> dict[str, Any]:
        """nsys_runner.profile's window arguments: steps are collected as the hook's own range."""
        nvtx_range = gemmscope_protocol.CAPTURE_RANGE if self.steps is not None else self.nvtx_range
        return {"nvtx_range": nvtx_range, "delay_s": self.delay_s, "duration_s": self.duration_s}

    def described(self) -> str | None:
        """The window in words, None for the whole run."""
        if self.audit is not None:
            every, window = self.audit
            period = f"{every} steps" if isinstance(every, int) else f"{every} of wall time"
            return (f"{window} training steps every {period} from step {gemmscope_protocol.AUDIT_FIRST_STEP}, "
                    "each judged as it lands")
        if self.steps is not None:
            return f"training steps {self.steps[0]}-{self.steps[1]} (its optimizer steps, from 0)"
        from gemmscope.profilers import nsys_runner

        return nsys_runner.describe_window(self.nvtx_range, self.delay_s, self.duration_s)

    def document(self) -> dict[str, Any] | None:
        """As the JSON report's meta.command.capture_window says it: what was given, None for the whole run."""
        if self.steps is not None:
            return {"steps": list(self.steps)}
        if self.audit is not None:
            return {"every": self.audit[0], "window": self.audit[1]}
        given = {"nvtx_range": self.nvtx_range, "delay_s": self.delay_s, "duration_s": self.duration_s}
        return {k: v for k, v in given.items() if v is not None} or None


def check_profiler(profiler: str, window: CaptureWindow) -> None:
    """InputError where `profiler` cannot capture `window` (torch.profiler knows no NVTX range) or
    is not one of PROFILERS."""
    if profiler not in PROFILERS:
        raise InputError(f"unknown profiler {profiler!r}: choose from {', '.join(PROFILERS)}")
    if profiler == "nsys" and window.audit is not None:
        raise InputError("--every captures with torch.profiler (--profiler torch, its default): an nsys session "
                         "stays attached after its window and slows every later step")
    if profiler == "torch" and window.nvtx_range is not None:
        raise InputError("--capture-range is nsys's capture window: --profiler torch records each process from "
                         "its import of torch to its exit, or --steps, or --delay/--duration (or use nsys)")


@dataclass(frozen=True)
class Captured:
    """A command's capture: the traces to read (none when the run left none), its exit status,
    and what the JSON report says of it (`outcome`)."""

    traces: tuple[Path, ...]
    exit_code: int
    profiler: str
    window: CaptureWindow
    folder: Path  # where the capture lives (without `out`: the scratch folder, removed on exit)
    # Traces read and attributed while the program ran on (loading.load's `read`): a window's,
    # complete before the program's end. Analysis takes them as they are.
    read: Mapping[Path, LoadedTrace] = field(default_factory=dict, repr=False, compare=False)

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    @property
    def outcome(self) -> dict[str, Any]:
        """The JSON report's meta.command: exit_code, capture_window, profiler."""
        return {"exit_code": self.exit_code, "capture_window": self.window.document(), "profiler": self.profiler}


def capture(command: Sequence[str], out: str | Path | None = None, *, profiler: str = "nsys",
            window: CaptureWindow | None = None, echo: bool = False, redact: bool = True, keep: Sequence[str] = (),
            say: Callable[[str], None] = say_on_stderr, on_trace: Callable[[Path], None] | None = None) -> Captured:
    """Run `command` under `profiler` (PROFILERS) with gemmscope's hook, collecting `window`
    (default: the whole run); the capture kept in `out` (default: a private temporary folder,
    removed when gemmscope exits). `echo`: also show the profiler's own output. A command that
    failed is said at once, with its last stderr lines, redacted unless `redact` is False
    (`keep`: shell patterns the redaction leaves). `on_trace`: called with each trace complete
    while the program runs on (an audit's windows), one after another in a thread of its own,
    instead of reading it early for the check."""
    command = list(command)
    window = window or CaptureWindow()
    check_profiler(profiler, window)
    if not command:
        raise InputError("nothing to capture: give a command")
    if shutil.which(command[0]) is None:  # under nsys it would read as a crashed run (exit 3), under torch 2
        raise InputError(f"{command[0]}: command not found (not on PATH, or not an executable file)")
    kept = out is not None
    # Without `out`, the capture (the program's environment and output included) lives in the
    # private scratch folder, removed when gemmscope exits.
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(dir=scratch.folder()))
    folder.mkdir(parents=True, exist_ok=True)
    hook = str(Path(gemmscope_protocol.__file__).parent)  # the folder of the hook's sitecustomize
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH")) if p))
    if window.steps is not None:  # the hook collects those steps alone (one more on each side: gemmscope_steps)
        env[gemmscope_protocol.STEPS] = f"{window.steps[0]}-{window.steps[1]}"
    if window.audit is not None:
        env[gemmscope_protocol.AUDIT] = gemmscope_protocol.format_audit(*window.audit)
    reads = _ReadWhileRunning(on_trace)
    run = _Run(command, folder, kept, env, window, echo, redact, tuple(keep), say, reads.offer)
    importing = threading.Thread(target=_import_checking, name="gemmscope-imports", daemon=True)
    importing.start()  # with the program: the command line starts without what checking needs
    try:
        traces, exit_code = run.torch() if profiler == "torch" else run.nsys()
    finally:
        importing.join()
        read = reads.finished()
    return Captured(tuple(traces), exit_code, profiler, window, folder, read)


class _ReadWhileRunning:
    """Traces complete before the program's end (a window's: written at its last step, while
    the job runs on) read and attributed meanwhile, one after another in a thread of their own,
    so that the check after the program's end has less left to do; or each given to `on_trace`
    (an audit's judge), every one of them, those waiting at the program's end too."""

    def __init__(self, on_trace: Callable[[Path], None] | None = None) -> None:
        self._offered: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._read: dict[Path, LoadedTrace] = {}
        self._on_trace = on_trace
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._read_offered, name="gemmscope-early-reads", daemon=True)
        self._thread.start()

    def offer(self, path: Path) -> None:
        self._offered.put(path)

    def _read_offered(self) -> None:
        while (path := self._offered.get()) is not None:
            if self._on_trace is not None:
                self._on_trace(path)
                continue
            # once the program has ended, what is still waiting is left to the check, which reads
            # several traces side by side (every rank's, written at the exit), not one after another
            if self._ended.is_set():
                continue
            try:
                from gemmscope.assembly.loading import load_one

                self._read[path] = load_one(path)
            except Exception:  # not kept: the check reads it again, and says what failed there
                continue

    def finished(self) -> dict[Path, LoadedTrace]:
        """What was read once the program has ended: the trace being read then is waited for."""
        self._ended.set()
        self._offered.put(None)
        self._thread.join()
        return self._read


# What checking a capture imports (pandas and the modules on it), imported while the program runs.
_CHECKING_MODULES = ("gemmscope.assembly.loading", "gemmscope.assembly.job", "gemmscope.judging.judgement",
                     "gemmscope.diagnosing.steps", "gemmscope.diagnosing.diagnosis", "gemmscope.report.verification",
                     "gemmscope.report.documents", "gemmscope.report.terminal")


def _import_checking() -> None:
    for name in _CHECKING_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the check imports it again, and says what failed there
            return


@dataclass(frozen=True)
class _Run:
    command: list[str]
    out: Path
    kept: bool
    env: dict[str, str]
    window: CaptureWindow
    echo: bool
    redact: bool
    keep: tuple[str, ...]
    say: Callable[[str], None]
    written: Callable[[Path], None]  # a trace complete while the program may run on

    def nsys(self) -> tuple[list[Path], int]:
        """The command under nsys, with TE's NVTX ranges on: its trace's export (Parquet where
        pyarrow reads it, else SQLite: nsys_runner.capture_export_format)."""
        from gemmscope.profilers import nsys_runner

        report = self.out / "trace.nsys-rep"
        env = {**self.env, "NVTE_NVTX_ENABLED": "1"}
        nsys_window = self.window.nsys_window()
        if nsys_window["nvtx_range"] is not None:  # a range pushed with a plain string, not a registered one
            env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
        seen = self.window.described()
        progress(1, f"running the command under nsys{f', collecting {seen}' if seen else ''}"
                    f"{'' if self.echo else ' (nsys output: --verbose)'}", self.say)
        exported: list[Path | InputError] = []

        def export_once_written() -> None:
            # at a window's end nsys returns with its report while the program may run on for long:
            # the export is done meanwhile, not after it (an error in it said once the program ends)
            if report.exists():
                # a trace in the scratch folder is gone when gemmscope exits: its path is said only when kept
                export_format = nsys_runner.capture_export_format()
                progress(2, f"exporting the trace to {export_format}{f' ({report})' if self.kept else ''}", self.say)
                try:
                    trace = nsys_runner.CAPTURE_EXPORTERS[export_format](report)
                except InputError as exc:
                    exported.append(exc)
                else:
                    exported.append(trace)
                    self.written(trace)

        done = nsys_runner.profile(self.command, report, env, **nsys_window, echo_nsys=self.echo,
                                   once_written=export_once_written)
        self._say_if_failed(done, env)
        if not report.exists():
            if not self.echo and done.profiler_text:
                self.say("\n".join(done.profiler_text))
            if done.returncode == 0 and self.window.steps is not None:
                raise InputError(f"{_NOT_REACHED.format(first=self.window.steps[0])}: nothing was collected")
            if done.returncode == 0 and self.window.delay_s:
                raise InputError(_NOT_OPENED.format(delay=self.window.delay_s))
            if done.returncode == 0:
                raise InputError(f"nsys wrote no report for {' '.join(self.command)}")
            # a command that failed is reported as such even when it left nothing to read
            self.say("gemmscope: nsys wrote no report for the failed command")
            return [], done.returncode
        # The command line itself stays out of reports: it may hold secrets.
        if seen:
            self.say(f"gemmscope: the trace holds {seen}; the command ran to its own end")
        if isinstance(exported[0], InputError):
            raise exported[0]
        return [exported[0]], done.returncode

    def torch(self) -> tuple[list[Path], int]:
        """The command with torch.profiler in each of its processes: the traces of those that used
        CUDA (with steps, of those that ran them; with a --delay/--duration window, that time of each)."""
        from gemmscope.profilers import torch_runner

        steps, window, env = self.window.steps, self.window, dict(self.env)
        if window.delay_s is not None or window.duration_s is not None:
            env[gemmscope_protocol.TIME_WINDOW] = gemmscope_protocol.format_time_window(window.delay_s,
                                                                                        window.duration_s)
        seen = window.described()
        progress(1, "running the command under torch.profiler, in each of its processes that imports torch"
                    f"{f', collecting {seen}' if seen else ''}"
                    f"{'' if self.echo else ' (Kineto output: --verbose)'}", self.say)
        done = torch_runner.profile(self.command, self.out, env, self.echo, self.written)
        self._say_if_failed(done, env)
        traces = torch_runner.traces(self.out)
        if not traces and done.returncode == 0 and steps is not None:
            raise InputError(f"{_NOT_REACHED.format(first=steps[0])}: no process wrote a torch.profiler trace")
        if not traces and done.returncode == 0 and window.delay_s:
            raise InputError(_NOT_OPENED.format(delay=window.delay_s))
        if not traces and done.returncode != 0:
            self.say("gemmscope: it wrote no torch.profiler trace: no process of it used CUDA before it ended")
        progress(2, f"{len(traces)} torch.profiler trace{'s' * (len(traces) != 1)} written, one per process that "
                    f"used CUDA{f' ({self.out})' if self.kept else ''}", self.say)
        return traces, done.returncode

    def _say_if_failed(self, done, env: dict[str, str]) -> None:
        """A failed command said at once, its last stderr lines redacted as the traces are (what
        the command's environment `env` says is secret, and the policy's rules) unless not `redact`."""
        if done.returncode == 0:
            return
        lines = done.stderr_tail
        if self.redact:
            from gemmscope.redaction.scrub import environment_redactor

            lines = list(map(environment_redactor(env, self.keep), lines))
        tail = "".join(f"\n    {line}" for line in lines)
        self.say(f"gemmscope: the command failed (exit {done.returncode})"
                 f"{'; its last lines on stderr:' + tail if tail else ', printing nothing on stderr'}")
