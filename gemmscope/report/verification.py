"""Checked traces (`analyze`, `verify`, `diagnose`, `report`, `bundle`) as one report: the
verdict, then every section, listed once here for every format.

A Report also holds its tables for a machine (`report --tables DIR`, a bundle's `tables/`): one
CSV each, from the analysis frames the sections show (`trace_tables`), under the names of
tables.TABLE_FILES.
"""

from __future__ import annotations

import json

import pandas as pd

from gemmscope import kernels, plots
from gemmscope.diagnosis import Diagnosis
from gemmscope.figures import coverage_groups
from gemmscope.findings import Finding
from gemmscope.jsonable import plain
from gemmscope.report import verification_terminal as terminal
from gemmscope.report.documents import gemm_fields, gemm_records
from gemmscope.report.frames import (
    ALLOWED_TITLE,
    COVERAGE_TITLE,
    FINDINGS_TITLE,
    LAUNCHES_TITLE,
    MISMATCHES_TITLE,
    RANGES_TITLE,
    RANKS_TITLE,
    STEPS_TITLE,
    SUMMARY_TITLE,
    UNJUDGED_TITLE,
    UNREADABLE_TITLE,
    autotuning_note,
    breakdown_frame,
    breakdown_window,
    differing_ranks,
    mismatch_frame,
    mismatch_groups,
    ranges_frame,
    ranges_table,
    steps_frame,
    summary_frame,
    unjudged_frame,
)
from gemmscope.report.model import Block, Details, Figure, Report, Section, Table, TextSection, count
from gemmscope.report.terminal import shorten_middle, table_section
from gemmscope.report.verdict import trace_environment, verdict_block
from gemmscope.verify import Verification

# Kernel names (templated CUTLASS ones run to hundreds of characters) are cut to this in a
# one-line summary; the full name is inside.
SUMMARY_KERNEL_CHARS = 70


def verification_report(result: Verification, diagnosis: Diagnosis, document: dict | None = None,
                        detail: str = "normal") -> Report:
    """What gemmscope says about checked traces: the verdict, then (unless `detail` is "quiet")
    the ranges checked, the GEMMs per module and pass, the mismatches, coverage, ranks that
    differ, traces that could not be read, where the GPU time went, the findings, every launch
    (`detail` "verbose") and each GEMM group's details. `document`: its JSON form."""
    names = [t.path.name for t in result.traces]
    status, verdict = verdict_block(result, diagnosis)
    report = Report(title=f"gemmscope report: {', '.join(names)}", status=status, verdict=verdict, sections=[],
                    tables=trace_tables(result, diagnosis), document=document, rows=lambda: launch_rows(result))
    if detail == "quiet":
        return report
    report.environment = trace_environment(result)
    report.sections = [*_check_sections(result), *diagnosis_sections(diagnosis)]
    if detail == "verbose":
        report.sections.append(Section(LAUNCHES_TITLE, blocks=[Table(LAUNCHES_TITLE, launch_rows(result))],
                                       terminal=lambda: [terminal.launches_section(result)]))
    report.sections.append(_gemm_details(result))
    return report


def diagnosis_report(result: Verification, diagnosis: Diagnosis) -> Report:
    """`gemmscope diagnose`: the verdict, where the GPU time went and the findings."""
    status, verdict = verdict_block(result, diagnosis)
    return Report(title=f"gemmscope diagnose: {', '.join(t.path.name for t in result.traces)}", status=status,
                  verdict=verdict, sections=diagnosis_sections(diagnosis), environment=trace_environment(result))


def launch_rows(result: Verification) -> pd.DataFrame:
    """Every GEMM launch, a row each (`--format csv`), its NVTX ranges joined outermost first."""
    frame = pd.DataFrame(gemm_records(result.gemms, result), columns=gemm_fields(result))
    frame["ranges"] = frame["ranges"].map(" > ".join)
    return frame


def _check_sections(result: Verification) -> list[Section]:
    sections = []
    if result.expect_map:
        ranges = ranges_frame(result.ranges_checked)
        sections.append(Section(RANGES_TITLE, blocks=[Table("Each NVTX range an --expect-map pattern names, against "
                                                            "its recipe", ranges)],
                                terminal=lambda: [table_section(RANGES_TITLE, ranges, {"range": shorten_middle})]))
    if len(result.autotuning):
        note = autotuning_note(result)
        sections.append(Section("Left out of the check", intro=[note], terminal=lambda: [TextSection(note)]))
    sections.append(Section(SUMMARY_TITLE, blocks=[Table(SUMMARY_TITLE, summary_frame(result))],
                            terminal=lambda: [terminal.summary_section(result)]))
    sections.append(Section("GEMM throughput against the GPU's dense peak",
                            blocks=[Figure(lambda: plots.trace_tflops_plot(result))], terminal=list))
    if result.checked:
        sections.append(Section(MISMATCHES_TITLE, blocks=[Table(MISMATCHES_TITLE, mismatch_frame(result, False))],
                                terminal=lambda: terminal.mismatch_sections(result, allowed=False)))
        if len(result.allowed):
            sections.append(Section(ALLOWED_TITLE, blocks=[Table(ALLOWED_TITLE, mismatch_frame(result, True))],
                                    terminal=lambda: terminal.mismatch_sections(result, allowed=True)))
        if len(result.unjudged):
            unjudged = unjudged_frame(result)
            sections.append(Section(UNJUDGED_TITLE, blocks=[Table(UNJUDGED_TITLE, unjudged)],
                                    terminal=lambda: [table_section(UNJUDGED_TITLE, unjudged,
                                                                    {"kernel": shorten_middle})]))
        if not result.coverage.empty:
            sections.append(Section(COVERAGE_TITLE, blocks=[Table(COVERAGE_TITLE, coverage_groups(result))],
                                    terminal=lambda: [terminal.coverage_section(result)]))
    if not result.rank_comparison.empty:
        sections.append(Section(RANKS_TITLE, blocks=[Table(RANKS_TITLE, differing_ranks(result))],
                                terminal=lambda: [terminal.ranks_section(result)]))
    if result.unreadable:
        unreadable = pd.DataFrame(result.unreadable)
        sections.append(Section(UNREADABLE_TITLE, blocks=[Table(UNREADABLE_TITLE, unreadable)],
                                terminal=lambda: [table_section(UNREADABLE_TITLE, unreadable, wrap={"error"})]))
    return sections


def diagnosis_sections(diagnosis: Diagnosis) -> list[Section]:
    """Where the GPU time went, its steps when steps were found, and the findings."""
    sections = [_breakdown_section(diagnosis)]
    if not diagnosis.step_times.empty:
        frame = steps_frame(diagnosis.step_times)
        sections.append(Section(STEPS_TITLE, blocks=[Table(STEPS_TITLE, frame)],
                                terminal=lambda: [_steps_terminal(frame)]))
    return [*sections, _findings_section(diagnosis.findings)]


# The terminal shows a long run's first steps and its slowest; every step is in JSON and CSV.
_TERMINAL_STEPS = 12


def _steps_terminal(frame: pd.DataFrame) -> TextSection:
    if len(frame) <= _TERMINAL_STEPS:
        return table_section(STEPS_TITLE, frame)
    slowest = frame.nlargest(_TERMINAL_STEPS // 2, "step ms").index
    shown = frame.loc[frame.index[: _TERMINAL_STEPS // 2].union(slowest)]
    return table_section(STEPS_TITLE, shown, before=[
        f"{len(shown)} of {len(frame)} steps: the first and the slowest (every step: --format json, "
        "report --tables breakdown-per-step.csv)"])


def _gemm_details(result: Verification) -> Section:
    """One <details> per layer × module × pass × kernel group, most time first: the kernel's full
    name decoded, what TE was handed, the verdict's cause and the NVTX ranges around a launch."""
    groups = result.groups.sort_values("time_ns", ascending=False, kind="stable")
    g = result.gemms.assign(**{"pass": result.gemms["te_pass"], "kernel": result.gemms["name"]})
    keys = ["layer", "module", "pass", "kernel"]

    def key(row: dict) -> tuple:  # None for a missing layer or pass: NaN never equals itself
        return tuple(row[k] if pd.notna(row[k]) else None for k in keys)

    first = g.drop_duplicates(keys)
    first_ranges = {key(row): ranges for row, ranges in
                    zip(first.to_dict("records"), result.ranges.lists(first["kernel_row"].to_numpy()))}
    decoded = kernels.decode_frame(pd.Series(groups["kernel"].unique()), ("name", *kernels.TABLE_COLUMNS)).set_index("name")
    blocks = []
    for row in groups.to_dict("records"):
        where = " · ".join(str(row[k]) if pd.notna(row[k]) else "?" for k in ("layer", "module", "pass"))
        verdict = "" if "verdict" not in row else f", {row['verdict']}" if pd.notna(row["verdict"]) else ", not checked"
        kernel = row["kernel"]
        if len(kernel) > SUMMARY_KERNEL_CHARS:
            kernel = kernel[:SUMMARY_KERNEL_CHARS] + "…"
        summary = (f"{where}: {kernel} ({row['precision']}{verdict}), "
                   f"{count(row['launches'], 'launch', 'launches')}, {row['time_ns'] / 1e6:.3f} ms")
        lines = [f"kernel: {row['kernel']}"]
        for column in ("requested", "cause"):
            if pd.notna(row.get(column)):
                lines.append(f"{column}: {row[column]}")
        if row.get("allowed"):
            lines.append("allowed by --allow")
        ranges = first_ranges.get(key(row))
        if ranges:
            lines.append("NVTX ranges around the first launch (outermost first): " + " > ".join(ranges))
        decoded_row = decoded.loc[[row["kernel"]]].reset_index(drop=True) if row["kernel"] in decoded.index else None
        blocks.append(Details(summary, lines, decoded_row))
    return Section("Per GEMM (layer · module · pass · kernel)",
                   intro=["Each line opens: the kernel's full name and what it decodes to, what TE was "
                          "handed, the verdict's cause and the NVTX ranges around the launch."],
                   blocks=blocks, terminal=list)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _findings_section(findings: list[Finding]) -> Section:
    table = pd.DataFrame({"finding": [f["code"] for f in findings],
                          "time at stake ms": [_ms(f["explains_ns"]) for f in findings],
                          "what it says": [f["statement"] for f in findings]})
    details = []
    for f in findings:
        figures = [f"{key}: {json.dumps(plain(value))}" for key, value in f["figures"].items()]
        concerns = pd.DataFrame(f["concerns"]) if f["concerns"] else None
        if concerns is not None and "time_ns" in concerns:
            concerns = concerns.assign(time_ms=concerns.pop("time_ns").map(_ms))
        details.append(Details(f"{f['code']}: figures" + (" and where the time is" if concerns is not None else ""),
                               figures, concerns))
    return Section(FINDINGS_TITLE, blocks=[Table(FINDINGS_TITLE, table), *details],
                   terminal=lambda: [terminal.findings_section(FINDINGS_TITLE, findings)])


def _breakdown_section(diagnosis: Diagnosis) -> Section:
    frame = breakdown_frame(diagnosis.breakdown)
    ms_columns = [c for c in frame.columns if c.endswith("_ms")]
    frame[ms_columns] = frame[ms_columns].map(lambda v: f"{v:.3f}")
    window = breakdown_window(diagnosis)
    intro = [window[0].upper() + window[1:] + ". Window = busy + idle; category times are kernel durations, which add up to more "
                      "than the busy time where streams overlap."]
    blocks: list[Block] = [Table("Where the GPU time went, per rank", frame),
                           Figure(lambda: plots.breakdown_plot(diagnosis)), Figure(lambda: plots.steps_plot(diagnosis))]
    return Section("Where the GPU time went", intro=intro, blocks=blocks,
                   terminal=lambda: terminal.breakdown_sections(diagnosis))


def trace_tables(result: Verification, diagnosis: Diagnosis) -> dict[str, pd.DataFrame]:
    """`verification_report`'s tables for a machine, keyed by file name: the frames of `analyze`'s
    JSON (summary, breakdown, findings) and the per-step breakdown."""
    tables = {}
    if result.expect_map:
        tables["ranges-checked.csv"] = ranges_table(result.ranges_checked)
    tables["gemms-per-module-pass.csv"] = result.summary
    tables["gemms-per-kernel.csv"] = result.groups
    if result.checked:
        tables["mismatches.csv"] = mismatch_groups(result)
    if not result.rank_comparison.empty:
        differing = differing_ranks(result)
        tables["ranks-differing.csv"] = differing.assign(
            differing_ranks=differing["differing_ranks"].map(lambda ranks: " ".join(map(str, ranks))))
    tables["unreadable-traces.csv"] = pd.DataFrame(result.unreadable, columns=["trace", "rank", "error"])
    tables["breakdown-per-rank.csv"] = diagnosis.breakdown
    tables["breakdown-per-step.csv"] = diagnosis.step_times
    findings = diagnosis.findings
    tables["findings.csv"] = pd.DataFrame(findings, columns=["code", "explains_ns", "statement"])
    tables["findings-figures.csv"] = pd.DataFrame(
        [(f["code"], name, value) for f in findings for name, value in _flat(plain(f["figures"]))],
        columns=["code", "figure", "value"], dtype=object)  # an integer figure stays one
    tables["findings-concerns.csv"] = pd.DataFrame(
        [{"code": f["code"], **concern} for f in findings for concern in f["concerns"]],
        columns=["code", "layer", "module", "pass", "time_ns"])
    tables["kernels-decoded.csv"] = kernels.decode_frame(pd.Series(result.groups["kernel"].unique(), dtype=object))
    return tables


def _flat(figures: dict, prefix: str = "") -> list[tuple[str, object]]:
    """A finding's figures as (name, value), nested ones named with dots: ("amdahl.s=2", 1.0)."""
    flat = []
    for name, value in figures.items():
        if isinstance(value, dict):
            flat += _flat(value, f"{prefix}{name}.")
        else:
            flat.append((prefix + name, value))
    return flat
