"""Run a command with torch.profiler recording inside it, for machines without nsys.

The command runs with gemmscope's hook first on PYTHONPATH and TORCH_TRACE_FOLDER naming a
folder: in every process of it that imports torch the hook starts torch.profiler (CPU and CUDA
activity, operator shapes) and, when the process exits, writes its trace there if it used CUDA
(gemmscope/autocast_hook/sitecustomize.py). So a torchrun job leaves one trace per worker and
none of its launcher, and gemmscope reads them as it reads any torch.profiler trace
(gemmscope.traces.kineto). Unlike nsys, a process records from its start to its exit: there is no capture
window, and a process that ends without exiting (os._exit, killed) leaves no trace.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

from gemmscope.autocast_hook.gemmscope_protocol import TORCH_TRACE_FOLDER, TORCH_TRACE_GLOB
from gemmscope.profilers import relay

# What Kineto, torch.profiler's library, prints on stderr at each start and stop of a capture
# ("USDT:2026-11-25 07:53:42 1587:1587 SyncActivityProfilerHandler.cpp:52] profiler_start"):
# held back unless asked for, as nsys's own text is. Its warnings and errors stay in view.
_KINETO_OWN_TEXT = re.compile(r"(?:USDT|STAGE|INFO):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\] .*")

# How often the traces folder is looked at while the program runs: a window's trace is read as
# soon as it appears, not after the program's end.
_WATCH_S = 0.25


def profile(command: list[str], folder: Path, env: dict[str, str], echo_profiler: bool = False,
            written: Callable[[Path], None] = lambda trace: None) -> relay.Capture:
    """Run `command` (env: with the hook on PYTHONPATH) so that each of its processes that used
    CUDA writes its torch.profiler trace into `folder`; a previous capture's traces there are
    removed first, so that what is read afterwards is this run's alone. `written` is called with
    each trace that appears while the program runs (a window's; each appears whole: the hook
    renames it into place), from a thread of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(TORCH_TRACE_GLOB):
        stale.unlink()
    ended = threading.Event()

    def watch() -> None:
        seen: set[Path] = set()
        while not ended.wait(_WATCH_S):
            for trace in traces(folder):
                if trace not in seen:
                    seen.add(trace)
                    written(trace)

    watcher = threading.Thread(target=watch, name="gemmscope-trace-watch", daemon=True)
    watcher.start()
    try:
        return relay.run(command, {**env, TORCH_TRACE_FOLDER: str(folder.resolve())}, _KINETO_OWN_TEXT, echo_profiler)
    finally:
        ended.set()
        watcher.join()


def traces(folder: Path) -> list[Path]:
    """The traces the run wrote into `folder`, one per process that used CUDA, in name order."""
    return sorted(folder.glob(TORCH_TRACE_GLOB))
