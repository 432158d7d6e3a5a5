"""The figures a verdict states, computed once from a checked run: its GEMM launches and time, the
ranks, the launches and time per precision, the verdict counts, the share of GEMM time at the
expected precision and coverage (the GEMMs asked for high precision: where they are, their share
of GEMM time and what low precision could gain on them). The JSON summary (report.documents) and
the verdict block (report.verdict) both say these figures; neither computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from gemmscope.judging.judgement import Judgement

# A low precision's dense peak over BF16's, on Hopper and Blackwell (FP8 vs BF16, on paper): what
# running a GEMM in low precision instead of high could gain at most (coverage, the fallback
# finding), and the s of the Amdahl bound people ask about (the gemm-share finding).
ASSUMED_SPEEDUP = 2.0


@dataclass(frozen=True, eq=False)
class Coverage:
    """The GEMM launches checked against their own request that asked for high precision
    (Judgement.coverage): not a failure, what low precision does not cover."""

    gemm_launches: int
    time_ns: int
    time_share: float | None  # of all GEMM time; None without GEMM time
    low_precision_time_share: float | None  # GEMM time asked (by its own request) for low precision
    saved_at_most_ns: int  # the time low precision could save on them, at ASSUMED_SPEEDUP
    groups: pd.DataFrame  # coverage_groups


@dataclass(frozen=True, eq=False)
class VerdictFigures:
    """What a verdict says in numbers (module docstring); the verdict counts and what follows
    them only where the run was checked (Judgement.checked)."""

    gemm_launches: int
    gemm_time_ns: int
    ranks: list[int]  # the ranks that ran a GEMM, in order
    launches_by_precision: dict[str, int]  # most launches first
    time_by_precision: dict[str, int]  # GEMM kernel time per precision ("unknown" where none), most first
    verdicts: dict[str, int] | None = None  # launches per verdict, most first
    expected_time_share: float | None = None  # of checked GEMM time, at the expected precision
    unchecked_gemm_launches: int = 0  # with no verdict
    unjudged_gemm_launches: int = 0  # Judgement.unjudged
    mismatches: int = 0
    allowed: int = 0
    coverage: Coverage | None = None  # checked each against its own request (no --expect)
    note: str | None = None  # why no GEMM time is stated


def verdict_figures(result: Judgement) -> VerdictFigures:
    """The figures of `result` (module docstring)."""
    g = result.gemms
    time = g.groupby(g["precision"].fillna("unknown"))["duration_ns"].sum().sort_values(ascending=False)
    ran = VerdictFigures(
        gemm_launches=len(g),
        gemm_time_ns=int(g["duration_ns"].sum()) if len(g) else 0,
        ranks=sorted(int(r) for r in g["rank"].dropna().unique()) if len(g) else [],
        launches_by_precision={k: int(v) for k, v in g["precision"].value_counts().items()} if len(g) else {},
        time_by_precision={k: int(v) for k, v in time.items()},
    )
    if not result.checked:
        return replace(ran, note=None if len(g) else "no GEMM kernel in this trace")
    checked = g[g["verdict"].notna()] if len(g) else g
    total = int(checked["duration_ns"].sum()) if len(g) else 0
    ok = checked.loc[checked["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), "duration_ns"].sum() if len(g) else 0
    return replace(
        ran,
        verdicts={k: int(v) for k, v in g["verdict"].value_counts().items()} if len(g) else {},
        expected_time_share=float(ok / total) if total else None,
        unchecked_gemm_launches=len(g) - len(checked),
        unjudged_gemm_launches=len(result.unjudged),
        mismatches=len(result.mismatches),
        allowed=len(result.allowed),
        coverage=None if result.expect_given else coverage(result),
        note=None if len(g) else f"no GEMM kernel ran: nothing ran at {' or '.join(result.expected_recipes)}",
    )


def coverage(result: Judgement) -> Coverage:
    """Coverage of a run checked each GEMM against its own request (Coverage)."""
    g = result.gemms
    high = result.coverage
    total = int(g["duration_ns"].sum())
    own = g[g["requested"].notna() & g["expected"].notna()] if "expected" in g else g.iloc[0:0]
    low = own.loc[~own["asked_high"], "duration_ns"].sum()
    high_ns = int(high["duration_ns"].sum())
    return Coverage(gemm_launches=len(high), time_ns=high_ns, time_share=high_ns / total if total else None,
                    low_precision_time_share=float(low / total) if total else None,
                    saved_at_most_ns=int(high_ns * (1 - 1 / ASSUMED_SPEEDUP)), groups=coverage_groups(result))


def coverage_groups(result: Judgement) -> pd.DataFrame:
    """The GEMMs asked for high precision (Judgement.coverage) per layer × module × what was
    asked (and why, where the run recorded why: `why`, Judgement's request_cause): the passes,
    launches, time and share of all GEMM time, in layer order."""
    g = result.gemms
    columns = ["layer", "layer_number", "module", "asked", "passes", "launches", "time_ns", "share"]
    high = result.coverage
    if high.empty:
        return pd.DataFrame(columns=columns)
    keys = ["layer", "layer_number", "module", "expected"]
    if high["request_cause"].notna().any():
        high = high.assign(why=high["request_cause"])
        keys.append("why")
        columns.append("why")
    out = high.groupby(keys, dropna=False, sort=False).agg(
        passes=("te_pass", lambda p: "+".join(dict.fromkeys(p.fillna("?")))),
        launches=("duration_ns", "size"), time_ns=("duration_ns", "sum")).reset_index()
    out = out.rename(columns={"expected": "asked"})
    out["share"] = out["time_ns"] / g["duration_ns"].sum()
    return out.sort_values(["layer_number", "layer"], na_position="last", ignore_index=True)[columns]
