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
from pathlib import Path

from gemmscope import relay
from gemmscope.autocast_hook.gemmscope_protocol import TORCH_TRACE_FOLDER, TORCH_TRACE_GLOB

# What Kineto, torch.profiler's library, prints on stderr at each start and stop of a capture
# ("USDT:2026-11-25 07:53:42 1587:1587 SyncActivityProfilerHandler.cpp:52] profiler_start"):
# held back unless asked for, as nsys's own text is. Its warnings and errors stay in view.
_KINETO_OWN_TEXT = re.compile(r"(?:USDT|STAGE|INFO):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\] .*")


def profile(command: list[str], folder: Path, env: dict[str, str], echo_profiler: bool = False) -> relay.Capture:
    """Run `command` (env: with the hook on PYTHONPATH) so that each of its processes that used
    CUDA writes its torch.profiler trace into `folder`; a previous capture's traces there are
    removed first, so that what is read afterwards is this run's alone."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(TORCH_TRACE_GLOB):
        stale.unlink()
    return relay.run(command, {**env, TORCH_TRACE_FOLDER: str(folder.resolve())}, _KINETO_OWN_TEXT, echo_profiler)


def traces(folder: Path) -> list[Path]:
    """The traces the run wrote into `folder`, one per process that used CUDA, in name order."""
    return sorted(folder.glob(TORCH_TRACE_GLOB))
