"""Traces read as one job, before any verdict (`assemble`): each kernel launch with its trace and
rank, the memory operations and the NVTX ranges around each launch, and the program's GEMM
launches labelled by where they ran (TE module or "(outside TE)", layer), the launches an
autotuner made left apart. What each GEMM was asked and what ran is judged on this by
gemmscope.judging.judgement.

Ranks: the rank gemmscope's hook marked; for a trace of several processes without marks, the GPU
each used (torchrun's workers on one node); for a trace of one process, the rank in its file's
name (rank3.sqlite), else its place among several files. A trace that could not be read is kept
as `unreadable` (when none could, the first reason is the error), and one whose process launched
no GPU kernel beside others that did as `without_kernels`: no failure. The same capture given
twice is read once (captures.one_job: `repeated`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope import kernels
from gemmscope.assembly.attribution import EnclosingRanges, LoadedTrace, attribute
from gemmscope.assembly.one_job import one_job
from gemmscope.errors import InputError, NoGpuKernels
from gemmscope.traces.model import Trace, text_codes

# A rank named in a per-rank trace's file name (nsys -o rank%q{RANK}, trace_rank3.sqlite, ...).
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


@dataclass(eq=False)
class Job:
    """The launches of one job's traces, each with its trace and rank, and its GEMM launches."""

    traces: list[Trace]  # those read, in the order given
    kernels: pd.DataFrame  # every launch, with trace and rank; gemms' kernel_row indexes it
    ranges: EnclosingRanges  # NVTX ranges around each kernel_row
    memops: pd.DataFrame  # memcpy / memset, with trace and rank
    # the program's GEMM launches (kernel_row: their row of `kernels`), with origin ("te" or
    # "outside-te"), module (module_labels) and layer_number
    gemms: pd.DataFrame
    tails_ns: int  # GEMM tails' time (split-K reduce, bias gradients)
    # GEMM launches torch.compile's autotuner made (autotuning_launches), left out of `gemms`
    autotuning: pd.DataFrame
    offsets: np.ndarray = field(repr=False)  # the row of `kernels` where each trace's launches start
    unreadable: list[dict] = field(default_factory=list)  # traces that could not be read: trace, rank, error
    # traces of processes that ran and launched no GPU kernel, beside others that did: trace, rank
    without_kernels: list[dict] = field(default_factory=list)
    # traces given again (the same capture: captures.one_job), read once: trace, same_as
    repeated: list[dict] = field(default_factory=list)

    def trace_of(self, kernel_rows: np.ndarray) -> np.ndarray:
        """The position in `traces` of the trace each of `kernel_rows` (rows of `kernels`) came from."""
        return np.searchsorted(self.offsets, kernel_rows, side="right") - 1


def assemble(traces: Trace | LoadedTrace | Sequence[Trace | LoadedTrace]) -> Job:
    """One or several traces (read here, or already loaded by `loading.load` in workers) as one
    job (module docstring). What was given is left as it was: each trace's launches are the
    job's through a copy (pandas' copy on write: no launch is copied until one of them changes)."""
    items = [traces] if isinstance(traces, (Trace, LoadedTrace)) else list(traces)
    loaded, repeated = one_job([item if isinstance(item, LoadedTrace) else attribute(item) for item in items])
    raise_if_none_usable(loaded)
    usable = [item for item in loaded if item.error is None]
    idle = [item.error is not None and item.no_kernels and item.cuda_traced for item in loaded]
    without_kernels = [{"trace": item.path.name, "rank": rank_in_name(item.path)}
                       for item, no_kernel in zip(loaded, idle) if no_kernel]
    unreadable = [{"trace": item.path.name, "rank": rank_in_name(item.path), "error": item.error}
                  for item, no_kernel in zip(loaded, idle) if item.error is not None and not no_kernel]
    read_traces = []
    for item in usable:
        assert item.trace is not None  # attribute() leaves it None only with an error
        read_traces.append(item.trace)
    kernel_parts, memop_parts, range_parts = [], [], []
    trace_names = pd.unique(pd.Series([item.path.name for item in usable], dtype=object))
    for index, item in enumerate(usable):
        trace = item.trace
        # attribute() leaves these None only with an error
        assert trace is not None and item.launches is not None and item.ranges is not None
        all_launches = item.launches.copy(deep=False)
        # one code per launch, not a string: a long trace's million are compared and grouped often
        code = np.full(len(all_launches), trace_names.tolist().index(trace.path.name))
        # categories as Python strings: with pyarrow, pandas would infer its Arrow-backed text,
        # which makes a string per launch again whenever the column is read as objects
        all_launches["trace"] = pd.Categorical.from_codes(code, categories=pd.Index(trace_names, dtype=object))
        all_launches["rank"] = _fill_ranks(all_launches, trace, index, len(read_traces))
        kernel_parts.append(all_launches)
        range_parts.append(item.ranges)
        rank_of_pid = all_launches[["global_pid", "rank"]].drop_duplicates("global_pid").set_index("global_pid")["rank"]
        memop_parts.append(trace.memops.assign(trace=trace.path.name,
                                               rank=trace.memops["global_pid"].map(rank_of_pid).astype("Int64")))
    all_kernels = kernel_parts[0] if len(kernel_parts) == 1 else pd.concat(kernel_parts, ignore_index=True)
    offsets = np.cumsum([0] + [len(part) for part in kernel_parts[:-1]])
    ranges = EnclosingRanges.concat(range_parts, offsets)
    memops = pd.concat(memop_parts, ignore_index=True)
    tails_ns = int(all_kernels.loc[all_kernels["role"] == "gemm-tail", "duration_ns"].sum())
    autotuning = autotuning_launches(all_kernels)
    gemms = all_kernels[(all_kernels["role"] == "gemm").to_numpy() & ~autotuning].rename_axis("kernel_row").reset_index()
    autotuned = all_kernels[(all_kernels["role"] == "gemm").to_numpy() & autotuning]
    is_te = launched_by_te(gemms)
    gemms["origin"] = np.where(is_te, "te", "outside-te")
    gemms["module"] = module_labels(gemms["te_module"], is_te)
    gemms["layer_number"] = layer_numbers(gemms["layer"])
    return Job(traces=read_traces, kernels=all_kernels, ranges=ranges, memops=memops, gemms=gemms, tails_ns=tails_ns,
               autotuning=autotuned, offsets=offsets, unreadable=unreadable, without_kernels=without_kernels,
               repeated=repeated)


def raise_if_none_usable(loaded: Sequence[LoadedTrace]) -> None:
    """When no trace could be read, the first reason, as the error the CLI prints: NoGpuKernels
    where every trace holds no GPU kernel (a run that launched none, or a capture blind to them),
    else InputError. One readable trace is enough: the others are reported as unreadable."""
    if any(item.error is None for item in loaded):
        return
    if loaded and all(item.no_kernels for item in loaded):
        assert loaded[0].error is not None  # none is usable: each says why
        raise NoGpuKernels(loaded[0].error, cuda_traced=all(item.cuda_traced for item in loaded))
    raise InputError(loaded[0].error if loaded and loaded[0].error else "no trace to check")


# A benchmark loop on one thread: cache flushes at most _LOOP_SPAN launches apart (a flush, the
# timed callable's one or two kernels, the next flush), _LOOP_FLUSHES or more in a row (Inductor's
# benchmarker flushes over a hundred times per candidate, triton.testing.do_bench six times or more).
_LOOP_SPAN = 3
_LOOP_FLUSHES = 3


def autotuning_launches(launches: pd.DataFrame) -> np.ndarray:
    """Per kernel launch, whether an autotuner launched it while timing candidates
    (torch.compile's max-autotune timing each GEMM's Triton and cuBLAS candidates, Triton's
    autotuner timing a kernel's configs), not the program:
    - a kernel only the autotuner launches (kernels.is_autotune_candidate: triton_mm and the like);
    - a benchmark loop's launches. Inductor's benchmarker and triton.testing.do_bench clear the L2
      cache (kernels.is_cache_flush) before each launch they time, and launch the candidate once
      first, untimed (do_bench also between its estimate and its timed launches). On each thread,
      in launch order, a GEMM's split-K reduction or epilogue counted with the GEMM: of a run of
      launches of one kernel, all are timed where loop flushes bound it on both sides, else the
      first where a loop flush precedes it (the program launches the tuned kernel right after)
      and the last where one follows (the untimed launch; the program's own launch of that kernel
      may come just before). A program zeroing an int tensor next to a GEMM of its own makes no
      loop (_LOOP_FLUSHES).
    These are not the program's GEMMs: they are reported apart from its steps."""
    # one code per distinct name: a long trace has a million launches and a few hundred names
    kernel, names = text_codes(launches["name"].to_numpy(dtype=object))
    benchmarked = kernels.is_autotune_candidate(names)[kernel]
    flush = kernels.is_cache_flush(names)[kernel]
    if not flush.any():
        return benchmarked
    # a GEMM's split-K reduction or epilogue belongs to its launch, not between it and a flush
    kept = launches["role"].to_numpy(dtype=object) != "gemm-tail"
    tid = launches["launch_global_tid"].fillna(-1).to_numpy(dtype="int64")
    launched = launches["launch_start"].fillna(launches["start"]).to_numpy(dtype="int64")
    order = np.flatnonzero(kept)[np.lexsort((launched[kept], tid[kept]))]
    thread = tid[order]
    loop = _loop_flushes(thread, flush[order])
    benchmarked[order] |= loop | _timed(thread, kernel[order], loop)
    return benchmarked


def _loop_flushes(thread: np.ndarray, flush: np.ndarray) -> np.ndarray:
    """Per launch (in thread and launch order), whether it is a flush of a benchmark loop:
    one of _LOOP_FLUSHES or more flushes of a thread, each at most _LOOP_SPAN launches from the next."""
    at = np.flatnonzero(flush)
    linked = (np.diff(at) <= _LOOP_SPAN) & (thread[at[1:]] == thread[at[:-1]])
    chain = np.concatenate(([0], np.cumsum(~linked)))
    loop = np.zeros(len(thread), dtype=bool)
    loop[at[(np.bincount(chain) >= _LOOP_FLUSHES)[chain]]] = True
    return loop


def _timed(thread: np.ndarray, kernel: np.ndarray, loop: np.ndarray) -> np.ndarray:
    """Per launch (in thread and launch order), whether a benchmark loop timed it (or warmed it
    up): of a run of one `kernel` on one thread, all where loop flushes bound it on both sides,
    else its first launch where one precedes the run and its last where one follows it."""
    n = len(thread)
    starts = np.ones(n, dtype=bool)
    starts[1:] = (kernel[1:] != kernel[:-1]) | (thread[1:] != thread[:-1])
    first = np.flatnonzero(starts)
    last = np.append(first[1:] - 1, n - 1)
    before, after = np.maximum(first - 1, 0), np.minimum(last + 1, n - 1)
    flush_before = (first > 0) & loop[before] & (thread[before] == thread[first])
    flush_after = (last < n - 1) & loop[after] & (thread[after] == thread[last])
    run = np.cumsum(starts) - 1
    position = np.arange(n)
    return ((flush_before & flush_after)[run] | (flush_before[run] & (position == first[run]))
            | (flush_after[run] & (position == last[run])))


def rank_in_name(path: Path) -> int | None:
    """The rank a trace's file name gives (rank3), None where it gives none."""
    named = _RANK_IN_NAME.search(path.name)
    return int(named[1]) if named else None


def _fill_ranks(trace_launches: pd.DataFrame, trace: Trace, index: int, count: int) -> pd.Series:
    """The rank the hook's mark named; for a trace of several processes without it, the GPU each
    used (_rank_by_gpu); for a trace of one process, the rank in the file's name, or its place
    among several files."""
    rank = trace_launches["rank"].astype("Int64")
    if rank.notna().all():
        return rank
    if trace_launches["global_pid"].nunique() > 1:
        return rank.fillna(_rank_by_gpu(trace_launches))
    named = rank_in_name(trace.path)
    fallback = named if named is not None else (index if count > 1 else pd.NA)
    return rank.fillna(fallback)


def _rank_by_gpu(trace_launches: pd.DataFrame) -> pd.Series:
    """Per launch of a trace of several processes, the GPU its process used, where each process
    used one GPU and no two the same: torchrun's workers each take the GPU of their local rank,
    which on one node is their rank. NA otherwise: the processes stay apart, unnamed."""
    devices = trace_launches.groupby("global_pid", sort=False)["device_id"].agg(["nunique", "first"])
    if not ((devices["nunique"] == 1).all() and devices["first"].is_unique):
        return pd.Series(pd.NA, index=trace_launches.index, dtype="Int64")
    return trace_launches["global_pid"].map(devices["first"]).astype("Int64")


# A layer number in a module path: the index of the first numbered member of a container
# (decoder.layers.3.mlp.linear_fc1, model.layers.12.self_attn.q_proj, 3.self_attention.proj).
_LAYER_NUMBER = r"(?:^|\.)(\d+)(?:\.|$)"


def layer_numbers(paths: pd.Series) -> pd.Series:
    """The layer number each module path names (NA where none)."""
    return pd.to_numeric(paths.astype("string").str.extract(_LAYER_NUMBER, expand=False)).astype("Int64")


def launched_by_te(launches: pd.DataFrame) -> np.ndarray:
    """Per launch, whether TE launched it: inside TE's GEMM ranges or the hook's record of a TE
    GEMM call (`via_te`), or in a module TE's own ranges name; a module the hook's record of a
    torch GEMM names (`recorded`, not via TE) is the program's, not TE's."""
    named_by_te = launches["te_module"].notna() & ~launches["recorded"].astype(bool)
    return launches["via_te"].to_numpy(dtype=bool) | named_by_te.to_numpy()


def module_labels(te_module: pd.Series, in_te: np.ndarray) -> pd.Series:
    """The TE module of each launch, or "(TE, module unknown)" where TE launched it (`in_te`) and
    nothing named the module, else "(outside TE)": one label in every table."""
    unnamed = np.where(in_te, "(TE, module unknown)", "(outside TE)")
    return te_module.where(te_module.notna(), pd.Series(unnamed, index=te_module.index))
