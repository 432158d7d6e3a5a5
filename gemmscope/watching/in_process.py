"""`gemmscope.audit(every=2000, window=3, out=DIR)`: the audit `verify --every` runs, started from
inside a training script nobody wraps (a scheduler's entry point, a notebook, a framework's
trainer: integrations.py). gemmscope's hook is installed into the running interpreter (what is
imported already is patched now, and what that cannot reach is said and marked: see
autocast_hook/gemmscope_install.py), every process that calls it writes its windows' traces into
DIR, and one follower process (`gemmscope timeline --follow DIR --until-pid PID`, started by the
rank-0 process) judges them into DIR/timeline.jsonl, off the training's process."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from gemmscope.autocast_hook import gemmscope_protocol
from gemmscope.errors import InputError
from gemmscope.watching.timeline import TIMELINE_FILE

# What the follower says (a line per window, its alerts): beside the timeline it writes.
FOLLOW_LOG = "follow.log"


def audit(every: int | str, window: int = 3, out: str | Path = "gemmscope-audit", *, expect: str | None = None,
          follow: bool = True) -> Path:
    """Audits this process from now on: `window` training steps every `every` steps (counted from
    this call), or every `every` of wall time ("30m": a period with its unit, s, m or h), the first
    window from step gemmscope_protocol.AUDIT_FIRST_STEP, each window's trace
    written into `out` (made if missing; a shared folder for a job of several processes or nodes)
    and, with `follow`, judged there by a follower process the rank-0 process starts (against
    `expect`, else what each GEMM asked). Returns the folder. Once per process."""
    try:
        audit_env = gemmscope_protocol.format_audit(every, window)
        gemmscope_protocol.parse_audit(audit_env)
    except (TypeError, ValueError) as exc:
        raise InputError(f"audit every {every} window {window}: {exc}") from None
    folder = Path(out).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if os.environ.get(gemmscope_protocol.TORCH_TRACE_FOLDER):
        raise InputError("gemmscope's hook already captures this process (verify, or an earlier audit)")
    os.environ[gemmscope_protocol.AUDIT] = audit_env
    os.environ[gemmscope_protocol.TORCH_TRACE_FOLDER] = str(folder)
    hook = str(Path(gemmscope_protocol.__file__).parent)
    if hook not in sys.path:
        sys.path.insert(0, hook)
    importlib.import_module("gemmscope_install").install()
    if follow and _launcher_rank() in ("0", gemmscope_protocol.UNKNOWN):
        _start_follower(folder, expect)
    return folder


def _launcher_rank() -> str:
    """This process's rank as its launcher set it (the hook's own rule)."""
    return importlib.import_module("gemmscope_records").launcher_rank()


def _start_follower(folder: Path, expect: str | None) -> None:
    """The follower, in a session of its own (a Ctrl-C meant for training leaves it to judge the
    last windows), until this process has ended; its lines go to FOLLOW_LOG."""
    (folder / TIMELINE_FILE).unlink(missing_ok=True)
    command = [sys.executable, "-m", "gemmscope", "timeline", "--follow", str(folder), "--until-pid", str(os.getpid()),
               *(["--expect", expect] if expect else [])]
    env = {k: v for k, v in os.environ.items()
           if k not in (gemmscope_protocol.AUDIT, gemmscope_protocol.TORCH_TRACE_FOLDER)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if os.path.abspath(p or ".") != str(Path(gemmscope_protocol.__file__).parent))
    with (folder / FOLLOW_LOG).open("w") as log:
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, env=env,
                         start_new_session=True)
