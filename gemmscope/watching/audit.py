"""`verify --every N --window W -- COMMAND`: the command run with gemmscope's hook capturing W
training steps every N (torch.profiler, from step gemmscope_protocol.AUDIT_FIRST_STEP on) in every
process, to its own end; each window's trace judged as it lands, in gemmscope's process while the
program runs on (its thread pays only the profiler's start, stop and export), into the job's
timeline (timeline.Timeline) in OUT."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gemmscope.autocast_hook.gemmscope_protocol import trace_steps
from gemmscope.errors import ExitCode
from gemmscope.options import Options
from gemmscope.running.capturing import Captured, CaptureWindow, capture
from gemmscope.watching.timeline import TIMELINE_FILE, Timeline


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


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def audit(command: Sequence[str], out: str | Path, every: int, window: int = 3, options: Options | None = None, *,
          echo: bool = False, say: Callable[[str], None] = _stderr) -> Audited:
    """Runs `command` with `window` steps captured every `every` in each of its processes, each
    window judged against `options` as it lands, into OUT/timeline.jsonl (a previous one there is
    replaced) beside the windows' traces; a line per window through `say`, its alerts with it."""
    options = options or Options()
    out = Path(out)
    (out / TIMELINE_FILE).unlink(missing_ok=True)
    timeline = Timeline(out, options, say=say)
    judged: set[str] = set()
    lock = threading.Lock()

    def judge(trace: Path) -> None:
        with lock:  # the capture's thread while the program runs, this one after it
            if trace.name in judged:
                return
            judged.add(trace.name)
            timeline.judge([trace], trace_steps(trace.name))

    captured = capture(command, out, profiler="torch", window=CaptureWindow(audit=(every, window)), echo=echo,
                       redact=options.redact, keep=options.keep, say=say, on_trace=judge)
    for trace in captured.traces:  # those written as the program ended
        judge(trace)
    return Audited(timeline, captured)
