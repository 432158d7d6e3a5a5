"""Requested vs dispatched precision: a verdict for every GEMM kernel launch of a trace.

Verdicts:
- ``OK``: the kernel ran at a precision the recipe asks for;
- ``FALLBACK``: it ran at another precision (e.g. FP8 asked, a BF16 kernel ran);
- ``EXPECTED-SUBSTITUTION``: another precision by TE's design (FP8 block scaling runs as MXFP8
  on sm100+);
- ``UNKNOWN``: the kernel name does not say its precision.
A FALLBACK that matches an ``--allow`` pattern keeps its verdict and is marked ``allowed``.

Where gemmscope's hook recorded what TE was handed, a FALLBACK says why (``cause``): TE was handed
operands of another precision (``requested-bf16``: a layer outside autocast, or a recipe that
keeps this GEMM in high precision), TE was handed the requested precision and the kernel still
ran another (``kernel-differs``), the GEMM ran outside TE (``outside-te``), or nothing recorded it
(``no-record``).

Several traces (one per rank, or one holding every rank) are checked together: each GEMM keeps
its trace and rank, and `rank_comparison` says whether all ranks ran the same kernels for the
same GEMM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gemmscope import te_ranges
from gemmscope.errors import InputError
from gemmscope.loading import LoadedTrace, attribute
from gemmscope.trace_parser import EnclosingRanges, Trace, name_matches

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
# A rank named in a per-rank trace's file name (nsys -o rank%q{RANK}, trace_rank3.sqlite, ...).
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def verdict(precision: str | None, recipe: str, sm: int | None) -> str:
    if precision is None or precision == "unknown":
        return "UNKNOWN"
    if precision in RECIPE_PRECISIONS[recipe]:
        return "OK"
    min_sm = EXPECTED_SUBSTITUTIONS.get((recipe, precision))
    if min_sm is not None and sm is not None and sm >= min_sm:
        return "EXPECTED-SUBSTITUTION"
    return "FALLBACK"


def recorded_recipes(traces: Sequence[Trace]) -> list[str]:
    """Recipes of the enabled `te.autocast` regions the autocast hook recorded, in order seen."""
    seen: list[str] = []
    for trace in traces:
        names = trace.nvtx["name"].dropna().unique()
        # parsed one by one: a handful of names per trace, and a run may have thousands of traces
        regions = [te_ranges.parse(name) for name in names if name.startswith(te_ranges.AUTOCAST_PREFIX)]
        for cls in (region["recipe_class"] for region in regions if region["kind"] == te_ranges.AUTOCAST):
            recipe = RECIPE_BY_CLASS.get(cls, cls)
            if cls != "disabled" and recipe not in seen:
                seen.append(recipe)
    return seen


def resolve_expected(traces: Sequence[Trace], expect: str | None) -> str | None:
    """The recipe to check against: --expect, else the one recipe the run recorded, else None."""
    if expect is not None:
        if expect not in RECIPES:
            raise InputError(f"unknown recipe {expect!r}: choose from {', '.join(RECIPES)}")
        return expect
    recorded = recorded_recipes(traces)
    unknown = [r for r in recorded if r not in RECIPES]
    if unknown:
        raise InputError(f"the run used a recipe gemmscope does not know ({', '.join(unknown)}): pass --expect")
    if len(recorded) > 1:
        raise InputError(f"the run used several recipes ({', '.join(recorded)}): pass --expect RECIPE")
    return recorded[0] if recorded else None


def _sm(traces: Sequence[Trace]) -> int | None:
    majors = [(g["cc_major"], g["cc_minor"]) for t in traces for g in t.meta["gpus"] if pd.notna(g.get("cc_major"))]
    return int(majors[0][0]) * 10 + int(majors[0][1]) if majors else None


@dataclass
class Verification:
    """GEMM launches with verdicts, and the summaries built from them."""

    expected: str | None
    gemms: pd.DataFrame
    tails_ns: int
    traces: list[Trace] = field(default_factory=list)
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)  # every launch; gemms' kernel_row indexes it
    ranges: EnclosingRanges = field(default_factory=EnclosingRanges.empty)  # NVTX ranges around each kernel_row
    memops: pd.DataFrame = field(default_factory=pd.DataFrame)  # memcpy / memset, with trace and rank
    unreadable: list[dict] = field(default_factory=list)  # traces that could not be read: trace, rank, error
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    rank_comparison: pd.DataFrame = field(default_factory=pd.DataFrame)

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
        """The check fails on a non-allowed FALLBACK, when a recipe was asked for and no GEMM ran,
        or when a trace could not be read."""
        checked = self.expected is not None and (len(self.mismatches) > 0 or len(self.gemms) == 0)
        return checked or bool(self.unreadable)


def check(traces: Trace | LoadedTrace | Sequence[Trace | LoadedTrace], expect: str | None = None,
          allow: tuple[str, ...] = ()) -> Verification:
    """Verdict per GEMM launch of one or several traces (read here, or already loaded by
    `loading.load` in workers) against `expect` (or the recipe the run recorded). A trace that
    could not be read is reported in `unreadable` and the others are checked; when none could,
    the first reason is the error."""
    items = [traces] if isinstance(traces, (Trace, LoadedTrace)) else list(traces)
    loaded = [item if isinstance(item, LoadedTrace) else attribute(item) for item in items]
    usable = [item for item in loaded if item.error is None]
    if not usable:
        raise InputError(loaded[0].error if loaded else "no trace to check")
    unreadable = [{"trace": item.path.name, "rank": _rank_in_name(item.path), "error": item.error}
                  for item in loaded if item.error is not None]
    traces = [item.trace for item in usable]
    expected = resolve_expected(traces, expect)
    kernel_parts, memop_parts = [], []
    for index, item in enumerate(usable):
        trace, all_launches = item.trace, item.launches
        # a column of one Python string, not pandas' string type (checked element by element)
        all_launches["trace"] = pd.Series(trace.path.name, index=all_launches.index, dtype=object)
        all_launches["rank"] = _fill_ranks(all_launches, trace, index, len(traces))
        kernel_parts.append(all_launches)
        rank_of_pid = all_launches.drop_duplicates("global_pid").set_index("global_pid")["rank"]
        memop_parts.append(trace.memops.assign(trace=trace.path.name,
                                               rank=trace.memops["global_pid"].map(rank_of_pid).astype("Int64")))
    # one trace's launches as they are: a copy of a long trace's would double what it holds
    all_kernels = kernel_parts[0] if len(kernel_parts) == 1 else pd.concat(kernel_parts, ignore_index=True)
    offsets = np.cumsum([0] + [len(part) for part in kernel_parts[:-1]])
    ranges = EnclosingRanges.concat([item.ranges for item in usable], offsets)
    memops = pd.concat(memop_parts, ignore_index=True)
    tails_ns = int(all_kernels.loc[all_kernels["role"] == "gemm-tail", "duration_ns"].sum())
    gemms = all_kernels[all_kernels["role"] == "gemm"].rename_axis("kernel_row").reset_index()
    is_te = gemms["via_te"].to_numpy(dtype=bool) | gemms["te_module"].notna().to_numpy()
    gemms["origin"] = np.where(is_te, "te", "outside-te")
    gemms["module"] = module_labels(gemms)
    if expected is not None:
        sm = _sm(traces)
        gemms["expected"] = expected
        verdicts = {p: verdict(p, expected, sm) for p in gemms["precision"].dropna().unique()}
        gemms["verdict"] = gemms["precision"].map(verdicts).fillna("UNKNOWN")
        gemms["cause"] = _causes(gemms, expected)
        gemms["allowed"] = (gemms["verdict"] == "FALLBACK").to_numpy() & allowed(allow, gemms, ranges)
    result = Verification(expected=expected, gemms=gemms, tails_ns=tails_ns, traces=traces,
                          kernels=all_kernels, ranges=ranges, memops=memops, unreadable=unreadable)
    result.summary = summarize(gemms, expected)
    result.groups = group(gemms)
    result.rank_comparison = compare_ranks(gemms)
    return result


def _rank_in_name(path) -> int | None:
    named = _RANK_IN_NAME.search(path.name)
    return int(named[1]) if named else None


def _fill_ranks(trace_launches: pd.DataFrame, trace: Trace, index: int, count: int) -> pd.Series:
    """The rank the hook's mark named; for a trace of one process without it, the rank in the
    file's name, or its place among several files."""
    rank = trace_launches["rank"].astype("Int64")
    if rank.notna().all() or trace_launches["global_pid"].nunique() > 1:
        return rank
    named = _rank_in_name(trace.path)
    fallback = named if named is not None else (index if count > 1 else pd.NA)
    return rank.fillna(fallback)


def _causes(gemms: pd.DataFrame, expected: str) -> np.ndarray:
    """Why a FALLBACK ran another precision (module docstring); None for other verdicts."""
    wanted = RECIPE_PRECISIONS[expected]
    requested = gemms["requested"]
    cause = np.select(
        [gemms["origin"] == "outside-te", requested.isna(), ~requested.isin(wanted)],
        ["outside-te", "no-record", "requested-" + requested.fillna("").astype(str)],
        default="kernel-differs",
    )
    return np.where(gemms["verdict"] == "FALLBACK", cause, None)


def allowed(patterns: Sequence[str], gemms: pd.DataFrame, ranges: EnclosingRanges) -> np.ndarray:
    """Per GEMM launch, whether an --allow pattern (shell-style, case-sensitive) matches its
    kernel name, its module label (a TE module, or "(outside TE)"), its layer, or any NVTX range
    around the launch (e.g. '*lm_head*')."""
    if not patterns or gemms.empty:
        return np.zeros(len(gemms), dtype=bool)
    hit = ranges.any_matching(patterns, gemms["kernel_row"].to_numpy())
    for column in ("name", "module", "layer"):
        hit |= name_matches(gemms[column], patterns)
    return hit


def module_labels(gemms: pd.DataFrame) -> pd.Series:
    """The TE module of each GEMM, or "(TE, module unknown)" / "(outside TE)"."""
    unnamed = np.where(gemms["origin"] == "te", "(TE, module unknown)", "(outside TE)")
    return gemms["te_module"].where(gemms["te_module"].notna(), pd.Series(unnamed, index=gemms.index))


def group(gemms: pd.DataFrame) -> pd.DataFrame:
    """GEMM launches grouped by layer × module × pass × kernel (and verdict and cause, where
    checked), with launch counts, ranks and kernel time: a 100-layer, 3-step run in one screen."""
    keys = ["layer", "module", "pass", "kernel", "precision"]
    keys += [c for c in ("requested", "verdict", "cause", "allowed") if c in gemms]
    if gemms.empty:
        return pd.DataFrame(columns=[*keys, "launches", "ranks", "time_ns"])
    g = gemms.assign(**{"pass": gemms["te_pass"], "kernel": gemms["name"]})
    grouped = g.groupby(keys, dropna=False, sort=False)
    out = grouped.agg(launches=("duration_ns", "size"), ranks=("rank", "nunique"),
                      time_ns=("duration_ns", "sum"))
    return out.reset_index()


def compare_ranks(gemms: pd.DataFrame) -> pd.DataFrame:
    """With several ranks: per layer × module × pass, the kernels each rank ran, and which ranks
    differ from the most common set. Empty with one rank."""
    ranked = gemms[gemms["rank"].notna()]
    if ranked["rank"].nunique() < 2:
        return pd.DataFrame(columns=["layer", "module", "pass", "ranks", "kernels", "differing_ranks"])
    keys = ["layer", "module", "pass"]
    r = ranked.assign(**{"pass": ranked["te_pass"]})
    per_rank = (r.groupby([*keys, "rank"], dropna=False, sort=False)["name"]
                .agg(lambda names: " + ".join(sorted(set(names)))).rename("kernels").reset_index())
    rows = []
    for key, part in per_rank.groupby(keys, dropna=False, sort=False):
        common = part["kernels"].mode().iloc[0]
        differing = part.loc[part["kernels"] != common, "rank"].tolist()
        rows.append((*key, part["rank"].nunique(), common, differing))
    return pd.DataFrame(rows, columns=[*keys, "ranks", "kernels", "differing_ranks"])


def summarize(gemms: pd.DataFrame, expected: str | None) -> pd.DataFrame:
    """Per module and pass: GEMM launches, GEMM kernel time, and with a recipe the share of that
    time that ran at the expected precision, plus verdict counts."""
    columns = ["module", "pass", "gemms", "gemm_time_ns"]
    if gemms.empty:
        return pd.DataFrame(columns=columns)
    g = gemms.assign(**{"pass": gemms["te_pass"].fillna("?")})
    grouped = g.groupby(["module", "pass"], sort=False)
    out = grouped.agg(gemms=("duration_ns", "size"), gemm_time_ns=("duration_ns", "sum"))
    if expected is not None:
        ok_time = g["duration_ns"].where(g["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), 0)
        out["expected_time_share"] = ok_time.groupby([g["module"], g["pass"]], sort=False).sum() / out["gemm_time_ns"]
        for v in ("OK", "FALLBACK", "EXPECTED-SUBSTITUTION", "UNKNOWN"):
            out[v.lower()] = (g["verdict"] == v).groupby([g["module"], g["pass"]], sort=False).sum()
        out["allowed"] = g["allowed"].groupby([g["module"], g["pass"]], sort=False).sum()
    return out.reset_index()
