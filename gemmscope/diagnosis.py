"""Why low precision did or did not pay: where a trace's time went, and findings that say why.

`breakdown` splits each rank's GPU window (first to last GPU activity) into busy time (the union of
kernel and memory-operation intervals) and idle time, and busy kernel time into categories taken
from the kernel-name rule table (`kernels`): GEMMs at the requested precision, GEMMs that fell
back, GEMM tails (split-K reduce, bias gradients), quantization, attention, communication (NCCL),
memcpy, memset, other. Category times are kernel durations; where kernels overlap (several
streams) they add up to more than the busy time, and the JSON says both.

`findings` turns a breakdown and the GEMM verdicts into statements, each with a code, its figures
and the time at stake (`explains_ns`), ordered by that time:

- ``gpu-idle``: the GPU idles for this share of the window; with the GEMM share and the Amdahl
  bound 1 / ((1 − W) + W / s) on what faster GEMMs can give end to end;
- ``launch-bound``: the median kernel is shorter than the median CUDA launch call;
- ``gemm-share``: GEMMs are W of the window, and the bound for s = 2 and for the GEMM speedup
  measured in the trace, when the trace says it;
- ``fallback``: GEMM time at another precision than requested, and where;
- ``quantize-overhead``: quantization kernels against the low-precision GEMM time they feed;
- ``small-gemm``: GEMMs far below their precision's dense peak (the hook's shape record needed);
- ``tails``: split-K reduce and bias-gradient kernels;
- ``gemms-healthy``: GEMMs ran at the requested precision near their expected throughput;
- ``unsupported``: the requested recipe cannot run on this GPU;
- ``unknown-device``: the GPU is not in gemmscope's device table, so no share of a peak is computed;
- ``slow-steps``, ``rank-lag``: steps that differ (`uneven_steps`), where steps are found.

Steps (gemmscope.steps: `step_range`, a shell pattern such as ``"step *"``; else the optimizer
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

from gemmscope.devices import lookup, peak_tflops
from gemmscope.jsonable import frame_records, plain
from gemmscope.recipes import RECIPE_MIN_SM
from gemmscope.steps import NO_OPTIMIZER_STEP, NO_STEPS, launching_step, located_steps, watched_without_steps
from gemmscope.traces.model import process_id
from gemmscope.verify import Verification, launched_by_te, module_labels

CATEGORIES = ("gemm", "gemm-fallback", "gemm-tail", "quantize", "attention", "communication",
              "memcpy", "memset", "other")
# The columns of `step_breakdown`: per rank and step, the figures `breakdown` has per rank.
STEP_COLUMNS = ["rank", "step", "name", "window_ns", "busy_ns", "idle_ns", "kernel_launches",
                *(f"{c}_ns" for c in CATEGORIES), "overlap_ns"]
# Kernel roles (the rule table's) that are a category of their own; NCCL's kernels are
# communication whatever their role.
_CATEGORY_OF_ROLE = {"gemm": "gemm", "gemm-tail": "gemm-tail", "quantize": "quantize", "attention": "attention"}
# What "near the expected throughput" means for gemms-healthy, and "far below" for small-gemm.
HEALTHY_SHARE_OF_PEAK = 0.5
SMALL_SHARE_OF_PEAK = 0.25
ASSUMED_SPEEDUP = 2.0  # the s of the Amdahl bound people ask about: FP8 over BF16 on paper
@dataclass(eq=False)
class Diagnosis:
    """Per-rank time breakdown and the findings drawn from it."""

    breakdown: pd.DataFrame = dataclasses.field(repr=False)  # one row per rank: window, busy, idle, launches, category times
    findings: list[dict] = dataclasses.field(repr=False)
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


def within_steps(result: Verification, steps: pd.DataFrame) -> tuple[Verification, pd.DataFrame]:
    """The checked run cut to the GPU work of its steps after the first, and per step: wall time
    on the CPU and the GPU time of the kernels it launched."""
    k = result.kernels
    step_of = launching_step(k, steps)
    trace_code = pd.Categorical(k["trace"])
    code_of = {name: code for code, name in enumerate(trace_code.categories)}
    kernel_ns = pd.Series(k["duration_ns"].to_numpy()).groupby([trace_code.codes, step_of]).sum()
    per_step = steps.assign(
        # whole ns, NA where an older export left the range's end empty (NVTX ends are floats for that)
        wall_ns=(steps["end"] - steps["start"]).astype("Int64"),
        gpu_kernel_ns=[int(kernel_ns.get((code_of.get(t, -2), i), 0)) for t, i in zip(steps["trace"], steps["index"])])
    measured = step_of >= 1
    if not measured.any():
        return result, per_step
    window_start, window_end = k.loc[measured, "start"].min(), k.loc[measured, "end"].max()
    kernels = _rows(k, ((k["start"] >= window_start) & (k["start"] <= window_end)).to_numpy())
    memops = _rows(result.memops, ((result.memops["start"] >= window_start)
                                   & (result.memops["start"] <= window_end)).to_numpy())
    gemms = result.gemms[result.gemms["kernel_row"].isin(kernels.index)]
    return dataclasses.replace(result, kernels=kernels, memops=memops, gemms=gemms), per_step


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


def categorize(result: Verification) -> pd.DataFrame:
    """Every kernel and memory operation of the checked traces with its category and rank key
    (categoricals: the rank keys' categories in name order, as `breakdown` lists the ranks)."""
    k = result.kernels
    role, family = k["role"].to_numpy(dtype=object), k["family"].to_numpy(dtype=object)
    code = np.full(len(k), CATEGORIES.index("other"))
    for kernel_role, category in _CATEGORY_OF_ROLE.items():
        code[role == kernel_role] = CATEGORIES.index(category)
    code[family == "nccl"] = CATEGORIES.index("communication")
    if "verdict" in result.gemms:
        fell_back = result.gemms.loc[result.gemms["verdict"] == "FALLBACK", "kernel_row"].to_numpy()
        code[k.index.get_indexer(fell_back)] = CATEGORIES.index("gemm-fallback")
    memops = result.memops
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


def breakdown(result: Verification, activity: pd.DataFrame | None = None) -> pd.DataFrame:
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


def step_breakdown(result: Verification, steps: pd.DataFrame, activity: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank and step after the first (`find_steps`' instances), the figures of `breakdown`.
    On a rank's GPU timeline a step runs from the first start of a kernel it launched to that
    of the next step; the first measured step from the rank's first activity, the last to its
    last. Each kernel and memory operation counts in the step its start falls in, and busy time
    is cut at the boundaries, so on a run cut by `within_steps` a rank's steps add up to its
    `breakdown` row: window, busy, idle, launches and every category (`activity`:
    categorize(result), where the caller has it already)."""
    k = result.kernels
    step = np.full(len(k) + len(result.memops), -1)
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


def _amdahl(share: float, speedup: float) -> float:
    return 1.0 / ((1.0 - share) + share / speedup)


def _pct(x: float) -> str:
    return f"{100 * x:.3g} %"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms" if ns < 1e9 else f"{ns / 1e9:.2f} s"


def _gemm_throughput(result: Verification) -> pd.DataFrame:
    """GEMM launches whose call shape the hook recorded (one kernel per call), with TFLOP/s and
    the share of their precision's dense peak on this GPU."""
    g = result.gemms
    if "gemm_m" not in g:
        return g.iloc[0:0]
    g = g[g["gemm_m"].notna() & (g["duration_ns"] > 0)].copy()
    g["tflops"] = g["call_flops"].astype("float64") / g["duration_ns"] / 1e3
    g["peak_tflops"] = _peaks(result, g["precision"])
    g["share_of_peak"] = g["tflops"] / g["peak_tflops"]
    return g


def gemm_group_throughput(result: Verification) -> pd.DataFrame:
    """Per GEMM: layer × module × pass × call shape (M, N, K as the hook recorded them; NaN
    without a record) × precision (× verdict, where checked), the launches and their time, and
    over the launches whose shape was recorded (`_gemm_throughput`): FLOPs, TFLOP/s and share of
    the precision's dense peak on this GPU (NaN where none was recorded, or no peak is known).
    `flagged`: the verdict is FALLBACK; `allowed`: all of them by --allow."""
    g = result.gemms
    shape = [c for c in ("gemm_m", "gemm_n", "gemm_k") if c in g]
    keys = ["layer", "module", "pass", *shape, "precision", *(["verdict"] if "verdict" in g else [])]
    rated = _gemm_throughput(result)
    recorded = g.index.isin(rated.index)
    g = g.assign(**{"pass": g["te_pass"], "recorded": recorded,
                    "recorded_ns": g["duration_ns"].where(recorded, 0),
                    "flops": rated["call_flops"].astype("float64").reindex(g.index).fillna(0)})
    if "allowed" not in g:
        g["allowed"] = False
    out = g.groupby(keys, dropna=False, sort=False).agg(
        launches=("duration_ns", "size"), time_ns=("duration_ns", "sum"), recorded_launches=("recorded", "sum"),
        recorded_ns=("recorded_ns", "sum"), flops=("flops", "sum"), allowed=("allowed", "all")).reset_index()
    out["flops"] = out["flops"].where(out["recorded_launches"] > 0)
    out["flops_per_launch"] = out["flops"] / out["recorded_launches"]
    out["tflops"] = out["flops"] / out["recorded_ns"] / 1e3
    out["peak_tflops"] = _peaks(result, out["precision"])
    out["share_of_peak"] = out["tflops"] / out["peak_tflops"]
    out["flagged"] = out["verdict"] == "FALLBACK" if "verdict" in out else False
    return out


def _peaks(result: Verification, precisions: pd.Series) -> pd.Series:
    """The dense peak (TFLOP/s) of each precision on the traces' GPU, NaN where unknown."""
    device = device_name(result)
    peaks = {p: peak_tflops(device, p) for p in precisions.dropna().unique()} if device else {}
    return precisions.map(peaks).astype("float64")


def device_name(result: Verification) -> str | None:
    names = [gpu["name"] for t in result.traces for gpu in t.meta["gpus"] if gpu.get("name")]
    return names[0] if names else None


def _sm(result: Verification) -> int | None:
    sms = [gpu["sm"] for t in result.traces for gpu in t.meta["gpus"] if gpu.get("sm")]
    return int(sms[0][2:]) if sms else None


def findings(result: Verification, times: pd.DataFrame) -> list[dict]:
    """The findings (module docstring) over all ranks, most time at stake first."""
    out: list[dict] = []
    window, busy, idle = (int(times[c].sum()) for c in ("window_ns", "busy_ns", "idle_ns"))
    gemm_ns = int(times["gemm_ns"].sum() + times["gemm-fallback_ns"].sum())
    share = gemm_ns / window if window else 0.0
    throughput = _gemm_throughput(result)
    measured_speedup = _measured_gemm_speedup(throughput)
    bounds = {"s=2": _amdahl(share, ASSUMED_SPEEDUP)}
    if measured_speedup:
        bounds[f"s={measured_speedup:.2f} (measured)"] = _amdahl(share, measured_speedup)
    bound_text = ", ".join(f"{k}: at most {v:.3f}× end to end" for k, v in bounds.items())
    device = device_name(result)
    sm = _sm(result)

    for recipe in result.expected_recipes:
        if recipe in RECIPE_MIN_SM and sm is not None and sm < RECIPE_MIN_SM[recipe]:
            out.append({"code": "unsupported", "explains_ns": window,
                        "statement": f"{recipe} cannot run on {device} (sm{sm}): TE needs compute "
                                     f"capability {RECIPE_MIN_SM[recipe] / 10:.1f} or higher",
                        "figures": {"sm": sm, "min_sm": RECIPE_MIN_SM[recipe], "recipe": recipe}, "concerns": []})
    if window and idle / window >= 0.3:
        out.append({"code": "gpu-idle", "explains_ns": idle,
                    "statement": f"the GPU is idle {_pct(idle / window)} of its {_ms(window)} window; GEMMs are "
                                 f"{_pct(share)} of it, so faster GEMMs cannot pay much ({bound_text})",
                    "figures": {"window_ns": window, "busy_ns": busy, "idle_ns": idle, "gemm_ns": gemm_ns,
                                "gemm_share": share, "amdahl": bounds}, "concerns": []})
        launch = result.kernels["launch_end"] - result.kernels["launch_start"]
        median_kernel, median_launch = result.kernels["duration_ns"].median(), launch.median()
        if pd.notna(median_launch) and median_kernel < median_launch:
            out.append({"code": "launch-bound", "explains_ns": int(idle * 0.99),
                        "statement": f"the median kernel runs {median_kernel / 1e3:.1f} µs, less than the "
                                     f"{median_launch / 1e3:.1f} µs the CPU takes to launch one: the GPU waits on the CPU",
                        "figures": {"median_kernel_ns": float(median_kernel), "median_launch_ns": float(median_launch),
                                    "kernel_launches": int(times["kernel_launches"].sum()),
                                    "launches_per_s": times["kernel_launches"].sum() / (window / 1e9)},
                        "concerns": []})
    if gemm_ns:
        out.append({"code": "gemm-share", "explains_ns": max(busy - gemm_ns, 0),
                    "statement": f"GEMMs are {_pct(share)} of the GPU window ({_ms(gemm_ns)}): {bound_text}",
                    "figures": {"gemm_ns": gemm_ns, "gemm_share": share, "amdahl": bounds,
                                "measured_gemm_speedup": measured_speedup}, "concerns": []})
    out += _verdict_findings(result, times, throughput)
    if device is not None and lookup(device) is None:
        out.append({"code": "unknown-device", "explains_ns": 0,
                    "statement": f"{device} is not in gemmscope's device table: no TFLOP/s share of a peak "
                                 "is computed for it (small-gemm and gemms-healthy need one)",
                    "figures": {"device": device}, "concerns": []})
    return sorted(out, key=lambda f: -f["explains_ns"])


def _measured_gemm_speedup(throughput: pd.DataFrame) -> float | None:
    """Median TFLOP/s of low-precision GEMMs over that of BF16 GEMMs of the same shapes, when
    one trace holds both (e.g. a layer outside autocast)."""
    if throughput.empty:
        return None
    keyed = throughput.assign(shape=list(zip(throughput["gemm_m"], throughput["gemm_n"], throughput["gemm_k"])))
    high = keyed[keyed["precision"] == "bf16"].groupby("shape")["tflops"].median()
    low = keyed[keyed["precision"] != "bf16"].groupby("shape")["tflops"].median()
    both = high.index.intersection(low.index)
    return float((low[both] / high[both]).median()) if len(both) else None


def _top(frame: pd.DataFrame, n: int = 3) -> list[dict]:
    keys = ["layer", "module", "pass"]
    g = frame.assign(**{"pass": frame["te_pass"]}).groupby(keys, dropna=False)["duration_ns"].sum()
    return [{"layer": k[0] if pd.notna(k[0]) else None, "module": k[1], "pass": k[2] if pd.notna(k[2]) else None,
             "time_ns": int(v)} for k, v in g.sort_values(ascending=False).head(n).items()]


def _verdict_findings(result: Verification, times: pd.DataFrame, throughput: pd.DataFrame) -> list[dict]:
    out = []
    g = result.gemms
    gemm_ns = int(g["duration_ns"].sum())
    if "verdict" in g and gemm_ns:
        fallback = g[(g["verdict"] == "FALLBACK") & ~g["allowed"]]
        if len(fallback):
            t = int(fallback["duration_ns"].sum())
            causes = fallback.groupby("cause")["duration_ns"].sum().sort_values(ascending=False)
            out.append({"code": "fallback", "explains_ns": int(t * (1 - 1 / ASSUMED_SPEEDUP)),
                        "statement": f"{_pct(t / gemm_ns)} of GEMM time ({_ms(t)}, {len(fallback)} launches) ran at "
                                     f"another precision than {' / '.join(result.expected_recipes)} ("
                                     + ", ".join(f"{c}: {_ms(v)}" for c, v in causes.items()) + ")",
                        "figures": {"fallback_ns": t, "gemm_ns": gemm_ns, "share": t / gemm_ns,
                                    "by_cause_ns": {c: int(v) for c, v in causes.items()}},
                        "concerns": _top(fallback)})
    quantize_ns = int(times["quantize_ns"].sum())
    low = g[~g["precision"].isin(["bf16", "fp16", "fp32", "tf32"])]
    low_ns = int(low["duration_ns"].sum())
    if quantize_ns and low_ns:
        k = result.kernels
        quant = k[k["role"] == "quantize"]
        by_module = quant.groupby(quant["te_module"].fillna("(module unknown)"))["duration_ns"].sum()
        out.append({"code": "quantize-overhead", "explains_ns": quantize_ns,
                    "statement": f"quantization kernels take {_ms(quantize_ns)}, {quantize_ns / low_ns:.2f}× the "
                                 f"{_ms(low_ns)} of low-precision GEMMs they feed",
                    "figures": {"quantize_ns": quantize_ns, "low_precision_gemm_ns": low_ns,
                                "ratio": quantize_ns / low_ns,
                                "by_module_ns": {m: int(v) for m, v in by_module.sort_values(ascending=False).items()}},
                    "concerns": []})
    tails_ns = int(times["gemm-tail_ns"].sum())
    if tails_ns and gemm_ns:
        out.append({"code": "tails", "explains_ns": tails_ns,
                    "statement": f"split-K reduce and bias-gradient kernels add {_ms(tails_ns)}, "
                                 f"{_pct(tails_ns / gemm_ns)} of GEMM time",
                    "figures": {"tails_ns": tails_ns, "gemm_ns": gemm_ns}, "concerns": []})
    rated = throughput[throughput["share_of_peak"].notna()]
    if len(rated):
        small = rated[rated["share_of_peak"] < SMALL_SHARE_OF_PEAK]
        if len(small):
            ideal = small["call_flops"].astype("float64") / (small["peak_tflops"] * 1e3)
            lost = int((small["duration_ns"] - ideal).clip(lower=0).sum())
            shapes = (small.assign(shape=[f"{m}×{n}×{k}" for m, n, k in zip(small["gemm_m"], small["gemm_n"], small["gemm_k"])])
                      .groupby("shape")["share_of_peak"].median().sort_values().head(5))
            out.append({"code": "small-gemm", "explains_ns": lost,
                        "statement": f"{len(small)} GEMM launches run below {_pct(SMALL_SHARE_OF_PEAK)} of their "
                                     f"precision's dense peak (M×N×K, median share: "
                                     + ", ".join(f"{s} {_pct(v)}" for s, v in shapes.items()) + ")",
                        "figures": {"launches": len(small), "time_ns": int(small["duration_ns"].sum()),
                                    "time_above_peak_ns": lost}, "concerns": _top(small)})
        # the GEMMs that ran as asked; with --expect-map their recipes, and so their peaks, differ:
        # each launch's time is weighed against its own precision's peak
        at_request = rated[rated["verdict"] == "OK"] if "verdict" in rated else rated.iloc[0:0]
        wanted = set(at_request["precision"])
        if len(at_request):
            weighted = float(at_request["call_flops"].astype("float64").sum()
                             / (at_request["duration_ns"] * 1e3 * at_request["peak_tflops"]).sum())
            if weighted >= HEALTHY_SHARE_OF_PEAK:
                t = int(at_request["duration_ns"].sum())
                out.append({"code": "gemms-healthy", "explains_ns": t,
                            "statement": f"GEMMs ran at {' / '.join(result.expected_recipes)} as requested, at "
                                         f"{_pct(weighted)} of the "
                                         f"GPU's dense {', '.join(sorted(wanted))} peak ({_ms(t)})",
                            "figures": {"share_of_peak": weighted, "time_ns": t}, "concerns": []})
    return out


def diagnose(result: Verification, step_range: str | None = None) -> Diagnosis:
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
    found = sorted(findings(window, times) + uneven_steps(step_times), key=lambda f: -f["explains_ns"])
    return Diagnosis(breakdown=times, findings=found, steps=per_step, step_range=step_range, step_times=step_times)


# A step this much slower than its rank's median step is named (slow-steps), and a rank whose
# median step is this much slower than the other ranks' median (rank-lag).
SLOW_STEP = 1.25
LAGGING_RANK = 1.10


def uneven_steps(step_times: pd.DataFrame) -> list[dict]:
    """The steps that differ: ``slow-steps`` (steps over SLOW_STEP × their rank's median step on
    the GPU, the time over the median at stake) and ``rank-lag`` (the rank whose median step is over
    LAGGING_RANK × the other ranks' median: they wait for it at every collective)."""
    out: list[dict] = []
    if len(step_times) < 3:
        return out
    window = step_times["window_ns"].astype("int64")
    median = window.groupby(step_times["rank"]).transform("median")
    slow = step_times[window > SLOW_STEP * median]
    if len(slow):
        over = (window - median)[slow.index]
        worst = over.idxmax()
        out.append({"code": "slow-steps",
                    "statement": f"{len(slow)} of {len(step_times)} steps run over {SLOW_STEP}× their rank's median "
                                 f"step; the slowest, step {step_times.at[worst, 'step']} of rank "
                                 f"{step_times.at[worst, 'rank']}, takes {_ms(window[worst])} against "
                                 f"{_ms(median[worst])}",
                    "explains_ns": int(over.sum()),
                    "figures": {"slow_steps": {f"rank {r} step {n}": int(ns) for r, n, ns in
                                               zip(slow["rank"], slow["step"], window[slow.index])},
                                "median_ns": int(median[worst])},
                    "concerns": []})
    per_rank = window.groupby(step_times["rank"]).median()
    lagging = per_rank.idxmax() if len(per_rank) > 1 else None
    others = per_rank.drop(lagging).median() if lagging is not None else 0
    if lagging is not None and per_rank[lagging] > LAGGING_RANK * others:
        steps_of = int((step_times["rank"] == lagging).sum())
        out.append({"code": "rank-lag",
                    "statement": f"rank {lagging}'s median step takes {_ms(per_rank[lagging])}, over {LAGGING_RANK}× "
                                 f"the other ranks' ({_ms(others)}): they wait for it",
                    "explains_ns": int((per_rank[lagging] - others) * steps_of),
                    "figures": {"rank": str(lagging), "median_step_ns": int(per_rank[lagging]),
                                "others_median_step_ns": int(others)},
                    "concerns": []})
    return out


def categorize_modules(result: Verification) -> pd.DataFrame:
    """Kernels with their module label (verify.module_labels, as the GEMM tables say it), pass and
    category."""
    activity = categorize(result)
    k = result.kernels
    module = module_labels(k["te_module"], launched_by_te(k))
    kernels = activity.iloc[: len(k)].assign(module=module.to_numpy(), **{"pass": k["te_pass"].to_numpy()})
    memops = activity.iloc[len(k):].assign(module="(memory operations)", **{"pass": None})
    return pd.concat([kernels, memops], ignore_index=True)
