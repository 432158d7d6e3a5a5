"""Checked traces (`analyze`, `verify`, `diagnose`, `report`, `bundle`) as one report: the
verdict, then every section, listed once here for every format.

A Report also holds its tables for a machine (`report --tables DIR`, a bundle's `tables/`): one
CSV each, from the analysis frames the sections show (`trace_tables`), under the names of
tables.TABLE_FILES.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

from gemmscope import kernels
from gemmscope.common.jsonable import plain
from gemmscope.diagnosing.diagnosis import Diagnosis
from gemmscope.diagnosing.findings import Finding
from gemmscope.errors import State
from gemmscope.judging.judgement import Judgement
from gemmscope.report import plots
from gemmscope.report.documents import gemm_fields, gemm_records, launch_fields, nothing_ran_document, range_lists
from gemmscope.report.frames import (
    ALLOWED_TITLE,
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
    breakdown_title,
    cause_meaning,
    cause_meanings,
    coverage_frame,
    differing_ranks,
    findings_frame,
    launches_frame,
    mismatch_frame,
    mismatch_groups,
    ranges_frame,
    ranges_table,
    ranks_frame,
    several_ranks,
    steps_frame,
    summary_frame,
    unjudged_frame,
)
from gemmscope.report.model import (
    Block,
    Codes,
    Details,
    Figure,
    Fit,
    Groups,
    Report,
    RowLimit,
    Section,
    Stack,
    Table,
    count,
)
from gemmscope.report.verdict import nothing_ran_block, trace_environment, traces_environment, verdict_block
from gemmscope.traces.model import Trace

# Kernel names (templated CUTLASS ones run to hundreds of characters) are cut to this in a
# one-line summary; the full name is inside.
SUMMARY_KERNEL_CHARS = 70


def verification_report(result: Judgement, diagnosis: Diagnosis, document: dict | None = None,
                        detail: str = "normal") -> Report:
    """What gemmscope says about checked traces: the verdict, then (unless `detail` is "quiet")
    the ranges checked, the GEMMs per module and pass, the mismatches, coverage, ranks that
    differ, traces that could not be read, where the GPU time went, the findings, every launch
    (`detail` "verbose") and each GEMM group's details. `document`: its JSON form."""
    names = [t.path.name for t in result.job.traces]
    status, verdict = verdict_block(result, diagnosis)
    report = Report(title=f"gemmscope report: {', '.join(names)}", status=status, verdict=verdict, sections=[],
                    tables=trace_tables(result, diagnosis), document=document, rows=lambda: launch_rows(result))
    if detail == "quiet":
        return report
    report.environment = trace_environment(result)
    report.sections = [*_check_sections(result), *diagnosis_sections(diagnosis)]
    if detail == "verbose":
        report.sections.append(_launches_section(result))
    report.sections.append(_gemm_details(result))
    return report


def diagnosis_report(result: Judgement, diagnosis: Diagnosis) -> Report:
    """`gemmscope diagnose`: the verdict, where the GPU time went and the findings."""
    status, verdict = verdict_block(result, diagnosis)
    return Report(title=f"gemmscope diagnose: {', '.join(t.path.name for t in result.job.traces)}", status=status,
                  verdict=verdict, sections=diagnosis_sections(diagnosis), environment=trace_environment(result))


def nothing_ran_report(kind: str, read: Sequence[Trace], names: list[str], expected: str | None, expect_given: bool,
                       expect_map: Sequence[tuple[str, str]], note: str, without_kernels: list[dict],
                       unpatched: list[dict], command: dict | None = None, per_launch: bool = False) -> Report:
    """The report of `kind` (analysis.REPORT_KINDS) of a run that launched no GPU kernel, in every
    format what any run's is, its state fail: the verdict block saying so (`note`: why), the
    environment the traces `read` record, the JSON document with every count zero (no breakdown,
    no findings) and CSV's header alone (`names`: the traces', none where the command left none)."""
    verdict = nothing_ran_block(read, expected, expect_given, expect_map, note, unpatched, command)
    document = None if kind in ("page", "diagnosis") else nothing_ran_document(
        kind, read, expected, expect_given, expect_map, note, without_kernels, unpatched, command, per_launch)
    fields = launch_fields(expected is not None or bool(expect_map), bool(expect_map))
    title = "gemmscope diagnose" if kind == "diagnosis" else "gemmscope report"
    return Report(title=f"{title}: {', '.join(names) or 'no trace'}", status=State.FAIL.value, verdict=verdict,
                  sections=[], environment=traces_environment(read, []) if read else [], document=document,
                  rows=lambda: pd.DataFrame(columns=fields))


def launch_rows(result: Judgement) -> pd.DataFrame:
    """Every GEMM launch, a row each (`--format csv`), its NVTX ranges joined outermost first."""
    frame = pd.DataFrame(gemm_records(result.gemms, result), columns=gemm_fields(result))
    frame["ranges"] = frame["ranges"].map(" > ".join)
    return frame


def _check_sections(result: Judgement) -> list[Section]:
    sections = []
    if result.expect_map:
        sections.append(Section(RANGES_TITLE, intro=["Each NVTX range an --expect-map pattern names, against its "
                                                     "recipe."],
                                blocks=[Table(RANGES_TITLE, ranges_frame(result.ranges_checked),
                                              fit=Fit(shorten={"range": "name"}))]))
    if len(result.job.autotuning):
        sections.append(Section("Left out of the check", notes=[autotuning_note(result)]))
    sections.append(Section(SUMMARY_TITLE, blocks=[_summary_table(result)]))
    sections.append(Section("GEMM throughput against the GPU's dense peak",
                            blocks=[Figure(lambda: plots.trace_tflops_plot(result))]))
    if result.checked:
        sections.append(Section(MISMATCHES_TITLE, blocks=[_mismatch_table(result, allowed=False)]))
        if len(result.allowed):
            sections.append(Section(ALLOWED_TITLE, blocks=[_mismatch_table(result, allowed=True)]))
        if len(result.unjudged):
            sections.append(Section(UNJUDGED_TITLE, blocks=[Table(UNJUDGED_TITLE, unjudged_frame(result),
                                                                  fit=Fit(shorten={"kernel": "name"}))]))
        if not result.coverage.empty:
            title = f"Coverage: {count(len(result.coverage), 'GEMM launch', 'GEMM launches')} asked for high precision"
            coverage = Table(title, coverage_frame(result),
                             lead="GEMMs that asked for high precision ran as asked (not a failure): what low "
                                  "precision does not cover",
                             fit=Fit(stack=Stack("layer · module"), once={"asked": lambda asked: f"all asked {asked}"}))
            sections.append(Section(title, blocks=[coverage]))
    if not result.rank_comparison.empty:
        sections.append(Section(RANKS_TITLE, blocks=[Table(RANKS_TITLE, ranks_frame(result), fit=Fit(
            stack=Stack("layer · module\n  kernels most ranks ran", under=(("kernels", ""),)), missing={"pass": "?"},
            wrap=("ranks that differ",)))]))
    if result.job.unreadable:
        sections.append(Section(UNREADABLE_TITLE, blocks=[Table(UNREADABLE_TITLE, pd.DataFrame(result.job.unreadable),
                                                                fit=Fit(wrap=("error",)))]))
    return sections


def _summary_table(result: Judgement) -> Table:
    """Per module and pass: launches, the share at the expected precision, verdict counts (the
    terminal leaves out those zero in every row) and kernel time."""
    at = ("time at\nexpected" if result.expect_map
          else f"time at\n{result.expected}" if result.expect_given or not result.requests_recorded else "time as\nasked")
    return Table(SUMMARY_TITLE, summary_frame(result), fit=Fit(
        zeros=("ok", "fallback", "expected-substitution", "unknown", "allowed"), shorten={"module": "name"}),
        headers={"gemms": "launches", "expected_time_share": at})


def _mismatch_table(result: Judgement, allowed: bool) -> Table:
    """The mismatches, a group per cause under what the cause means; a row per layer, module, pass
    and kernel. The terminal says the precision or rank count every row shares once above them."""
    frame = mismatch_frame(result, allowed)

    def totals(rows: pd.DataFrame) -> str:
        return f"{count(int(rows['launches'].sum()), 'launch', 'launches')}, {rows['time_ms'].sum():.3f} ms"

    return Table(ALLOWED_TITLE if allowed else MISMATCHES_TITLE, frame,
                 codes=Codes("cause", cause_meanings(frame, result)), groups=Groups("cause", totals),
                 fit=Fit(stack=Stack("layer · module\n  kernel", under=(("kernel", ""),)),
                         hide=("requested",) + (() if several_ranks(result) else ("ranks",)), missing={"pass": "?"},
                         once={"expected": None, "precision": lambda precision: f"all ran as {precision}",
                               "ranks": lambda ranks: f"on {count(ranks, 'rank')}"}))


def _launches_section(result: Judgement) -> Section:
    """Every GEMM launch, one line each; on the terminal its kernel numbered (the names listed once,
    under the table)."""
    frame = launches_frame(result)
    codes = Codes("cause", cause_meanings(frame, result)) if result.checked else None
    return Section(LAUNCHES_TITLE, blocks=[Table(LAUNCHES_TITLE, frame, codes=codes, fit=Fit(
        hide=() if several_ranks(result) else ("rank",), missing={"pass": "?"}, numbered="kernel",
        joined=("cause", "verdict") if result.checked else None,
        shorten={"layer (or module)": "layer"}))])


def diagnosis_sections(diagnosis: Diagnosis) -> list[Section]:
    """Where the GPU time went, its steps when steps were found, and the findings."""
    sections = [_breakdown_section(diagnosis)]
    if not diagnosis.step_times.empty:
        sections.append(Section(STEPS_TITLE, blocks=[Table(STEPS_TITLE, steps_frame(diagnosis.step_times), fit=Fit(
            limit=RowLimit(12, "step ms", "{shown} of {total} steps: the first and the slowest (every step: "
                                          "--format json, report --tables breakdown-per-step.csv)")))]))
    return [*sections, _findings_section(diagnosis.findings)]


def _gemm_details(result: Judgement) -> Section:
    """One <details> per layer × module × pass × kernel group, most time first: the kernel's full
    name decoded, what TE was handed, the verdict's cause and the NVTX ranges around a launch."""
    groups = result.groups.sort_values("time_ns", ascending=False, kind="stable")
    g = result.gemms.assign(**{"pass": result.gemms["te_pass"], "kernel": result.gemms["name"]})
    keys = ["layer", "module", "pass", "kernel"]

    def key(row: dict) -> tuple:  # None for a missing layer or pass: NaN never equals itself
        return tuple(row[k] if pd.notna(row[k]) else None for k in keys)

    first = g.drop_duplicates(keys)
    first_ranges = {key(row): ranges for row, ranges in
                    zip(first.to_dict("records"), range_lists(result, first["kernel_row"].to_numpy()))}
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
        if pd.notna(row.get("requested")):
            lines.append(f"requested: {row['requested']}")
        if pd.notna(row.get("cause")):
            expected = row["expected"] if result.expect_map else result.expected
            meaning = cause_meaning(row["cause"], expected, result.hook_recorded, row.get("request_cause"))
            lines.append(f"cause: {row['cause']}: {meaning}")
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
                   blocks=blocks)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def findings_table(title: str, findings: list[Finding]) -> Table:
    """The findings; the terminal leaves their time at stake to the order of the rows."""
    return Table(title, findings_frame(findings), fit=Fit(hide=("time at stake ms",), wrap=("what it says",)))


def _findings_section(findings: list[Finding]) -> Section:
    details = []
    for f in findings:
        figures = [f"{key}: {json.dumps(plain(value))}" for key, value in f["figures"].items()]
        concerns = pd.DataFrame(f["concerns"]) if f["concerns"] else None
        if concerns is not None and "time_ns" in concerns:
            concerns = concerns.assign(time_ms=concerns.pop("time_ns").map(_ms))
        details.append(Details(f"{f['code']}: figures" + (" and where the time is" if concerns is not None else ""),
                               figures, concerns))
    return Section(FINDINGS_TITLE, blocks=[findings_table(FINDINGS_TITLE, findings), *details])


def _breakdown_section(diagnosis: Diagnosis) -> Section:
    """Where the GPU time went, a row per rank; the terminal turns it, a row per figure and a
    column per rank."""
    frame = breakdown_frame(diagnosis.breakdown)
    intro = ["Window = busy + idle; category times are kernel durations, which add up to more than the busy time "
             "where streams overlap."]
    blocks: list[Block] = [Table(breakdown_title(diagnosis), frame, fit=Fit(transpose="rank"),
                                 headers={"launches": "kernel launches"}),
                           Figure(lambda: plots.breakdown_plot(diagnosis)), Figure(lambda: plots.steps_plot(diagnosis))]
    return Section("Where the GPU time went", intro=intro, blocks=blocks)


def trace_tables(result: Judgement, diagnosis: Diagnosis) -> dict[str, pd.DataFrame]:
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
    tables["unreadable-traces.csv"] = pd.DataFrame(result.job.unreadable, columns=["trace", "rank", "error"])
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
