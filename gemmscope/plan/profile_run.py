"""A `gemmscope profile` run directory read back: the plan's GEMMs at each recipe and mode, their
timings and verdicts. `analyze_run` derives everything from the trace alone (the workload leaves
its plan, its CUDA-event timings and each entry's status in NVTX marks), so a run directory can be
re-analyzed anywhere, without a GPU; gemmscope.plan.gpu_profile makes one.
"""

from __future__ import annotations

import glob
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemmscope import devices
from gemmscope.assembly.attribution import launches_with_ranges
from gemmscope.errors import InputError
from gemmscope.judging.judgement import verdict
from gemmscope.judging.recipes import recipe_precision
from gemmscope.plan.run_marks import PLAN_PREFIX, RANGE_PREFIX, RESULT_PREFIX, WARMUP_PREFIX
from gemmscope.traces.model import Trace
from gemmscope.traces.read import read_trace

MODES = ("autocast", "prequant")


def is_run_dir(path: Path) -> bool:
    """A `gemmscope profile` run directory (it writes spec.json, then results.json), as opposed
    to a folder of traces."""
    return path.is_dir() and any((path / name).is_file() for name in ("spec.json", "results.json"))


def run_directory(inputs: Sequence[str | Path], verb: str) -> Path | None:
    """The profile run directory `inputs` name, or None when they name traces; InputError where
    one is given with other runs or traces (`verb`: what the command does with it, "bundle")."""
    runs = [Path(p) for p in inputs if is_run_dir(Path(p))]
    if runs and len(inputs) > 1:
        raise InputError(f"{runs[0]} is a profile run directory: {verb} it alone, not with other runs or traces")
    return runs[0] if runs else None
# A run directory's trace, in the order load_run looks for it (the export, or it compressed).
RUN_TRACES = ("trace.sqlite", "trace.sqlite.xz")
# The GEMMs' output is BF16 whatever the recipe (the workload asks TE for out_dtype=bfloat16).
OUTPUT_BYTES = 2
# A factor of a GEMM's speedup that costs less than this is within run-to-run noise (the example
# runs' IQRs are 1-3 % of e2e), so the speedup reason does not name it.
NEGLIGIBLE_LOSS = 0.05



def parse_label(text: str) -> dict:
    """`prefix|key=value|…|reason=free text` → dict (numbers as numbers; reason may hold '|')."""
    body = text.split("|", 1)[1]
    head, sep, reason = body.partition("|reason=")
    fields: dict[str, Any] = dict(part.split("=", 1) for part in head.split("|"))
    if sep:
        fields["reason"] = reason
    for key in ("m", "k", "n", "iters"):
        if key in fields:
            fields[key] = int(fields[key])
    for key in ("e2e_ms", "e2e_iqr_ms", "e2e_mean_ms"):
        if key in fields:
            fields[key] = float(fields[key])
    return fields


_KEY = ["op", "pass", "precision", "mode", "m", "k", "n"]


@dataclass
class ProfileRun:
    """One profile run, as re-derived from its trace."""

    device: dict
    plan: dict
    gemms: pd.DataFrame
    memory: pd.DataFrame  # peak_mib per mode and recipe; NaN where none of its GEMMs ran
    # nsys version, schema and GPUs of the trace the run was derived from (None: made without nsys)
    trace_meta: dict | None = None

    def speedups(self) -> dict:
        """Per mode, per recipe: per-layer time speedup over BF16 (None where any GEMM of either
        is not ok: a missing measurement is never summed as 0)."""
        layer = self.per_layer()
        out: dict = {}
        for mode in layer.index.get_level_values("mode").unique():
            base = layer.loc[(mode, "bf16"), "e2e_ms"] if (mode, "bf16") in layer.index else None
            out[mode] = {}
            for precision in layer.loc[mode].index:
                if precision == "bf16":
                    continue
                t = layer.loc[(mode, precision), "e2e_ms"]
                out[mode][precision] = (base / t) if base is not None and pd.notna(base) and pd.notna(t) else None
        return out

    def per_layer(self) -> pd.DataFrame:
        """Per mode and precision: the sum over one layer's GEMMs (NaN unless all are ok)."""
        g = self.gemms[self.gemms["per_layer"]]
        rows = []
        for (mode, precision), grp in g.groupby(["mode", "precision"], sort=False):
            complete = (grp["status"] == "ok").all()
            row = {"mode": mode, "precision": precision, "gemms": len(grp),
                   "not_ok": int((grp["status"] != "ok").sum())}
            for column in ("e2e_ms", "kernel_ms", "overhead_ms"):  # NaN unless every GEMM has it
                row[column] = grp[column].sum(min_count=len(grp)) if complete else math.nan
            row["flagged"] = int((grp["verdict"] == "FALLBACK").sum())
            rows.append(row)
        return pd.DataFrame(rows).set_index(["mode", "precision"])

    def full_model(self) -> pd.DataFrame:
        """Per mode and precision: Σ time × count over the plan (one training step's GEMMs)."""
        rows = []
        for (mode, precision), grp in self.gemms.groupby(["mode", "precision"], sort=False):
            complete = (grp["status"] == "ok").all()
            rows.append({"mode": mode, "precision": precision,
                         "e2e_ms": (grp["e2e_ms"] * grp["count"]).sum(min_count=len(grp)) if complete else math.nan})
        return pd.DataFrame(rows).set_index(["mode", "precision"])


def analyze_run(trace: Trace) -> ProfileRun:
    """A profile run from its trace alone: plan and CUDA-event results from the workload's NVTX
    marks, kernel and overhead times from the kernels launched inside each timed range."""
    marks = trace.nvtx.loc[trace.nvtx["kind"] == "mark", "name"].dropna()
    plans = [n for n in marks if n.startswith(PLAN_PREFIX)]
    if not plans:
        raise InputError(f"{trace.path} is not a gemmscope profile trace (no gemmscope.plan mark)")
    gpu = trace.meta["gpus"][0] if trace.meta["gpus"] else {"name": "unknown", "sm": None}
    results = [n for n in marks if n.startswith(RESULT_PREFIX)]
    run = _run_from(json.loads(plans[0][len(PLAN_PREFIX):]), results, {"name": gpu["name"], "sm": gpu["sm"]},
                    timed_ranges(trace), _memory_by_precision(trace))
    run.trace_meta = trace.meta
    return run


def analyze_events(events: dict) -> ProfileRun:
    """A run made without nsys: CUDA-event times only (no kernel, overhead or verdict)."""
    return _run_from(events["plan"], events["results"], events["device"], {}, pd.DataFrame())


def _run_from(plan: dict, result_marks: list[str], device: dict, measured: dict, memory: pd.DataFrame) -> ProfileRun:
    sm = int(device["sm"][2:]) if device.get("sm") else None
    counts = {(g["op"], g["pass"]): g["count"] for g in plan["gemms"]}
    per_layer_ops = {(g["op"], g["pass"]) for g in plan["gemms"] if g["count"] == plan["num_layers"]}
    rows = []
    for r in map(parse_label, result_marks):
        m = measured.get(range_label(r), {})
        flops = 2 * r["m"] * r["k"] * r["n"]
        row = {k: r[k] for k in _KEY} | {
            "iters": r["iters"], "status": r["status"], "reason": r.get("reason"),
            "count": counts.get((r["op"], r["pass"]), 1),
            "per_layer": (r["op"], r["pass"]) in per_layer_ops, "flops": flops,
            "e2e_ms": r.get("e2e_ms", math.nan), "e2e_iqr_ms": r.get("e2e_iqr_ms", math.nan),
            "e2e_mean_ms": r.get("e2e_mean_ms", math.nan),
            "kernel": m.get("kernel"), "kernel_precision": m.get("precision"),
            "kernel_ms": m.get("kernel_ms", math.nan), "kernel_median_ms": m.get("kernel_median_ms", math.nan),
            "kernel_iqr_ms": m.get("kernel_iqr_ms", math.nan), "overhead_ms": m.get("overhead_ms", math.nan),
            "e2e_trace_ms": m.get("e2e_trace_ms", math.nan), "gemm_launches": m.get("gemm_launches", 0),
        }
        # A verdict needs the trace's kernels; an entry that did not run has none.
        row["verdict"] = verdict(m.get("precision"), r["precision"], sm) if r["status"] == "ok" and m else None
        rows.append(row)
    if not rows:
        raise InputError("the run holds no gemmscope results: the workload stopped before its first GEMM")
    gemms = pd.DataFrame(rows)
    if not memory.empty:  # a precision none of whose GEMMs ran has no peak: NaN, never 0
        ok = gemms[gemms["status"] == "ok"]
        ran = pd.MultiIndex.from_frame(memory[["mode", "precision"]]).isin(
            pd.MultiIndex.from_frame(ok[["mode", "precision"]]))
        memory = memory.assign(peak_mib=memory["peak_mib"].where(ran))
    return ProfileRun(device=device, plan=plan, gemms=with_speed_figures(gemms, device["name"]), memory=memory)


def with_speed_figures(gemms: pd.DataFrame, device_name: str) -> pd.DataFrame:
    """The profile rows with, per GEMM shape and recipe, what its time is made of and the reason
    its speedup over BF16 is what it is. Columns added:

    - `peak_tflops`: the GPU's dense tensor-core peak at the recipe's kernel precision
      (`devices`; NaN on a GPU not in the table);
    - `tflops`, `pct_of_peak`: end-to-end (CUDA-event) throughput and its % of that peak;
    - `kernel_tflops`, `kernel_pct_of_peak`: the same for the GEMM kernels alone (flops / kernel_ms);
    - `quantization_pct`: the other kernels TE ran in the timed range (overhead_ms), % of e2e_trace_ms;
    - `idle_pct`: the time in the timed range with no kernel running (launch gaps), % of e2e_trace_ms;
    - `intensity`: FLOP per byte, 2MNK over A (M x K) and B (K x N) at the recipe's operand size
      (FP8 1 byte, NVFP4 0.5, block scales left out) plus the BF16 output (M x N);
    - `ridge`: the GPU's ridge point at that precision (peak / memory bandwidth, FLOP/B);
    - `speedup`: the BF16 row's e2e_ms for the same GEMM and mode over this row's;
    - `speedup_reason`: one line, from the first of these rules that applies:

      1. the entry did not run: none (TE's own reason is in `reason`);
      2. verdict FALLBACK: "kernel fell back to BF16" (the precision that ran);
      3. intensity below the ridge point: "memory-bound: intensity 210 < ridge 590 FLOP/B" (memory
         bandwidth, not the tensor cores, sets the time);
      4. no trace (a run made without nsys): "no trace: e2e at 58 % of FP8 peak";
      5. the speedup over BF16 is the peak ratio x kernel factor x kernel share, where kernel
         factor = this kernel's % of peak / the BF16 kernel's % of BF16 peak for the same GEMM
         and mode (/ 100 % when the run has no BF16 row for it) and kernel share = kernel_ms /
         e2e_trace_ms. When the kernel share is the smaller of the two and costs more than
         NEGLIGIBLE_LOSS, the larger of quantization and idle time is the reason: "quantization
         24 % of e2e", "GPU idle 44 % of e2e (launch gaps)";
      6. otherwise the kernel: "kernel at 54 % of FP8 peak (BF16 kernel at 70 %)"; on a GPU not
         in the table, "kernel 1388 TFLOP/s (GPU not in the device table: no peak)".
    """
    kernel_precisions = {recipe: recipe_precision(recipe) for recipe in gemms["precision"].unique()}
    precision = gemms["precision"].map(kernel_precisions)

    def per_precision(figure) -> pd.Series:  # one figure per kernel precision, spread over the rows
        return precision.map({p: figure(p) for p in set(kernel_precisions.values())}).astype(float)

    peak = per_precision(lambda p: devices.peak_tflops(device_name, p))
    tflops = (gemms["flops"] / (gemms["e2e_ms"] * 1e9)).where(gemms["status"] == "ok")
    kernel_tflops = gemms["flops"] / (gemms["kernel_ms"] * 1e9)
    idle_ms = (gemms["e2e_trace_ms"] - gemms["kernel_ms"] - gemms["overhead_ms"]).clip(lower=0)
    m, k, n = gemms["m"], gemms["k"], gemms["n"]
    moved_bytes = per_precision(devices.operand_bytes) * (m * k + k * n) + OUTPUT_BYTES * m * n
    figures = pd.DataFrame({
        "peak_tflops": peak,
        "tflops": tflops,
        "pct_of_peak": 100 * tflops / peak,
        "kernel_tflops": kernel_tflops,
        "kernel_pct_of_peak": 100 * kernel_tflops / peak,
        "quantization_pct": 100 * gemms["overhead_ms"] / gemms["e2e_trace_ms"],
        "idle_pct": 100 * idle_ms / gemms["e2e_trace_ms"],
        "intensity": gemms["flops"] / moved_bytes,
        "ridge": per_precision(lambda p: devices.ridge_point(device_name, p)),
    }, index=gemms.index)
    out = pd.concat([gemms, figures], axis=1)
    baseline = _bf16_baseline(out)
    out["speedup"] = baseline["e2e_ms"] / out["e2e_ms"]
    out["speedup_reason"] = _speedup_reasons(out, baseline, precision.map(devices.peak_label))
    return out


def _bf16_baseline(rows: pd.DataFrame) -> pd.DataFrame:
    """For each row, the BF16 row of the same GEMM and mode (NaN where the run has none)."""
    same_gemm = ["op", "pass", "mode", "m", "k", "n"]
    bf16 = rows.loc[rows["precision"] == "bf16", same_gemm + ["e2e_ms", "kernel_pct_of_peak"]]
    baseline = rows[same_gemm].merge(bf16.drop_duplicates(same_gemm), on=same_gemm, how="left")
    return baseline.set_axis(rows.index)


def _speedup_reasons(rows: pd.DataFrame, baseline: pd.DataFrame, peak_label: pd.Series) -> pd.Series:
    """The rules of `with_speed_figures`, in order: the first that holds gives the row's text."""
    def number(values: pd.Series) -> pd.Series:
        return values.map(lambda v: f"{v:.0f}")

    kernel_factor = rows["kernel_pct_of_peak"] / baseline["kernel_pct_of_peak"].fillna(100)
    kernel_share = rows["kernel_ms"] / rows["e2e_trace_ms"]
    overhead_limits = (kernel_share < 1 - NEGLIGIBLE_LOSS) & ~(kernel_factor < kernel_share)
    compared = ("(BF16 kernel at " + number(baseline["kernel_pct_of_peak"]) + " %)").where(
        (rows["precision"] != "bf16") & baseline["kernel_pct_of_peak"].notna(), "")
    rules = [
        (rows["verdict"] == "FALLBACK", "kernel fell back to " + rows["kernel_precision"].str.upper()),
        (rows["intensity"] < rows["ridge"],
         "memory-bound: intensity " + number(rows["intensity"]) + " < ridge " + number(rows["ridge"]) + " FLOP/B"),
        (rows["kernel_ms"].isna() & rows["peak_tflops"].notna(),
         "no trace: e2e at " + number(rows["pct_of_peak"]) + " % of " + peak_label + " peak"),
        (rows["kernel_ms"].isna(), "no trace: e2e " + number(rows["tflops"]) + " TFLOP/s"),
        (overhead_limits & (rows["quantization_pct"] >= rows["idle_pct"]),
         "quantization " + number(rows["quantization_pct"]) + " % of e2e"),
        (overhead_limits, "GPU idle " + number(rows["idle_pct"]) + " % of e2e (launch gaps)"),
        (rows["peak_tflops"].isna(),
         "kernel " + number(rows["kernel_tflops"]) + " TFLOP/s (GPU not in the device table: no peak)"),
    ]
    kernel = ("kernel at " + number(rows["kernel_pct_of_peak"]) + " % of " + peak_label + " peak " + compared)
    reasons = np.select([condition.to_numpy(dtype=bool) for condition, _ in rules],
                        [text.to_numpy(dtype=object) for _, text in rules],
                        default=kernel.str.strip().to_numpy(dtype=object))
    return pd.Series(reasons, index=rows.index).where(rows["status"] == "ok")  # no reason for what did not run


def range_label(result: dict) -> str:
    """The NVTX range a result mark's loop was timed in (the workload's protocol, run_marks; a
    grouped module's m_splits where its entry has them: workload.Entry.label)."""
    keys = (*_KEY, *(["m_splits"] if "m_splits" in result else []), "iters")
    return RANGE_PREFIX + "|".join(f"{k}={result[k]}" for k in keys)


def timed_ranges(trace: Trace) -> dict[str, dict]:
    """Per timed range (its label): the GEMM kernels it launched, the quantization kernels among
    the rest, and the rest (overhead), per iteration."""
    k, ranges = launches_with_ranges(trace)
    # a timed range holds one entry's loop; no two nest
    k["timed"] = ranges.innermost_matching([glob.escape(RANGE_PREFIX) + "*"], np.arange(len(k)))
    k = k[k["timed"].notna()]
    out = {}
    for label, grp in k.groupby("timed"):
        iters = int(parse_label(label)["iters"])
        gemm = grp[grp["role"] == "gemm"]
        tails = grp[grp["role"] == "gemm-tail"]
        rest = grp[~grp["role"].isin(["gemm", "gemm-tail"])]
        q = gemm["duration_ns"].quantile([0.25, 0.5, 0.75]) / 1e6 if len(gemm) else None
        out[label] = {
            "kernel": gemm["name"].mode().iat[0] if len(gemm) else None,
            "precision": gemm["precision"].mode().iat[0] if len(gemm) else None,
            "gemm_launches": len(gemm),
            "kernel_ms": (gemm["duration_ns"].sum() + tails["duration_ns"].sum()) / iters / 1e6,
            "kernel_median_ms": q[0.5] if q is not None else math.nan,
            "kernel_iqr_ms": (q[0.75] - q[0.25]) if q is not None else math.nan,
            "overhead_ms": rest["duration_ns"].sum() / iters / 1e6,
            "quantize_ms": rest.loc[rest["role"] == "quantize", "duration_ns"].sum() / iters / 1e6,
            "e2e_trace_ms": (grp["end"].max() - grp["start"].min()) / iters / 1e6,
        }
    return out


def _memory_by_precision(trace: Trace) -> pd.DataFrame:
    """Peak GPU memory above the baseline while each (mode, precision) ran, from the trace's
    memory events (the workload empties PyTorch's cache after every entry). The baseline is the
    memory live when that (mode, precision)'s first entry starts, itself the lowest peak: an entry
    that only frees what was allocated before it peaks at 0, never below."""
    mem = trace.memory[trace.memory["mem_kind"] == 2].sort_values("start")  # device memory
    live = mem["delta_bytes"].cumsum()
    spans = trace.nvtx[trace.nvtx["name"].fillna("").str.startswith((WARMUP_PREFIX, RESULT_PREFIX))]
    rows = []
    labels = spans["name"].map(parse_label)
    keyed = spans.assign(mode=labels.map(lambda f: f["mode"]), precision=labels.map(lambda f: f["precision"]))
    for (mode, precision), grp in keyed.groupby(["mode", "precision"], sort=False):
        t0, t1 = grp["start"].min(), grp["start"].max()
        before = live[mem["start"] < t0]
        inside = live[(mem["start"] >= t0) & (mem["start"] <= t1)]
        base = before.iat[-1] if len(before) else 0
        rows.append({"mode": mode, "precision": precision,
                     "peak_mib": (max(inside.max(), base) - base) / 2**20 if len(inside) else 0.0})
    return pd.DataFrame(rows)


def load_run(run_dir: Path) -> ProfileRun:
    """Re-derive a run from its trace (`trace.sqlite` or `trace.sqlite.xz`), or from the
    workload's `events.json` for a run made without nsys."""
    for name in RUN_TRACES:
        if (run_dir / name).exists():
            return analyze_run(read_trace(run_dir / name))
    if (run_dir / "events.json").exists():
        return analyze_events(json.loads((run_dir / "events.json").read_text()))
    raise InputError(f"{run_dir} holds no trace.sqlite: not a gemmscope profile run directory")
