"""Nsight Systems SQLite exports → pandas DataFrames.

`read_trace` opens an export read-only and returns a `Trace`: one DataFrame per kind of record
(kernels, memsets/memcpys, CUDA API calls, NVTX ranges, threads, GPUs, memory events). Schemas
differ between nsys releases (2023.4 and 2025.x are read here), so every table and column is
looked up before use and a missing one yields an empty frame or an NA column, never an error.

`launches` joins each kernel to the API call that launched it (on correlationId and process,
never on the API's name: cuBLAS 13 launches through cuLaunchKernelEx) and attributes it to the
NVTX ranges open around that call on the launching thread, and to Transformer Engine's own
ranges, which tell module and pass even for backward GEMMs launched from autograd's thread.
"""

from __future__ import annotations

import ctypes
import fnmatch
import glob
import hashlib
import lzma
import os
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope import kernels, kineto_parser, scratch, te_ranges
from gemmscope.autocast_hook.gemmscope_protocol import BACKWARD
from gemmscope.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"

# nsys packs process and thread ids into one 64-bit "global thread id".
_TID_MASK = 0xFFFFFF


def process_id(global_tid: pd.Series) -> pd.Series:
    """The process id packed into nsys's global thread (or process) id."""
    return (global_tid // (1 << 24)) & _TID_MASK


def _tid(global_tid: pd.Series) -> pd.Series:
    return global_tid & _TID_MASK


# NVTX_EVENTS.eventType values (nsys's ENUM_NSYS_EVENT_TYPE, the same in 2023.4 and 2025.3).
NVTX_KINDS = {34: "mark", 59: "push-pop", 60: "start-end"}
NVTX_DOMAIN_CREATE = 75


@dataclass
class Trace:
    """Everything gemmscope reads from one export, as DataFrames; times are ns on nsys's clock."""

    path: Path  # as given (.sqlite, .sqlite.xz, .nsys-rep, or a torch.profiler trace: .json, .json.gz)
    sqlite: Path | None  # the export actually read; None for a torch.profiler trace (kineto_parser)
    meta: dict
    kernels: pd.DataFrame
    memops: pd.DataFrame
    api_calls: pd.DataFrame
    nvtx: pd.DataFrame
    threads: pd.DataFrame
    gpus: pd.DataFrame
    memory: pd.DataFrame


# Stands for SQL NULL in an integer column fetched as text (no nsys id or time takes it).
_NULL = -(1 << 63)


class _Export:
    """A read-only connection to an export, with table and column feature detection."""

    def __init__(self, path: Path):
        self.path = path
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.tables = {name for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def columns(self, table: str) -> set[str]:
        return set(self.types(table))

    def types(self, table: str) -> dict[str, type]:
        """Column → int for the columns SQLite gives integer affinity (a declared type holding
        "INT"), object for the rest."""
        return {row[1]: int if "INT" in (row[2] or "").upper() else object for row in self._declared(table)}

    def _declared(self, table: str) -> list[tuple]:
        if table not in self.tables:
            return []
        return self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()

    def frame(self, table: str, columns: dict[str, str], where: str = "") -> pd.DataFrame:
        """`columns` maps output name → column (or SQL expression over present columns); columns
        this export lacks come back as NA, a missing table as an empty frame. Integer columns
        come as pandas reads them (int64; float64 with NaN where some are NULL; None where all
        are), the rest through pandas."""
        types = self.types(table)
        if not types:
            return pd.DataFrame({name: pd.Series(dtype="object") for name in columns})
        missing = [name for name, expr in columns.items() if expr.isidentifier() and expr not in types]
        integers = {name: expr for name, expr in columns.items() if types.get(expr) is int}
        others = {name: expr for name, expr in columns.items() if name not in integers and name not in missing}
        fetched = self._integers(table, integers, where)
        if others or fetched is None:
            rest = others if fetched is not None else {n: e for n, e in columns.items() if n not in missing}
            select = ", ".join(f"{expr} AS {name}" for name, expr in rest.items())
            read = pd.read_sql_query(f"SELECT {select} FROM {table} {where}", self.conn)
            fetched = (fetched or {}) | {name: read[name] for name in rest}
        count = len(next(iter(fetched.values()))) if fetched else 0
        return pd.DataFrame({name: fetched[name] if name in fetched else np.full(count, None, dtype=object)
                             for name in columns})

    def _integers(self, table: str, columns: dict[str, str], where: str) -> dict[str, np.ndarray] | None:
        """Integer columns as one comma-separated text each, which SQLite writes and numpy parses
        several times faster than Python builds a tuple per row (a long job's trace has millions
        of rows); None if a value is not an integer after all (SQLite's types are per value).
        A column the schema lets be NULL stands NULL in as _NULL; one that is NULL throughout (a
        feature the trace did not use) is not read at all: a scan stopping at its first value
        says so, cheaper than writing and parsing a million stand-ins."""
        if not columns:
            return {}
        nullable = {row[1] for row in self._declared(table) if not row[3]}
        filtered = f"{where} AND" if where else "WHERE"
        unused = {name for name, expr in columns.items() if expr in nullable and self.conn.execute(
            f'SELECT 1 FROM "{table}" {filtered} "{expr}" IS NOT NULL LIMIT 1').fetchone() is None}
        read = {name: expr for name, expr in columns.items() if name not in unused}
        texts = "".join(f', group_concat(COALESCE("{expr}", {_NULL}))' if expr in nullable else f', group_concat("{expr}")'
                        for expr in read.values())
        count, *texts = self.conn.execute(f'SELECT COUNT(*){texts} FROM "{table}" {where}').fetchone()
        out = {name: np.full(count, None, dtype=object) for name in unused}
        for at, name in enumerate(read):
            text, texts[at] = texts[at], None  # each text freed once parsed: a long trace's are large
            values = np.fromstring(text, dtype="int64", sep=",") if count else np.empty(0, dtype="int64")
            if len(values) != count:
                return None
            null = values == _NULL
            if not count:
                out[name] = np.empty(0, dtype=object)
            elif null.all():
                out[name] = np.full(count, None, dtype=object)
            elif null.any():
                out[name] = np.where(null, np.nan, values.astype("float64"))
            else:
                out[name] = values
        return {name: out[name] for name in columns}

    def strings(self) -> pd.Series:
        """StringIds as a Series indexed by id (for vectorised lookups)."""
        if "StringIds" not in self.tables:
            return pd.Series(dtype="object")
        frame = pd.read_sql_query("SELECT id, value FROM StringIds", self.conn)
        return pd.Series(frame["value"].to_numpy(dtype=object), index=frame["id"].to_numpy())


def _check_file(path: Path, given: Path) -> None:
    """`path` (the export of `given`, which messages name) is an SQLite file."""
    if not path.exists():
        raise InputError(f"no such file: {given}")
    if not path.is_file():
        raise InputError(f"not a file: {given}")
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise InputError(
            f"{given} is not an SQLite export of Nsight Systems "
            "(give a .sqlite from `nsys export --type sqlite`, or an .nsys-rep)"
        )


TRACE_SUFFIXES = (".sqlite", ".sqlite.xz", ".nsys-rep")
# torch.profiler's traces: in a folder, only those whose content says so are taken.
KINETO_SUFFIXES = (".json", ".json.gz")


def _is_trace(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES) or (path.name.endswith(KINETO_SUFFIXES) and kineto_parser.is_kineto(path))


def trace_paths(arguments: Sequence[str | Path]) -> list[Path]:
    """The traces named by files, folders (every export inside; an .nsys-rep only where no
    export of it is beside it) and glob patterns, in name order, each once."""
    found: list[Path] = []
    for argument in map(Path, arguments):
        if argument.is_dir():
            inside = [p for p in sorted(argument.iterdir()) if _is_trace(p)]
            exported = {p.name.removesuffix(".xz").removesuffix(".sqlite") for p in inside
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
    return list(dict.fromkeys(found))


def read_trace(path: str | Path, threads: int = 2) -> Trace:
    """Read an nsys SQLite export: `.sqlite`, `.sqlite.xz` (as fixtures and examples ship), or
    an `.nsys-rep` (exported with nsys first; see `sqlite_export`); or a torch.profiler trace,
    told by its content whatever its name (kineto_parser). `threads`: 2 reads the tables
    over two threads (for one long trace); 1 reads all in this thread (where processes already
    read several traces side by side)."""
    given = Path(path)
    if given.is_file() and kineto_parser.is_kineto(given):
        return kineto_parser.read(given)
    path = sqlite_export(given)
    try:
        return _read(_Export(path), given, threads)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:  # pandas wraps sqlite's errors
        raise InputError(f"{given} is a damaged or truncated SQLite file ({exc})") from None


def trace_source(path: str | Path) -> Path:
    """The file a trace is read from: a torch.profiler trace itself, an nsys trace's SQLite
    export (sqlite_export)."""
    path = Path(path)
    if path.is_file() and kineto_parser.is_kineto(path):
        return path
    return sqlite_export(path)


def sqlite_export(path: str | Path) -> Path:
    """The SQLite export of a trace, checked to be one: a `.sqlite` itself; a `.sqlite.xz`
    decompressed, an `.nsys-rep` exported with nsys (or its export beside it, when newer), into
    this process's private scratch folder (gemmscope.scratch: never beside the input, which may
    be read-only or shared, and removed at exit)."""
    given = path = Path(path)
    if path.suffix == ".xz":
        path = _decompressed(path)
    elif path.suffix == ".nsys-rep":
        from gemmscope import nsys_runner

        if not path.is_file():
            raise InputError(f"no such file: {path}")
        path = nsys_runner.export_sqlite(path, scratch.folder() / _scratch_name(str(path.resolve()), path.stem))
    _check_file(path, given)
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{given} is a damaged or truncated SQLite file ({exc})") from None
    if "META_DATA_EXPORT" not in tables or "StringIds" not in tables:
        raise InputError(f"{given} is an SQLite file but not an Nsight Systems export (no META_DATA_EXPORT table)")
    return path


def _scratch_name(key: str, name: str) -> str:
    """A file name in the scratch folder for `key` (a path, content): its hash, and the start of
    `name` to say what it is (a name can be as long as the system allows; the hash keeps it unique)."""
    return f"{hashlib.sha256(key.encode()).hexdigest()[:16]}-{name[:80].removesuffix('.sqlite')}.sqlite"


def _decompressed(path: Path) -> Path:
    """An xz-compressed export, decompressed once per process into the scratch folder (keyed by content)."""
    if not path.is_file():
        raise InputError(f"no such file: {path}")
    data = path.read_bytes()
    target = scratch.folder() / _scratch_name(hashlib.sha256(data).hexdigest(), path.name.removesuffix(".xz"))
    if not target.exists():
        try:
            raw = lzma.decompress(data)
        except lzma.LZMAError as exc:
            raise InputError(f"{path} is not a readable xz file ({exc})") from None
        partial = target.with_name(target.name + f".{os.getpid()}.partial")
        partial.write_bytes(raw)
        partial.replace(target)
    return target


def _read(export: _Export, given: Path, threads: int) -> Trace:
    strings = export.strings()
    meta_rows = dict(export.conn.execute("SELECT name, value FROM META_DATA_EXPORT"))
    gpus = _gpus(export)
    meta = {
        "nsys_version": meta_rows.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": meta_rows.get("EXPORT_SCHEMA_VERSION"),
        "gpus": gpus.to_dict("records"),
        "profiler": f"nsys {meta_rows.get('EXPORT_PRODUCT_VERSION')}",
        "lacks": [],
        # CUDA API calls were captured (an export may hold every table, empty): a trace without
        # kernels then ran none, it was not blind to them
        "cuda_api_traced": "CUPTI_ACTIVITY_KIND_RUNTIME" in export.tables and bool(
            export.conn.execute("SELECT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME)").fetchone()[0]),
    }
    # The three long reads first: kernels and NVTX ranges start at once, and the launch calls go
    # to whichever thread is free first (a replicated trace has more launch calls than ranges,
    # a real one with TE's and the hook's ranges more ranges than launch calls).
    readers = {
        "kernels": lambda e: _kernels(e, strings),
        "nvtx": lambda e: _nvtx(e, strings, _session_end(e)),
        "api_calls": lambda e: _api_calls(e, strings, _LAUNCH_CALLS),
        "memory": _memory,
        "memops": _memops,
        "threads": lambda e: _threads(e, strings),
    }
    if threads > 1:
        # Each table on a connection of its own: SQLite lets go of the GIL while it steps, so
        # the threads read side by side.
        with ThreadPoolExecutor(threads) as pool:
            futures = {name: pool.submit(lambda read=read: read(_Export(export.path))) for name, read in readers.items()}
            frames = {name: future.result() for name, future in futures.items()}
    else:
        frames = {name: read(export) for name, read in readers.items()}
    unlaunched = ~_launch_key(frames["kernels"]).isin(_launch_key(frames["api_calls"]))
    if unlaunched.any():  # launched by a call whose name says nothing of launching: read the rest
        rest = _api_calls(export, strings, _OTHER_CALLS)
        named = frames["api_calls"]
        frames["api_calls"] = rest if named.empty else pd.concat([named, rest], ignore_index=True)
    _give_back_freed_memory()
    return Trace(path=given, sqlite=export.path, meta=meta, gpus=gpus, **frames)


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
    return _objects(np.where(at >= 0, names, None), ids.index)


def _objects(values: np.ndarray, index: pd.Index) -> pd.Series:
    """`values` as a column of Python objects: pandas would check each of a long trace's million
    strings to make them its own string type."""
    return pd.Series(np.array(values, dtype=object), index=index, dtype=object, copy=False)


# Columns every CUPTI GPU activity table (kernels, memsets, memcpys) has.
_GPU_ACTIVITY = {
    "start": "start",
    "end": "end",
    "device_id": "deviceId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
}


def _kernels(export: _Export, strings: pd.Series) -> pd.DataFrame:
    k = export.frame(
        "CUPTI_ACTIVITY_KIND_KERNEL",
        _GPU_ACTIVITY | {"demangled_id": "demangledName", "short_id": "shortName", "graph_node_id": "graphNodeId"},
    ).sort_values("start", kind="stable", ignore_index=True)
    k["short_name"] = _name(k["short_id"], strings)
    # The demangled name keeps template arguments that tell e.g. cutlass' int8 GEMMs apart.
    k["name"] = _name(k["demangled_id"], strings).fillna(k["short_name"])
    # `name` as its StringIds id (the short name's, negated, where it stands in): names are
    # decoded once per id, not once per kernel
    k["name_id"] = k["demangled_id"].where(k["demangled_id"].notna(), -1 - k["short_id"]).fillna(_NULL).astype("int64")
    k["duration_ns"] = k["end"] - k["start"]
    k["pid"] = process_id(k["global_pid"])
    return k.drop(columns=["demangled_id", "short_id"])


def _memops(export: _Export) -> pd.DataFrame:
    frames = []
    for table, kind in (("CUPTI_ACTIVITY_KIND_MEMSET", "memset"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy")):
        f = export.frame(table, _GPU_ACTIVITY | {"bytes": "bytes"})
        f["kind"] = kind
        frames.append(f)
    out = pd.concat(frames, ignore_index=True).sort_values("start", ignore_index=True)
    out["duration_ns"] = out["end"] - out["start"]
    return out


# Which CUDA API calls `_api_calls` reads, by their name: those named as launching (cudaLaunchKernel,
# cuLaunchKernelEx, cudaGraphLaunch, ...), all of them, or those of the others that launched a
# kernel. A trace holds several calls per kernel (events, queries, synchronisation); finding the
# ones that launched a kernel among them means looking each one's correlation id up among every
# kernel's, most of the time this table takes, while a name is tested at once: `_read` reads the
# launching ones, and the others only for a kernel none of those launched. Either way calls are
# joined to kernels on correlation id and process, never on their name.
_LAUNCH_CALLS = "IN"
_OTHER_CALLS = "NOT IN"
_LAUNCHING_NAMES = "SELECT id FROM StringIds WHERE value LIKE '%Launch%'"


def _api_calls(export: _Export, strings: pd.Series, names: str) -> pd.DataFrame:
    """The CUDA API calls `names` (_LAUNCH_CALLS or _OTHER_CALLS) selects; of the others only
    those that launched a kernel, the rest stay in the export."""
    where = f"WHERE nameId {names} ({_LAUNCHING_NAMES})"
    if names == _OTHER_CALLS and "CUPTI_ACTIVITY_KIND_KERNEL" in export.tables:
        where += " AND correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    a = export.frame(
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        {
            "start": "start",
            "end": "end",
            "global_tid": "globalTid",
            "correlation_id": "correlationId",
            "name_id": "nameId",
            "event_class": "eventClass",
        },
        where,
    )
    a["name"] = _name(a["name_id"], strings)
    a["api"] = a["event_class"].map({0: "runtime", 1: "driver"})
    a["global_pid"] = a["global_tid"] - _tid(a["global_tid"])
    return a.drop(columns=["name_id", "event_class"])


def _launch_key(frame: pd.DataFrame) -> pd.Index:
    """(process, correlation id) as one integer per row: CUPTI's correlation ids are 32-bit."""
    pid = (frame["global_pid"].fillna(0).astype("int64").to_numpy() >> 24) & _TID_MASK
    return pd.Index((pid << 32) | frame["correlation_id"].fillna(0).astype("int64").to_numpy())


def _nvtx(export: _Export, strings: pd.Series, session_end: float) -> pd.DataFrame:
    n = export.frame(
        "NVTX_EVENTS",
        {
            "start": "start",
            "end": "end",
            "event_type": "eventType",
            "text": "text",
            "text_id": "textId",
            "global_tid": "globalTid",
            "end_global_tid": "endGlobalTid",
            "domain_id": "domainId",
            "category": "category",
        },
    )
    # Registered strings (nvtxDomainRegisterString) arrive as textId; plain ones as text, one
    # Python string per row: kept once per distinct name (a long trace repeats a few thousand
    # names a million times, hundreds of MB as separate strings).
    named = n["text"].where(n["text"].notna(), _name(n["text_id"], strings)).to_numpy(dtype=object)
    codes, distinct = pd.factorize(named)
    n["name"] = _objects(np.append(np.asarray(distinct, dtype=object), None)[codes], n.index)
    del n["text"]
    n["pid"] = process_id(n["global_tid"])
    n["tid"] = _tid(n["global_tid"])
    # Domain ids are numbered per process; a DomainCreate row names each one (0 is the default).
    created = n[n["event_type"] == NVTX_DOMAIN_CREATE]
    domains = pd.Series(created["name"].to_numpy(), index=_domain_key(created))
    domains = domains[~domains.index.duplicated()]
    n = n[n["event_type"].isin(NVTX_KINDS)]
    n["kind"] = n["event_type"].map(NVTX_KINDS)
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


def _session_end(export: _Export) -> float:
    """End of the capture on the trace's clock (ANALYSIS_DETAILS.duration), or +inf if absent."""
    if "duration" not in export.columns("ANALYSIS_DETAILS"):
        return float("inf")
    (end,) = export.conn.execute("SELECT MAX(duration) FROM ANALYSIS_DETAILS").fetchone()
    return float(end) if end is not None else float("inf")


def _threads(export: _Export, strings: pd.Series) -> pd.DataFrame:
    t = export.frame("ThreadNames", {"global_tid": "globalTid", "name_id": "nameId", "priority": "priority"})
    t["name"] = _name(t["name_id"], strings)
    t["pid"] = process_id(t["global_tid"])
    t["tid"] = _tid(t["global_tid"])
    # A thread named through NVTX (priority 0) keeps that name over its OS name (priority 20).
    t = t.sort_values("priority", kind="stable").drop_duplicates("global_tid", ignore_index=True)
    return t.drop(columns=["name_id", "priority"])


def _gpus(export: _Export) -> pd.DataFrame:
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


def _memory(export: _Export) -> pd.DataFrame:
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


# --- attribution ----------------------------------------------------------------------------

# GEMMs inside one LayerNormMLP range, in launch order, when neither the hook's record nor a
# per-GEMM TE range says their pass (TE's layernorm_mlp.py: forward fc1 then fc2; backward fc2
# dgrad, fc2 wgrad, fc1 dgrad, fc1 wgrad).
_TE_SEQUENCE = {
    ("_LayerNormMLP", "backward"): ("dgrad", "wgrad", "dgrad", "wgrad"),
}
# cuBLAS honours TE's operand layout for 16-bit GEMMs (TN fprop, NN dgrad, NT wgrad); FP8 GEMMs
# on Hopper are always TN (TE transposes the operands first), so there the layout says nothing.
_PASS_BY_LAYOUT = {"TN": "fprop", "NN": "dgrad", "NT": "wgrad"}
_LAYOUT_TELLS_PASS = {"bf16", "fp16", "fp32", "tf32"}
# PyTorch runs the backward pass of CUDA tensors on one autograd thread per device, named so
# (torch/csrc/autograd/engine.cpp: setThreadName("pt_autograd_" + device)): a GEMM launched
# straight from another named thread is in no backward pass. The layout letters cannot say that:
# a bare torch.matmul(A, B) is NN, as a dgrad is.
_AUTOGRAD_THREAD_PREFIX = "pt_autograd_"
# The pass of a GEMM the autograd thread launched when nothing tells dgrad from wgrad.
BACKWARD = "backward"
# A CUDA graph's kernels are launched by the graph's launch, from whichever thread replays it.
_GRAPH_LAUNCH = "GraphLaunch"
_FAR_FUTURE = np.int64(1 << 62)  # an unclosed range is open until the end of the capture

# What `launches` adds to each kernel row from the ranges around its launch.
ATTRIBUTION_COLUMNS = ("te_module", "te_name", "layer", "te_pass", "pass_source", "requested_a",
                       "requested_b", "requested", "requested_scale", "gemm_m", "gemm_n", "gemm_k", "call_flops",
                       "via_te", "recorded", "rank")


@dataclass
class EnclosingRanges:
    """Every NVTX range open around each launch (on the launching thread, from every domain, plus
    process-wide start/end ranges) as pairs: `launch` (row position in the launches frame,
    ascending; for one launch its ranges outermost first) and `name` (code into `names`, the
    few distinct range names). Kept as arrays, not a list per launch: a long job has millions of
    launches, and patterns are matched once per distinct name."""

    launch: np.ndarray
    name: np.ndarray
    names: np.ndarray

    @classmethod
    def empty(cls) -> EnclosingRanges:
        return cls(np.empty(0, dtype="int64"), np.empty(0, dtype="int64"), np.empty(0, dtype=object))

    def lists(self, rows: np.ndarray) -> list[list]:
        """The range names around each launch of `rows` (positions), outermost first: for the
        few launches shown one by one."""
        rows = np.asarray(rows, dtype="int64")
        low, high = np.searchsorted(self.launch, rows, "left"), np.searchsorted(self.launch, rows, "right")
        return [self.names[self.name[a:b]].tolist() for a, b in zip(low, high)]

    def around(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every (launch, range name) pair of the launches of `rows`: the launch as its position
        in `rows`, in order, each launch's ranges outermost first."""
        rows = np.asarray(rows, dtype="int64")
        low, high = np.searchsorted(self.launch, rows, "left"), np.searchsorted(self.launch, rows, "right")
        counts = high - low
        which = np.repeat(np.arange(len(rows)), counts)
        pair = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(low, counts)
        return which, self.names[self.name[pair]] if len(pair) else np.empty(0, dtype=object)

    def matching_names(self, patterns: Sequence[str]) -> np.ndarray:
        """Per distinct name, whether a shell pattern (case-sensitive) matches it."""
        return name_matches(self.names, patterns)

    def innermost_matching(self, patterns: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """Per launch of `rows`, the innermost enclosing range whose name a pattern matches
        (None where none does)."""
        rows = np.asarray(rows, dtype="int64")
        if not len(self.names):
            return np.full(len(rows), None, dtype=object)
        launches = int(max(self.launch.max(initial=-1), rows.max(initial=-1))) + 1
        found = _innermost(self.launch, self.name, self.matching_names(patterns), launches)[rows]
        return np.where(found >= 0, self.names[np.maximum(found, 0)], None)

    def any_matching(self, patterns: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """Per launch of `rows`, whether a pattern matches any range around it."""
        rows = np.asarray(rows, dtype="int64")
        keep = self.matching_names(patterns)[self.name] & (self.launch <= rows.max(initial=-1))
        hit = np.zeros(int(rows.max(initial=-1)) + 1, dtype=bool)
        hit[self.launch[keep]] = True
        return hit[rows]

    @classmethod
    def concat(cls, parts: Sequence[EnclosingRanges], offsets: Sequence[int]) -> EnclosingRanges:
        """The ranges of several launches frames stacked in order, the n-th starting at row
        offsets[n]."""
        if not parts:
            return cls.empty()
        names = pd.Index(np.concatenate([p.names for p in parts]))
        distinct = names.unique()
        launch, name, first = [], [], 0
        for part, offset in zip(parts, offsets):
            recode = distinct.get_indexer(names[first:first + len(part.names)])
            first += len(part.names)
            launch.append(part.launch + offset)
            name.append(recode[part.name])
        return cls(np.concatenate(launch), np.concatenate(name), distinct.to_numpy(dtype=object))


def first_matching_pattern(names: np.ndarray | pd.Series, patterns: Sequence[str]) -> np.ndarray:
    """Per name, the position of the first shell pattern (case-sensitive, as --allow's and
    --expect-map's) that matches it, -1 where none does (None matches nothing); each distinct
    name is matched once: a long trace has millions of ranges and a few distinct names."""
    values = pd.Series(np.asarray(names, dtype=object))
    first = {v: next((i for i, p in enumerate(patterns) if fnmatch.fnmatchcase(v, p)), -1)
             for v in values.dropna().unique() if isinstance(v, str)}
    return values.map(first).fillna(-1).to_numpy(dtype="int64")


def name_matches(names: np.ndarray | pd.Series, patterns: Sequence[str]) -> np.ndarray:
    """Whether a shell pattern (first_matching_pattern) matches each name."""
    return first_matching_pattern(names, patterns) >= 0


def launches(trace: Trace) -> pd.DataFrame:
    """One row per kernel launch (`launches_with_ranges` without the ranges)."""
    return launches_with_ranges(trace)[0]


def launches_with_ranges(trace: Trace) -> tuple[pd.DataFrame, EnclosingRanges]:
    """One row per kernel launch: the kernel's record, its decoded name, the API call that
    launched it (`launch_*`, `thread`), and what the NVTX ranges open around the launch say
    (ATTRIBUTION_COLUMNS): the TE module, its name and layer, the pass, the
    operand types TE was handed (`requested_*`) and the call's shape (`gemm_m/n/k`, `call_flops`),
    both from gemmscope's hook, whether TE launched it
    (`via_te`), whether the hook recorded it (`recorded`) and the process's rank. `pass_source`
    says what told the pass: "hook", "te-range" (TE's per-GEMM range), "te-order" (the launch
    order inside a module-level TE range), "thread" (a GEMM launched from a thread that runs no
    backward pass: fprop) or "layout" (a 16-bit kernel's layout letters on the autograd thread,
    also for GEMMs outside TE such as a torch.nn.Linear's). With it, the ranges around each launch
    (EnclosingRanges)."""
    k = trace.kernels
    api = trace.api_calls[["correlation_id", "global_pid", "start", "end", "global_tid", "name"]].rename(
        columns={"start": "launch_start", "end": "launch_end", "global_tid": "launch_global_tid",
                 "name": "launch_api"}
    )
    # A correlation id is unique per process; keep the outermost call if a trace repeats one.
    if not _launch_key(api).is_unique:
        api = api.sort_values("launch_start").drop_duplicates(["correlation_id", "global_pid"])
    out = k.merge(api, on=["correlation_id", "global_pid"], how="left")
    out = out.sort_values("start", kind="stable", ignore_index=True)
    threads = trace.threads.set_index("global_tid")["name"]
    out["thread"] = _objects(out["launch_global_tid"].map(threads).to_numpy(dtype=object), out.index)
    codes, ids = pd.factorize(out.pop("name_id").to_numpy())
    first = np.empty(len(ids), dtype="int64")
    first[codes[::-1]] = np.arange(len(codes))[::-1]  # each name's first row: the last write wins
    decoded = kernels.decoded_columns(out["name"].to_numpy(dtype=object)[first], codes,
                                      ("role", "precision", "family", "layout"))
    for column, values in decoded.items():
        out[column] = _objects(values, out.index)
    launch_ids, range_ids = _enclosing_ranges(out, trace.nvtx)
    # names coded once per range, not once per (launch, range) pair
    codes, names = pd.factorize(trace.nvtx["name"].to_numpy(dtype=object), use_na_sentinel=False)
    names = np.array([name if isinstance(name, str) else None for name in names], dtype=object)
    ranges = EnclosingRanges(launch_ids, codes[range_ids].astype("int64"), names)
    attribution = _attribute(out, launch_ids, range_ids, trace.nvtx, codes, names)
    for column in ATTRIBUTION_COLUMNS:
        out[column] = attribution[column]
    return out, ranges


def _enclosing_ranges(launch: pd.DataFrame, nvtx: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (launch row, nvtx row) of every range open around each launch, sorted by launch,
    then outermost first. Push/pop ranges nest per thread and NVTX domain, and ranges of
    different domains (NCCL's, TE's, the program's) interleave freely on one thread: each
    (thread, domain) stack is resolved on its own and none overwrites another."""
    known = launch["launch_start"].notna()
    t0 = launch["launch_start"].where(known, launch["start"]).astype("int64").to_numpy()
    t1 = launch["launch_end"].where(known, launch["start"]).astype("int64").to_numpy()
    launch_tid = launch["launch_global_tid"].fillna(-1).astype("int64").to_numpy()
    launch_pid = (launch["global_pid"].fillna(-1).astype("int64").to_numpy() >> 24) & _TID_MASK
    r_start = nvtx["start"].astype("int64").to_numpy()
    r_end = nvtx["end"].fillna(_FAR_FUTURE).astype("int64").to_numpy()
    pairs_l, pairs_r = [], []

    push_pop = nvtx.loc[nvtx["kind"].to_numpy() == "push-pop", ["global_tid", "domain"]]
    launches_of: dict[int, np.ndarray] = {}  # per thread with ranges: the launches it made
    for (tid, _), rows in push_pop.groupby(["global_tid", push_pop["domain"].fillna("")], sort=False):
        if int(tid) not in launches_of:
            launches_of[int(tid)] = np.flatnonzero(launch_tid == tid)
        mine = launches_of[int(tid)]
        if not len(mine):
            continue
        ids = rows.index.to_numpy()
        order = np.lexsort((-r_end[ids], r_start[ids]))
        ids = ids[order]
        parent = _parents(r_start[ids], r_end[ids])
        # Innermost open range: the last one pushed before the launch, or the nearest of its
        # ancestors still open then.
        at = np.searchsorted(r_start[ids], t0[mine], side="right") - 1
        lo, hi = t0[mine], t1[mine]
        while True:
            closed = (at >= 0) & (r_end[ids[np.maximum(at, 0)]] < hi)
            if not closed.any():
                break
            at = np.where(closed, parent[np.maximum(at, 0)], at)
        at = np.where((at >= 0) & (r_start[ids[np.maximum(at, 0)]] <= lo), at, -1)
        while (at >= 0).any():
            inside = at >= 0
            pairs_l.append(mine[inside])
            pairs_r.append(ids[at[inside]])
            at = np.where(inside, parent[np.maximum(at, 0)], -1)

    # Start/end ranges belong to the process, not a thread, and need not nest: containment in time.
    start_end = nvtx[nvtx["kind"] == "start-end"]
    if len(start_end):
        order = np.argsort(t0, kind="stable")
        for pid, rows in start_end.groupby("pid", sort=False):
            mine = order[launch_pid[order] == pid]
            times = t0[mine]
            for row in rows.index.to_numpy():
                inside = mine[np.searchsorted(times, r_start[row], "left"):np.searchsorted(times, r_end[row], "right")]
                inside = inside[t1[inside] <= r_end[row]]
                pairs_l.append(inside)
                pairs_r.append(np.full(len(inside), row))

    if not pairs_l:
        return np.empty(0, dtype="int64"), np.empty(0, dtype="int64")
    launch_ids, range_ids = np.concatenate(pairs_l), np.concatenate(pairs_r)
    order = np.lexsort((-r_end[range_ids], r_start[range_ids], launch_ids))
    return launch_ids[order], range_ids[order]


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Position of each range's enclosing range (-1 for none), for ranges of one push/pop stack
    sorted by (start, -end): a range's depth is how many earlier ranges are still open at its
    start, and its parent is the last earlier range one level up."""
    n = len(starts)
    closed_before = np.searchsorted(np.sort(ends), starts, side="right")
    depth = np.maximum(np.arange(n) - closed_before, 0)
    parent = np.full(n, -1, dtype="int64")
    positions = np.arange(n)
    for level in range(1, int(depth.max(initial=0)) + 1):
        above = positions[depth == level - 1]
        here = positions[depth == level]
        found = np.searchsorted(above, here) - 1
        parent[here] = np.where(found >= 0, above[np.maximum(found, 0)], -1)
    return parent


def _innermost(launch_ids: np.ndarray, range_ids: np.ndarray, selected: np.ndarray, n: int) -> np.ndarray:
    """Per launch, the innermost enclosing range among those `selected` (-1 where none)."""
    out = np.full(n, -1, dtype="int64")
    keep = selected[range_ids]
    out[launch_ids[keep]] = range_ids[keep]  # pairs run outermost first: the last write wins
    return out


def _attribute(launch: pd.DataFrame, launch_ids: np.ndarray, range_ids: np.ndarray, nvtx: pd.DataFrame,
               name_codes: np.ndarray, names: np.ndarray) -> pd.DataFrame:
    """ATTRIBUTION_COLUMNS per launch. `name_codes`: each NVTX row's code into `names`, its
    distinct names: TE's range grammar is read once per distinct name, not once per range."""
    n = len(launch)
    grammar = te_ranges.classify(pd.Series(names, dtype=object))

    def of_kind(*kinds: str) -> np.ndarray:
        return np.isin(grammar["kind"].to_numpy(dtype=object), kinds)[name_codes]

    def first(*candidates: tuple[np.ndarray, str], under: np.ndarray | None = None) -> np.ndarray:
        """Per launch, the value of the first (innermost range per launch, grammar column) of
        `candidates` that has one, else `under`'s, else None. Only the launches inside such a
        range are looked at: on a long trace most launches are in none."""
        values = np.full(n, None, dtype=object) if under is None else under.copy()
        for ranges, column in reversed(candidates):
            rows = np.flatnonzero(ranges >= 0)
            found = grammar[column].to_numpy(dtype=object)[name_codes[ranges[rows]]]
            known = pd.notna(found)
            values[rows[known]] = found[known]
        return values

    # the innermost of the hook's records, of a TE GEMM call or of one outside TE
    hook = _innermost(launch_ids, range_ids, of_kind(*te_ranges.RECORD_KINDS), n)
    te_gemm = _innermost(launch_ids, range_ids, of_kind(te_ranges.TE_GEMM), n)
    module_range = _innermost(launch_ids, range_ids, of_kind(te_ranges.TE_MODULE), n)
    c_gemm = _innermost(launch_ids, range_ids, of_kind(te_ranges.TE_C_GEMM), n)
    out = pd.DataFrame(index=launch.index)
    # The hook's record says what TE itself was doing; TE's ranges are next best.
    out["te_module"] = _objects(first((hook, "module"), (te_gemm, "module"), (module_range, "module")), out.index)
    te_name = first((hook, "name"), (te_gemm, "name"))
    out["te_name"] = _objects(te_name, out.index)
    out["layer"] = _objects(first((hook, "layer"), under=te_name), out.index)
    hook_pass, range_pass = first((hook, "pass")), first((te_gemm, "pass"))
    out["te_pass"] = _objects(first((hook, "pass"), (te_gemm, "pass")), out.index)
    out["pass_source"] = _objects(np.select([pd.notna(hook_pass), pd.notna(range_pass)], ["hook", "te-range"], None),
                                  out.index)
    for column, source in (("requested_a", "operand_a"), ("requested_b", "operand_b"), ("requested", "requested"),
                           ("requested_scale", "scale")):
        out[column] = _objects(first((hook, source)), out.index)
    # The GEMM call's shape and FLOPs, as the hook read them from TE's operands (a grouped call's
    # FLOPs are its members' sum, shared by the kernels it launched: `call_flops`).
    hook_name = np.full(n, -1, dtype="int64")  # (a trace without NVTX has no name to index)
    hook_name[hook >= 0] = name_codes[hook[hook >= 0]]
    for column, source in (("gemm_m", "m"), ("gemm_n", "n"), ("gemm_k", "k"), ("call_flops", "flops")):
        out[column] = grammar[source].array.take(hook_name, allow_fill=True)  # NA where no record
    out["recorded"] = hook >= 0
    te_record = first((hook, "kind")) == te_ranges.HOOK_GEMM
    out["via_te"] = (c_gemm >= 0) | te_record
    _pass_from_layout_and_order(launch, out, module_range, first((module_range, "direction")),
                                first((module_range, "step")))
    out["rank"] = _ranks(launch, nvtx, grammar, name_codes)
    return out


def _pass_from_layout_and_order(launch: pd.DataFrame, out: pd.DataFrame, module_range: np.ndarray,
                                direction: np.ndarray, step: np.ndarray) -> None:
    """Passes for GEMMs no hook record nor per-GEMM TE range names (LayerNormMLP, GroupedLinear,
    GEMMs outside TE): inside a module-level TE range, forward GEMMs are fprop and those of a
    deferred-wgrad range wgrad; a GEMM launched from a thread that runs no backward pass is
    fprop; on the autograd thread, 16-bit GEMMs' layout letters say their pass; the GEMMs of one
    LayerNormMLP backward range follow TE's launch order; a GEMM the autograd thread launched that
    none of these tells is at least BACKWARD (dgrad or wgrad). Only the GEMMs are looked at, a few
    of a trace's launches."""
    te_pass = out["te_pass"].to_numpy(dtype=object).copy()
    source = out["pass_source"].to_numpy(dtype=object).copy()
    gemm = np.flatnonzero(launch["role"].to_numpy(dtype=object) == "gemm")
    unknown = gemm[pd.isna(te_pass[gemm])]
    in_module = unknown[module_range[unknown] >= 0]
    wgrad_range = in_module[step[in_module] == "wgrad"]
    forward = in_module[(step[in_module] != "wgrad") & (direction[in_module] == "forward")]
    te_pass[wgrad_range], te_pass[forward] = "wgrad", "fprop"
    source[wgrad_range], source[forward] = "te-order", "te-order"
    unknown = np.setdiff1d(unknown, np.r_[wgrad_range, forward])
    thread = pd.Series(launch["thread"].to_numpy(dtype=object)[unknown], dtype="string")
    graph = pd.Series(launch["launch_api"].to_numpy(dtype=object)[unknown], dtype="string").str.contains(_GRAPH_LAUNCH)
    no_backward = (~thread.str.startswith(_AUTOGRAD_THREAD_PREFIX) & ~graph).fillna(False).to_numpy(dtype=bool)
    te_pass[unknown[no_backward]], source[unknown[no_backward]] = "fprop", "thread"
    unknown = unknown[~no_backward]  # GEMMs only: a few of a trace's kernels
    precision = launch["precision"].to_numpy(dtype=object)[unknown]
    by_layout = pd.Series(launch["layout"].to_numpy(dtype=object)[unknown]).map(_PASS_BY_LAYOUT).to_numpy(dtype=object)
    told = pd.notna(by_layout) & pd.Series(precision).isin(_LAYOUT_TELLS_PASS).to_numpy()
    te_pass[unknown[told]], source[unknown[told]] = by_layout[told], "layout"
    # The hook's range around a backward node outside TE says "backward": the node runs its dgrad
    # and its wgrad GEMM, and a 16-bit kernel's layout letters say which each is.
    node = gemm[te_pass[gemm] == BACKWARD]
    node_layout = pd.Series(launch["layout"].to_numpy(dtype=object)[node]).map(_PASS_BY_LAYOUT).to_numpy(dtype=object)
    told = (np.isin(node_layout, ("dgrad", "wgrad"))
            & pd.Series(launch["precision"].to_numpy(dtype=object)[node]).isin(_LAYOUT_TELLS_PASS).to_numpy())
    te_pass[node[told]], source[node[told]] = node_layout[told], "layout"
    rows = np.setdiff1d(in_module, np.r_[wgrad_range, forward])
    backward = pd.DataFrame({"range": module_range[rows], "module": out["te_module"].to_numpy()[rows], "row": rows})
    for (module, _), members in backward.groupby(["module", "range"], sort=False):
        expected = _TE_SEQUENCE.get((module, "backward"))
        if expected is not None and len(expected) == len(members):
            at = members["row"].to_numpy()
            missing = pd.isna(te_pass[at])
            te_pass[at[missing]] = np.array(expected, dtype=object)[missing]
            source[at[missing]] = "te-order"
    # what nothing above told, launched by the autograd thread itself, is at least backward
    autograd = gemm[pd.isna(te_pass[gemm])]
    autograd = autograd[pd.Series(launch["thread"].to_numpy(dtype=object)[autograd], dtype="string")
                        .str.startswith(_AUTOGRAD_THREAD_PREFIX).fillna(False).to_numpy(dtype=bool)]
    te_pass[autograd], source[autograd] = BACKWARD, "thread"
    out["te_pass"] = _objects(te_pass, out.index)
    out["pass_source"] = _objects(source, out.index)


def _ranks(launch: pd.DataFrame, nvtx: pd.DataFrame, grammar: pd.DataFrame, name_codes: np.ndarray) -> pd.Series:
    """Each launch's rank, from the mark gemmscope's hook leaves in every process (NA without);
    `grammar` per distinct NVTX name, `name_codes` each NVTX row's code into it."""
    marks = (grammar["kind"].to_numpy() == te_ranges.PROCESS)[name_codes]
    by_pid = pd.Series(grammar["rank"].array.take(name_codes[marks]), index=nvtx["pid"].to_numpy()[marks],
                       dtype="Int64")
    by_pid = by_pid[~by_pid.index.duplicated(keep="last")]
    pid = process_id(launch["global_pid"].astype("int64"))
    return pd.Series(pid.map(by_pid).array, index=launch.index, dtype="Int64")
