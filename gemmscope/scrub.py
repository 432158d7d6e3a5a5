"""Remove what an nsys export records about the machine and the user before a trace is shared.

nsys stores the profiled process's whole environment (tokens, paths, user names) in the export:
`TARGET_INFO_SYSTEM_ENV` row `DeviceEnvironment`, `META_DATA_CAPTURE` rows
`PROCESS_n:ENVIRONMENT_VARIABLE`, and stray `NAME=value` strings in `StringIds`; plus the
command line, working directory, user and host names. `scrub` writes a copy without them and
leaves everything gemmscope reads (kernels, API calls, NVTX, GPUs, memory) untouched.
"""

from __future__ import annotations

import lzma
import re
import shutil
import sqlite3
from pathlib import Path

from gemmscope.errors import InputError
from gemmscope.trace_parser import read_trace

REDACTED = "[redacted]"

# (table, key column, value column, SQL LIKE patterns of keys whose values are redacted)
_REDACT = (
    ("TARGET_INFO_SYSTEM_ENV", "name", "value", ("DeviceEnvironment", "Hostname")),
    ("META_DATA_CAPTURE", "name", "value",
     ("PROCESS_%:ARGUMENT_%", "PROCESS_%:WORKING_DIR", "PROCESS_%:USER_NAME", "DEVICE_DISPLAY_NAME")),
    ("META_DATA_EXPORT", "name", "value", ("EXPORT_PARAM_%PATH%", "EXPORT_HOST", "EXPORT_USER")),
)
_DELETE = (("META_DATA_CAPTURE", "name", "PROCESS_%:ENVIRONMENT_VARIABLE"),)
# An environment assignment as nsys stores it among other strings: NAME=value.
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def scrub(trace: str | Path, out: str | Path) -> Path:
    """Write a scrubbed copy of `trace` (an nsys SQLite export, .sqlite.xz or .nsys-rep) to
    `out`: SQLite, xz-compressed when `out` ends in .xz."""
    out = Path(out)
    loaded = read_trace(trace)  # validates; decompresses or exports first where needed
    source = loaded.sqlite
    if out.resolve() in (source.resolve(), Path(trace).resolve()):
        raise InputError("scrub writes a new file: give an output path other than the input")
    if out.is_dir():
        raise InputError(f"{out} is a folder: give the output file's path")
    if not out.parent.is_dir():
        raise InputError(f"no such folder: {out.parent}")
    partial = out.with_name(out.name + ".partial")
    shutil.copyfile(source, partial)
    try:
        conn = sqlite3.connect(partial)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table, key, value, patterns in _REDACT:
            if table in tables:
                for pattern in patterns:
                    conn.execute(f"UPDATE {table} SET {value} = ? WHERE {key} LIKE ?", (REDACTED, pattern))
        for table, key, pattern in _DELETE:
            if table in tables:
                conn.execute(f"DELETE FROM {table} WHERE {key} LIKE ?", (pattern,))
        env_strings = [
            (REDACTED, string_id)
            for string_id, value in conn.execute("SELECT id, value FROM StringIds")
            if value and _ENV_ASSIGNMENT.match(value)
        ]
        conn.executemany("UPDATE StringIds SET value = ? WHERE id = ?", env_strings)
        conn.commit()
        conn.execute("VACUUM")  # freed pages would still hold the old values
        conn.close()
        if out.suffix == ".xz":
            partial.write_bytes(lzma.compress(partial.read_bytes(), preset=9))
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out)
    return out
