"""Requested vs dispatched precision: a verdict for every GEMM kernel launch of a trace.

Verdicts:
- ``OK``: the kernel ran at a precision the recipe asks for;
- ``FALLBACK``: it ran at another precision (e.g. FP8 asked, a BF16 kernel ran);
- ``EXPECTED-SUBSTITUTION``: another precision by TE's design (FP8 block scaling runs as MXFP8
  on sm100+);
- ``UNKNOWN``: the kernel name does not say its precision.
A FALLBACK that matches an ``--allow`` pattern keeps its verdict and is marked ``allowed``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

import pandas as pd

from gemmscope.errors import InputError
from gemmscope.trace_parser import Trace, launches

RECIPES = ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")

# The GEMM precisions each recipe runs (kernel precisions as `kernels` names them).
RECIPE_PRECISIONS = {
    "bf16": {"bf16"},
    "fp8-delayed": {"fp8"},
    "fp8-current": {"fp8"},
    "fp8-block": {"fp8-block"},
    "mxfp8": {"mxfp8"},
    "nvfp4": {"nvfp4"},
}
# (recipe, dispatched precision, lowest SM generation) that TE substitutes by design.
EXPECTED_SUBSTITUTIONS = {("fp8-block", "mxfp8"): 100}

# TE recipe classes as the autocast hook records them (`gemmscope.autocast(recipe=<class>)`).
RECIPE_BY_CLASS = {
    "DelayedScaling": "fp8-delayed",
    "Float8CurrentScaling": "fp8-current",
    "Float8BlockScaling": "fp8-block",
    "MXFP8BlockScaling": "mxfp8",
    "NVFP4BlockScaling": "nvfp4",
}
_AUTOCAST_RANGE = re.compile(r"^gemmscope\.autocast\(recipe=(?P<cls>\w+)\)$")


def verdict(precision: str | None, recipe: str, sm: int | None) -> str:
    if precision is None or precision == "unknown":
        return "UNKNOWN"
    if precision in RECIPE_PRECISIONS[recipe]:
        return "OK"
    min_sm = EXPECTED_SUBSTITUTIONS.get((recipe, precision))
    if min_sm is not None and sm is not None and sm >= min_sm:
        return "EXPECTED-SUBSTITUTION"
    return "FALLBACK"


def recorded_recipes(trace: Trace) -> list[str]:
    """Recipes of the enabled `te.autocast` regions the autocast hook recorded, in order seen."""
    seen: list[str] = []
    for name in trace.nvtx["name"].dropna():
        m = _AUTOCAST_RANGE.match(name)
        if m and m["cls"] != "disabled":
            recipe = RECIPE_BY_CLASS.get(m["cls"], m["cls"])
            if recipe not in seen:
                seen.append(recipe)
    return seen


def resolve_expected(trace: Trace, expect: str | None) -> str | None:
    """The recipe to check against: --expect, else the one recipe the run recorded, else None."""
    if expect is not None:
        if expect not in RECIPES:
            raise InputError(f"unknown recipe {expect!r}: choose from {', '.join(RECIPES)}")
        return expect
    recorded = recorded_recipes(trace)
    unknown = [r for r in recorded if r not in RECIPES]
    if unknown:
        raise InputError(f"the run used a recipe gemmscope does not know ({', '.join(unknown)}): pass --expect")
    if len(recorded) > 1:
        raise InputError(f"the run used several recipes ({', '.join(recorded)}): pass --expect RECIPE")
    return recorded[0] if recorded else None


def _sm(trace: Trace) -> int | None:
    majors = [(g["cc_major"], g["cc_minor"]) for g in trace.meta["gpus"] if pd.notna(g.get("cc_major"))]
    return int(majors[0][0]) * 10 + int(majors[0][1]) if majors else None


@dataclass
class Verification:
    """GEMM launches with verdicts, and the summaries built from them."""

    expected: str | None
    gemms: pd.DataFrame
    tails_ns: int
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def mismatches(self) -> pd.DataFrame:
        if "verdict" not in self.gemms:
            return self.gemms.iloc[0:0]
        return self.gemms[(self.gemms["verdict"] == "FALLBACK") & ~self.gemms["allowed"]]

    @property
    def allowed(self) -> pd.DataFrame:
        if "verdict" not in self.gemms:
            return self.gemms.iloc[0:0]
        return self.gemms[(self.gemms["verdict"] == "FALLBACK") & self.gemms["allowed"]]

    @property
    def failed(self) -> bool:
        """The check fails on a non-allowed FALLBACK, or when a recipe was asked for and no GEMM ran."""
        return self.expected is not None and (len(self.mismatches) > 0 or len(self.gemms) == 0)


def check(trace: Trace, expect: str | None = None, allow: tuple[str, ...] = ()) -> Verification:
    """Verdict per GEMM launch against `expect` (or the recipe the run recorded)."""
    if trace.kernels.empty:
        raise InputError(
            f"{trace.path} holds no GPU kernels: was it captured with --trace=cuda, on a GPU?"
        )
    expected = resolve_expected(trace, expect)
    all_launches = launches(trace)
    gemms = all_launches[all_launches["role"] == "gemm"].reset_index(drop=True)
    tails_ns = int(all_launches.loc[all_launches["role"] == "gemm-tail", "duration_ns"].sum())
    gemms["origin"] = [
        "te" if via_te or isinstance(module, str) else "outside-te"
        for via_te, module in zip(gemms["via_te"], gemms["te_module"])
    ]
    if expected is not None:
        sm = _sm(trace)
        gemms["expected"] = expected
        gemms["verdict"] = [verdict(p, expected, sm) for p in gemms["precision"]]
        gemms["allowed"] = [
            v == "FALLBACK" and _matches(allow, row)
            for v, row in zip(gemms["verdict"], gemms.itertuples(index=False))
        ]
    result = Verification(expected=expected, gemms=gemms, tails_ns=tails_ns)
    result.summary = summarize(gemms, expected)
    return result


def _matches(patterns: tuple[str, ...], row) -> bool:
    """An --allow pattern (shell-style, case-sensitive) matches the kernel name, the module label
    (a TE module, or "(outside TE)"), or any NVTX range around the launch (e.g. '*lm_head*')."""
    subjects = [row.name, module_label(row), *row.ranges]
    return any(fnmatch.fnmatchcase(s, p) for p in patterns for s in subjects)


def module_label(row) -> str:
    if isinstance(row.te_module, str):
        return row.te_module
    return "(TE, module unknown)" if row.origin == "te" else "(outside TE)"


def summarize(gemms: pd.DataFrame, expected: str | None) -> pd.DataFrame:
    """Per module and pass: GEMM launches, GEMM kernel time, and with a recipe the share of that
    time that ran at the expected precision, plus verdict counts."""
    columns = ["module", "pass", "gemms", "gemm_time_ns"]
    if gemms.empty:
        return pd.DataFrame(columns=columns)
    g = gemms.assign(
        module=[module_label(r) for r in gemms.itertuples(index=False)],
        **{"pass": gemms["te_pass"].fillna("?")},
    )
    grouped = g.groupby(["module", "pass"], sort=False)
    out = grouped.agg(gemms=("duration_ns", "size"), gemm_time_ns=("duration_ns", "sum"))
    if expected is not None:
        ok_time = g["duration_ns"].where(g["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), 0)
        out["expected_time_share"] = ok_time.groupby([g["module"], g["pass"]], sort=False).sum() / out["gemm_time_ns"]
        for v in ("OK", "FALLBACK", "EXPECTED-SUBSTITUTION", "UNKNOWN"):
            out[v.lower()] = (g["verdict"] == v).groupby([g["module"], g["pass"]], sort=False).sum()
        out["allowed"] = g["allowed"].groupby([g["module"], g["pass"]], sort=False).sum()
    return out.reset_index()
