"""Remove what an nsys export records about the machine and the user before a trace is shared.

nsys stores the profiled process's whole environment (tokens, paths, user names) in the export:
`TARGET_INFO_SYSTEM_ENV` row `DeviceEnvironment`, `META_DATA_CAPTURE` rows
`PROCESS_n:ENVIRONMENT_VARIABLE`, and stray `NAME=value` strings in `StringIds`; plus the
command line, working directory, user and host names. The paths those values name also turn up
elsewhere, e.g. as the profiled program's module path in OS-runtime call chains, so each of
them is redacted wherever it appears. `scrub` writes a copy without them and leaves everything
gemmscope reads (kernels, API calls, NVTX, GPUs, memory) untouched.
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
     ("PROCESS_%:COMMAND", "PROCESS_%:ARGUMENT_%", "PROCESS_%:WORKING_DIR", "PROCESS_%:USER_NAME",
      "DEVICE_DISPLAY_NAME")),
    ("META_DATA_EXPORT", "name", "value", ("EXPORT_PARAM_%PATH%", "EXPORT_HOST", "EXPORT_USER")),
)
# (table, key column, value column, SQL LIKE pattern of keys whose rows are deleted)
_DELETE = (("META_DATA_CAPTURE", "name", "value", "PROCESS_%:ENVIRONMENT_VARIABLE"),)
# An environment assignment as nsys stores it among other strings: NAME=value.
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Characters that continue a path name: a path matches only where none of them is just before
# it or just after it ("/bin" is not redacted inside "/usr/bin" or "/binaries").
_PATH_CHAR = r"[A-Za-z0-9_.~+-]"
# An absolute path inside a removed value ("PATH=/a:/b", "PWD=/x;HOME=/y", 'NAME="/z"',
# "--out=/w"; not the "/b" of "a/b"): from its slash up to the next separator.
_PATH_IN_VALUE = re.compile(rf"(?<!{_PATH_CHAR})/[^\s;:=\"',]*")


def _path_pattern(removed: list[str]) -> re.Pattern | None:
    """A pattern matching each absolute path named in the `removed` values, longest first so
    that a path is redacted whole rather than by its parent."""
    paths = {path.rstrip("/") for text in removed if text for path in _PATH_IN_VALUE.findall(text)} - {""}
    if not paths:
        return None
    alternatives = "|".join(re.escape(path) for path in sorted(paths, key=len, reverse=True))
    return re.compile(f"(?<!{_PATH_CHAR})(?<!/)(?:{alternatives})(?!{_PATH_CHAR})")


def _redact_paths(conn: sqlite3.Connection, tables: set[str], pattern: re.Pattern) -> None:
    for table in tables:
        for column in [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]:
            changed = []
            for rowid, text in conn.execute(
                    f'SELECT rowid, "{column}" FROM "{table}" WHERE typeof("{column}") = \'text\' '
                    f'AND instr("{column}", \'/\') > 0'):
                redacted = pattern.sub(REDACTED, text)
                if redacted != text:
                    changed.append((redacted, rowid))
            conn.executemany(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', changed)


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
        removed = []  # every value taken out, for the paths it names
        for table, key, value, patterns in _REDACT:
            if table in tables:
                for pattern in patterns:
                    removed += [v for (v,) in conn.execute(f"SELECT {value} FROM {table} WHERE {key} LIKE ?", (pattern,))]
                    conn.execute(f"UPDATE {table} SET {value} = ? WHERE {key} LIKE ?", (REDACTED, pattern))
        for table, key, value, pattern in _DELETE:
            if table in tables:
                removed += [v for (v,) in conn.execute(f"SELECT {value} FROM {table} WHERE {key} LIKE ?", (pattern,))]
                conn.execute(f"DELETE FROM {table} WHERE {key} LIKE ?", (pattern,))
        env_strings = [(string_id, value) for string_id, value in conn.execute("SELECT id, value FROM StringIds")
                       if value and _ENV_ASSIGNMENT.match(value)]
        removed += [value for _, value in env_strings]
        conn.executemany("UPDATE StringIds SET value = ? WHERE id = ?",
                         [(REDACTED, string_id) for string_id, _ in env_strings])
        paths = _path_pattern(removed)
        if paths is not None:
            _redact_paths(conn, tables, paths)
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
