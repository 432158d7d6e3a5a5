"""Following a folder that another tool writes traces into (dynolog's `dyno gputrace`, Kineto's
daemon, a program's own torch.profiler schedule, Megatron's --profile, nsys exports): each new
trace, once complete, is judged as one window of the job's timeline (timeline.Timeline).

A trace is complete once its size and modification time have not moved for `settle_s` and, for a
compressed one, it reads to its end; a name still being written under a temporary suffix
(`.partial`, `.tmp`) is never read. Traces already there when following starts are judged first,
in name order."""

from __future__ import annotations

import gzip
import lzma
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gemmscope.autocast_hook.gemmscope_protocol import trace_steps
from gemmscope.watching.timeline import TIMELINE_FILE, Timeline

# What a trace file is named (torch.profiler's `*.pt.trace.json[.gz]`, gemmscope's own
# `trace.*.json.gz`, Chrome traces, nsys's SQLite and Parquet exports, compressed or not).
_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.xz", ".sqlite.gz")
_BEING_WRITTEN = (".partial", ".tmp", ".part")


def _is_trace(path: Path) -> bool:
    name = path.name
    return (path.is_file() and name != TIMELINE_FILE and name.endswith(_TRACE_SUFFIXES)
            and not name.endswith(_BEING_WRITTEN) and not name.startswith("."))


def _reads_to_its_end(path: Path) -> bool:
    """A compressed file whose stream ends: not one still being written."""
    if path.suffix not in (".gz", ".xz"):
        return True
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else lzma.open(path, "rb")) as stream:
            while stream.read(1 << 20):
                pass
    except (EOFError, OSError, lzma.LZMAError):
        return False
    return True


def complete_traces(folder: Path, settle_s: float, poll_s: float = 0.5,
                    ended: Callable[[], bool] = lambda: False) -> Iterator[Path]:
    """Each trace that appears in `folder` (those already there first), once complete, until
    `ended()` says the writer is gone and no trace there is still settling."""
    seen: dict[Path, tuple[int, int, float]] = {}  # size, mtime, since when unchanged
    judged: set[Path] = set()
    while True:
        gone = ended()  # asked before the look: what the writer left by then is seen below
        now = time.monotonic()
        settling = False
        for path in sorted(p for p in folder.iterdir() if p not in judged and _is_trace(p)):
            stat = path.stat()
            shape = (stat.st_size, stat.st_mtime_ns)
            before = seen.get(path)
            if before is None or before[:2] != shape:
                seen[path] = (*shape, now)
                settling = True
            elif now - before[2] >= settle_s and _reads_to_its_end(path):
                judged.add(path)
                yield path
            else:
                settling = True
        if gone and not settling:
            return
        time.sleep(poll_s)


def process_ended(pid: int) -> Callable[[], bool]:
    """Whether process `pid` has ended (a training process whose windows are followed)."""
    def ended() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, someone else's
            return False
        return False

    return ended


def follow(folder: str | Path, timeline: Timeline, count: int | None = None, settle_s: float = 2.0,
           poll_s: float = 0.5, until_pid: int | None = None) -> Timeline:
    """Judges each trace written into `folder` as a window of `timeline`, until `count` traces
    were judged or process `until_pid` has ended and its last traces are judged (neither: until
    interrupted). A window's steps are read from its name where gemmscope's hook named it."""
    ended = process_ended(until_pid) if until_pid is not None else (lambda: False)
    for judged, trace in enumerate(complete_traces(Path(folder), settle_s, poll_s, ended), 1):
        timeline.judge([trace], trace_steps(trace.name))
        if count is not None and judged >= count:
            break
    return timeline
