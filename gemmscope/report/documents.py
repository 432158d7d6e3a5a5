"""The JSON documents gemmscope writes (`--format json`, `analysis.json`, `results.json`; the
schemas in gemmscope/schemas hold them), and the values in them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gemmscope import devices
from gemmscope.common.jsonable import frame_records, plain
from gemmscope.diagnosing.diagnosis import Diagnosis
from gemmscope.judging.figures import Coverage, verdict_figures
from gemmscope.judging.judgement import Judgement
from gemmscope.plan.shapes import Gemm
from gemmscope.traces.model import Trace

# The version of every JSON document gemmscope writes (`schema_version`, a top-level key): it
# changes when a key is removed or renamed, or a value changes type, unit or meaning; a new key or
# a new value of an enumeration leaves it.
SCHEMA_VERSION = "2"

_GEMM_FIELDS = ("kernel", "role", "precision", "start_ns", "duration_ns", "trace", "rank", "thread",
                "ranges", "te_module", "te_name", "layer", "layer_number", "te_pass", "pass_source", "requested_a",
                "requested_b", "requested", "requested_scale", "origin")


def gemm_fields(result: Judgement) -> list[str]:
    return launch_fields(result.checked, bool(result.expect_map))


def launch_fields(checked: bool, mapped: bool) -> list[str]:
    """The fields of a GEMM launch's record: its check's where it was `checked`, its mapped
    range's under --expect-map (`mapped`)."""
    return (list(_GEMM_FIELDS) + (["expected", "verdict", "cause", "allowed", "asked_high"] if checked else [])
            + (["expect_range"] if mapped else []))


# How a range without a name (no text, no registered string) is listed: every format lists names as text.
UNNAMED_RANGE = "(unnamed range)"


def range_lists(result: Judgement, rows: np.ndarray) -> list[list[str]]:
    """The names of the NVTX ranges around each launch of `rows` (kernel rows), outermost first,
    as reports list them."""
    return [[name if isinstance(name, str) else UNNAMED_RANGE for name in names] for names in result.job.ranges.lists(rows)]


def gemm_records(gemms: pd.DataFrame, result: Judgement) -> list[dict]:
    """`gemms` (rows of result.gemms) as JSON-able records, one per launch."""
    g = gemms.rename(columns={"name": "kernel", "start": "start_ns"})
    g["ranges"] = range_lists(result, g["kernel_row"].to_numpy()) if len(g) else []
    return [{f: plain(row[f]) for f in gemm_fields(result)} for row in g.to_dict("records")]


# GEMM launches formatted at a time by `launch_lines`: what it holds stays bounded however many
# launches a trace has.
JSONL_CHUNK = 10_000


def launch_lines(result: Judgement) -> Iterator[str]:
    """`--format jsonl`: one JSON object per GEMM launch, a line each (the records --per-launch
    adds to the JSON document; common.schema.json's gemm_launch), made a chunk at a time."""
    for start in range(0, len(result.gemms), JSONL_CHUNK):
        for record in gemm_records(result.gemms.iloc[start:start + JSONL_CHUNK], result):
            yield json.dumps(record) + "\n"


def check_mode(result: Judgement) -> str:
    if result.expect_given:
        return "recipe"
    return "per-gemm" if result.checked else "none"


def coverage_document(coverage: Coverage) -> dict:
    return {"gemm_launches": coverage.gemm_launches, "time_ns": coverage.time_ns,
            "time_share": coverage.time_share, "low_precision_time_share": coverage.low_precision_time_share,
            "saved_at_most_ns": coverage.saved_at_most_ns, "groups": frame_records(coverage.groups)}


def summary_document(result: Judgement) -> dict:
    """The check's summary: its state and figures (figures.verdict_figures), the GEMMs grouped, the
    ranks compared, and the traces that could not be read or launched no kernel."""
    figures = verdict_figures(result)
    doc: dict[str, Any] = {
        "state": result.state.value,
        "expected": result.expected,
        "mode": check_mode(result),
        "gemm_launches": figures.gemm_launches,
        "gemm_time_ns": figures.gemm_time_ns,
        "gemm_tail_time_ns": result.job.tails_ns,
        "by_precision": figures.launches_by_precision,
        "by_module_pass": frame_records(result.summary),
        "groups": frame_records(result.groups),
        "ranks": figures.ranks,
        "rank_comparison": frame_records(result.rank_comparison),
        "unreadable_traces": plain(result.job.unreadable),
        "traces_without_kernels": plain(result.job.without_kernels),
        "autotuning_gemm_launches": len(result.job.autotuning),
        "autotuning_gemm_time_ns": int(result.job.autotuning["duration_ns"].sum()) if len(result.job.autotuning) else 0,
    }
    if result.expect_map:
        doc["expect_map"] = [{"pattern": p, "recipe": r} for p, r in result.expect_map]
        doc["ranges_checked"] = frame_records(result.ranges_checked)
    if figures.verdicts is not None:
        doc |= {"verdicts": figures.verdicts, "expected_time_share": figures.expected_time_share,
                "unchecked_gemm_launches": figures.unchecked_gemm_launches,
                "unjudged_gemm_launches": figures.unjudged_gemm_launches, "mismatches": figures.mismatches,
                "allowed": figures.allowed}
        if figures.coverage is not None:
            doc["coverage"] = coverage_document(figures.coverage)
    if figures.note is not None:
        doc["note"] = figures.note
    if result.unpatched:
        doc["unpatched"] = result.unpatched
    return doc


def _trace_meta(trace: Trace) -> dict:
    return {
        "trace": str(trace.path),
        "nsys_version": trace.meta["nsys_version"],
        "schema_version": trace.meta["schema_version"],
        "gpus": [{k: plain(v) for k, v in g.items()} for g in trace.meta["gpus"]],
        "profiler": trace.meta["profiler"],
        "lacks": trace.meta["lacks"],
    }


def _meta(traces: Sequence[Trace], command: dict | None) -> dict:
    """The first trace's meta at the top level (one trace: as before), every trace under
    `traces`, and the profiled command's outcome when gemmscope ran it."""
    metas = [_trace_meta(t) for t in traces]
    meta = dict(metas[0]) if metas else {}
    meta["traces"] = metas
    if command is not None:
        meta["command"] = command
    return meta


def diagnosis_document(diagnosis: Diagnosis) -> dict:
    """`breakdown` (per rank: GPU window, busy, idle, launches, time per category, in ns; the
    steps it covers) and `findings` (code, statement, explains_ns, figures, concerns; most time
    at stake first)."""
    steps = diagnosis.steps
    return {
        "breakdown": {
            "step_range": diagnosis.step_range,
            "per_rank": frame_records(diagnosis.breakdown),
            "steps": frame_records(steps[["trace", "pid", "name", "index", "wall_ns", "gpu_kernel_ns"]])
            if "wall_ns" in steps else [],
        },
        "findings": plain(diagnosis.findings),
    }


def analysis_document(result: Judgement, command: dict | None = None, diagnosis: Diagnosis | None = None,
                      per_launch: bool = False) -> dict:
    """`gemmscope analyze --format json`: meta, summary (GEMMs grouped per layer, module, pass and
    kernel), the breakdown and findings; with `per_launch`, one object per GEMM launch too (a
    long job has hundreds of thousands)."""
    doc = {"schema_version": SCHEMA_VERSION, "meta": _meta(result.job.traces, command)}
    if per_launch:
        doc["gemms"] = gemm_records(result.gemms, result)
    doc["summary"] = summary_document(result)
    return doc | (diagnosis_document(diagnosis) if diagnosis else {})


def verification_document(result: Judgement, command: dict | None = None,
                          diagnosis: Diagnosis | None = None, per_launch: bool = False) -> dict:
    """`gemmscope verify --format json`: summary (mismatches grouped in its `groups`), the
    breakdown and findings; with `per_launch`, the non-allowed and the allowed mismatches one
    object per launch too."""
    doc = {"schema_version": SCHEMA_VERSION, "meta": _meta(result.job.traces, command), "summary": summary_document(result)}
    if per_launch:
        records = gemm_records(result.gemms[result.gemms["verdict"] == "FALLBACK"], result) if result.checked else []
        doc["mismatches"] = [r for r in records if not r["allowed"]]
        doc["allowed"] = [r for r in records if r["allowed"]]
    return doc | (diagnosis_document(diagnosis) if diagnosis else {})


def nothing_ran_document(kind: str, traces: Sequence[Trace], expected: str | None, expect_given: bool,
                         expect_map: Sequence[tuple[str, str]], note: str, without_kernels: list[dict],
                         unpatched: list[dict], command: dict | None = None, per_launch: bool = False) -> dict:
    """The document of `kind` ("analysis": analyze's, else verify's) of a run that launched no GPU
    kernel: the same keys as any run's, state fail, every count zero, no breakdown and no findings,
    `note` saying why (`traces`: those read, none where the command left none)."""
    summary: dict[str, Any] = {
        "state": "fail", "expected": expected, "mode": "recipe" if expect_given else "none",
        "gemm_launches": 0, "gemm_time_ns": 0, "gemm_tail_time_ns": 0, "by_precision": {}, "by_module_pass": [],
        "groups": [], "ranks": [], "rank_comparison": [], "unreadable_traces": [],
        "traces_without_kernels": plain(without_kernels), "autotuning_gemm_launches": 0,
        "autotuning_gemm_time_ns": 0,
    }
    if expect_map:
        summary["expect_map"] = [{"pattern": p, "recipe": r} for p, r in expect_map]
    if expected is not None or expect_map:
        summary |= {"verdicts": {}, "expected_time_share": None, "unchecked_gemm_launches": 0,
                    "unjudged_gemm_launches": 0, "mismatches": 0, "allowed": 0}
    summary["note"] = note
    if unpatched:
        summary["unpatched"] = unpatched
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "meta": _meta(traces, command)}
    if per_launch:
        doc |= {"gemms": []} if kind == "analysis" else {"mismatches": [], "allowed": []}
    return doc | {"summary": summary, "breakdown": {"step_range": None, "per_rank": [], "steps": []}, "findings": []}


def comparison_document(comparison: dict) -> dict:
    """`gemmscope compare --format json`: the statement, totals, modules and passes, kernels that
    changed, and each run's findings."""
    return plain({"schema_version": SCHEMA_VERSION, "statement": comparison["statement"],
                   "totals": comparison["totals"], "by_module": frame_records(comparison["by_module"]),
                   "kernels_changed": frame_records(comparison["kernels_changed"]),
                   "base_findings": comparison["base_findings"], "new_findings": comparison["new_findings"]})


def shapes_document(plan: list[Gemm]) -> dict:
    """`gemmscope shapes --format json`: the plan's GEMMs."""
    return {"schema_version": SCHEMA_VERSION, "gemms": [gemm.as_dict() for gemm in plan]}


def kernels_document(decoded: pd.DataFrame) -> dict:
    """`gemmscope kernel --format json`: what each name says (kernels.decode_frame's rows)."""
    return {"schema_version": SCHEMA_VERSION, "kernels": frame_records(decoded)}


def results_document(run, wall_s: float | None) -> dict:
    """`results.json` of a profile run."""
    device = devices.lookup(run.device["name"])
    return {
        "schema_version": SCHEMA_VERSION,
        "device": run.device,
        "device_figures": None if device is None else {
            "part": device.part, "dense_peak_tflops": dict(device.peak_tflops),
            "memory_bandwidth_tbps": device.bandwidth_tbps, "sources": list(device.sources), "note": device.note},
        "wall_s": wall_s,
        "model": run.plan["model"],
        "num_layers": run.plan["num_layers"],
        "speedups": {m: {p: plain(v) for p, v in d.items()} for m, d in run.speedups().items()},
        "per_layer": frame_records(run.per_layer().reset_index()),
        "full_model": frame_records(run.full_model().reset_index()),
        "memory": frame_records(run.memory),
        "gemms": frame_records(run.gemms),
    }
