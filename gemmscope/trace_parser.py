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

import hashlib
import lzma
import os
import re
import sqlite3
import tempfile
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import sqlite_utils

from gemmscope import kernels
from gemmscope.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"

# nsys packs process and thread ids into one 64-bit "global thread id".
_TID_MASK = 0xFFFFFF


def _pid(global_tid: pd.Series) -> pd.Series:
    return (global_tid // (1 << 24)) & _TID_MASK


def _tid(global_tid: pd.Series) -> pd.Series:
    return global_tid & _TID_MASK


# NVTX_EVENTS.eventType values (nsys's ENUM_NSYS_EVENT_TYPE, the same in 2023.4 and 2025.3).
NVTX_KINDS = {34: "mark", 59: "push-pop", 60: "start-end"}
NVTX_DOMAIN_CREATE = 75


@dataclass
class Trace:
    """Everything gemmscope reads from one export, as DataFrames; times are ns on nsys's clock."""

    path: Path  # as given (.sqlite, .sqlite.xz or .nsys-rep)
    sqlite: Path  # the export actually read
    meta: dict
    kernels: pd.DataFrame
    memops: pd.DataFrame
    api_calls: pd.DataFrame
    nvtx: pd.DataFrame
    threads: pd.DataFrame
    gpus: pd.DataFrame
    memory: pd.DataFrame


class _Export:
    """A read-only connection to an export, with table and column feature detection."""

    def __init__(self, path: Path):
        self.path = path
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.db = sqlite_utils.Database(self.conn)
        self.tables = set(self.db.table_names())

    def columns(self, table: str) -> set[str]:
        return set(self.db[table].columns_dict) if table in self.tables else set()

    def frame(self, table: str, columns: dict[str, str], where: str = "") -> pd.DataFrame:
        """`columns` maps output name → column (or SQL expression over present columns); columns
        this export lacks come back as NA, a missing table as an empty frame."""
        present = self.columns(table)
        if not present:
            return pd.DataFrame({name: pd.Series(dtype="object") for name in columns})
        select = [
            f"{expr} AS {name}" if expr in present or not expr.isidentifier() else f"NULL AS {name}"
            for name, expr in columns.items()
        ]
        return pd.read_sql_query(f"SELECT {', '.join(select)} FROM {table} {where}", self.conn)

    def strings(self) -> dict[int, str]:
        if "StringIds" not in self.tables:
            return {}
        return dict(self.conn.execute("SELECT id, value FROM StringIds"))


def _check_file(path: Path) -> None:
    if not path.exists():
        raise InputError(f"no such file: {path}")
    if not path.is_file():
        raise InputError(f"not a file: {path}")
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise InputError(
            f"{path} is not an SQLite export of Nsight Systems "
            "(give a .sqlite from `nsys export --type sqlite`, or an .nsys-rep)"
        )


def read_trace(path: str | Path) -> Trace:
    """Read an nsys SQLite export: `.sqlite`, `.sqlite.xz` (as fixtures and examples ship), or
    an `.nsys-rep` (exported beside it with nsys first)."""
    given = path = Path(path)
    if path.suffix == ".xz":
        path = _decompressed(path)
    elif path.suffix == ".nsys-rep":
        from gemmscope import nsys_runner

        if not path.exists():
            raise InputError(f"no such file: {path}")
        path = nsys_runner.export_sqlite(path)
    _check_file(path)
    try:
        export = _Export(path)
        if "META_DATA_EXPORT" not in export.tables or "StringIds" not in export.tables:
            raise InputError(
                f"{path} is an SQLite file but not an Nsight Systems export (no META_DATA_EXPORT table)"
            )
        return _read(export, given)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:  # pandas wraps sqlite's errors
        raise InputError(f"{path} is a damaged or truncated SQLite file ({exc})") from None


def _decompressed(path: Path) -> Path:
    """An xz-compressed export, decompressed once into the temporary folder (keyed by content)."""
    if not path.is_file():
        raise InputError(f"no such file: {path}")
    data = path.read_bytes()
    target = Path(tempfile.gettempdir()) / "gemmscope-xz" / (
        hashlib.sha256(data).hexdigest()[:16] + "-" + path.name.removesuffix(".xz"))
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            raw = lzma.decompress(data)
        except lzma.LZMAError as exc:
            raise InputError(f"{path} is not a readable xz file ({exc})") from None
        partial = target.with_name(target.name + f".{os.getpid()}.partial")
        partial.write_bytes(raw)
        partial.replace(target)
    return target


def _read(export: _Export, given: Path) -> Trace:
    strings = export.strings()
    meta_rows = dict(export.conn.execute("SELECT name, value FROM META_DATA_EXPORT"))
    gpus = _gpus(export)
    meta = {
        "nsys_version": meta_rows.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": meta_rows.get("EXPORT_SCHEMA_VERSION"),
        "gpus": gpus.to_dict("records"),
    }
    return Trace(
        path=given,
        sqlite=export.path,
        meta=meta,
        kernels=_kernels(export, strings),
        memops=_memops(export),
        api_calls=_api_calls(export, strings),
        nvtx=_nvtx(export, strings, _session_end(export)),
        threads=_threads(export, strings),
        gpus=gpus,
        memory=_memory(export),
    )


def _name(ids: pd.Series, strings: dict[int, str]) -> pd.Series:
    return ids.map(lambda i: strings.get(int(i)) if pd.notna(i) else None)


# Columns every CUPTI GPU activity table (kernels, memsets, memcpys) has.
_GPU_ACTIVITY = {
    "start": "start",
    "end": "end",
    "device_id": "deviceId",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
}


def _kernels(export: _Export, strings: dict[int, str]) -> pd.DataFrame:
    k = export.frame(
        "CUPTI_ACTIVITY_KIND_KERNEL",
        _GPU_ACTIVITY | {"demangled_id": "demangledName", "short_id": "shortName", "graph_node_id": "graphNodeId"},
        "ORDER BY start",
    )
    k["short_name"] = _name(k["short_id"], strings)
    # The demangled name keeps template arguments that tell e.g. cutlass' int8 GEMMs apart.
    k["name"] = _name(k["demangled_id"], strings).fillna(k["short_name"])
    k["duration_ns"] = k["end"] - k["start"]
    k["pid"] = _pid(k["global_pid"])
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


def _api_calls(export: _Export, strings: dict[int, str]) -> pd.DataFrame:
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
    )
    a["name"] = _name(a["name_id"], strings)
    a["api"] = a["event_class"].map({0: "runtime", 1: "driver"})
    a["global_pid"] = a["global_tid"] - _tid(a["global_tid"])
    return a.drop(columns=["name_id", "event_class"])


def _nvtx(export: _Export, strings: dict[int, str], session_end: float) -> pd.DataFrame:
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
    # Registered strings (nvtxDomainRegisterString) arrive as textId; plain ones as text.
    n["name"] = n["text"].where(n["text"].notna(), _name(n["text_id"], strings))
    n["pid"] = _pid(n["global_tid"])
    n["tid"] = _tid(n["global_tid"])
    # Domain ids are numbered per process; a DomainCreate row names each one (0 is the default).
    created = n[n["event_type"] == NVTX_DOMAIN_CREATE]
    domains = dict(zip(zip(created["pid"], created["domain_id"]), created["name"]))
    n = n[n["event_type"].isin(NVTX_KINDS)].copy()
    n["kind"] = n["event_type"].map(NVTX_KINDS)
    n["domain"] = [domains.get((p, d)) for p, d in zip(n["pid"], n["domain_id"])]
    # nsys closes a range left open at exit at the end of the session; an older export may
    # leave its end NULL.
    n["unclosed"] = (n["kind"] != "mark") & (n["end"].isna() | (n["end"] >= session_end))
    n["ended_on_other_thread"] = n["end_global_tid"].notna() & (n["end_global_tid"] != n["global_tid"])
    n["duration_ns"] = n["end"] - n["start"]
    keep = ["start", "end", "duration_ns", "name", "kind", "domain", "category", "global_tid",
            "end_global_tid", "pid", "tid", "unclosed", "ended_on_other_thread"]
    return n[keep].sort_values("start", ignore_index=True)


def _session_end(export: _Export) -> float:
    """End of the capture on the trace's clock (ANALYSIS_DETAILS.duration), or +inf if absent."""
    if "duration" not in export.columns("ANALYSIS_DETAILS"):
        return float("inf")
    (end,) = export.conn.execute("SELECT MAX(duration) FROM ANALYSIS_DETAILS").fetchone()
    return float(end) if end is not None else float("inf")


def _threads(export: _Export, strings: dict[int, str]) -> pd.DataFrame:
    t = export.frame("ThreadNames", {"global_tid": "globalTid", "name_id": "nameId", "priority": "priority"})
    t["name"] = _name(t["name_id"], strings)
    t["pid"] = _pid(t["global_tid"])
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
        "ORDER BY start",
    )
    # ENUM_CUDA_DEV_MEM_EVENT_OPER: 0 allocation, 1 deallocation
    m["delta_bytes"] = m["bytes"].where(m["operation"] == 0, -m["bytes"])
    return m


# --- attribution ----------------------------------------------------------------------------

# Transformer Engine's NVTX ranges (pushed when NVTE_NVTX_ENABLED=1), see TE's module/*.py:
# `transformer_engine._Linear.forward.gemm`, `….backward.dgrad_gemm`, `….backward.wgrad_gemm`
# around each GEMM of _Linear and _LayerNormLinear (and their userbuffers variants, which add
# a suffix), and only module-level ranges for LayerNormMLP.
_TE_GEMM_RANGE = re.compile(
    r"^transformer_engine\.(?P<module>_\w+)\.(?:forward|backward)\.(?P<gemm>gemm|dgrad_gemm|wgrad_gemm)\b"
)
_TE_PASS = {"gemm": "fprop", "dgrad_gemm": "dgrad", "wgrad_gemm": "wgrad"}
_TE_MODULES = r"Linear|LayerNormLinear|LayerNormMLP|GroupedLinear"
_TE_MODULE_RANGE = re.compile(rf"^(?:(?P<fwd>{_TE_MODULES}) forward|(?P<bwd>_(?:{_TE_MODULES}))_backward)$")
# GEMMs inside one LayerNormMLP range, in launch order (TE's layernorm_mlp.py: forward fc1 then
# fc2; backward fc2 dgrad, fc2 wgrad, fc1 dgrad, fc1 wgrad).
_TE_SEQUENCE = {
    ("_LayerNormMLP", "forward"): ("fprop", "fprop"),
    ("_LayerNormMLP", "backward"): ("dgrad", "wgrad", "dgrad", "wgrad"),
}
# cuBLAS honours TE's operand layout for 16-bit GEMMs (TN fprop, NN dgrad, NT wgrad); FP8 GEMMs
# on Hopper are always TN (TE transposes the operands first), so there the layout says nothing.
_PASS_BY_LAYOUT = {"TN": "fprop", "NN": "dgrad", "NT": "wgrad"}
_LAYOUT_TELLS_PASS = {"bf16", "fp16", "fp32", "tf32"}
# TE's C library pushes this around every GEMM it launches, whatever NVTE_NVTX_ENABLED says.
TE_GEMM_CALL = "nvte_cublas_gemm_v2"


def launches(trace: Trace) -> pd.DataFrame:
    """One row per kernel launch: the kernel's record, its decoded name, the API call that
    launched it (`launch_*`, `thread`), `ranges` (NVTX ranges open around the launch on the
    launching thread plus process-wide start/end ranges, outermost first), `via_te` (launched
    by TE's GEMM call), `te_module` and `te_pass` (from TE's ranges; None where they are absent)."""
    k = trace.kernels
    api = trace.api_calls[["correlation_id", "global_pid", "start", "end", "global_tid", "name"]].rename(
        columns={"start": "launch_start", "end": "launch_end", "global_tid": "launch_global_tid",
                 "name": "launch_api"}
    )
    # A correlation id is unique per process; keep the outermost call if a trace repeats one.
    api = api.sort_values("launch_start").drop_duplicates(["correlation_id", "global_pid"])
    out = k.merge(api, on=["correlation_id", "global_pid"], how="left")
    out = out.sort_values("start", ignore_index=True)
    threads = trace.threads.set_index("global_tid")["name"].to_dict()
    out["thread"] = out["launch_global_tid"].map(lambda g: threads.get(g) if pd.notna(g) else None)
    decoded = kernels.decode_frame(out["name"])
    for column in ("role", "precision", "family", "layout"):
        out[column] = decoded[column].values
    range_ids = _enclosing_ranges(out, trace.nvtx)
    nvtx_names = trace.nvtx["name"].to_numpy()
    out["ranges"] = range_ids.map(lambda ids: [nvtx_names[r] for r in ids])
    out["via_te"] = out["ranges"].map(lambda names: TE_GEMM_CALL in names)
    module, pass_ = _te_attribution(out, range_ids)
    out["te_module"] = pd.Series(module, index=out.index, dtype="object")
    out["te_pass"] = pd.Series(pass_, index=out.index, dtype="object")
    return out


def _enclosing_ranges(launch: pd.DataFrame, nvtx: pd.DataFrame) -> pd.Series:
    """Per launch, the row numbers in `nvtx` of the ranges around it, outermost first."""
    result: list[list[tuple[int, int, int]]] = [[] for _ in range(len(launch))]
    known = launch["launch_start"].notna()
    t0 = launch["launch_start"].where(known, launch["start"]).astype("int64").to_numpy()
    t1 = launch["launch_end"].where(known, launch["start"]).astype("int64").to_numpy()
    big = 1 << 62  # an unclosed range is open until the end of the capture
    ranges = nvtx[nvtx["kind"] != "mark"]

    # Push/pop ranges nest on their thread, one stack per NVTX domain: a sweep per stack.
    push_pop = ranges[ranges["kind"] == "push-pop"]
    for (gtid, _), rows in push_pop.groupby(["global_tid", push_pop["domain"].fillna("")]):
        mine = launch.index[(launch["launch_global_tid"] == gtid).to_numpy()]
        if len(mine) == 0:
            continue
        starts = rows["start"].astype("int64").to_numpy()
        ends = rows["end"].fillna(big).astype("int64").to_numpy()
        row_ids = rows.index.to_numpy()
        order = sorted(range(len(rows)), key=lambda i: (starts[i], -ends[i]))
        stack: list[int] = []
        j = 0
        for li in sorted(mine, key=lambda i: t0[i]):
            while j < len(order) and starts[order[j]] <= t0[li]:
                r = order[j]
                while stack and ends[stack[-1]] < starts[r]:
                    stack.pop()
                stack.append(r)
                j += 1
            while stack and ends[stack[-1]] < t0[li]:
                stack.pop()
            result[li] = [(starts[r], -ends[r], row_ids[r]) for r in stack if ends[r] >= t1[li]]

    # Start/end ranges belong to the process, not a thread: containment in time.
    start_end = ranges[ranges["kind"] == "start-end"]
    launch_pid = launch["global_pid"].to_numpy()
    for pid, rows in start_end.groupby("pid"):
        mine = [i for i in range(len(launch)) if (launch_pid[i] >> 24) & _TID_MASK == pid]
        mine.sort(key=lambda i: t0[i])
        times = [t0[i] for i in mine]
        for s, e, row_id in zip(rows["start"], rows["end"].fillna(big), rows.index):
            for pos in range(bisect_left(times, s), bisect_right(times, e)):
                li = mine[pos]
                if t1[li] <= e:
                    result[li].append((int(s), -int(e), row_id))
    return pd.Series([[row for *_, row in sorted(r)] for r in result], index=launch.index, dtype="object")


def _te_attribution(launch: pd.DataFrame, range_ids: pd.Series) -> tuple[list, list]:
    module: list = [None] * len(launch)
    pass_: list = [None] * len(launch)
    is_gemm = (launch["role"] == "gemm").to_numpy()
    # GEMMs under each module-level range instance (keyed by its NVTX row), for order-based passes.
    sequences: dict[tuple, list[int]] = {}
    for i, (names, ids, precision, layout) in enumerate(
        zip(launch["ranges"], range_ids, launch["precision"], launch["layout"])
    ):
        if not is_gemm[i]:
            continue
        for depth in range(len(names) - 1, -1, -1):
            if m := _TE_GEMM_RANGE.match(names[depth]):
                module[i], pass_[i] = m["module"], _TE_PASS[m["gemm"]]
                break
            if m := _TE_MODULE_RANGE.match(names[depth]):
                direction = "forward" if m["fwd"] else "backward"
                module[i] = "_" + m["fwd"] if m["fwd"] else m["bwd"]
                if precision in _LAYOUT_TELLS_PASS and layout in _PASS_BY_LAYOUT:
                    pass_[i] = _PASS_BY_LAYOUT[layout]
                sequences.setdefault((module[i], direction, ids[depth]), []).append(i)
                break
    for (mod, direction, _), members in sequences.items():
        expected = _TE_SEQUENCE.get((mod, direction))
        if expected is None and direction == "forward":
            expected = ("fprop",) * len(members)
        if expected is not None and len(expected) == len(members):
            for i, p in zip(members, expected):
                pass_[i] = pass_[i] or p
    return module, pass_
