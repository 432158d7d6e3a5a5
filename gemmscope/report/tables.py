"""A report's tables for a machine: one CSV file each (`report --tables DIR`, a bundle's
`tables/`), under the names of TABLE_FILES."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gemmscope.common import sinks
from gemmscope.errors import InputError

# Every CSV a report's tables are written as, and what a row of it is. Names are whole (kernels,
# layers, ranges: never shortened); times are in the unit their column names (`_ns`, `_ms`),
# shares 0–1 (`_share`) or 0–100 (`_pct`), as in the JSON documents; what did not run is blank,
# never 0.
TABLE_FILES = {
    # traces (`analyze`'s JSON: summary, breakdown, findings)
    "ranges-checked.csv": "an NVTX range an --expect-map pattern names, or a pattern that names none "
                          "(with --expect-map only)",
    "gemms-per-module-pass.csv": "a TE module and pass: GEMM launches, time, verdict counts",
    "gemms-per-kernel.csv": "a layer, module, pass and kernel: precision, verdict, cause, launches, time",
    "mismatches.csv": "a layer, module, pass and kernel whose requested precision did not run, allowed "
                      "ones included (when checked against a recipe)",
    "ranks-differing.csv": "a layer, module and pass where some ranks ran other kernels than the rest "
                           "(several ranks only)",
    "unreadable-traces.csv": "a trace that could not be read",
    "breakdown-per-rank.csv": "a rank: GPU window, busy, idle, kernel launches, time per category",
    "breakdown-per-step.csv": "a rank and training step (after the first): the same figures",
    "findings.csv": "a finding, most time at stake first",
    "findings-figures.csv": "a figure of a finding (nested figures named with dots: amdahl.s=2)",
    "findings-concerns.csv": "a layer, module and pass where a finding's time is",
    "kernels-decoded.csv": "a GEMM kernel that ran: what its name says",
    # a profile run directory (its results.json)
    "per-layer.csv": "a mode and precision: one layer's GEMM times, speedup over BF16, entries not run, flagged",
    "full-model.csv": "a mode and precision: one step's GEMM time for the whole model",
    "gemm-entries.csv": "a GEMM, precision and mode: every figure of results.json's gemms",
    "gemm-kernels.csv": "a mode, pass, precision and kernel that ran, with the GEMMs that ran it",
    "not-run.csv": "a precision and reason: the entries that did not run, and TE's reason",
    "memory.csv": "a mode and precision: peak GPU memory above the baseline, MiB",
}


def csv_text(table: pd.DataFrame) -> str:
    """A table as CSV: a header, a row per row, blank where a value is missing; every text cell as
    a spreadsheet may open it (sinks.csv_cells). Python's CSV writer quotes a cell holding a
    character of its line terminator, and a bare carriage return would otherwise end a row where
    a reader reads one: a table holding one is written with CRLF line ends (RFC 4180's)."""
    cells = sinks.csv_cells(table)
    text = [cells[c].astype("string") for c in sinks.text_columns(cells)] + [pd.Series(cells.columns, dtype="string")]
    carriage_return = any(column.str.contains("\r", regex=False).any() for column in text)
    return cells.to_csv(index=False, lineterminator="\r\n" if carriage_return else "\n")


def write_tables(tables: dict[str, pd.DataFrame], directory: Path) -> list[Path]:
    """Each table as `directory/<name>` (the folder made if missing); a file of TABLE_FILES that
    this report has no table for is removed, so that the folder never mixes two reports. The
    paths written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in TABLE_FILES.keys() - tables.keys():
            (directory / stale).unlink(missing_ok=True)
        paths = []
        for name, table in tables.items():
            (directory / name).write_text(csv_text(table), encoding="utf-8")
            paths.append(directory / name)
    except OSError as exc:
        raise InputError(f"cannot write tables into {directory}: {exc.strerror}") from None
    return paths
