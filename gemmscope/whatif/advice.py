"""Per group: the time now, the time at each recipe (the measured ratio of that recipe to the
group's own recipe, times the group's time now per step), and what to change, time at stake first.

A group's time at a recipe is, per module shape, the runner's GEMM and quantization kernel time
at that recipe (the module's forward and backward inside its timed range), each scaled to the
program by the same kind of time at the recipe now: its GEMM time now / the runner's GEMM time
now, its quantization time now / the runner's (the GEMM scale where either quantizes nothing).
GEMM kernels are the same in both and scale for clocks or another GPU; quantization differs by
how a program does it (weights kept quantized between steps, delayed scaling's amax work batched
per step: an HF Llama on accelerate's TE backend quantized at half the runner's cost per module,
and a ratio of totals put its BF16 time 18 % low). A shape that was not measured at either leaves
the group's figure missing, never zero. Where the run itself ran the same module shape at
that recipe, in another group of the same module pattern, its time there per GEMM is the figure
(_from_the_run): the recommendation says "in this run", per_recipe's `source` names the group.
The recommendation compares the group's recipe now with the one it could switch to in this program: BF16 for a low-precision group, the
program's own low-precision recipe for a BF16 group (the best measured one where the program ran
none). A change smaller than NOISE of the time now is no change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gemmscope.judging.judgement import verdict
from gemmscope.judging.recipes import RECIPES
from gemmscope.whatif.groups import RunGroups
from gemmscope.whatif.measure import plan

# Below this share of the time now, a predicted change is within run-to-run noise (the runner's
# CUDA-event IQRs are 1-3 % of a module's time).
NOISE = 0.05
NUMERICS = ("Numerics: a precision change can change convergence; first and last layers are usually kept in BF16 "
            "for stability. whatif measures speed, not convergence: check the loss curve after applying a change.")


@dataclass
class Advice:
    """The groups with their figures at each recipe, and the recommendations, most time at stake first."""

    per_recipe: pd.DataFrame  # group, recipe, status, reason, ratio (recipe / now), predicted_ms
    groups: pd.DataFrame  # RunGroups.groups plus target, target_ms, speedup, stake_ms, action, text
    recommendations: pd.DataFrame  # the groups whose action is a change or a keep worth saying, stake first
    device: dict  # the GPU measured on
    other_gpu: str | None  # one line when the measurement ran on another GPU than the trace


def _label(recipe: str) -> str:
    return {"bf16": "BF16", "fp8-current": "FP8", "fp8-delayed": "FP8 (delayed scaling)",
            "fp8-block": "FP8 (block scaling)", "fp8-tensorwise": "FP8", "fp8-rowwise": "FP8 (row-wise)"}.get(
        recipe, recipe.upper())


def advise(run: RunGroups, results: pd.DataFrame, device: dict) -> Advice:
    """Join the measurement (measure.read_measurement) to the run's groups (module docstring)."""
    ok = results[(results["status"] == "ok") & results["gemm_ms"].notna()]
    measured = ok.assign(measured_gemm_ms=ok["gemm_ms"], measured_quant_ms=ok["quant_ms"].fillna(0))[
        ["group", "m", "k", "n", "recipe", "measured_gemm_ms", "measured_quant_ms", "kernel_precision"]]
    shapes = run.shapes.rename(columns={"tokens": "m", "in_features": "k", "out_features": "n"})
    shapes = shapes.merge(run.groups[["group", "now_recipe"]], on="group")
    now = measured.rename(columns={"recipe": "now_recipe", "measured_gemm_ms": "base_gemm_ms",
                                   "measured_quant_ms": "base_quant_ms"}).drop(columns="kernel_precision")
    for dim in ("m", "k", "n"):
        shapes[dim] = shapes[dim].astype("float64")
        now[dim] = now[dim].astype("float64")
        measured = measured.assign(**{dim: measured[dim].astype("float64")})
    shapes = shapes.merge(now, on=["group", "m", "k", "n", "now_recipe"], how="left")
    recipes = pd.DataFrame({"recipe": results["recipe"].unique()})
    grid = shapes.merge(recipes, how="cross").merge(measured, on=["group", "m", "k", "n", "recipe"], how="left")
    gemm_scale = (grid["gemm_ms"] / grid["base_gemm_ms"]).where(grid["base_gemm_ms"] > 0)
    quant_now = grid["now_ms"] - grid["gemm_ms"]
    quant_scale = (quant_now / grid["base_quant_ms"]).where((grid["base_quant_ms"] > 0) & (quant_now > 0), gemm_scale)
    scaled = grid["measured_gemm_ms"] * gemm_scale + grid["measured_quant_ms"] * quant_scale
    grid["predicted_ms"] = scaled.where(grid["recipe"] != grid["now_recipe"],
                                        grid["now_ms"].where(grid["measured_gemm_ms"].notna()))
    grid = _from_the_run(run, grid)
    per_recipe = (grid.assign(missing=grid["predicted_ms"].isna())
                  .groupby(["group", "recipe"], sort=False)
                  .agg(predicted_ms=("predicted_ms", "sum"), missing=("missing", "any"),
                       source=("source", "first")).reset_index())
    per_recipe.loc[per_recipe.pop("missing"), "predicted_ms"] = np.nan  # a shape not measured: no figure
    status = results.groupby(["group", "recipe"], sort=False).agg(
        status=("status", lambda s: "ok" if (s == "ok").all() else s[s != "ok"].iat[0]),
        reason=("reason", lambda r: r.dropna().iat[0] if r.notna().any() else None)).reset_index()
    per_recipe = per_recipe.merge(status, on=["group", "recipe"], how="left")
    per_recipe = per_recipe.merge(_kernel_verdicts(ok, device), on=["group", "recipe"], how="left")
    per_recipe = per_recipe.merge(run.groups[["group", "now_ms"]], on="group")
    per_recipe["ratio"] = per_recipe["now_ms"] / per_recipe["predicted_ms"]  # > 1: faster than now
    groups = _recommend(run, per_recipe)
    changes = groups[groups["action"].notna()].sort_values("stake_ms", ascending=False, ignore_index=True)
    trace_gpu = run.gpu
    sourced = per_recipe["source"].notna().any()
    other = (f"measured on {device.get('name')}, the trace ran on {trace_gpu}: the figures are this GPU's"
             + ("; those taken from the run's own groups are the trace's" if sourced else "")
             if trace_gpu and device.get("name") and device.get("name") != trace_gpu else None)
    return Advice(per_recipe=per_recipe, groups=groups, recommendations=changes, device=device, other_gpu=other)


def _from_the_run(run: RunGroups, grid: pd.DataFrame) -> pd.DataFrame:
    """Where the run itself ran a group's module shape at a recipe in another group of the same
    module pattern (Megatron's first and last layers in BF16, the middle ones in FP8), the time
    there per GEMM launch, not the runner's ratio: the program's own evidence of how it runs that
    module, quantization as it does it, included (a program that keeps its FP8 weights between
    steps quantizes less than the runner's module does). `source` names that group."""
    groups = run.groups[["group", "name", "pattern", "now_recipe"]]
    shapes = run.shapes.rename(columns={"tokens": "m", "in_features": "k", "out_features": "n"})
    ran = shapes.merge(groups, on="group").astype({"m": "float64", "k": "float64", "n": "float64"})
    ran = ran.assign(ms_per_gemm=ran["now_ms"] / ran["gemms_per_step"]).rename(
        columns={"now_recipe": "recipe", "group": "sibling", "name": "source"})
    ran = ran[["pattern", "m", "k", "n", "recipe", "sibling", "source", "ms_per_gemm"]].drop_duplicates(
        ["pattern", "m", "k", "n", "recipe"])
    keyed = grid.merge(groups[["group", "pattern"]], on="group", how="left")
    keyed = keyed.merge(ran, on=["pattern", "m", "k", "n", "recipe"], how="left")
    other = (keyed["sibling"].notna() & (keyed["sibling"] != keyed["group"])).to_numpy()
    grid = grid.copy()
    grid["source"] = np.where(other, keyed["source"], None)
    grid.loc[other, "predicted_ms"] = (keyed["ms_per_gemm"] * keyed["gemms_per_step"])[other].to_numpy()
    return grid


def _kernel_verdicts(ok: pd.DataFrame, device: dict) -> pd.DataFrame:
    """Per (group, recipe): the precision of the GEMM kernel that ran in the timed range (nsys's
    evidence) and, for a TE recipe, verify's verdict on it (a FALLBACK: the figure is not the
    recipe's)."""
    ran = ok.dropna(subset=["kernel_precision"]).drop_duplicates(["group", "recipe"])[
        ["group", "recipe", "kernel_precision"]]
    sm = int(device["sm"][2:]) if device.get("sm") else None
    ran["kernel_verdict"] = [verdict(p, r, sm) if r in RECIPES else None  # a few rows: one per group and recipe
                             for p, r in zip(ran["kernel_precision"], ran["recipe"])]
    return ran


def _recommend(run: RunGroups, per_recipe: pd.DataFrame) -> pd.DataFrame:
    groups = run.groups.copy()
    low = [r for r in run.recipes if r != "bf16"] or list(dict.fromkeys(groups.loc[groups["low_precision"],
                                                                                    "now_recipe"].dropna()))
    measured = per_recipe[per_recipe["predicted_ms"].notna() & (per_recipe["recipe"] != "bf16")]
    best = measured.sort_values("predicted_ms").drop_duplicates("group").set_index("group")["recipe"]
    program_recipe = low[0] if low else None
    groups["target"] = np.where(groups["low_precision"], "bf16",
                                program_recipe if program_recipe else groups["group"].map(best))
    target = groups[["group", "target"]].merge(per_recipe.rename(columns={"recipe": "target"}), on=["group", "target"],
                                               how="left")
    groups["target_ms"] = target["predicted_ms"].to_numpy()
    groups["target_status"] = target["status"].to_numpy()
    groups["target_source"] = target["source"].to_numpy()
    # a group the runner could not build has no result at all: the plan says why
    unbuildable = plan(run).dropna(subset=["unmeasurable"]).drop_duplicates("group").set_index("group")["unmeasurable"]
    groups["target_reason"] = target["reason"].where(target["reason"].notna(),
                                                     groups["group"].map(unbuildable)).to_numpy()
    groups["speedup"] = groups["now_ms"] / groups["target_ms"]  # > 1: the target is faster
    groups["stake_ms"] = (groups["now_ms"] - groups["target_ms"]).abs()
    gains = groups["target_ms"] < groups["now_ms"] * (1 - NOISE)
    losses = groups["target_ms"] > groups["now_ms"] * (1 + NOISE)
    unmeasured = groups["target_ms"].isna()
    now_label = groups["now_recipe"].fillna("bf16").map(_label)
    target_label = groups["target"].fillna("low precision").map(_label)
    name = groups["name"]
    speed = groups["speedup"].map(lambda s: f"{s:.2f}".rstrip("0").rstrip(".") + "×" if pd.notna(s) else "")
    # a measured figure is this GPU's ("here"); one another group of the run ran is the run's own
    # (which group: per_recipe's source)
    in_run = groups["target_source"].notna().to_numpy()
    sourced = np.where(in_run, " in this run", "")
    where = np.where(in_run, " in this run", " here")
    per_step = groups["stake_ms"].map(lambda ms: f"{ms:.2f} ms per step" if pd.notna(ms) else "")
    action = np.select([unmeasured.to_numpy(), gains.to_numpy(), losses.to_numpy()], ["unmeasured", "move", "keep"],
                       default="")
    groups["action"] = pd.Series(action, index=groups.index).replace("", None)  # None: within noise, no change
    groups["text"] = np.select(
        [unmeasured.to_numpy(), gains.to_numpy(), losses.to_numpy()],
        [name + ": not measured at " + target_label + groups["target_reason"].fillna("").map(
            lambda r: f" ({r})" if r else ""),
         "move " + name + " to " + target_label + " (" + speed + sourced + ", " + per_step + ")",
         "keep " + name + " in " + now_label + " (" + target_label + " " + speed + where + ", " + per_step
         + " lost)"],
        default="no change for " + name + ": " + target_label + " within " + f"{NOISE:.0%}" + " of now")
    groups.loc[groups["action"] == "unmeasured", "stake_ms"] = np.nan
    return groups
