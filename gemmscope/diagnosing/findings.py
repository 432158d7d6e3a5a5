"""Findings: statements that say why low precision did or did not pay, each with a code, its
figures and the time at stake (`explains_ns`), ordered by that time. `findings` draws them from a
checked run and its time breakdown (diagnosis.breakdown), `uneven_steps` from its steps:

- ``gpu-idle``: the GPU idles for this share of the window; with the GEMM share and the Amdahl
  bound 1 / ((1 − W) + W / s) on what faster GEMMs can give end to end;
- ``launch-bound``: the median kernel is shorter than the median CUDA launch call;
- ``gemm-share``: GEMMs are W of the window, and the bound for s = 2 and for the GEMM speedup
  measured in the trace, when the trace says it;
- ``fallback``: GEMM time at another precision than requested, and where;
- ``quantize-overhead``: quantization kernels against the low-precision GEMM time they feed;
- ``small-gemm``: GEMMs far below their precision's dense peak (the hook's shape record needed);
- ``tails``: split-K reduce and bias-gradient kernels;
- ``gemms-healthy``: GEMMs ran as requested near their expected throughput: what each asked and
  its share of their time (several: a run whose first and last layers asked BF16 on purpose);
- ``unsupported``: the requested recipe cannot run on this GPU;
- ``unknown-device``: the GPU is not in gemmscope's device table, so no share of a peak is computed;
- ``slow-steps``, ``rank-lag``: steps that differ (`uneven_steps`), where steps are found.

Where the breakdown covers the steps after the first (diagnosis.within_steps), each statement
that counts GEMMs or times kernels says so (`scope`, AFTER_FIRST_STEP): the verdict above it counts
every step, and a count on the same screen that differs says why.
"""

from __future__ import annotations

from typing import Any, TypedDict

import pandas as pd

from gemmscope.devices import lookup
from gemmscope.diagnosing.throughput import device_name, gemm_throughput
from gemmscope.judging.figures import ASSUMED_SPEEDUP
from gemmscope.judging.judgement import Judgement
from gemmscope.judging.recipes import RECIPE_MIN_SM, RECIPES
from gemmscope.traces.model import gpu_sm

# Where a finding's time is: a layer, module and pass, and its time there.
Concern = TypedDict("Concern", {"layer": str | None, "module": str, "pass": str | None, "time_ns": int})


class Finding(TypedDict):
    """One finding (module docstring), as the JSON documents hold it."""

    code: str
    explains_ns: int  # the time at stake: findings are ordered by it, most first
    statement: str
    figures: dict[str, Any]  # its figures, by name (times in ns, shares as fractions)
    concerns: list[Concern]  # where its time is, most first (empty where no one place is)


# What "near the expected throughput" means for gemms-healthy, and "far below" for small-gemm.
HEALTHY_SHARE_OF_PEAK = 0.5
SMALL_SHARE_OF_PEAK = 0.25


def _amdahl(share: float, speedup: float) -> float:
    return 1.0 / ((1.0 - share) + share / speedup)


def _pct(x: float) -> str:
    return f"{100 * x:.3g} %"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms" if ns < 1e9 else f"{ns / 1e9:.2f} s"


# What a statement says of its figures where the window is the steps after the first (module docstring).
AFTER_FIRST_STEP = "after the first step"


def findings(result: Judgement, times: pd.DataFrame, scope: str | None = None) -> list[Finding]:
    """The findings (module docstring) over all ranks, most time at stake first; `scope`: the
    part of the run `result` and `times` cover, where it is not the whole (AFTER_FIRST_STEP)."""
    out: list[Finding] = []
    within = f" {scope}" if scope else ""
    window, busy, idle = (int(times[c].sum()) for c in ("window_ns", "busy_ns", "idle_ns"))
    gemm_ns = int(times["gemm_ns"].sum() + times["gemm-fallback_ns"].sum())
    share = gemm_ns / window if window else 0.0
    throughput = gemm_throughput(result)
    measured_speedup = _measured_gemm_speedup(throughput)
    bounds = {f"s={ASSUMED_SPEEDUP:g}": _amdahl(share, ASSUMED_SPEEDUP)}
    if measured_speedup:
        bounds[f"s={measured_speedup:.2f} (measured)"] = _amdahl(share, measured_speedup)
    bound_text = ", ".join(f"{k}: at most {v:.3f}× end to end" for k, v in bounds.items())
    device = device_name(result)
    sm = gpu_sm(result.job.traces)

    for recipe in result.expected_recipes:
        if recipe in RECIPE_MIN_SM and sm is not None and sm < RECIPE_MIN_SM[recipe]:
            out.append({"code": "unsupported", "explains_ns": window,
                        "statement": f"{recipe} cannot run on {device} (sm{sm}): TE needs compute "
                                     f"capability {RECIPE_MIN_SM[recipe] / 10:.1f} or higher",
                        "figures": {"sm": sm, "min_sm": RECIPE_MIN_SM[recipe], "recipe": recipe}, "concerns": []})
    if window and idle / window >= 0.3:
        out.append({"code": "gpu-idle", "explains_ns": idle,
                    "statement": f"the GPU is idle {_pct(idle / window)} of its {_ms(window)} window{within}; GEMMs are "
                                 f"{_pct(share)} of it, so faster GEMMs cannot pay much ({bound_text})",
                    "figures": {"window_ns": window, "busy_ns": busy, "idle_ns": idle, "gemm_ns": gemm_ns,
                                "gemm_share": share, "amdahl": bounds}, "concerns": []})
        launch = result.job.kernels["launch_end"] - result.job.kernels["launch_start"]
        median_kernel, median_launch = result.job.kernels["duration_ns"].median(), launch.median()
        if pd.notna(median_launch) and median_kernel < median_launch:
            out.append({"code": "launch-bound", "explains_ns": int(idle * 0.99),
                        "statement": f"the median kernel{within} runs {median_kernel / 1e3:.1f} µs, less than the "
                                     f"{median_launch / 1e3:.1f} µs the CPU takes to launch one: the GPU waits on the CPU",
                        "figures": {"median_kernel_ns": float(median_kernel), "median_launch_ns": float(median_launch),
                                    "kernel_launches": int(times["kernel_launches"].sum()),
                                    "launches_per_s": times["kernel_launches"].sum() / (window / 1e9)},
                        "concerns": []})
    if gemm_ns:
        out.append({"code": "gemm-share", "explains_ns": max(busy - gemm_ns, 0),
                    "statement": f"GEMMs are {_pct(share)} of the GPU window{within} ({_ms(gemm_ns)}): {bound_text}",
                    "figures": {"gemm_ns": gemm_ns, "gemm_share": share, "amdahl": bounds,
                                "measured_gemm_speedup": measured_speedup}, "concerns": []})
    out += _verdict_findings(result, times, throughput, within)
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


def _top(frame: pd.DataFrame, n: int = 3) -> list[Concern]:
    keys = ["layer", "module", "pass"]
    g = frame.assign(**{"pass": frame["te_pass"]}).groupby(keys, dropna=False)["duration_ns"].sum()
    return [{"layer": k[0] if pd.notna(k[0]) else None, "module": k[1], "pass": k[2] if pd.notna(k[2]) else None,
             "time_ns": int(v)} for k, v in g.sort_values(ascending=False).head(n).items()]


def _verdict_findings(result: Judgement, times: pd.DataFrame, throughput: pd.DataFrame, within: str) -> list[Finding]:
    out: list[Finding] = []
    g = result.gemms
    gemm_ns = int(g["duration_ns"].sum())
    if "verdict" in g and gemm_ns:
        fallback = g[(g["verdict"] == "FALLBACK") & ~g["allowed"]]
        if len(fallback):
            t = int(fallback["duration_ns"].sum())
            causes = fallback.groupby("cause")["duration_ns"].sum().sort_values(ascending=False)
            # what these GEMMs were checked against: --expect's recipe, or each one's own request
            asked = " / ".join(dict.fromkeys(asked_labels(fallback)))
            out.append({"code": "fallback", "explains_ns": int(t * (1 - 1 / ASSUMED_SPEEDUP)),
                        "statement": f"{_pct(t / gemm_ns)} of GEMM time{within} ({_ms(t)}, {len(fallback)} launches) "
                                     f"ran at another precision than {asked} ("
                                     + ", ".join(f"{c}: {_ms(v)}" for c, v in causes.items()) + ")",
                        "figures": {"fallback_ns": t, "gemm_ns": gemm_ns, "share": t / gemm_ns,
                                    "launches": len(fallback),
                                    "by_cause_ns": {c: int(v) for c, v in causes.items()}},
                        "concerns": _top(fallback)})
    quantize_ns = int(times["quantize_ns"].sum())
    low = g[~g["precision"].isin(["bf16", "fp16", "fp32", "tf32"])]
    low_ns = int(low["duration_ns"].sum())
    if quantize_ns and low_ns:
        k = result.job.kernels
        quant = k[k["role"] == "quantize"]
        by_module = quant.groupby(quant["te_module"].fillna("(module unknown)"))["duration_ns"].sum()
        out.append({"code": "quantize-overhead", "explains_ns": quantize_ns,
                    "statement": f"quantization kernels take {_ms(quantize_ns)}{within}, {quantize_ns / low_ns:.2f}× "
                                 f"the {_ms(low_ns)} of low-precision GEMMs they feed",
                    "figures": {"quantize_ns": quantize_ns, "low_precision_gemm_ns": low_ns,
                                "ratio": quantize_ns / low_ns,
                                "by_module_ns": {m: int(v) for m, v in by_module.sort_values(ascending=False).items()}},
                    "concerns": []})
    tails_ns = int(times["gemm-tail_ns"].sum())
    if tails_ns and gemm_ns:
        out.append({"code": "tails", "explains_ns": tails_ns,
                    "statement": f"split-K reduce and bias-gradient kernels add {_ms(tails_ns)}{within}, "
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
                        "statement": f"{len(small)} GEMM launches{within} run below {_pct(SMALL_SHARE_OF_PEAK)} of "
                                     f"their precision's dense peak (M×N×K, median share: "
                                     + ", ".join(f"{s} {_pct(v)}" for s, v in shapes.items()) + ")",
                        "figures": {"launches": len(small), "time_ns": int(small["duration_ns"].sum()),
                                    "time_above_peak_ns": lost}, "concerns": _top(small)})
        healthy = _healthy(g, rated, within)
        if healthy is not None:
            out.append(healthy)
    return out


def asked_labels(gemms: pd.DataFrame) -> pd.Series:
    """What each GEMM was checked against, as a finding names it: its `expected` (--expect's or
    --expect-map's recipe, or the precision its own request named: bf16, fp8), the precision
    named by the recipe of the operands TE was handed where the hook recorded one (fp8-current)."""
    expected = gemms["expected"].astype(str)
    recipe = gemms["requested_a"].where(gemms["requested_a"].isin(RECIPES) & ~expected.isin(RECIPES))
    return recipe.where(recipe.notna(), expected).astype(str)


def _healthy(gemms: pd.DataFrame, rated: pd.DataFrame, within: str) -> Finding | None:
    """gemms-healthy: the GEMMs that ran as asked, when those whose shapes the hook recorded run
    near their peak, each weighed against its own precision's (with --expect-map, or each GEMM
    against its own request, their precisions differ). The statement names what they asked, each
    with its share of their time where they asked several (a run that keeps its first and last
    layers in BF16 on purpose), and their share of all GEMM time where others ran otherwise: never
    one precision for GEMMs that ran another."""
    if "verdict" not in gemms:
        return None
    at_request = rated[rated["verdict"] == "OK"]
    if not len(at_request):
        return None
    weighted = float(at_request["call_flops"].astype("float64").sum()
                     / (at_request["duration_ns"] * 1e3 * at_request["peak_tflops"]).sum())
    if weighted < HEALTHY_SHARE_OF_PEAK:
        return None
    ok = gemms[gemms["verdict"] == "OK"]
    ok_ns, gemm_ns, t = int(ok["duration_ns"].sum()), int(gemms["duration_ns"].sum()), int(at_request["duration_ns"].sum())
    by_request = ok["duration_ns"].groupby(asked_labels(ok)).sum().sort_values(ascending=False)
    subject = (f"GEMMs ran as requested ({_ms(ok_ns)}{within})" if ok_ns >= gemm_ns else
               f"The GEMMs that ran as requested ({_pct(ok_ns / gemm_ns)} of GEMM time{within}, {_ms(ok_ns)})")
    if len(by_request) == 1:
        what = f"all at {by_request.index[0]}; {_pct(weighted)} of the GPU's dense peak at that precision"
    else:
        shares = ", ".join(f"{label} {100 * ns / ok_ns:.1f} %" for label, ns in by_request.items())
        what = (f"each at what it asked, {shares} of their time; {_pct(weighted)} of the GPU's dense peak at "
                "those precisions")
    if t < ok_ns:
        what += f" (over the {_ms(t)} of them whose shapes were recorded)"
    return {"code": "gemms-healthy", "explains_ns": t,
            "statement": f"{subject}: {what}",
            "figures": {"share_of_peak": weighted, "time_ns": t, "requested_ns": ok_ns, "gemm_ns": gemm_ns,
                        "by_request_ns": {label: int(ns) for label, ns in by_request.items()}},
            "concerns": []}


# A step this much slower than its rank's median step is named (slow-steps), and a rank whose
# median step is this much slower than the other ranks' median (rank-lag).
SLOW_STEP = 1.25
LAGGING_RANK = 1.10


def uneven_steps(step_times: pd.DataFrame) -> list[Finding]:
    """The steps that differ: ``slow-steps`` (steps over SLOW_STEP × their rank's median step on
    the GPU, the time over the median at stake) and ``rank-lag`` (the rank whose median step is over
    LAGGING_RANK × the other ranks' median: they wait for it at every collective)."""
    out: list[Finding] = []
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
