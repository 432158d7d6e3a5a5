"""Two runs of one program side by side (`gemmscope compare BASE NEW`): where NEW gained or lost
GPU time against BASE, per category and per module/pass, and which GEMM kernels changed; built on
diagnosis's breakdown, so that the differences add up as its times do."""

from __future__ import annotations

import pandas as pd

from gemmscope.diagnosing.diagnosis import CATEGORIES, breakdown, categorize_modules, findings, within_steps
from gemmscope.diagnosing.findings import AFTER_FIRST_STEP
from gemmscope.diagnosing.steps import find_steps
from gemmscope.judging.judgement import Judgement


def compare(base: Judgement, new: Judgement, step_range: str | None = None) -> dict:
    """Two runs of one program side by side: per category and per module/pass, each run's time
    and NEW − BASE. The differences add up: window = busy + idle, and busy = the categories'
    kernel time − overlap."""
    cut, scopes = [], []
    for result in (base, new):
        steps = find_steps(result, step_range)
        window = within_steps(result, steps)[0] if len(steps) > 1 else result
        cut.append(window)
        scopes.append(AFTER_FIRST_STEP if window is not result else None)
    base, new = cut
    b, n = breakdown(base), breakdown(new)
    totals = {}
    for column in ("window_ns", "busy_ns", "idle_ns", "kernel_launches", *(f"{c}_ns" for c in CATEGORIES),
                   "overlap_ns"):
        totals[column] = {"base": int(b[column].sum()), "new": int(n[column].sum()),
                          "difference": int(n[column].sum() - b[column].sum())}

    def per_module(result: Judgement) -> pd.Series:
        k = categorize_modules(result)
        return k.groupby(["module", "pass", "category"], dropna=False)["duration_ns"].sum()

    modules = pd.concat({"base": per_module(base), "new": per_module(new)}, axis=1).fillna(0).astype("int64")
    modules["difference"] = modules["new"] - modules["base"]
    modules = modules.reset_index().sort_values("difference", key=abs, ascending=False)
    kernels_changed = _kernels_changed(base, new)
    return {"statement": _comparison_statement(totals), "totals": totals, "by_module": modules,
            "kernels_changed": kernels_changed, "base_findings": findings(base, b, scopes[0]), "new_findings": findings(new, n, scopes[1])}


def _comparison_statement(totals: dict) -> str:
    """One line: the window's difference and what it is made of, largest parts first."""
    d = {k: v["difference"] for k, v in totals.items()}
    base_window = totals["window_ns"]["base"]
    categories = sorted(((c, d[f"{c}_ns"]) for c in CATEGORIES if d[f"{c}_ns"]), key=lambda cv: -abs(cv[1]))
    if not any(d.values()):
        return "NEW's GPU time is BASE's: the same window, busy and idle time, categories and kernel launches"
    parts = [f"{c} {v / 1e6:+.3f}" for c, v in categories[:4]] + [f"overlap {d['overlap_ns'] / 1e6:+.3f}"]
    relative = f" ({d['window_ns'] / base_window:+.1%})" if base_window else ""
    return (f"NEW's GPU window is {d['window_ns'] / 1e6:+.3f} ms{relative} against BASE: busy "
            f"{d['busy_ns'] / 1e6:+.3f} ms ({', '.join(parts)}), idle "
            f"{d['idle_ns'] / 1e6:+.3f} ms; {d['kernel_launches']:+d} kernel launches")


def _kernels_changed(base: Judgement, new: Judgement) -> pd.DataFrame:
    """Per layer × module × pass, the GEMM kernels each run used, where they differ."""
    def kernels_of(result: Judgement) -> pd.Series:
        g = result.gemms.assign(**{"pass": result.gemms["te_pass"]})
        return g.groupby(["layer", "module", "pass"], dropna=False)["name"].agg(lambda s: " + ".join(sorted(set(s))))

    both = pd.concat({"base": kernels_of(base), "new": kernels_of(new)}, axis=1)
    return both[both["base"] != both["new"]].reset_index()
