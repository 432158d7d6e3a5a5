"""`gemmscope whatif`'s report: the same recommendations in the terminal (the top three first),
the JSON document (schemas/whatif.schema.json) and the HTML page, from one report model."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gemmscope.common.jsonable import frame_records, plain
from gemmscope.report.documents import SCHEMA_VERSION
from gemmscope.report.model import Fit, Report, Section, Table
from gemmscope.whatif.advice import NUMERICS, Advice
from gemmscope.whatif.changes import Changes
from gemmscope.whatif.groups import RunGroups

TITLE = "gemmscope whatif"
# What a run that was not measured says first, and the JSON's state.
MEASURED, NOT_MEASURED = "measured", "not-measured"
_GROUP_COLUMNS = {"name": "modules", "module_class": "class", "precision": "now", "calls_per_step": "calls",
                  "gemm_ms": "GEMM ms", "quant_ms": "quant ms", "now_ms": "ms/step"}


def _groups_table(run: RunGroups) -> pd.DataFrame:
    frame = run.groups[list(_GROUP_COLUMNS)].rename(columns=_GROUP_COLUMNS)
    return frame.round({"calls": 2, "GEMM ms": 3, "quant ms": 3, "ms/step": 3})


def _shapes_table(run: RunGroups, planned: pd.DataFrame) -> pd.DataFrame:
    """The shapes to time; a grouped module's m_splits (tokens per member GEMM) where there is one."""
    splits = ["m_splits"] if planned["m_splits"].notna().any() else []
    frame = planned[["name", "tokens", "in_features", "out_features", *splits, "kind", "unmeasurable"]]
    return frame.rename(columns={"name": "modules", "in_features": "in", "out_features": "out",
                                 "unmeasurable": "not measurable"})


def _section(title: str, frame: pd.DataFrame) -> Section:
    """A table section whose module names the terminal shortens in the middle to fit."""
    return Section(title, blocks=[Table(title, frame, fit=Fit(shorten={"modules": "layer"}))])


def listing_report(run: RunGroups, planned: pd.DataFrame, why: str, command: str) -> Report:
    """Without a GPU: the groups that would be measured, and the command that measures them."""
    measurable = planned[planned["unmeasurable"].isna()]
    to_time = len(measurable.drop_duplicates(["kind", "tokens", "in_features", "out_features", "m_splits"]))
    intro = [f"NOT MEASURED ({why}): the groups below would be timed on a GPU.",
             f"On a GPU machine, run: {command}",
             f"{len(run.groups)} groups of GEMMs, {to_time} distinct module shapes to time at "
             f"{', '.join(planned['recipes'].iat[0]) if len(planned) else 'no recipe'}; framework: {run.framework}; "
             f"{run.steps_note}.", *run.notes]
    sections = [_section("Groups: time per step now, from the trace", _groups_table(run)),
                _section("Module shapes to measure", _shapes_table(run, planned))]
    document = _document(run, NOT_MEASURED) | {
        "not_measured": why, "command": command, "shapes": frame_records(_shapes_table(run, planned))}
    return Report(title=TITLE, status=None, verdict=[], sections=sections, intro=intro, document=document)


def advice_report(run: RunGroups, advice: Advice, changes: Changes, written_to: str | None) -> Report:
    recs = advice.recommendations
    top = [f"{i + 1}. {text}" for i, text in enumerate(recs["text"].head(3))] or [
        "no change recommended: every measured group is within noise of its faster precision"]
    device = advice.device.get("name") or "an unknown GPU"
    intro = [f"MEASURED on {device}: {run.framework}; {run.steps_note}.", *top]
    intro += [advice.other_gpu] if advice.other_gpu else []
    intro += [*run.notes, NUMERICS]
    if written_to:
        intro.append(f"The change, as files to apply: {written_to}")
    recommendations = recs[["text", "now_ms", "target_ms", "stake_ms"]].rename(
        columns={"text": "recommendation", "now_ms": "now ms", "target_ms": "then ms", "stake_ms": "at stake ms"}
    ).round(3)
    figures = advice.per_recipe["predicted_ms"].round(3).astype(str) + advice.per_recipe["kernel_verdict"].map(
        lambda v: f" (kernel {v})" if v == "FALLBACK" else "")
    said = figures.where(advice.per_recipe["predicted_ms"].notna(),
                         advice.per_recipe["status"].fillna("not measured"))
    per_recipe = (advice.per_recipe.assign(said=said).pivot(index="group", columns="recipe", values="said")
                  .reindex(advice.groups["group"]))
    per_recipe.insert(0, "modules", advice.groups.set_index("group")["name"])
    per_recipe = per_recipe.reset_index(drop=True)
    total = run.groups["now_ms"].sum()
    predicted = (f"with the change as written: {changes.predicted_ms:.3f} ms per step of GEMMs and their quantization "
                 f"(now {total:.3f} ms)" if pd.notna(changes.predicted_ms) else
                 "with the change as written: not predicted (a module it changes was not measured)")
    change_lines = [*changes.lines, predicted, *[f"note: {n}" for n in changes.notes],
                    *[f"file: {f}" for f in changes.files]]
    sections = [
        Section("Recommendations", blocks=[Table("Recommendations", recommendations,
                                                 fit=Fit(wrap=("recommendation",)))]),
        _section("Groups: time per step now, from the trace", _groups_table(run)),
        _section("Predicted ms per step at each recipe", per_recipe),
        Section("The change", notes=change_lines),
    ]
    document = _document(run, MEASURED) | {
        "device": plain(advice.device), "other_gpu": advice.other_gpu,
        "recommendations": frame_records(recs[["group", "name", "action", "text", "now_recipe", "target", "now_ms",
                                               "target_ms", "speedup", "stake_ms"]]),
        "per_recipe": frame_records(advice.per_recipe[["group", "recipe", "status", "reason", "predicted_ms",
                                                       "ratio", "source", "kernel_precision", "kernel_verdict"]]),
        "changes": {"framework": changes.framework, "lines": changes.lines, "notes": changes.notes,
                    "files": sorted(changes.files), "now_ms": plain(run.groups["now_ms"].sum()),
                    "predicted_ms": plain(changes.predicted_ms)}}
    return Report(title=TITLE, status=None, verdict=[], sections=sections, intro=intro, document=document)


def _document(run: RunGroups, state: str) -> dict[str, Any]:
    groups = run.groups.drop(columns=["pattern"])
    return {"schema_version": SCHEMA_VERSION, "state": state, "framework": run.framework, "recipes": run.recipes,
            "steps": run.steps, "steps_note": run.steps_note, "trace_gpu": run.gpu, "notes": run.notes,
            "numerics": NUMERICS, "groups": frame_records(groups)}
