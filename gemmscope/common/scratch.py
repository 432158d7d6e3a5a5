"""Private scratch space for the copies of trace data gemmscope makes: an .xz input decompressed,
an .nsys-rep exported, scrub's work copy, verify's capture when --out does not keep it.

They hold the unscrubbed trace (environment, command line, the program's output), so they never
go next to the input (its folder may be read-only or shared) nor into a shared cache: one folder
per process, made on first use by `tempfile.mkdtemp` (mode 0700: no other user can list or read
it), and removed when the process exits, however it exits (a result, an error, Ctrl-C; the CLI
turns SIGTERM and SIGHUP into an exit too). Worker processes use their parent's folder
(`adopt`) and leave its removal to the parent.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_folder: Path | None = None
_owner: int | None = None  # the process that made _folder


def folder() -> Path:
    """This process's scratch folder (0700), made on first use and removed at exit."""
    global _folder, _owner
    if _folder is None:
        _folder, _owner = Path(tempfile.mkdtemp(prefix="gemmscope-")), os.getpid()
        atexit.register(_remove, _folder, _owner)
    return _folder


def remove() -> None:
    """Remove the scratch folder now, if this process made it (for an exit that runs no exit
    handlers); an adopted one is its parent's."""
    if _folder is not None and _owner is not None:
        _remove(_folder, _owner)


def adopt(path: str | Path) -> None:
    """Use `path`, the scratch folder of the process that started this one (a worker)."""
    global _folder
    _folder = Path(path)


def _remove(path: Path, owner: int) -> None:
    # A forked child inherits the registration: only the process that made the folder removes it.
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)
