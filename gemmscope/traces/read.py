"""Which traces were named, and which reader reads each, told by content.

`trace_paths` expands files, folders and globs into traces; `read_trace` reads one with the
reader its content calls for: a torch.profiler trace (traces.kineto), whatever its name, or
an nsys export (traces.nsys).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from gemmscope.errors import InputError
from gemmscope.traces import kineto, kineto_json, nsys
from gemmscope.traces.model import Trace

TRACE_SUFFIXES = (".sqlite", ".sqlite.xz", ".nsys-rep")
# torch.profiler's traces: in a folder, only those whose content says so are taken.
KINETO_SUFFIXES = (".json", ".json.gz")


def _is_trace(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES) or (path.name.endswith(KINETO_SUFFIXES) and kineto_json.is_kineto(path))


def trace_paths(arguments: Sequence[str | Path]) -> list[Path]:
    """The traces named by files, folders (every export inside; an .nsys-rep only where no
    export of it is beside it; a folder nsys exported as Parquet or Arrow is one trace) and glob
    patterns, in name order, each once."""
    found: list[Path] = []
    if any(str(argument) == "" for argument in arguments):  # Path("") is the current folder: never meant
        raise InputError("an empty trace name was given (an unset shell variable?): name a trace, folder or glob")
    for argument in map(Path, arguments):
        if argument.is_dir() and nsys.columnar_export(argument):  # one trace: nsys's Parquet or Arrow export
            found.append(argument)
        elif argument.is_dir():
            inside = [p for p in sorted(argument.iterdir()) if _is_trace(p) or (p.is_dir() and nsys.columnar_export(p))]
            # the export of REPORT.nsys-rep: REPORT.sqlite, REPORT.sqlite.xz, or a folder REPORT.parquetdir
            exported = {p.stem if p.is_dir() else p.name.removesuffix(".xz").removesuffix(".sqlite") for p in inside
                        if not p.name.endswith(".nsys-rep")}
            inside = [p for p in inside if not (p.suffix == ".nsys-rep" and p.stem in exported)]
            if not inside:
                raise InputError(f"no trace (.sqlite, .sqlite.xz, .nsys-rep, torch.profiler .json) in folder {argument}")
            found += inside
        elif not argument.exists() and glob.has_magic(str(argument)):
            matches = sorted(Path(p) for p in glob.glob(str(argument)))
            if not matches:
                raise InputError(f"no trace matches {argument}")
            found += matches
        else:
            found.append(argument)
    for path in found:
        _check_name(path)
    return list(dict.fromkeys(found))


def _check_name(path: Path) -> None:
    """InputError for a trace whose file name is not UTF-8 text: a trace's name is text in every
    output (its JSON, its tables), and Python holds such a name with lone surrogates that no
    output can encode."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("utf-8", errors="backslashreplace")
        raise InputError(f"{shown}: the file name is not UTF-8 text, which gemmscope names traces by in its "
                         "outputs: rename the file (or link it under a UTF-8 name)") from None


def read_trace(path: str | Path, threads: int = 2, name: Path | None = None) -> Trace:
    """Read an nsys SQLite export: `.sqlite`, `.sqlite.xz` (as fixtures and examples ship), or
    an `.nsys-rep` (exported with nsys first; see traces.nsys.sqlite_export); or a torch.profiler trace,
    told by its content whatever its name (traces.kineto). `threads`: 2 reads the tables
    over two threads (for one long trace); 1 reads all in this thread (where processes already
    read several traces side by side). `name`: what the trace and messages call it (default: `path`;
    a scrubbed copy in the scratch folder keeps its input's name)."""
    given = Path(path)
    if given.is_file() and kineto_json.is_kineto(given):
        return kineto.read(given, name)
    return nsys.read(given, threads, name)


def trace_source(path: str | Path) -> Path:
    """The file a trace is read from: a torch.profiler trace itself, an nsys trace's SQLite
    export (traces.nsys.sqlite_export)."""
    path = Path(path)
    if path.is_file() and kineto_json.is_kineto(path):
        return path
    export = nsys.sqlite_export(nsys.redactable(path))
    nsys.check_strings(export, path)
    return export


def redactable_source(trace: Trace) -> Path:
    """What scrubbing `trace` reads and rewrites: its nsys export as SQLite (nsys.redactable: for
    a Parquet/Arrow export, the .nsys-rep beside it), or the torch.profiler trace itself."""
    return nsys.redactable(trace.records) if trace.made_by_nsys else trace.path
