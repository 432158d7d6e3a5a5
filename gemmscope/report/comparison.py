"""`gemmscope compare`: two runs side by side, as one report: the statement, the totals and
categories, the modules that changed most, the kernels that changed, and each run's findings."""

from __future__ import annotations

import pandas as pd

from gemmscope.report.documents import comparison_document
from gemmscope.report.frames import findings_frame, where
from gemmscope.report.model import Report, Section, Table, TextSection
from gemmscope.report.terminal import shorten_gemm_cell, shorten_middle, table_section, terminal_table
from gemmscope.report.verification_terminal import findings_section

# The modules and passes listed, those that moved most first.
MODULES_SHOWN = 15


def comparison_report(comparison: dict) -> Report:
    """`comparison` (comparison.compare's) as a report; its JSON document is comparison_document's."""
    totals = pd.DataFrame([{"figure": k, **v} for k, v in comparison["totals"].items()])
    by_module = comparison["by_module"]
    ms = totals.assign(**{c: totals[c].where(totals["figure"] == "kernel_launches", totals[c] / 1e6)
                          for c in ("base", "new", "difference")})
    ms["figure"] = ms["figure"].str.replace("_ns", " (ms)")
    moved = by_module.head(MODULES_SHOWN).assign(**{c: by_module[c].head(MODULES_SHOWN) / 1e6
                                                    for c in ("base", "new", "difference")})
    changed = comparison["kernels_changed"]
    sections = [_section("Totals: NEW − BASE (window = busy + idle; busy = categories − overlap)", ms),
                _section("Modules and passes that moved most (ms)", moved, lambda title: [
                    table_section(title, moved, {"module": shorten_middle})]),
                _section("GEMM kernels that changed", changed,
                         lambda title: [_kernels_changed_section(title, changed)])]
    for run in ("BASE", "NEW"):
        findings = comparison[f"{run.lower()}_findings"]
        sections.append(_section(f"Findings, {run}", findings_frame(findings),
                                 lambda title, findings=findings: [findings_section(title, findings)]))
    return Report(title="gemmscope compare", status=None, verdict=[], intro=[comparison["statement"]],
                  sections=sections, document=comparison_document(comparison))


def _section(title: str, frame: pd.DataFrame, terminal=None) -> Section:
    return Section(title, blocks=[Table(title, frame)], terminal=None if terminal is None else lambda: terminal(title))


def _kernels_changed_section(title: str, changed: pd.DataFrame) -> TextSection:
    """Per layer, module and pass, the kernels BASE ran (−) and those NEW ran (+), a line each."""
    if changed.empty:
        return TextSection(f"{title}: none")
    column = "layer · module\n  − BASE's kernels, + NEW's"

    def listed(kernels: pd.Series, sign: str) -> pd.Series:
        return ("\n  " + sign + " " + kernels.fillna("(none)").str.replace(" + ", f"\n  {sign} ", regex=False))

    frame = pd.DataFrame({column: where(changed["layer"], changed["module"]) + listed(changed["base"], "−")
                          + listed(changed["new"], "+"), "pass": changed["pass"].fillna("?")})
    return TextSection(title, terminal_table(frame, {column: shorten_gemm_cell}))
