"""Launch attribution: each kernel <- the API call that launched it <- the NVTX ranges around it.

`launches` joins each kernel of a trace (gemmscope.traces) to the API call that launched it (on
correlationId and process, never on the API's name: cuBLAS 13 launches through
cuLaunchKernelEx) and attributes it to the NVTX ranges open around that call on the launching
thread, and to Transformer Engine's own ranges (te_ranges), which tell module and pass even for
backward GEMMs launched from autograd's thread. `attribute` does it for one trace read, and
keeps the result (a `LoadedTrace`) or why there is nothing to attribute.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from gemmscope import kernels
from gemmscope.assembly import te_ranges
from gemmscope.autocast_hook.gemmscope_protocol import BACKWARD
from gemmscope.traces.model import (
    ID_BITS,
    TID_MASK,
    Trace,
    launch_key,
    object_column,
    process_id,
    starting_with,
)

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
# A CUDA graph's kernels are launched by the graph's launch, from whichever thread replays it.
_GRAPH_LAUNCH = "GraphLaunch"
_FAR_FUTURE = np.int64(1 << 62)  # an unclosed range is open until the end of the capture

# What `launches` adds to each kernel row from the ranges around its launch.
ATTRIBUTION_COLUMNS = ("te_module", "te_name", "layer", "te_pass", "pass_source", "requested_a",
                       "requested_b", "requested", "requested_scale", "gemm_m", "gemm_n", "gemm_k", "call_flops",
                       "gemm_members", "via_te", "recorded", "rank")


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
        which, pair = self._pairs(rows)
        return which, self.names[self.name[pair]]

    def take(self, rows: np.ndarray) -> EnclosingRanges:
        """The ranges of the launches of `rows` (ascending positions) alone, each launch renumbered
        as its position in `rows`."""
        which, pair = self._pairs(rows)
        return EnclosingRanges(which, self.name[pair], self.names)

    def _pairs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pairs of the launches of `rows`: each one's launch as its position in `rows`, and
        where the pair stands in these arrays."""
        rows = np.asarray(rows, dtype="int64")
        low, high = np.searchsorted(self.launch, rows, "left"), np.searchsorted(self.launch, rows, "right")
        counts = high - low
        which = np.repeat(np.arange(len(rows)), counts)
        pair = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(low, counts)
        return which, pair

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
        # numpy's stubs take no None for where's `y` (an object array's missing value) and fall back to its
        # one-argument form
        return cast(np.ndarray, np.where(found >= 0, self.names[np.maximum(found, 0)], None))

    def any_matching(self, patterns: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """Per launch of `rows`, whether a pattern matches any range around it."""
        rows = np.asarray(rows, dtype="int64")
        keep = self.matching_names(patterns)[self.name] & (self.launch <= rows.max(initial=-1))
        hit = np.zeros(int(rows.max(initial=-1)) + 1, dtype=bool)
        hit[self.launch[keep]] = True
        return hit[rows]

    @classmethod
    def concat(cls, parts: Sequence[EnclosingRanges], offsets: Sequence[int] | np.ndarray) -> EnclosingRanges:
        """The ranges of several launches frames stacked in order, the n-th starting at row
        offsets[n]."""
        if not parts:
            return cls.empty()
        # as Python objects (None where a range has no name): not checked one by one to make them pandas' string type
        names = pd.Index(np.concatenate([p.names for p in parts]), dtype=object)
        if len(parts) == 1 and offsets[0] == 0 and names.is_unique:  # one trace's: as they are
            return parts[0]
        distinct = names.unique()
        launch, name, first = [], [], 0
        for part, offset in zip(parts, offsets):
            recode = distinct.get_indexer(names[first:first + len(part.names)])
            first += len(part.names)
            launch.append(part.launch + offset)
            name.append(recode[part.name])
        return cls(np.concatenate(launch), np.concatenate(name), distinct.to_numpy(dtype=object))


def first_matching_pattern(names: np.ndarray | pd.Series, patterns: Sequence[str],
                           distinct_names: bool = False) -> np.ndarray:
    """Per name, the position of the first shell pattern (case-sensitive, as --allow's and
    --expect-map's) that matches it, -1 where none does (None matches nothing); each distinct
    name is matched once: a long trace has millions of ranges and a few distinct names.
    `distinct_names`: `names` repeat none (a trace's range_names), and are not looked over for
    repeats."""
    names = np.asarray(names, dtype=object)
    codes, distinct = (np.arange(len(names)), names) if distinct_names else pd.factorize(names)
    first = np.full(len(distinct) + 1, -1, dtype="int64")  # the last one: a missing name's (code -1)
    for position in reversed(range(len(patterns))):  # the first pattern that matches is written last
        match = re.compile(fnmatch.translate(patterns[position])).match  # what fnmatchcase runs, compiled once
        prefix = literal_prefix(patterns[position])
        first[[i for i in starting_with(distinct, prefix) if match(distinct[i])]] = position
    return first[codes]


def literal_prefix(pattern: str) -> str:
    """What every name a shell pattern matches starts with: its text up to the first wildcard."""
    return pattern[:next((i for i, c in enumerate(pattern) if c in "*?["), len(pattern))]


def name_matches(names: np.ndarray | pd.Series, patterns: Sequence[str], distinct_names: bool = False) -> np.ndarray:
    """Whether a shell pattern (first_matching_pattern) matches each name."""
    return first_matching_pattern(names, patterns, distinct_names) >= 0


def launches(trace: Trace) -> pd.DataFrame:
    """One row per kernel launch (`launches_with_ranges` without the ranges)."""
    return launches_with_ranges(trace)[0]


def launches_with_ranges(trace: Trace) -> tuple[pd.DataFrame, EnclosingRanges]:
    """One row per kernel launch: the kernel's record, its decoded name, the API call that
    launched it (`launch_*`, `thread`), and what the NVTX ranges open around the launch say
    (ATTRIBUTION_COLUMNS): the TE module, its name and layer, the pass, the
    operand types TE was handed (`requested_*`) and the call's shape (`gemm_m/n/k`, `call_flops`;
    a grouped call's members, `gemm_members`, as the record wrote them: gemmscope_protocol.parse_members),
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
    if not launch_key(api).is_unique:
        api = api.sort_values("launch_start").drop_duplicates(["correlation_id", "global_pid"])
    # kernels come in start order (Trace), and a left join keeps its left side's order
    out = k.merge(api, on=["correlation_id", "global_pid"], how="left")
    threads = trace.threads.set_index("global_tid")["name"]
    out["thread"] = object_column(out["launch_global_tid"].map(threads).to_numpy(dtype=object), out.index)
    codes, ids = pd.factorize(out.pop("name_id").to_numpy())
    first = np.empty(len(ids), dtype="int64")
    first[codes[::-1]] = np.arange(len(codes))[::-1]  # each name's first row: the last write wins
    decoded = kernels.decoded_columns(out["name"].to_numpy(dtype=object)[first], codes,
                                      ("role", "precision", "family", "layout"))
    for column, values in decoded.items():
        out[column] = object_column(values, out.index)
    launch_ids, range_ids = _enclosing_ranges(out, trace.nvtx)
    # names coded once per range, not once per (launch, range) pair
    codes, names = pd.factorize(trace.nvtx["name"].to_numpy(dtype=object), use_na_sentinel=False)
    names = names.astype(object)
    names[pd.isna(names)] = None  # a range without a name: None, whichever missing value the reader gave
    ranges = EnclosingRanges(launch_ids, codes[range_ids].astype("int64"), names)
    attribution = _attribute(out, launch_ids, range_ids, trace.nvtx, codes, names)
    for column in ATTRIBUTION_COLUMNS:
        out[column] = attribution[column]
    return out, ranges


@dataclass
class LoadedTrace:
    """One trace read and attributed, or why it could not be."""

    path: Path
    trace: Trace | None = None  # None where it could not be read; with no_kernels, read and holding no kernel
    launches: pd.DataFrame | None = None
    ranges: EnclosingRanges | None = None  # the NVTX ranges around each of `launches`
    error: str | None = None
    no_kernels: bool = False  # read, but it holds no GPU kernel
    cuda_traced: bool = False  # its CUDA API calls were captured: with no_kernels, the program launched none


def attribute(trace: Trace) -> LoadedTrace:
    """A trace already read, with its launches attributed (or why it has nothing to attribute)."""
    if trace.kernels.empty:
        cuda_traced = bool(trace.meta.get("cuda_api_traced"))
        error = (trace.meta.get("no_kernels")  # a reader that can tell why says so (a CPU-only torch.profiler trace)
                 or (f"{trace.path} ran no GPU kernel: its CUDA calls were captured, and none launched one"
                     if cuda_traced else f"{trace.path} holds no GPU kernels: was it captured with --trace=cuda, on a GPU?"))
        # kept: what it records of the run (its GPU, the hook's records) says what ran nothing
        return LoadedTrace(trace.path, trace, error=error, no_kernels=True, cuda_traced=cuda_traced)
    frame, ranges = launches_with_ranges(trace)
    # `frame` holds every kernel with the call that launched it: the trace's own frames of them
    # are let go (a long trace's are hundreds of MB), their columns kept. The ranges' names are
    # the trace's distinct range names, coded here already: kept as its range_names.
    trace = trace.replaced(ranges.names[pd.notna(ranges.names)], kernels=trace.kernels.iloc[:0].copy(),
                           api_calls=trace.api_calls.iloc[:0].copy())
    return LoadedTrace(trace.path, trace, frame, ranges)


def _enclosing_ranges(launch: pd.DataFrame, nvtx: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (launch row, nvtx row) of every range open around each launch, sorted by launch,
    then outermost first. Push/pop ranges nest per thread and NVTX domain, and ranges of
    different domains (NCCL's, TE's, the program's) interleave freely on one thread: each
    (thread, domain) stack is resolved on its own and none overwrites another."""
    known = launch["launch_start"].notna()
    t0 = launch["launch_start"].where(known, launch["start"]).astype("int64").to_numpy()
    t1 = launch["launch_end"].where(known, launch["start"]).astype("int64").to_numpy()
    launch_tid = launch["launch_global_tid"].fillna(-1).astype("int64").to_numpy()
    launch_pid = (launch["global_pid"].fillna(-1).astype("int64").to_numpy() >> ID_BITS) & TID_MASK
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
    grammar = te_ranges.parse_distinct(names)

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
    out["te_module"] = object_column(first((hook, "module"), (te_gemm, "module"), (module_range, "module")), out.index)
    te_name = first((hook, "name"), (te_gemm, "name"))
    out["te_name"] = object_column(te_name, out.index)
    out["layer"] = object_column(first((hook, "layer"), under=te_name), out.index)
    hook_pass, range_pass = first((hook, "pass")), first((te_gemm, "pass"))
    out["te_pass"] = object_column(first((hook, "pass"), (te_gemm, "pass")), out.index)
    # numpy's stubs take no None (an object array's missing value) as select's default
    out["pass_source"] = object_column(np.select(  # type: ignore[call-overload]
        [pd.notna(hook_pass), pd.notna(range_pass)], ["hook", "te-range"], None), out.index)
    for column, source in (("requested_a", "operand_a"), ("requested_b", "operand_b"), ("requested", "requested"),
                           ("requested_scale", "scale")):
        out[column] = object_column(first((hook, source)), out.index)
    # The GEMM call's shape and FLOPs, as the hook read them from TE's operands (a grouped call's
    # FLOPs are its members' sum, shared by the kernels it launched: `call_flops`).
    hook_name = np.full(n, -1, dtype="int64")  # (a trace without NVTX has no name to index)
    hook_name[hook >= 0] = name_codes[hook[hook >= 0]]
    for column, source in (("gemm_m", "m"), ("gemm_n", "n"), ("gemm_k", "k"), ("call_flops", "flops"),
                           ("gemm_members", "members")):
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
    forward = in_module[direction[in_module] == "forward"]  # a deferred-wgrad range is a backward one
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
    out["te_pass"] = object_column(te_pass, out.index)
    out["pass_source"] = object_column(source, out.index)


def _ranks(launch: pd.DataFrame, nvtx: pd.DataFrame, grammar: pd.DataFrame, name_codes: np.ndarray) -> pd.Series:
    """Each launch's rank, from the mark gemmscope's hook leaves in every process (NA without);
    `grammar` per distinct NVTX name, `name_codes` each NVTX row's code into it."""
    marks = (grammar["kind"].to_numpy() == te_ranges.PROCESS)[name_codes]
    by_pid = pd.Series(grammar["rank"].array.take(name_codes[marks]), index=nvtx["pid"].to_numpy()[marks],
                       dtype="Int64")
    by_pid = by_pid[~by_pid.index.duplicated(keep="last")]
    pid = process_id(launch["global_pid"].astype("int64"))
    return pd.Series(pid.map(by_pid).array, index=launch.index, dtype="Int64")
