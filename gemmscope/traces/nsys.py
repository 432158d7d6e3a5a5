"""Nsight Systems exports → the trace model's DataFrames (all of gemmscope's SQL is here and in nsys_tables).

`read` opens an export read-only and returns a `Trace`: one DataFrame per kind of record
(kernels, memsets/memcpys, CUDA API calls, NVTX ranges, threads, GPUs, memory events). Schemas
differ between nsys releases (2023.4 and 2025.x are read here), so every table and column is
looked up before use and a missing one yields an empty frame or an NA column, never an error.
`sqlite_export` turns what was given (.sqlite, .sqlite.xz, .nsys-rep) into the export to read.
"""

from __future__ import annotations

import ctypes
import hashlib
import lzma
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope.common import interruptible, scratch
from gemmscope.common.atomic import written_whole
from gemmscope.errors import InputError
from gemmscope.traces.model import (
    DamagedTrace,
    Trace,
    check_records,
    launch_key,
    object_column,
    process_id,
    refuse_missing,
    refuse_where,
    shown_value,
    thread_id,
)
from gemmscope.traces.nsys_tables import (
    LAUNCH_CALLS,
    NULL,
    OTHER_CALLS,
    ColumnarExport,
    Export,
    SqliteExport,
    columnar_export,
    read_only,
    refuse_non_text,
)

SQLITE_MAGIC = b"SQLite format 3\x00"

# NVTX_EVENTS.eventType values (nsys's ENUM_NSYS_EVENT_TYPE, the same in 2023.4 and 2025.3).
NVTX_KINDS = {34: "mark", 59: "push-pop", 60: "start-end"}
NVTX_DOMAIN_CREATE = 75


def redactable(export: Path) -> Path:
    """`export` where gemmscope can redact it (scrub, report, bundle): an SQLite export; for a
    columnar one, the SQLite export of the report it came from where that lies beside it (as
    verify keeps its capture: trace.nsys-rep and trace.parquetdir), else it is refused in one line
    (the redactor rewrites SQLite tables)."""
    if export.is_dir() and columnar_export(export):
        report = export.with_suffix(".nsys-rep")
        if report.is_file():
            return sqlite_export(report)
        raise InputError(f"{export} is an nsys Parquet/Arrow export: report, bundle and scrub redact an SQLite "
                         "export (nsys export --type sqlite, or the .nsys-rep beside the folder); analyze, "
                         "verify --trace, diagnose and compare read the folder as it is")
    return export


def check_strings(export: Path, name: Path | str) -> None:
    """InputError where the SQLite export `export` (of the trace `name`) holds a StringIds value
    that is not text, which nsys never writes: what redacts reads StringIds with SQL, not
    through `read`, and would otherwise meet a blob as if it were text."""
    try:
        with closing(read_only(export)) as conn:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'StringIds'").fetchone():
                return
            found = conn.execute("SELECT rowid, value FROM StringIds WHERE typeof(value) NOT IN ('text', 'null') "
                                 "LIMIT 1").fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{name} is a damaged or truncated SQLite file ({exc})") from None
    if found is not None:
        row, value = found
        raise InputError(DamagedTrace(f"StringIds.value is {shown_value(value)} in row {row}, not text").message(name))


# What a file that is no SQLite export is, by its first bytes (said instead of "not SQLite").
_MAGIC_KINDS = ((b"\x1f\x8b", "gzip-compressed"), (b"\xfd7zXZ\x00", "xz-compressed"), (b"PK\x03\x04", "a zip archive"),
                (b"BZh", "bzip2-compressed"), (b"\x28\xb5\x2f\xfd", "zstd-compressed"))


def _what_it_is(head: bytes) -> str:
    """What a file is, as far as its first bytes tell: empty, JSON, compressed (by what), text or data."""
    if not head:
        return "an empty file"
    kind = next((kind for magic, kind in _MAGIC_KINDS if head.startswith(magic)), None)
    if kind is not None:
        return f"{kind} but no trace gemmscope reads"
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        return "JSON but not a torch.profiler trace (no traceEvents near its start)"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return "data: not an SQLite export of Nsight Systems, nor a torch.profiler trace"
    return "text: not an SQLite export of Nsight Systems, nor a torch.profiler trace"


_READ_AS = ("give an nsys export (.sqlite from `nsys export --type sqlite`, .sqlite.xz, or an .nsys-rep) "
            "or a torch.profiler trace (.json or .json.gz)")


def _check_file(path: Path, given: Path) -> None:
    """`path` (the export of `given`, which messages name) is an SQLite file."""
    if not path.exists():
        raise InputError(f"no such file: {given}")
    if not path.is_file():
        raise InputError(f"not a file: {given}")
    with open(path, "rb") as f:
        head = f.read(512)
    if not head.startswith(SQLITE_MAGIC):
        what = _what_it_is(head)
        if path != given and what.startswith("JSON"):  # the .xz of a torch.profiler trace, or of other JSON
            raise InputError(f"{given} is xz-compressed JSON: gemmscope reads a torch.profiler trace as .json or "
                             ".json.gz (decompress it with xz -d, or recompress it with gzip)")
        raise InputError(f"{given} is {what}; {_READ_AS}")


def read(given: Path, threads: int = 2, name: Path | None = None) -> Trace:
    """The nsys trace `given` (.sqlite, .sqlite.xz or .nsys-rep: sqlite_export; or a folder nsys
    exported as Parquet or Arrow) read; `threads` as traces.read.read_trace's; `name`, what the
    trace and messages call it (default: `given`; a scrubbed copy keeps its input's)."""
    name = name or given
    if given.is_dir() and columnar_export(given):
        try:
            return _read(ColumnarExport(given), name, threads)
        except DamagedTrace as exc:
            raise InputError(exc.message(name)) from None
    path = sqlite_export(given)
    try:
        return _read(SqliteExport(path), name, threads)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:  # pandas wraps sqlite's errors
        raise InputError(f"{name} is a damaged or truncated SQLite file ({exc})") from None
    except DamagedTrace as exc:
        raise InputError(exc.message(name)) from None


def sqlite_export(path: str | Path) -> Path:
    """The SQLite export of a trace, checked to be one: a `.sqlite` itself; a `.sqlite.xz`
    decompressed, an `.nsys-rep` exported with nsys (or its export beside it, when newer), into
    this process's private scratch folder (gemmscope.common.scratch: never beside the input, which may
    be read-only or shared, and removed at exit)."""
    given = path = Path(path)
    if path.suffix == ".xz":
        path = _decompressed(path)
    elif path.suffix == ".nsys-rep":
        from gemmscope.profilers import nsys_runner

        if not path.is_file():
            raise InputError(f"no such file: {path}")
        path = nsys_runner.export_sqlite(path, scratch.folder() / _scratch_name(str(path.resolve()), path.stem))
    _check_file(path, given)
    try:
        with closing(read_only(path)) as conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{given} is a damaged or truncated SQLite file ({exc})") from None
    lacking = [table for table in ("META_DATA_EXPORT", "StringIds") if table not in tables]
    if lacking:
        raise InputError(f"{given} is an SQLite file but not an Nsight Systems export (no {' and no '.join(lacking)} "
                         f"table{'s' * (len(lacking) > 1)})")
    return path


def _scratch_name(key: str, name: str) -> str:
    """A file name in the scratch folder for `key` (a path, content): its hash, and the start of
    `name` to say what it is (a name can be as long as the system allows; the hash keeps it unique)."""
    return f"{hashlib.sha256(key.encode()).hexdigest()[:16]}-{name[:80].removesuffix('.sqlite')}.sqlite"


def _decompressed(path: Path) -> Path:
    """An xz-compressed export, decompressed once per process into the scratch folder (keyed by content)."""
    if not path.is_file():
        raise InputError(f"no such file: {path}")
    target = scratch.folder() / _scratch_name(hashlib.sha256(path.read_bytes()).hexdigest(),
                                              path.name.removesuffix(".xz"))
    if not target.exists():
        try:
            with written_whole(target) as partial:
                interruptible.xz_decompress(path, partial)  # a chunk at a time: Ctrl-C stops it at once
        except lzma.LZMAError as exc:
            raise InputError(f"{path} is not a readable xz file ({exc})") from None
        except OSError as exc:  # said of the input: the scratch copy's name means nothing to the user
            raise InputError(f"cannot decompress {path}: {exc.strerror or exc}") from None
    return target


def _read(export: Export, given: Path, threads: int) -> Trace:
    strings = export.strings()
    meta_rows = export.meta()
    gpus = _gpus(export)
    meta = {
        "nsys_version": meta_rows.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": meta_rows.get("EXPORT_SCHEMA_VERSION"),
        "gpus": gpus.to_dict("records"),
        "profiler": f"nsys {meta_rows.get('EXPORT_PRODUCT_VERSION')}",
        "lacks": [],
        # CUDA API calls were captured (an export may hold every table, empty): a trace without
        # kernels then ran none, it was not blind to them
        "cuda_api_traced": export.has_rows("CUPTI_ACTIVITY_KIND_RUNTIME"),
        "capture": _capture(export),
    }
    # The three long reads first: kernels and NVTX ranges start at once, and the launch calls go
    # to whichever thread is free first (a replicated trace has more launch calls than ranges,
    # a real one with TE's and the hook's ranges more ranges than launch calls).
    readers = {
        "kernels": lambda e: _kernels(e, strings),
        "nvtx": lambda e: _nvtx(e, strings, _session_end(e)),
        "api_calls": lambda e: _api_calls(e, strings, LAUNCH_CALLS),
        "memory": _memory,
        "memops": _memops,
        "threads": lambda e: _threads(e, strings),
    }
    if threads > 1:
        # Each table on a connection of its own: SQLite lets go of the GIL while it steps, so
        # the threads read side by side.
        with ThreadPoolExecutor(threads) as pool:
            # no type is inferred for a lambda whose parameter has a default (here, to bind each reader)
            futures = {name: pool.submit(lambda read=read: read(type(export)(export.path)))  # type: ignore[misc]
                       for name, read in readers.items()}
            frames = {name: future.result() for name, future in futures.items()}
    else:
        frames = {name: read(export) for name, read in readers.items()}
    if not frames["kernels"].empty and "CUPTI_ACTIVITY_KIND_RUNTIME" not in export.tables:
        # nsys exports the calls' table wherever it exports kernels: without it, a table dropped,
        # and with the calls go the threads and NVTX ranges around every launch
        raise InputError(f"{given} holds GPU kernels but no CUDA API call table (CUPTI_ACTIVITY_KIND_RUNTIME "
                         "is missing): a damaged export; export it again from the .nsys-rep")
    if frames["kernels"].empty and meta["cuda_api_traced"]:
        # "the program launched no kernel" is an answer (exit 1): only if every call's name is one
        _integer_ids(export, "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId")
    unlaunched = ~launch_key(frames["kernels"]).isin(launch_key(frames["api_calls"]))
    if unlaunched.any():  # launched by a call whose name says nothing of launching: read the rest
        rest = _api_calls(export, strings, OTHER_CALLS)
        named = frames["api_calls"]
        frames["api_calls"] = rest if named.empty else pd.concat([named, rest], ignore_index=True)
    check_records(frames["kernels"], frames["memops"], frames["api_calls"], frames["nvtx"])
    meta["capture"]["gpus"] = _gpus_used(export, frames["kernels"])
    _give_back_freed_memory()
    return Trace(path=given, sqlite=export.path, meta=meta, gpus=gpus, **frames)


def _capture(export: Export) -> dict:
    """What the capture records about itself (traces.model.capture_identity): when its session
    started (TARGET_INFO_SESSION_START_TIME, wall clock) and the span it analysed (ANALYSIS_DETAILS,
    on the trace's clock, which starts with the session), and the command it launched
    (META_DATA_CAPTURE; None where redacted or absent). A hand-made export without a session start
    has no identity."""
    session = export.frame("TARGET_INFO_SESSION_START_TIME", {"utc": "utcEpochNs"})["utc"].dropna()
    details = export.frame("ANALYSIS_DETAILS", {"start": "startTime", "stop": "stopTime"}).dropna()
    if session.empty:
        return {"id": None, "window": None, "command": None}
    utc = int(session.iloc[0])
    start, stop = (int(details.iloc[0]["start"]), int(details.iloc[0]["stop"])) if len(details) else (0, 0)
    rows = export.frame("META_DATA_CAPTURE", {"name": "name", "value": "value"})
    parts = rows[rows["name"].astype(str).str.match(r"PROCESS_0:(COMMAND|ARGUMENT_\d+)$")]
    command = " ".join(parts["value"].astype(str)) or None
    return {"id": f"nsys session {utc} {start} {stop}", "window": (utc + start, utc + stop),
            # scrub's mark (scrub.REDACTED; scrub imports this module): a redacted command tells nothing
            "command": None if command is None or "[redacted]" in command else command}


def _integer_ids(export: Export, table: str, column: str) -> None:
    """DamagedTrace where some row of `table` holds no integer in `column` (one scan: SQLite's
    types are per value); a columnar export's are typed by Arrow."""
    if isinstance(export, SqliteExport) and column in export.columns(table):
        bad = export.conn.execute(f'SELECT rowid, "{column}" FROM "{table}" WHERE typeof("{column}") '
                                  "NOT IN ('integer', 'null') LIMIT 1").fetchone()
        if bad is not None:
            raise DamagedTrace(f"{table}.{column} is {bad[1]!r:.40} in row {bad[0]}, not an integer")


def _gpus_used(export: Export, kernels: pd.DataFrame) -> list[str]:
    """The UUIDs of the GPUs the trace's kernels ran on (TARGET_INFO_GPU lists every GPU of the
    machine): two captures of one GPU are one job only if they ran at the same time."""
    gpus = export.frame("TARGET_INFO_GPU", {"id": "id", "uuid": "uuid"})
    used = gpus[gpus["id"].isin(kernels["device_id"].dropna().unique())]["uuid"].dropna().astype(str)
    return sorted(uuid for uuid in used.unique() if uuid and "[redacted]" not in uuid)


def _give_back_freed_memory() -> None:
    """Hand the memory reading freed back to the system: glibc keeps it in each thread's arena
    (a long trace's read frees hundreds of MB of SQLite text, parse buffers and strings), and
    whatever comes next would add its own peak on top of it. Nothing where the C library has
    no malloc_trim."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _name(ids: pd.Series, strings: pd.Series) -> pd.Series:
    """The strings of StringIds `ids` (None where an id is missing or unknown)."""
    at = strings.index.get_indexer(ids.to_numpy()) if len(strings) else np.full(len(ids), -1)
    names = strings.to_numpy(dtype=object)[np.maximum(at, 0)] if len(strings) else np.full(len(ids), None)
    # numpy's stubs take no None (an object array's missing value) as where's `y`
    return object_column(np.where(at >= 0, names, None), ids.index)  # type: ignore[arg-type]


# Columns every CUPTI GPU activity table (kernels, memsets, memcpys) has.
_GPU_ACTIVITY = {
    "start": "start",
    "end": "end",
    "device_id": "deviceId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
}


def _kernels(export: Export, strings: pd.Series) -> pd.DataFrame:
    k = export.frame(
        "CUPTI_ACTIVITY_KIND_KERNEL",
        _GPU_ACTIVITY | {"demangled_id": "demangledName", "short_id": "shortName", "graph_node_id": "graphNodeId"},
    ).sort_values("start", kind="stable", ignore_index=True)
    refuse_missing(k, "GPU kernel", {"device_id": "device", "stream_id": "stream", "global_pid": "process id",
                                     "correlation_id": "correlation id"})
    k["short_name"] = _name(k["short_id"], strings)
    demangled = _name(k["demangled_id"], strings)
    # no name, or an id StringIds does not hold: the kernel would lose what says what it is
    unnamed = ((k["demangled_id"].notna() & demangled.isna()) | (k["short_id"].notna() & k["short_name"].isna())
               | (k["demangled_id"].isna() & k["short_id"].isna()))
    refuse_where(k, unnamed.to_numpy(), "GPU kernel", "have no name StringIds holds")
    # The demangled name keeps template arguments that tell e.g. cutlass' int8 GEMMs apart.
    k["name"] = demangled.fillna(k["short_name"])
    # `name` as its StringIds id (the short name's, negated, where it stands in): names are
    # decoded once per id, not once per kernel
    k["name_id"] = k["demangled_id"].where(k["demangled_id"].notna(), -1 - k["short_id"]).fillna(NULL).astype("int64")
    k["duration_ns"] = k["end"] - k["start"]
    k["pid"] = process_id(k["global_pid"])
    return k.drop(columns=["demangled_id", "short_id"])


def _memops(export: Export) -> pd.DataFrame:
    frames = []
    for table, kind in (("CUPTI_ACTIVITY_KIND_MEMSET", "memset"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy")):
        f = export.frame(table, _GPU_ACTIVITY | {"bytes": "bytes"})
        f["kind"] = kind
        frames.append(f)
    out = pd.concat(frames, ignore_index=True).sort_values("start", ignore_index=True)
    out["duration_ns"] = out["end"] - out["start"]
    return out


def _api_calls(export: Export, strings: pd.Series, names: str) -> pd.DataFrame:
    """The CUDA API calls `names` (LAUNCH_CALLS or OTHER_CALLS) selects; of the others only
    those that launched a kernel, the rest stay in the export."""
    a = export.api_calls(
        {
            "start": "start",
            "end": "end",
            "global_tid": "globalTid",
            "correlation_id": "correlationId",
            "name_id": "nameId",
            "event_class": "eventClass",
        },
        names,
    )
    refuse_missing(a, "CUDA API call", {"global_tid": "thread id", "correlation_id": "correlation id"})
    a["name"] = _name(a["name_id"], strings)
    a["api"] = a["event_class"].map({0: "runtime", 1: "driver"})
    a["global_pid"] = a["global_tid"] - thread_id(a["global_tid"])
    return a.drop(columns=["name_id", "event_class"])


def _nvtx(export: Export, strings: pd.Series, session_end: float) -> pd.DataFrame:
    n = export.frame(
        "NVTX_EVENTS",
        {
            "start": "start",
            "end": "end",
            "event_type": "eventType",
            "text_id": "textId",
            "global_tid": "globalTid",
            "end_global_tid": "endGlobalTid",
            "domain_id": "domainId",
            "category": "category",
        },
    )
    refuse_missing(n, "NVTX event", {"global_tid": "thread id", "event_type": "event type"})
    text = export.text("NVTX_EVENTS", "text")
    text = pd.Series(text if text is not None else np.full(len(n), None, dtype=object), index=n.index, dtype=object)
    refuse_non_text(text, np.zeros(len(n), dtype=bool), "NVTX_EVENTS.text")
    # Registered strings (nvtxDomainRegisterString) arrive as textId; plain ones as text, one
    # Python string per row: kept once per distinct name (a long trace repeats a few thousand
    # names a million times, hundreds of MB as separate strings).
    named = text.where(text.notna(), _name(n["text_id"], strings)).to_numpy(dtype=object)
    codes, distinct = pd.factorize(named)
    # numpy's stubs take no None (an object array's missing value) as append's values
    n["name"] = object_column(np.append(np.asarray(distinct, dtype=object), None)[codes],  # type: ignore[call-overload]
                              n.index)
    n["pid"] = process_id(n["global_tid"])
    n["tid"] = thread_id(n["global_tid"])
    # Domain ids are numbered per process; a DomainCreate row names each one (0 is the default).
    created = n[n["event_type"] == NVTX_DOMAIN_CREATE]
    domains = pd.Series(created["name"].to_numpy(), index=_domain_key(created))
    domains = domains[~domains.index.duplicated()]
    n = n[n["event_type"].isin(NVTX_KINDS)]
    # as Python strings (object_column): mapped, pandas would make its Arrow-backed text of them,
    # turned back into a string per range whenever a range's kind is read as an array
    kinds = pd.Series(NVTX_KINDS, dtype=object)
    n["kind"] = object_column(kinds.to_numpy()[kinds.index.get_indexer(n["event_type"].to_numpy())], n.index)
    n["domain"] = _domain_key(n).map(domains).astype("object").where(lambda d: d.notna(), None)
    # nsys closes a range left open at exit at the end of the session; an older export may
    # leave its end NULL.
    n["unclosed"] = (n["kind"] != "mark") & (n["end"].isna() | (n["end"] >= session_end))
    n["ended_on_other_thread"] = n["end_global_tid"].notna() & (n["end_global_tid"] != n["global_tid"])
    n["duration_ns"] = n["end"] - n["start"]
    keep = ["start", "end", "duration_ns", "name", "kind", "domain", "category", "global_tid",
            "end_global_tid", "pid", "tid", "unclosed", "ended_on_other_thread"]
    return n[keep].sort_values("start", ignore_index=True)


def _domain_key(nvtx: pd.DataFrame) -> pd.Series:
    """One integer per (process, NVTX domain id), for a vectorised lookup of domain names."""
    return nvtx["pid"].astype("int64") * (1 << 32) + nvtx["domain_id"].fillna(0).astype("int64")


def _session_end(export: Export) -> float:
    """End of the capture on the trace's clock (ANALYSIS_DETAILS.duration), or +inf if absent."""
    end = export.max_of("ANALYSIS_DETAILS", "duration")
    return end if end is not None else float("inf")


def _threads(export: Export, strings: pd.Series) -> pd.DataFrame:
    t = export.frame("ThreadNames", {"global_tid": "globalTid", "name_id": "nameId", "priority": "priority"})
    refuse_missing(t, "thread name", {"global_tid": "thread id"})
    t["name"] = _name(t["name_id"], strings)
    t["pid"] = process_id(t["global_tid"])
    t["tid"] = thread_id(t["global_tid"])
    # A thread named through NVTX (priority 0) keeps that name over its OS name (priority 20).
    t = t.sort_values("priority", kind="stable").drop_duplicates("global_tid", ignore_index=True)
    return t.drop(columns=["name_id", "priority"])


def _gpus(export: Export) -> pd.DataFrame:
    g = export.frame(
        "TARGET_INFO_GPU",
        {
            "id": "id",
            "name": "name",
            "cc_major": "computeMajor",
            "cc_minor": "computeMinor",
            "sm_count": "smCount",
            "total_memory": "totalMemory",
            "clock_rate_hz": "clockRate",
        },
    )
    g["sm"] = [
        f"sm{int(a)}{int(b)}" if pd.notna(a) and pd.notna(b) else None
        for a, b in zip(g["cc_major"], g["cc_minor"])
    ]
    return g


def _memory(export: Export) -> pd.DataFrame:
    m = export.frame(
        "CUDA_GPU_MEMORY_USAGE_EVENTS",
        {
            "start": "start",
            "global_pid": "globalPid",
            "device_id": "deviceId",
            "address": "address",
            "bytes": "bytes",
            "mem_kind": "memKind",
            "operation": "memoryOperationType",
        },
    ).sort_values("start", kind="stable", ignore_index=True)
    # ENUM_CUDA_DEV_MEM_EVENT_OPER: 0 allocation, 1 deallocation
    m["delta_bytes"] = m["bytes"].where(m["operation"] == 0, -m["bytes"])
    return m


