"""Why low precision did or did not pay: where a trace's time went, and findings that say why.

`breakdown` splits each rank's GPU window (first to last GPU activity) into busy time (the union of
kernel and memory-operation intervals) and idle time, and busy kernel time into categories taken
from the kernel-name rule table (`kernels`): GEMMs at the requested precision, GEMMs that fell
back, GEMM tails (split-K reduce, bias gradients), quantization, attention, communication (NCCL),
memcpy, memset, other. Category times are kernel durations; where kernels overlap (several
streams) they add up to more than the busy time, and the JSON says both. `diagnose` adds the
findings drawn from the breakdown and the GEMM verdicts (gemmscope.diagnosing.findings).

Steps (gemmscope.diagnosing.steps: `step_range`, a shell pattern such as ``"step *"``; else the optimizer
steps gemmscope's hook marked; else NVTX ranges named like ``step 3`` / ``iteration 3`` that
repeat): the breakdown covers the GPU work the steps launched, leaving out the first step
(warm-up: allocation, autotuning, lazy init) and everything before it (start-up); each step's own
figures are kept in `Diagnosis.steps`.

`compare` puts two traces of one program side by side (BF16 vs FP8, before vs after): per
category and per module/pass, each run's time and the difference, which add up to the
difference in busy time; the window's difference is that plus the idle difference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from gemmscope.assembly.job import launched_by_te, module_labels
from gemmscope.common.jsonable import frame_records, plain
from gemmscope.diagnosing.findings import AFTER_FIRST_STEP, Finding, findings, uneven_steps
from gemmscope.diagnosing.steps import NO_OPTIMIZER_STEP, NO_STEPS, launching_step, located_steps, watched_without_steps
from gemmscope.judging.judgement import Judgement
from gemmscope.traces.model import process_id

CATEGORIES = ("gemm", "gemm-fallback", "gemm-tail", "quantize", "attention", "communication",
              "memcpy", "memset", "other")
# The columns of `step_breakdown`: per rank and step, the figures `breakdown` has per rank.
STEP_COLUMNS = ["rank", "step", "name", "window_ns", "busy_ns", "idle_ns", "kernel_launches",
                *(f"{c}_ns" for c in CATEGORIES), "overlap_ns"]
# Kernel roles (the rule table's) that are a category of their own; NCCL's kernels are
# communication whatever their role.
_CATEGORY_OF_ROLE = {"gemm": "gemm", "gemm-tail": "gemm-tail", "quantize": "quantize", "attention": "attention"}
@dataclass(eq=False)
class Diagnosis:
    """Per-rank time breakdown and the findings drawn from it."""

    breakdown: pd.DataFrame = dataclasses.field(repr=False)  # one row per rank: window, busy, idle, launches, category times
    findings: list[Finding] = dataclasses.field(repr=False)
    steps: pd.DataFrame = dataclasses.field(repr=False)  # one row per step range instance (empty when no steps were found)
    step_range: str | None  # the pattern the window was cut by (steps.MARKED_PATTERN: the hook's marks), or None
    # per rank and step after the first: `step_breakdown` (empty when the window is the whole trace)
    step_times: pd.DataFrame = dataclasses.field(default_factory=lambda: pd.DataFrame(columns=STEP_COLUMNS),
                                                 repr=False)
    no_steps: str = NO_STEPS  # why the window is the whole trace, when it is

    def to_dict(self) -> dict:
        """The same as JSON-able values: frames as lists of records (NA as None), times in ns."""
        return {"breakdown": frame_records(self.breakdown), "findings": plain(self.findings),
                "steps": frame_records(self.steps), "step_range": self.step_range,
                "step_times": frame_records(self.step_times)}


def within_steps(result: Judgement, steps: pd.DataFrame) -> tuple[Judgement, pd.DataFrame]:
    """The checked run cut to the GPU work of its steps after the first, and per step: wall time
    on the CPU and the GPU time of the kernels it launched."""
    k = result.job.kernels
    step_of = launching_step(k, steps)
    trace_code = pd.Categorical(k["trace"])
    kernel_ns = pd.Series(k["duration_ns"].to_numpy()).groupby([trace_code.codes, step_of]).sum()
    # each step's sum looked up all at once (a long run has thousands of steps); -2: a trace without kernels
    step_code = pd.Categorical(steps["trace"], categories=trace_code.categories).codes.astype("int64")
    step_code[step_code < 0] = -2
    at = pd.MultiIndex.from_arrays([step_code, steps["index"].to_numpy(dtype="int64")])
    per_step = steps.assign(
        # whole ns, NA where an older export left the range's end empty (NVTX ends are floats for that)
        wall_ns=(steps["end"] - steps["start"]).astype("Int64"),
        gpu_kernel_ns=kernel_ns.reindex(at, fill_value=0).to_numpy().astype("int64"))
    measured = step_of >= 1
    if not measured.any():
        return result, per_step
    window_start, window_end = k.loc[measured, "start"].min(), k.loc[measured, "end"].max()
    kernels = _rows(k, ((k["start"] >= window_start) & (k["start"] <= window_end)).to_numpy())
    memops = _rows(result.job.memops, ((result.job.memops["start"] >= window_start)
                                   & (result.job.memops["start"] <= window_end)).to_numpy())
    gemms = result.gemms[result.gemms["kernel_row"].isin(kernels.index)]
    job = dataclasses.replace(result.job, kernels=kernels, memops=memops)
    return dataclasses.replace(result, job=job, gemms=gemms), per_step


def _rows(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The rows of `frame` that `keep` says; a slice (no copy) when they are one run of rows, as
    one trace's kernels in a time window are: a copy of a long trace's launches is large."""
    rows = np.flatnonzero(keep)
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return frame.iloc[rows[0]:rows[-1] + 1]
    return frame[keep]


def _rank_key(frame: pd.DataFrame) -> pd.Series:
    """The rank where known, else the process ("process 4242", its trace named first when there are
    several): one GPU timeline each (labelled once per distinct trace, process and rank, not once
    per kernel; as codes, not a string per kernel)."""
    pid = process_id(frame["global_pid"].astype("int64"))
    rank = frame["rank"] if "rank" in frame else pd.Series(pd.NA, index=frame.index, dtype="Int64")
    timelines = pd.DataFrame({"trace": frame["trace"], "pid": pid, "rank": rank})
    # grouped as integers (the trace's code, the process, the rank or -1), not as strings
    keys = pd.DataFrame({"trace": pd.factorize(frame["trace"])[0], "pid": pid.to_numpy(),
                         "rank": rank.fillna(-1).to_numpy(dtype="int64")})
    codes = keys.groupby(["trace", "pid", "rank"], sort=False).ngroup().to_numpy()
    first = timelines.iloc[np.unique(codes, return_index=True)[1]]
    several = pd.Series(frame["trace"]).nunique() > 1
    labels = [str(r) if pd.notna(r) else f"{f'{t} ' if several else ''}process {p}"
              for t, p, r in zip(first["trace"], first["pid"], first["rank"])]
    # timelines of one rank in several traces (or processes) share its label
    label_codes, distinct = pd.factorize(pd.Series(labels, dtype=object))
    return pd.Series(pd.Categorical.from_codes(label_codes[codes], categories=pd.Index(distinct, dtype=object)),
                     index=frame.index)


def categorize(result: Judgement) -> pd.DataFrame:
    """Every kernel and memory operation of the checked traces with its category and rank key
    (categoricals: the rank keys' categories in name order, as `breakdown` lists the ranks)."""
    k = result.job.kernels
    role, family = k["role"].to_numpy(dtype=object), k["family"].to_numpy(dtype=object)
    code = np.full(len(k), CATEGORIES.index("other"))
    for kernel_role, category in _CATEGORY_OF_ROLE.items():
        code[role == kernel_role] = CATEGORIES.index(category)
    code[family == "nccl"] = CATEGORIES.index("communication")
    if "verdict" in result.gemms:
        fell_back = result.gemms.loc[result.gemms["verdict"] == "FALLBACK", "kernel_row"].to_numpy()
        code[k.index.get_indexer(fell_back)] = CATEGORIES.index("gemm-fallback")
    memops = result.job.memops
    code = np.r_[code, pd.Categorical(memops["kind"], categories=CATEGORIES).codes]
    rank_key = union_categoricals([_rank_key(k).array, _rank_key(memops).array], sort_categories=True)
    columns = ["start", "end", "duration_ns"]
    # the few columns asked for, not a copy of every launch's record
    return pd.DataFrame({"rank_key": rank_key,
                         **{c: np.r_[k[c].to_numpy("int64"), memops[c].to_numpy("int64")] for c in columns},
                         "category": pd.Categorical.from_codes(code, categories=CATEGORIES)})


def _union_blocks(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as disjoint blocks, in time order: (starts, ends)."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new_block = np.r_[True, s[1:] > reach[:-1]]
    # the reach only grows: a block ends where it stands at the block's last interval
    return s[new_block], reach[np.r_[new_block[1:], True]]


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals [start, end)."""
    if len(start) == 0:
        return 0
    block_start, block_end = _union_blocks(start, end)
    return int((block_end - block_start).sum())


def _covered_ns(block_start: np.ndarray, block_end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`, how much of the blocks (disjoint, in time order) lies before it."""
    before = np.r_[0, np.cumsum(block_end - block_start)]
    n = np.searchsorted(block_start, at, side="right")  # blocks starting at or before the time
    last = np.maximum(n - 1, 0)
    inside = np.minimum(at, block_end[last]) - block_start[last]
    return np.where(n > 0, before[last] + inside, 0)


def breakdown(result: Judgement, activity: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank: GPU window, busy and idle time, kernel launches, time per category
    (`activity`: categorize(result), where the caller has it already)."""
    activity = categorize(result) if activity is None else activity
    rows = []
    for key, part in activity.groupby("rank_key", sort=True):
        start, end = part["start"].to_numpy("int64"), part["end"].to_numpy("int64")
        window = int(end.max() - start.min())
        busy = busy_ns(start, end)
        row = {"rank": key, "window_ns": window, "busy_ns": busy, "idle_ns": window - busy,
               "idle_share": (window - busy) / window if window else None,
               "kernel_launches": int((~part["category"].isin(("memcpy", "memset"))).sum())}
        times = part.groupby("category")["duration_ns"].sum()
        row.update({f"{c}_ns": int(times.get(c, 0)) for c in CATEGORIES})
        # kernels of several streams at once: category times add up to busy time plus this
        row["overlap_ns"] = int(times.sum()) - busy
        rows.append(row)
    return pd.DataFrame(rows)


def step_breakdown(result: Judgement, steps: pd.DataFrame, activity: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank and step after the first (`find_steps`' instances), the figures of `breakdown`.
    On a rank's GPU timeline a step runs from the first start of a kernel it launched to that
    of the next step; the first measured step from the rank's first activity, the last to its
    last. Each kernel and memory operation counts in the step its start falls in, and busy time
    is cut at the boundaries, so on a run cut by `within_steps` a rank's steps add up to its
    `breakdown` row: window, busy, idle, launches and every category (`activity`:
    categorize(result), where the caller has it already)."""
    k = result.job.kernels
    step = np.full(len(k) + len(result.job.memops), -1)
    step[: len(k)] = launching_step(k, steps)  # categorize puts the kernels first, in order
    activity = (categorize(result) if activity is None else activity).assign(step=step, row=np.arange(len(step)))
    measured = activity[activity["step"] >= 1]
    first = measured.groupby(["rank_key", "step"]).agg(start=("start", "min"), row=("row", "first"))
    # each step's name, looked up for the first kernel of each rank's step only
    rows = first["row"].to_numpy()
    keys = pd.MultiIndex.from_arrays([k["trace"].to_numpy(dtype=object)[rows],
                                      process_id(k["global_pid"].astype("int64")).to_numpy()[rows], step[rows]])
    first["name"] = steps.set_index(["trace", "pid", "index"])["name"].reindex(keys).to_numpy(dtype=object)
    parts = []
    for key, part in activity.groupby("rank_key", sort=True):  # per rank, not per kernel
        if key not in first.index.get_level_values(0):
            continue  # no kernel of this rank was launched in a measured step
        own = first.loc[key]
        start, end = part["start"].to_numpy("int64"), part["end"].to_numpy("int64")
        edges = np.maximum.accumulate(np.r_[start.min(), own["start"].to_numpy("int64")[1:], end.max()])
        which = np.searchsorted(edges[1:-1], start, side="right")
        blocks = _union_blocks(start, end)
        covered = _covered_ns(*blocks, edges)
        times = (part.groupby([which, part["category"]])["duration_ns"].sum()
                 .unstack(fill_value=0).reindex(index=range(len(own)), columns=CATEGORIES, fill_value=0))
        frame = pd.DataFrame({"rank": key, "step": own.index.to_numpy(), "name": own["name"].to_numpy(),
                              "window_ns": np.diff(edges), "busy_ns": np.diff(covered)})
        frame["idle_ns"] = frame["window_ns"] - frame["busy_ns"]
        launched = (~part["category"].isin(("memcpy", "memset"))).groupby(which).sum()
        frame["kernel_launches"] = launched.reindex(range(len(own)), fill_value=0).to_numpy()
        for category in CATEGORIES:
            frame[f"{category}_ns"] = times[category].to_numpy()
        frame["overlap_ns"] = times.sum(axis=1).to_numpy() - frame["busy_ns"]
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)[STEP_COLUMNS] if parts else pd.DataFrame(columns=STEP_COLUMNS)


def diagnose(result: Judgement, step_range: str | None = None) -> Diagnosis:
    """Breakdown and findings of a checked run, over its steps after the first when steps are
    found (`step_range`, else the hook's marks, else the default step names: steps.located_steps),
    else over the whole trace."""
    steps, step_range = located_steps(result, step_range)
    window, per_step = within_steps(result, steps) if len(steps) > 1 else (result, steps)
    activity = categorize(window)
    times = breakdown(window, activity)
    if window is result:
        return Diagnosis(breakdown=times, findings=findings(window, times), steps=per_step, step_range=None,
                         no_steps=NO_OPTIMIZER_STEP if watched_without_steps(result) else NO_STEPS)
    step_times = step_breakdown(window, steps, activity)
    found = sorted(findings(window, times, AFTER_FIRST_STEP) + uneven_steps(step_times), key=lambda f: -f["explains_ns"])
    return Diagnosis(breakdown=times, findings=found, steps=per_step, step_range=step_range, step_times=step_times)


def categorize_modules(result: Judgement) -> pd.DataFrame:
    """Kernels with their module label (job.module_labels, as the GEMM tables say it), pass and
    category."""
    activity = categorize(result)
    k = result.job.kernels
    module = module_labels(k["te_module"], launched_by_te(k))
    kernels = activity.iloc[: len(k)].assign(module=module.to_numpy(), **{"pass": k["te_pass"].to_numpy()})
    memops = activity.iloc[len(k):].assign(module="(memory operations)", **{"pass": None})
    return pd.concat([kernels, memops], ignore_index=True)
