"""The tables of checked traces as people read them (milliseconds, shares in %, blank where
nothing ran), for every format."""

from __future__ import annotations

import pandas as pd

from gemmscope.diagnosing.diagnosis import CATEGORIES, Diagnosis
from gemmscope.diagnosing.findings import Finding
from gemmscope.diagnosing.steps import described
from gemmscope.judging.figures import coverage_groups
from gemmscope.judging.judgement import Judgement
from gemmscope.report.model import count

# Section titles, the same in every format.
RANGES_TITLE = "Ranges checked (--expect-map)"
SUMMARY_TITLE = "GEMMs per module and pass"
MISMATCHES_TITLE = "Mismatches (requested precision did not run)"
ALLOWED_TITLE = "Allowed mismatches"
RANKS_TITLE = "Ranks that ran other kernels than the rest"
UNREADABLE_TITLE = "Traces that could not be read (the others are checked)"
FINDINGS_TITLE = "Findings, most time at stake first"
UNJUDGED_TITLE = "Not checked: GEMMs with nothing to judge them against (--expect or --allow them)"
LAUNCHES_TITLE = "Every GEMM launch"


def breakdown_frame(breakdown: pd.DataFrame) -> pd.DataFrame:
    """The per-rank breakdown for people: milliseconds and shares."""
    out = pd.DataFrame({"rank": breakdown["rank"], "window_ms": breakdown["window_ns"] / 1e6,
                        "idle": (breakdown["idle_share"] * 100).round(1).astype(str) + " %",
                        "launches": breakdown["kernel_launches"]})
    for category in CATEGORIES:
        out[f"{category}_ms"] = breakdown[f"{category}_ns"] / 1e6
    return out


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    """The findings, most time at stake first: each one's code, its time at stake and what it says."""
    return pd.DataFrame({"finding": [f["code"] for f in findings],
                         "time at stake ms": [f"{f['explains_ns'] / 1e6:.3f}" for f in findings],
                         "what it says": [f["statement"] for f in findings]})


def summary_frame(result: Judgement) -> pd.DataFrame:
    s = result.summary.copy()
    if s.empty:
        return s
    s["gemm_time_ms"] = s.pop("gemm_time_ns") / 1e6
    if "expected_time_share" in s:
        s["expected_time_share"] = (s["expected_time_share"] * 100).round(1).astype(str) + " %"
    return s


def ranges_table(ranges: pd.DataFrame) -> pd.DataFrame:
    """The mapped ranges (verify's `ranges_checked`), a range that ran no GEMM with no time and
    no share, not 0."""
    ran = ranges["gemms"] > 0
    return ranges.assign(gemm_time_ns=ranges["gemm_time_ns"].astype("Int64").where(ran),
                         expected_time_share=ranges["expected_time_share"].where(ran))


def ranges_frame(ranges: pd.DataFrame) -> pd.DataFrame:
    """The mapped ranges for people: milliseconds and shares."""
    table = ranges_table(ranges)
    timed = table["gemm_time_ns"].notna()
    return pd.DataFrame({
        "range": table["range"].fillna("(no range matches " + table["pattern"] + ")"),
        "expected": table["expected"],
        "instances": table["instances"],
        "gemms": table["gemms"],
        "gemm_ms": table["gemm_time_ns"] / 1e6,
        "at_expected": ((table["expected_time_share"] * 100).round(1).astype(str) + " %").where(timed),
        "fallbacks": table["fallbacks"],
        "verdict": table["verdict"],
    })


def mismatch_groups(result: Judgement) -> pd.DataFrame:
    """The layer × module × pass × kernel groups whose requested precision did not run, allowed
    ones included (`allowed` says which)."""
    return result.groups[result.groups["verdict"] == "FALLBACK"]


def differing_ranks(result: Judgement) -> pd.DataFrame:
    """The layer × module × pass where some ranks ran other kernels than the rest."""
    comparison = result.rank_comparison
    return comparison[comparison["differing_ranks"].map(len) > 0]


def mismatch_frame(result: Judgement, allowed: bool) -> pd.DataFrame:
    """Mismatches grouped by layer × module × pass × kernel, with counts."""
    groups = mismatch_groups(result)
    rows = groups[groups["allowed"] == allowed]
    return pd.DataFrame(
        {
            "layer": rows["layer"],
            "module": rows["module"],
            "pass": rows["pass"],
            "kernel": rows["kernel"],
            **({"expected": rows["expected"]} if result.expect_map else {}),
            "precision": rows["precision"],
            "requested": rows["requested"],
            "cause": rows["cause"],
            "launches": rows["launches"],
            "ranks": rows["ranks"],
            "time_ms": rows["time_ns"] / 1e6,
        }
    )


# What each cause of a FALLBACK means (verify's `cause`; its module docstring says how each is
# told), the words every format shows: the one place they are written.
CAUSES = {
    "kernel-differs": "TE was handed the requested precision and a kernel of another precision ran",
    "outside-te": "these GEMMs ran outside TE (a plain torch.nn.Linear, say)",
    "no-record": "nothing recorded what TE was handed (a trace made without gemmscope's hook)",
    "emulated": ("torchao emulates these float8 GEMMs on purpose (Float8LinearConfig.emulate, for CI and "
                 "debugging): an FP32 GEMM of the dequantized operands, not a fallback; no float8 speed"),
}
# A no-record GEMM in a run the hook did record: a call the hook does not wrap.
_NO_RECORD_WITH_HOOK = ("gemmscope's hook recorded this run but not these GEMM calls (a TE entry point it "
                        "does not wrap, or an older hook that recorded only the autocast regions)")
# `requested-<recipe>`: the GEMMs asked for another recipe than the one expected of them.
_REQUESTED = ("these GEMMs asked for {handed} (TE was handed {handed} operands, or a GEMM outside TE had them), "
              "not {expected}{why}")
_HIGH_PRECISIONS = ("bf16", "fp16", "fp32")


# `backward-override`: the backward GEMMs of a recipe with a backward_override (its `request_cause`).
_BACKWARD_OVERRIDE = ("these backward GEMMs asked for high precision, not {expected}: the recipe's {why} runs the "
                      "backward GEMMs on high-precision or dequantized operands")


# `module-recipe`: a module whose own recipe asked another (Megatron-Core's quant_recipe; its `request_cause`).
_MODULE_RECIPE = "these GEMMs asked for what their module's own recipe asked, not {expected}: {why}"


def cause_meaning(cause: str, expected: str | None, hook_recorded: bool, why: str | None = None) -> str:
    """What a FALLBACK's cause says, for GEMMs expected to run `expected` (`why`: their
    request_cause, where the run recorded one)."""
    if cause == "no-record" and hook_recorded:
        return _NO_RECORD_WITH_HOOK
    if cause == "backward-override":
        return _BACKWARD_OVERRIDE.format(expected=expected, why=why or "backward_override")
    if cause == "module-recipe":
        return _MODULE_RECIPE.format(expected=expected, why=why or "a per-module recipe")
    handed = cause.removeprefix("requested-")
    if handed == cause:
        return CAUSES.get(cause, cause)
    why = (": a layer outside autocast, or a recipe that keeps these GEMMs in high precision"
           if handed in _HIGH_PRECISIONS else "")
    return _REQUESTED.format(handed=handed, expected=expected, why=why)


def cause_meanings(frame: pd.DataFrame, result: Judgement) -> dict[str, str]:
    """What each cause in `frame` (rows with `cause`, and `expected` under --expect-map) means:
    against the recipe its rows expected where they expected one, else "the expected"."""
    meanings = {}
    for cause, rows in frame.groupby(frame["cause"].fillna("?"), sort=False):
        expected = result.expected
        if result.expect_map:
            recipes = rows["expected"].unique()
            expected = recipes[0] if len(recipes) == 1 else "the expected"
        why = rows["request_cause"].dropna() if "request_cause" in rows else pd.Series(dtype="object")
        meanings[str(cause)] = cause_meaning(str(cause), expected, result.hook_recorded,
                                             why.iloc[0] if len(why) else None)
    return meanings


def launches_frame(result: Judgement) -> pd.DataFrame:
    """Every GEMM launch for people: its start, rank, where it ran, its pass, kernel, precision,
    duration and (where checked) its verdict and cause."""
    g = result.gemms
    frame = pd.DataFrame({"start ms": (g["start"] / 1e6).map("{:.3f}".format), "rank": g["rank"],
                          "layer (or module)": g["layer"].where(g["layer"].notna(), g["module"]),
                          "pass": g["te_pass"], "kernel": g["name"],
                          "precision": g["precision"].fillna("unknown"), "µs": g["duration_ns"] / 1e3})
    if result.expect_map:
        frame["expected"] = g["expected"]
    if result.checked:
        frame["verdict"], frame["cause"] = g["verdict"], g["cause"]
    return frame


def coverage_frame(result: Judgement) -> pd.DataFrame:
    """The GEMMs asked for high precision (coverage_groups) for people: milliseconds and shares."""
    groups = coverage_groups(result)
    frame = pd.DataFrame({"layer": groups["layer"], "module": groups["module"], "passes": groups["passes"],
                          "asked": groups["asked"], "launches": groups["launches"], "time_ms": groups["time_ns"] / 1e6,
                          "of GEMM time": (groups["share"].astype(float) * 100).round(1).astype(str) + " %"})
    if "why" in groups:
        frame["why"] = groups["why"]
    return frame


def ranks_frame(result: Judgement) -> pd.DataFrame:
    """Per layer, module and pass where some ranks ran other kernels: what most ranks ran, and
    which ranks differ."""
    differing = differing_ranks(result)
    return pd.DataFrame({"layer": differing["layer"], "module": differing["module"], "pass": differing["pass"],
                         "kernels": differing["kernels"], "ranks": differing["ranks"],
                         "ranks that differ": differing["differing_ranks"].map(lambda r: ", ".join(map(str, r)))})


def unjudged_frame(result: Judgement) -> pd.DataFrame:
    """The GEMMs that leave the run not fully checked (Judgement.unjudged), grouped by layer ×
    module × pass × kernel, with counts."""
    g = result.unjudged.assign(**{"pass": result.unjudged["te_pass"], "kernel": result.unjudged["name"]})
    keys = ["layer", "module", "pass", "kernel", "precision"]
    grouped = g.groupby(keys, dropna=False, sort=False).agg(
        launches=("duration_ns", "size"), time_ns=("duration_ns", "sum")).reset_index()
    return grouped.assign(time_ms=grouped.pop("time_ns") / 1e6)


STEPS_TITLE = "Steps, per rank (on the GPU: from the first kernel a step launched to the next step's)"


def steps_frame(step_times: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step (Diagnosis.step_times) for people: the step's time, its idle share and
    where its busy time went, in milliseconds."""
    out = pd.DataFrame({"rank": step_times["rank"].astype(str), "step": step_times["step"].astype("int64"),
                        "step ms": step_times["window_ns"] / 1e6,
                        "idle": (100 * step_times["idle_ns"] / step_times["window_ns"]).round(1).astype(str) + " %"})
    for category, label in _STEP_CATEGORIES.items():
        out[f"{label} ms"] = step_times[f"{category}_ns"] / 1e6
    return out


# The step table's categories, named short enough for a terminal's width.
_STEP_CATEGORIES = {"gemm": "gemm", "gemm-fallback": "fallback", "quantize": "quantize", "attention": "attn",
                    "communication": "comm", "other": "other"}


def breakdown_window(diagnosis: Diagnosis) -> str:
    """Which part of the run the breakdown covers: the steps taken (and what they are), or the
    whole trace, saying why."""
    if diagnosis.step_range:
        return f"steps: {described(diagnosis.step_range)}, after the first"
    return f"the whole trace: {diagnosis.no_steps}"


def breakdown_title(diagnosis: Diagnosis) -> str:
    return f"Where the GPU time went ({breakdown_window(diagnosis)})"


def several_ranks(result: Judgement) -> bool:
    return result.gemms["rank"].nunique() > 1


def autotuning_note(result: Judgement) -> str:
    a = result.job.autotuning
    return (f"Left out of the check: {count(len(a), 'GEMM launch', 'GEMM launches')} "
            f"({a['duration_ns'].sum() / 1e6:.3f} ms) torch.compile's max-autotune made, benchmarking candidates")
