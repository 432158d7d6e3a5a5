"""`gemmscope compare`: two runs side by side, as one report: the statement, the totals and
categories, the modules that changed most, the kernels that changed, and each run's findings."""

from __future__ import annotations

import pandas as pd

from gemmscope.report.documents import comparison_document
from gemmscope.report.model import Fit, Report, Section, Stack, Table
from gemmscope.report.verification import findings_table

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
    # Per layer, module and pass, the kernels BASE ran (−) and those NEW ran (+).
    changed = Stack("layer · module\n  − BASE's kernels, + NEW's", under=(("base", "−"), ("new", "+")))
    tables = [Table("Totals: NEW − BASE (window = busy + idle; busy = categories − overlap)", ms),
              Table("Modules and passes that moved most (ms)", moved, fit=Fit(shorten={"module": "name"})),
              Table("GEMM kernels that changed", comparison["kernels_changed"],
                    fit=Fit(stack=changed, missing={"pass": "?"})),
              *(findings_table(f"Findings, {run}", comparison[f"{run.lower()}_findings"]) for run in ("BASE", "NEW"))]
    return Report(title="gemmscope compare", status=None, verdict=[], intro=[comparison["statement"]],
                  sections=[Section(table.title, blocks=[table]) for table in tables],
                  document=comparison_document(comparison))
