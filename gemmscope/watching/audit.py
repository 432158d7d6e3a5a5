"""`verify --every N --window W -- COMMAND`: the command run with gemmscope's hook capturing W
training steps every N steps, or every N of wall time (torch.profiler, from step
gemmscope_protocol.AUDIT_FIRST_STEP on) in every process, to its own end; each window's trace judged as it lands, in gemmscope's process while the
program runs on (its thread pays only the profiler's start, stop and export), into the job's
timeline (timeline.Timeline) in OUT."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gemmscope.autocast_hook.gemmscope_protocol import trace_steps
from gemmscope.common.sinks import terminal_lines
from gemmscope.errors import ExitCode
from gemmscope.options import Options
from gemmscope.running.capturing import Captured, CaptureWindow, capture
from gemmscope.watching.timeline import Timeline


@dataclass(frozen=True)
class Audited:
    """An audited run: its timeline (a record per window and rank) and how the command ended."""

    timeline: Timeline
    captured: Captured

    @property
    def exit_code(self) -> ExitCode:
        """3 for a failed command (never a pass), else the worst window's state (4: no window)."""
        if self.captured.failed:
            return ExitCode.COMMAND_FAILED
        state = self.timeline.state
        return state.exit_code if state is not None else ExitCode.NOT_CHECKED


def node_folder(out: Path) -> Path:
    """This verify process's own folder in OUT: its host and pid, so that no two processes of a job
    (a verify per node, or per srun task) write one file or remove another's traces."""
    return out / f"{socket.gethostname()}-{os.getpid()}"


def _stderr(line: str) -> None:
    print(terminal_lines(line), file=sys.stderr, flush=True)


def audit(command: Sequence[str], out: str | Path, every: int | str, window: int = 3, options: Options | None = None, *,
          echo: bool = False, say: Callable[[str], None] = _stderr, keep_windows: int | None = None) -> Audited:
    """Runs `command` with `window` steps captured every `every` steps, or every `every` of wall
    time ("30m"), in each of its processes, each window judged against `options` as it lands,
    into OUT/NODE/timeline.jsonl beside the windows' traces (node_folder: one per verify process,
    so that the verify of each node of a job, or each srun task, writes its own files into one
    shared OUT); a line per window through `say`, its alerts with it. `keep_windows`: the traces
    of windows with nothing new kept, the newest (None: all)."""
    options = options or Options()
    folder = node_folder(Path(out))
    timeline = Timeline(folder, options, say=say, keep_windows=keep_windows)
    judged: set[str] = set()
    lock = threading.Lock()

    def judge(trace: Path) -> None:
        with lock:  # the capture's thread while the program runs, this one after it
            if trace.name in judged:
                return
            judged.add(trace.name)
            timeline.judge([trace], trace_steps(trace.name))

    captured = capture(command, folder, profiler="torch", window=CaptureWindow(audit=(every, window)), echo=echo,
                       redact=options.redact, keep=options.keep, say=say, on_trace=judge)
    for trace in captured.traces:  # those written as the program ended
        judge(trace)
    return Audited(timeline, captured)
