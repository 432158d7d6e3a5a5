"""GEMM throughput against the GPU's dense peaks: per launch whose call shape gemmscope's hook
recorded, and per GEMM (layer × module × pass × shape × precision), in TFLOP/s and as a share of
the precision's peak on the traces' GPU (gemmscope.devices)."""

from __future__ import annotations

import pandas as pd

from gemmscope.devices import peak_tflops
from gemmscope.judging.judgement import Judgement


def gemm_throughput(result: Judgement) -> pd.DataFrame:
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


def gemm_group_throughput(result: Judgement) -> pd.DataFrame:
    """Per GEMM: layer × module × pass × call shape (M, N, K as the hook recorded them; NaN
    without a record) × precision (× verdict, where checked), the launches and their time, and
    over the launches whose shape was recorded (`gemm_throughput`): FLOPs, TFLOP/s and share of
    the precision's dense peak on this GPU (NaN where none was recorded, or no peak is known).
    `flagged`: the verdict is FALLBACK; `allowed`: all of them by --allow."""
    g = result.gemms
    shape = [c for c in ("gemm_m", "gemm_n", "gemm_k") if c in g]
    keys = ["layer", "module", "pass", *shape, "precision", *(["verdict"] if "verdict" in g else [])]
    rated = gemm_throughput(result)
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


def _peaks(result: Judgement, precisions: pd.Series) -> pd.Series:
    """The dense peak (TFLOP/s) of each precision on the traces' GPU, NaN where unknown."""
    device = device_name(result)
    peaks = {p: peak_tflops(device, p) for p in precisions.dropna().unique()} if device else {}
    return precisions.map(peaks).astype("float64")


def device_name(result: Judgement) -> str | None:
    names = [gpu["name"] for t in result.job.traces for gpu in t.meta["gpus"] if gpu.get("name")]
    return names[0] if names else None
