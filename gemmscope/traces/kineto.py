"""PyTorch profiler (Kineto) traces → the same DataFrames as the nsys reader (the trace model).

`torch.profiler` writes a Chrome-trace JSON (`.json`, often `.json.gz`, one per rank): an object
whose head holds `schemaVersion`, `deviceProperties`, `distributedInfo` (rank, world size) and
`baseTimeNanoseconds`, then `traceEvents`, a list of events with a category (`cat`), `pid`,
`tid`, `ts` and `dur` in microseconds (with three decimals: Kineto prints nanoseconds / 1000):

- `kernel`, `gpu_memcpy`, `gpu_memset`: GPU activity; `pid` is the device, `tid` the stream,
  `args` the device, stream and `correlation` (the launching call's);
- `cuda_runtime`, `cuda_driver`: API calls on the launching thread, with `args.correlation`;
- `cpu_op`: ATen operators on the calling thread, with `Input type` / `Input Dims` when
  recorded with `record_shapes=True`; `autograd::engine::evaluate_function: …` wraps each
  backward node autograd runs;
- `user_annotation`: `record_function` labels (ProfilerStep#N among them);
- `ph: "M"` metadata: process and thread names (`thread 123 (pt_autograd_0)`).

`read` streams the events (ijson: a 1 GB trace is never held whole) into those frames, times in
ns. A Kineto trace has no NVTX: `record_function` labels take their place (gemmscope's own
records arrive that way too), and where gemmscope's hook left no record of a torch._scaled_mm,
one is made from the operator's input types and shapes (its float8 operands and how their scales
say they are scaled), in the hook's record format (gemmscope_protocol), so that the request is
read by the same grammar (te_ranges) whichever way it came. What a trace lacks is said in
`meta["lacks"]`.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope.autocast_hook.gemmscope_protocol import (
    BACKWARD,
    PROCESS_PREFIX,
    TORCH_GEMM_PREFIX,
    UNKNOWN,
    format_record,
)
from gemmscope.errors import InputError
from gemmscope.traces.kineto_json import (
    MAX_STRING,
    READ_ERRORS,
    bad_event,
    damaged,
    head_and_events,
    one_line,
    shown,
)
from gemmscope.traces.model import ID_BITS, TID_MASK, DamagedTrace, Trace, check_records

# The trace format versions this reader knows (Kineto's `schemaVersion`, 1 since PyTorch 1.10).
KNOWN_SCHEMA_VERSIONS = (1,)

# Event categories (Kineto's ActivityType names; older PyTorch spelled some otherwise).
_CATEGORY = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "driver", "driver": "driver",
    "cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "annotation",
}
_BACKWARD_NODE = "autograd::engine::evaluate_function: "
_SCALED_MM = "aten::_scaled_mm"
# Kineto names a thread "thread <tid> (<OS name>)"; nsys, and so the attribution, by its OS name.
_THREAD_NAME = re.compile(r"^thread \d+ \((?P<name>.*)\)$")
# ATen's scalar type names as Kineto's `Input type` spells them -> the operand types gemmscope's
# records use (gemmscope_protocol.OPERAND_TYPES).
OPERAND_OF_SCALAR_TYPE = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "c10::Float4_e2m1fn_x2": "fp4",
}


class _Columns:
    """Columns of one kind of event, as typed arrays (8 bytes a value, not a Python object each:
    a 1 GB trace holds millions of events)."""

    def __init__(self, **types: str):
        self.data = {name: array(code) for name, code in types.items()}

    def frame(self) -> dict[str, np.ndarray]:
        return {name: np.frombuffer(values, dtype=values.typecode) if len(values) else
                np.empty(0, dtype=values.typecode) for name, values in self.data.items()}


class _Names:
    """Distinct strings, each kept once, coded by first appearance."""

    def __init__(self):
        self.codes: dict[str, int] = {}

    def code(self, name: str) -> int:
        code = self.codes.get(name)
        if code is None:
            code = self.codes[name] = len(self.codes)
        return code

    def values(self) -> np.ndarray:
        return np.array(list(self.codes), dtype=object)


def _ns(microseconds: float) -> int:
    """Kineto's microseconds (three decimals) as integer nanoseconds."""
    return round(microseconds * 1000)


def read(path: Path, given: Path | None = None) -> Trace:
    """A Kineto trace as a Trace (`given`: the path messages name)."""
    given = given or path
    try:
        head, events = head_and_events(path)
        read_events = _Events(head)
        read_events.consume(events)
        read_events.strings_cut = events.cut
        return read_events.trace(given)
    except InputError:
        raise
    except DamagedTrace as exc:
        raise InputError(exc.message(given)) from None
    except READ_ERRORS as exc:
        raise damaged(given, exc) from None


class _Events:
    """The events of one trace, sorted by kind into columns as they stream past."""

    def __init__(self, head: dict):
        version = head.get("schemaVersion")
        if version is not None and version not in KNOWN_SCHEMA_VERSIONS:
            raise InputError(f"torch.profiler trace format version {version} is not one gemmscope reads "
                             f"(known: {', '.join(map(str, KNOWN_SCHEMA_VERSIONS))})")
        for key, kind in (("distributedInfo", dict), ("deviceProperties", list)):
            if head.get(key) is not None and not isinstance(head[key], kind):
                raise DamagedTrace(f"its {key} is {shown(head[key])}, not a{'n object' if kind is dict else ' list'}")
        rank = (head.get("distributedInfo") or {}).get("rank")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):
            raise DamagedTrace(f"its distributedInfo.rank is {shown(rank)}, not an integer")
        self.head = head
        self.names = _Names()
        gpu = {"start": "q", "end": "q", "device_id": "q", "stream_id": "q", "correlation_id": "q", "name": "q"}
        self.gpu = {kind: _Columns(**gpu, bytes="q") for kind in ("kernel", "memcpy", "memset")}
        self.api = _Columns(start="q", end="q", pid="q", tid="q", correlation_id="q", name="q", driver="b")
        self.annotations = _Columns(start="q", end="q", pid="q", tid="q", name="q")
        self.backward_nodes = _Columns(start="q", end="q", pid="q", tid="q")
        self.scaled_mm: list[tuple[int, int, int, int, dict]] = []  # (start, end, pid, tid, args)
        self.cpu_ops = 0
        self.strings_cut = 0  # texts longer than MAX_STRING, cut as they were read
        # every name given, in order, by (pid, tid) as the trace writes them (_threads keeps the int ones)
        self.thread_names: dict[tuple[object, object], list[str]] = {}

    def consume(self, events: Iterable[dict]) -> None:
        """Sort the events into columns; the first one a field of which is not what Kineto writes
        (a time that is no number, an event that is no object) is refused by name (bad_event),
        looked for only then: the loop itself checks nothing it need not."""
        names = self.names
        at, e = -1, None
        try:
            for at, e in enumerate(events):  # noqa: B007 (`at` names the event the except clause refuses)
                kind = _CATEGORY.get(str(e.get("cat", "")).lower())
                if kind is None:
                    if e.get("ph") == "M" and e.get("name") == "thread_name":
                        names_given = self.thread_names.setdefault((e.get("pid"), e.get("tid")), [])
                        names_given.append((e.get("args") or {}).get("name", ""))
                    continue
                start = _ns(e["ts"])
                end = start + _ns(e.get("dur", 0))
                args = e.get("args") or {}
                if kind == "cpu_op":
                    self.cpu_ops += 1
                    name = e.get("name", "")
                    if name.startswith(_BACKWARD_NODE):
                        self.backward_nodes.data["start"].append(start)
                        self.backward_nodes.data["end"].append(end)
                        self.backward_nodes.data["pid"].append(_int(e.get("pid")))
                        self.backward_nodes.data["tid"].append(_int(e.get("tid")))
                    elif name == _SCALED_MM:
                        self.scaled_mm.append((start, end, _int(e.get("pid")), _int(e.get("tid")), args))
                elif kind == "annotation":
                    columns = self.annotations.data
                    columns["start"].append(start)
                    columns["end"].append(end)
                    columns["pid"].append(_int(e.get("pid")))
                    columns["tid"].append(_int(e.get("tid")))
                    columns["name"].append(names.code(e.get("name", "")))
                elif kind in ("runtime", "driver"):
                    columns = self.api.data
                    columns["start"].append(start)
                    columns["end"].append(end)
                    columns["pid"].append(_int(e.get("pid")))
                    columns["tid"].append(_int(e.get("tid")))
                    columns["correlation_id"].append(_correlation(args))
                    columns["name"].append(names.code(e.get("name", "")))
                    columns["driver"].append(kind == "driver")
                else:
                    columns = self.gpu[kind].data
                    columns["start"].append(start)
                    columns["end"].append(end)
                    columns["device_id"].append(_int(args.get("device", e.get("pid", -1))))
                    columns["stream_id"].append(_int(args.get("stream", e.get("tid", -1))))
                    columns["correlation_id"].append(_correlation(args))
                    columns["name"].append(names.code(e.get("name", "")))
                    columns["bytes"].append(_int(args.get("bytes", -1)))
        except (TypeError, KeyError, AttributeError, OverflowError, ValueError) as exc:
            # the event the loop could not take: what is wrong with it, in words where bad_event knows
            raise bad_event(at, e) or DamagedTrace(f"event {at + 1} of traceEvents could not be read "
                                                    f"({one_line(exc)})") from None
        not_text = [name for name in names.codes if not isinstance(name, str)]
        if not_text:
            raise DamagedTrace(f"an event's name is {not_text[0]!r:.40}, not text")

    def trace(self, given: Path) -> Trace:
        names = self.names.values()
        api = pd.DataFrame(self.api.frame())
        kernels = pd.DataFrame(self.gpu["kernel"].frame())
        pids = _Ids(np.concatenate([api["pid"].to_numpy(), self.annotations.frame()["pid"]]))
        tids = _Ids(np.concatenate([api["tid"].to_numpy(), self.annotations.frame()["tid"]]))
        api["global_pid"] = pids.packed(api["pid"].to_numpy())
        api["global_tid"] = api["global_pid"] | tids.of(api["tid"].to_numpy())
        api["name"] = names[api["name"].to_numpy()]
        api["api"] = np.where(api.pop("driver").to_numpy(dtype=bool), "driver", "runtime")
        api = api.drop(columns=["pid", "tid"])
        gpu_pid = self._launching_pids(api, pids)
        kernels = self._gpu_frame(kernels, names, gpu_pid).drop(columns="bytes")
        kernels["short_name"] = kernels["name"]
        # the name's code, row by row of the frame as _gpu_frame sorted it (by start)
        kernels["name_id"] = pd.factorize(kernels["name"])[0]
        kernels["graph_node_id"] = None
        kernels["pid"] = kernels["global_pid"].to_numpy() >> ID_BITS
        memops = pd.concat([self._gpu_frame(pd.DataFrame(self.gpu[kind].frame()), names, gpu_pid).assign(kind=kind)
                            for kind in ("memset", "memcpy")], ignore_index=True).drop(columns="name")
        memops = memops.sort_values("start", ignore_index=True)
        check_records(kernels, memops, api, pd.DataFrame(self.annotations.frame()))
        nvtx = self._ranges(names, pids, tids)
        gpus = self._gpus()
        meta = {"nsys_version": None, "schema_version": _text(self.head.get("schemaVersion")),
                "gpus": gpus.to_dict("records"), "profiler": "torch.profiler", "lacks": self._lacks(nvtx),
                "no_kernels": None if len(kernels) else self._no_kernels(given, api),
                # CUDA calls recorded and none of them a launch: the run launched no kernel
                "cuda_api_traced": not api.empty and not api["name"].str.contains("Launch").any(),
                "capture": self._capture(kernels, api)}
        return Trace(path=given, sqlite=None, meta=meta, kernels=kernels, memops=memops, api_calls=api,
                          nvtx=nvtx, threads=self._threads(pids, tids), gpus=gpus, memory=_no_memory_events())

    def _capture(self, kernels: pd.DataFrame, api: pd.DataFrame) -> dict:
        """What the trace records about itself (as traces.nsys._capture): Kineto's trace_id (else its
        first event's time and its processes), the span of its GPU activity and CUDA calls on the
        wall clock (where baseTimeNanoseconds says where its times count from); no command."""
        starts = [frame["start"].min() for frame in (kernels, api) if len(frame)]
        ends = [frame["end"].max() for frame in (kernels, api) if len(frame)]
        first = int(min(starts)) if starts else None
        identity = self.head.get("trace_id")
        if identity is None and first is not None:
            identity = f"{first} {sorted(pd.unique(api['global_pid']).tolist())}"
        base_ns = self.head.get("baseTimeNanoseconds")
        if not isinstance(base_ns, int) or isinstance(base_ns, bool):  # what its times count from, unknown
            base_ns = None
        window = (base_ns + first, base_ns + int(max(ends))) if base_ns is not None and first is not None else None
        return {"id": None if identity is None else f"torch.profiler {identity}", "window": window, "command": None}

    def _launching_pids(self, api: pd.DataFrame, pids: _Ids):
        """Per correlation id, the packed process id of the call that launched it (a kernel's own
        `pid` is its device); where no call is found, the trace's process when it has one."""
        by_correlation = pd.Series(api["global_pid"].to_numpy(),
                                   index=api["correlation_id"].to_numpy())
        by_correlation = by_correlation[~by_correlation.index.duplicated()]
        only = int(pids.packed(pids.values[:1])[0]) if len(pids.values) == 1 else 0

        def of(correlation: np.ndarray) -> np.ndarray:
            found = by_correlation.reindex(correlation).to_numpy()
            return np.where(pd.isna(found), only, found).astype("int64")

        return of

    def _gpu_frame(self, frame: pd.DataFrame, names: np.ndarray, launching_pid) -> pd.DataFrame:
        frame = frame.copy()
        frame["name"] = names[frame["name"].to_numpy()] if len(frame) else np.empty(0, dtype=object)
        frame["global_pid"] = launching_pid(frame["correlation_id"].to_numpy())
        frame["duration_ns"] = frame["end"] - frame["start"]
        frame["bytes"] = frame["bytes"].where(frame["bytes"] >= 0)
        return frame.sort_values("start", kind="stable", ignore_index=True)

    def _ranges(self, names: np.ndarray, pids: _Ids, tids: _Ids) -> pd.DataFrame:
        """The `record_function` labels as NVTX push/pop ranges of their thread, the rank
        `distributedInfo` names as the process mark gemmscope's hook leaves, and a record per
        torch._scaled_mm where the hook left none."""
        annotations = self.annotations.frame()
        frame = pd.DataFrame({key: annotations[key] for key in ("start", "end", "pid", "tid")})
        frame["name"] = names[annotations["name"]] if len(frame) else np.empty(0, dtype=object)
        frame["kind"] = "push-pop"
        hook_recorded = frame["name"].str.startswith(TORCH_GEMM_PREFIX).any()
        extra = [] if hook_recorded else self._scaled_mm_records()
        info = self.head.get("distributedInfo") or {}
        if "rank" in info and len(pids.values):
            mark = format_record(PROCESS_PREFIX, {"rank": info["rank"], "world_size": info.get("world_size", UNKNOWN)})
            start = int(frame["start"].min()) if len(frame) else 0
            extra.append({"start": start, "end": start, "pid": int(pids.values[0]), "tid": int(tids.values[0])
                          if len(tids.values) else 0, "name": mark, "kind": "mark"})
        if extra:
            frame = pd.concat([frame, pd.DataFrame(extra)], ignore_index=True)
        global_pid = pids.packed(frame["pid"].to_numpy(dtype="int64"))
        frame["global_tid"] = global_pid | tids.of(frame["tid"].to_numpy(dtype="int64"))
        frame["end_global_tid"] = frame["global_tid"]
        frame["pid"] = global_pid >> ID_BITS
        frame["tid"] = frame["global_tid"] & TID_MASK
        frame["domain"] = None
        frame["category"] = None
        frame["unclosed"] = False
        frame["ended_on_other_thread"] = False
        frame["duration_ns"] = frame["end"] - frame["start"]
        # as the nsys reader gives them: Python strings, not pandas' Arrow-backed text (traces.nsys._nvtx)
        frame["name"], frame["kind"] = frame["name"].astype(object), frame["kind"].astype(object)
        keep = ["start", "end", "duration_ns", "name", "kind", "domain", "category", "global_tid",
                "end_global_tid", "pid", "tid", "unclosed", "ended_on_other_thread"]
        return frame[keep].sort_values("start", ignore_index=True)

    def _scaled_mm_records(self) -> list[dict]:
        """One record per torch._scaled_mm with its input types, as gemmscope's hook writes one
        (`gemmscope.torch_gemm|op=_scaled_mm|…`): operand types, scaling, shape, and the pass
        when autograd ran it for a backward node."""
        if not self.scaled_mm:
            return []
        start, end, pid, tid = (np.array(column, dtype="int64") for column in zip(*(op[:4] for op in self.scaled_mm)))
        backward = _inside(self.backward_nodes.frame(), start, end, pid, tid)
        records, labels = [], {}
        for at, (*_, args) in enumerate(self.scaled_mm):
            types, dims = args.get("Input type") or [], args.get("Input Dims") or []
            if len(types) < 4 or len(dims) < 4:
                continue  # recorded without record_shapes: nothing says what it asked
            key = (str(types[:4]), str(dims[:4]), bool(backward[at]))
            if key not in labels:  # a training run repeats a few calls thousands of times
                labels[key] = _scaled_mm_record(types, dims, bool(backward[at]))
            records.append({"start": start[at], "end": end[at], "pid": pid[at], "tid": tid[at],
                            "name": labels[key], "kind": "push-pop"})
        return records

    def _threads(self, pids: _Ids, tids: _Ids) -> pd.DataFrame:
        known = [(pid, tid, self._thread_name(pid, names)) for (pid, tid), names in self.thread_names.items()
                 if isinstance(pid, int) and isinstance(tid, int) and pid in pids and tid in tids]
        frame = pd.DataFrame(known, columns=["pid", "tid", "name"])
        global_pid = pids.packed(frame["pid"].to_numpy(dtype="int64"))
        frame["global_tid"] = global_pid | tids.of(frame["tid"].to_numpy(dtype="int64"))
        frame["pid"] = global_pid >> ID_BITS
        frame["tid"] = frame["global_tid"] & TID_MASK
        return frame[["global_tid", "name", "pid", "tid"]].drop_duplicates("global_tid", ignore_index=True)

    def _thread_name(self, pid: int, names: list[str]) -> str:
        """What a thread is: Kineto may name one twice, as what it is (autograd's
        `thread 1262 (pt_autograd_0)`) and by the name it took from the thread that started it
        (`thread 1262 (pt_main_thread)`, `(python3)`), in either order; the first name that is
        not its process's main thread's wins."""
        bare = [_bare_thread_name(name) for name in names]
        main = [_bare_thread_name(name) for name in self.thread_names.get((pid, pid), [])[:1]]
        return next((name for name in bare if name not in main), bare[0])

    def _gpus(self) -> pd.DataFrame:
        rows = [{"id": d.get("id"), "name": d.get("name"), "cc_major": d.get("computeMajor"),
                 "cc_minor": d.get("computeMinor"), "sm_count": d.get("numSms"),
                 "total_memory": d.get("totalGlobalMem"), "clock_rate_hz": None}
                for d in self.head.get("deviceProperties") or [] if isinstance(d, dict)]
        frame = pd.DataFrame(rows, columns=["id", "name", "cc_major", "cc_minor", "sm_count", "total_memory",
                                            "clock_rate_hz"])
        for column, key in (("cc_major", "computeMajor"), ("cc_minor", "computeMinor")):
            given = frame[column].dropna()
            integer = given.map(lambda value: isinstance(value, int) and not isinstance(value, bool))
            if not integer.all():
                raise DamagedTrace(f"its deviceProperties' {key} is {shown(given[~integer].iloc[0])}, not an integer")
        frame["sm"] = [f"sm{int(a)}{int(b)}" if pd.notna(a) and pd.notna(b) else None
                       for a, b in zip(frame["cc_major"], frame["cc_minor"])]
        return frame

    def _no_kernels(self, given: Path, api: pd.DataFrame) -> str | None:
        """Why a trace without GPU kernels has none, as far as it tells: None where it recorded
        CUDA calls and none launched a kernel (the run launched none)."""
        launches = int(api["name"].str.contains("Launch").sum())
        if not api.empty and not launches:
            return None
        if api.empty and not self.cpu_ops:
            return f"{given} is a torch.profiler trace without any activity: nothing to check"
        if api.empty:
            return (f"{given} is a CPU-only torch.profiler trace (no CUDA activity): profile with "
                    "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU")
        return (f"{given} is a torch.profiler trace without GPU activity: it holds {launches} kernel launch "
                "calls and no kernel (CUPTI recorded none)")

    def _lacks(self, nvtx: pd.DataFrame) -> list[str]:
        """What this trace does not hold that an nsys capture would, in words."""
        lacks = ["NVTX ranges (record_function labels stand in: no Transformer Engine ranges)"]
        if self.scaled_mm and not any(args.get("Input type") for *_, args in self.scaled_mm):
            lacks.append("operator input types (captured without record_shapes=True)")
        if not self.head.get("deviceProperties"):
            lacks.append("device properties (GPU name, compute capability)")
        if not self.thread_names:
            lacks.append("thread names (the backward pass cannot be told by its thread)")
        if "distributedInfo" not in self.head:
            lacks.append("distributed info (rank from the file name or order)")
        lacks.append("GPU memory events")
        if self.strings_cut:
            lacks.append(f"the whole of {self.strings_cut} text{'s' * (self.strings_cut > 1)} longer than "
                         f"{MAX_STRING:,} bytes (a name, an argument: cut to its first {MAX_STRING:,} as read)")
        return lacks


def scaled_mm_scaling(scale_a_type: str, a: list, b: list, scale_a: list, scale_b: list) -> str:
    """How torch._scaled_mm was asked to scale (gemmscope_protocol.SCALINGS), from its inputs'
    shapes, by the rules gemmscope's hook applies to the tensors themselves: e8m0 scales are MX
    blocks; one scale each is tensor-wise; a scale per row of A and per column of B row-wise;
    anything else per block. (torchao's row-wise request run as a tensor-wise GEMM plus a
    rescale cannot be told here: the hook reads it from the calling frame.)"""
    if "e8m0" in scale_a_type.lower():
        return "mx"
    if int(np.prod(scale_a or [1])) == 1 and int(np.prod(scale_b or [1])) == 1:
        return "tensorwise"
    if len(a) == 2 and len(b) == 2 and list(scale_a) == [a[0], 1] and list(scale_b) == [1, b[1]]:
        return "rowwise"
    return "blockwise"


def _scaled_mm_record(types: list, dims: list, backward: bool) -> str:
    """The record gemmscope's hook would have left around this torch._scaled_mm call, from its
    input types and shapes (a, b, scale_a, scale_b first)."""
    fields = {"op": "_scaled_mm", "module": UNKNOWN, "layer": "", "pass": BACKWARD if backward else UNKNOWN,
              "a": OPERAND_OF_SCALAR_TYPE.get(types[0], types[0]), "b": OPERAND_OF_SCALAR_TYPE.get(types[1], types[1]),
              "scale": scaled_mm_scaling(str(types[2]), dims[0], dims[1], dims[2], dims[3])}
    if len(dims[0]) == 2 and len(dims[1]) == 2:
        m, k, n = int(dims[0][0]), int(dims[0][1]), int(dims[1][1])
        fields |= {"m": m, "n": n, "k": k, "flops": 2 * m * n * k}
    return format_record(TORCH_GEMM_PREFIX, fields)


def _inside(nodes: dict[str, np.ndarray], start: np.ndarray, end: np.ndarray, pid: np.ndarray,
            tid: np.ndarray) -> np.ndarray:
    """Per call, whether a backward node autograd ran on its thread encloses it: the last node
    to start before it on that thread (nodes of one thread nest or follow each other)."""
    if not len(nodes["start"]):
        return np.zeros(len(start), dtype=bool)
    threads, codes = np.unique(np.concatenate([(nodes["pid"] << 32) ^ nodes["tid"], (pid << 32) ^ tid]),
                               return_inverse=True)
    t0 = min(nodes["start"].min(), start.min())
    # one sortable key per (thread, time): a trace spans far less than 2**40 ns
    node_key = (codes[:len(nodes["start"])] << 40) + (nodes["start"] - t0)
    order = np.argsort(node_key, kind="stable")
    at = np.searchsorted(node_key[order], (codes[len(nodes["start"]):] << 40) + (start - t0), side="right") - 1
    node = order[np.maximum(at, 0)]
    return (at >= 0) & (codes[node] == codes[len(nodes["start"]):]) & (nodes["end"][node] >= end)


class _Ids:
    """A trace's process or thread ids, packed as nsys packs them (24 bits each): the ids
    themselves where they fit, else their place among the distinct ones."""

    def __init__(self, ids: np.ndarray):
        self.values = pd.unique(ids.astype("int64"))
        self.fit = bool(len(self.values) == 0 or (self.values.min() >= 0 and self.values.max() < 1 << ID_BITS))

    def __contains__(self, value: int) -> bool:
        return bool(np.isin(value, self.values))

    def of(self, ids: np.ndarray) -> np.ndarray:
        ids = ids.astype("int64")
        return ids if self.fit else pd.Index(self.values).get_indexer(ids).astype("int64") + 1

    def packed(self, ids: np.ndarray) -> np.ndarray:
        return self.of(ids) << ID_BITS


def _bare_thread_name(name) -> str:
    """A thread's own name, from Kineto's `thread <tid> (<name>)`."""
    match = _THREAD_NAME.match(str(name))
    return match["name"] if match else str(name)


def _int(value) -> int:
    """An id as Kineto writes it (a number; a string for its own pseudo-processes) as an int."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _correlation(args: dict) -> int:
    """The correlation id of a GPU activity or CUDA call: an integer, as Kineto writes it (-1 where absent)."""
    value = args.get("correlation", -1)
    if type(value) is not int:
        raise TypeError("correlation")
    return value


def _text(value) -> str | None:
    return None if value is None else str(value)


def _no_memory_events() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="int64") for name in
                         ("start", "global_pid", "device_id", "address", "bytes", "mem_kind", "operation",
                          "delta_bytes")})
