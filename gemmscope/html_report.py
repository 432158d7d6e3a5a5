"""`gemmscope report`: one file to attach to an issue, as a self-contained HTML page or as
Markdown for an issue comment.

The page loads nothing from anywhere: its CSS and its few lines of JavaScript (click a table
header to sort) are inline, and its plots are PNGs inlined as data: URIs. It opens with a
verdict block (what was asked, what ran, the share of GEMM time at the requested precision, the
top findings, the environment), then tables, per-GEMM details on demand (<details>), findings,
plots and the environment. Every text from a trace or a run goes through html.escape.

Both formats render one `Report`, built either from a `gemmscope profile` run directory
(`run_report`) or from checked traces and their diagnosis (`traces_report`); Markdown has the
same sections, with the plots named instead of drawn (an issue comment cannot show a data: URI).

A Report also holds its tables for a machine (`report --tables DIR`, a bundle's `tables/`): one
CSV each, from the analysis frames the page's tables show (`trace_tables`, `run_tables`), under
the names of TABLE_FILES.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gemmscope import devices, kernels, plots, reports, verify
from gemmscope.diagnosis import NO_STEPS, Diagnosis
from gemmscope.errors import InputError
from gemmscope.profile_run import ProfileRun
from gemmscope.scrub import Redactor

FORMATS = ("html", "markdown")


@dataclass
class Table:
    """A sortable table."""

    title: str
    frame: pd.DataFrame


@dataclass
class Figure:
    title: str
    png: bytes
    caption: str

    @classmethod
    def of(cls, plot: plots.Plot) -> Figure:
        """A plot, its caption followed by what the figure says was not drawn."""
        notes = [f"{note[0].upper()}{note[1:]}." for note in plot.notes]
        return cls(plot.title, plot.png, " ".join([plot.caption, *notes]))


@dataclass
class Details:
    """Something shown on demand: a one-line summary, then lines and a table."""

    summary: str
    lines: list[str] = field(default_factory=list)
    frame: pd.DataFrame | None = None


@dataclass
class Section:
    title: str
    intro: list[str] = field(default_factory=list)  # paragraphs before the blocks
    blocks: list[Table | Figure | Details] = field(default_factory=list)


@dataclass
class Report:
    title: str
    status: str  # "pass", "fail" or "unchecked": the verdict block's word and colour
    verdict: list[tuple[str, str]]  # one to five (label, text) lines
    environment: list[tuple[str, str]]
    sections: list[Section]
    tables: dict[str, pd.DataFrame]  # file name (TABLE_FILES) -> the table for a machine


# Kernel names (templated CUTLASS ones run to hundreds of characters) are cut to this in a
# one-line summary; the full name is inside.
SUMMARY_KERNEL_CHARS = 70
# A table cell's text up to this long is kept on one line (names, precisions, kernel names are
# one word anyway); longer text is a sentence that may wrap.
SHORT_TEXT_CHARS = 24
STATUS_WORDS = {"pass": "PASS", "fail": "MISMATCHES", "unchecked": "NOT CHECKED"}


# --- numbers ----------------------------------------------------------------------------------------

def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def redacted(report: Report, redactor: Redactor) -> Report:
    """`report` with every text in it passed through the redaction policy (scrub.Redactor):
    titles, verdict, environment, paragraphs, tables, details, and the tables for CSV. Redact
    before rendering: HTML's escapes (&amp;, &quot;) would hide a value from a pass over the page.
    A plot's pixels cannot be redacted: plots are drawn from traces already scrubbed."""
    r = redactor

    def block(item: Table | Figure | Details) -> Table | Figure | Details:
        if isinstance(item, Table):
            return Table(r(item.title), r.frame(item.frame))
        if isinstance(item, Figure):
            return Figure(r(item.title), item.png, r(item.caption))
        return Details(r(item.summary), [r(line) for line in item.lines],
                       None if item.frame is None else r.frame(item.frame))

    return Report(
        title=r(report.title), status=report.status,
        verdict=[(r(label), r(text)) for label, text in report.verdict],
        environment=[(r(label), r(text)) for label, text in report.environment],
        sections=[Section(r(s.title), [r(p) for p in s.intro], [block(b) for b in s.blocks]) for s in report.sections],
        tables={name: r.frame(table) for name, table in report.tables.items()})


# --- from checked traces ------------------------------------------------------------------------

def traces_report(result: verify.Verification, diagnosis: Diagnosis) -> Report:
    """What `gemmscope analyze` says about traces, as one report."""
    names = [t.path.name for t in result.traces]
    status, verdict = reports.verdict_block(result, diagnosis)
    environment = reports.trace_environment(result)
    sections = [_findings_section(diagnosis.findings), _breakdown_section(diagnosis),
                Section("GEMMs per module and pass", blocks=[Table("GEMMs per module and pass",
                                                                   reports._summary_frame(result))])]
    throughput = plots.trace_tflops_plot(result)
    if throughput is not None:
        sections.append(Section("GEMM throughput against the GPU's dense peak", blocks=[Figure.of(throughput)]))
    if result.expect_map:
        sections.insert(0, Section("Ranges checked (--expect-map)", blocks=[
            Table("Each NVTX range an --expect-map pattern names, against its recipe",
                  reports.ranges_frame(result.ranges_checked))]))
    if result.checked:
        mismatches = [Table("Mismatches (the requested precision did not run), grouped by layer × module × "
                            "pass × kernel", reports._mismatch_frame(result, False))]
        if len(result.allowed):
            mismatches.append(Table("Allowed mismatches", reports._mismatch_frame(result, True)))
        sections.append(Section("Mismatches", blocks=mismatches))
        if not result.coverage.empty:
            sections.append(Section("Coverage", blocks=[Table(reports.COVERAGE_TITLE, reports.coverage_groups(result))]))
    if not result.rank_comparison.empty:
        sections.append(Section("Ranks that ran other kernels than the rest",
                                blocks=[Table("Ranks that ran other kernels than the rest",
                                              reports.differing_ranks(result))]))
    sections.append(_gemm_details(result))
    return Report(title=f"gemmscope report: {', '.join(names)}", status=status, verdict=verdict,
                  environment=environment, sections=sections, tables=trace_tables(result, diagnosis))


def _gemm_details(result: verify.Verification) -> Section:
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
    decoded = kernels.decode_frame(pd.Series(groups["kernel"].unique())).set_index("name")
    blocks = []
    for row in groups.to_dict("records"):
        where = " · ".join(str(row[k]) if pd.notna(row[k]) else "?" for k in ("layer", "module", "pass"))
        verdict = "" if "verdict" not in row else f", {row['verdict']}" if pd.notna(row["verdict"]) else ", not checked"
        kernel = row["kernel"]
        if len(kernel) > SUMMARY_KERNEL_CHARS:
            kernel = kernel[:SUMMARY_KERNEL_CHARS] + "…"
        summary = (f"{where}: {kernel} ({row['precision']}{verdict}), "
                   f"{reports._count(row['launches'], 'launch', 'launches')}, {row['time_ns'] / 1e6:.3f} ms")
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
                   blocks=blocks)


def _findings_section(findings: list[dict]) -> Section:
    table = pd.DataFrame({"finding": [f["code"] for f in findings],
                          "time at stake ms": [_ms(f["explains_ns"]) for f in findings],
                          "what it says": [f["statement"] for f in findings]})
    details = []
    for f in findings:
        figures = [f"{key}: {json.dumps(reports._plain(value))}" for key, value in f["figures"].items()]
        concerns = pd.DataFrame(f["concerns"]) if f["concerns"] else None
        if concerns is not None and "time_ns" in concerns:
            concerns = concerns.assign(time_ms=concerns.pop("time_ns").map(_ms))
        details.append(Details(f"{f['code']}: figures" + (" and where the time is" if concerns is not None else ""),
                               figures, concerns))
    title = "Findings, most time at stake first"
    return Section(title, blocks=[Table(title, table), *details])


def _breakdown_section(diagnosis: Diagnosis) -> Section:
    frame = reports.breakdown_frame(diagnosis.breakdown)
    ms_columns = [c for c in frame.columns if c.endswith("_ms")]
    frame[ms_columns] = frame[ms_columns].map(lambda v: f"{v:.3f}")
    window = (f"Steps: NVTX ranges matching {diagnosis.step_range}, after the first." if diagnosis.step_range
              else f"The whole trace: {NO_STEPS}.")
    intro = [window + " Window = busy + idle; category times are kernel durations, which add up to more "
                      "than the busy time where streams overlap."]
    blocks: list[Table | Figure | Details] = [Table("Where the GPU time went, per rank", frame)]
    blocks += [Figure.of(plot) for plot in (plots.breakdown_plot(diagnosis), plots.steps_plot(diagnosis))
               if plot is not None]
    return Section("Where the GPU time went", intro=intro, blocks=blocks)


# --- from a profile run directory -----------------------------------------------------------------

def is_run_dir(path: Path) -> bool:
    """A `gemmscope profile` run directory (it writes spec.json, then results.json), as opposed
    to a folder of traces."""
    return path.is_dir() and any((path / name).is_file() for name in ("spec.json", "results.json"))


def run_report(run: ProfileRun, run_dir: Path) -> Report:
    """What `gemmscope profile` says about a run directory, as one report."""
    results = _results_json(run_dir)
    environment = _run_environment(run, results)
    status, verdict = reports.profile_verdict_block(run, reports.environment_line(environment))

    summary_tables = reports.profile_summary_tables(run)
    sections = [
        Section("Speedups over BF16", intro=[reports.device_line(run)],
                blocks=[Table(title, frame) for title, frame in summary_tables[:2]]
                + [Figure.of(plot) for plot in plots.profile_plots(run)]),
        Section("Every GEMM entry", intro=["Click a header to sort; each GEMM's full figures and kernels are "
                                           "in the next section."],
                blocks=[Table("Every GEMM entry", _entries_frame(run))]),
        _run_details(run),
        Section("Findings", blocks=[Table(title, frame) for title, frame in summary_tables[2:]]
                + [Table("GEMM kernels that ran (per mode, pass and precision)", reports.profile_kernel_table(run))]),
    ]
    return Report(title=f"gemmscope report: {run_dir.name} ({run.plan['model']} on {run.device['name']})",
                  status=status, verdict=verdict, environment=environment, sections=sections,
                  tables=run_tables(run))


def _results_json(run_dir: Path) -> dict:
    path = run_dir / "results.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not readable JSON ({exc})") from None


def _run_environment(run: ProfileRun, results: dict) -> list[tuple[str, str]]:
    device = devices.lookup(run.device["name"])
    gpu = f"{run.device['name']} ({run.device['sm']})" + (f" = {device.part}" if device else "")
    meta = run.trace_meta or {}
    # results.json records versions only where the run that wrote it did ("versions": {name: version}).
    versions = results.get("versions") or {}
    recorded = ", ".join(f"{name} {version}" for name, version in versions.items())
    return [("GPU", gpu), ("nsys", meta.get("nsys_version") or "no trace (run made with --no-nsys)"),
            ("TE / torch versions", recorded or "not recorded in results.json")]


# The columns of `reports.profile_pass_tables` that fit one sortable table of every entry.
_ENTRY_COLUMNS = ["op", "shape (MxKxN)", "precision", "e2e ms", "kernel ms", "speedup", "kernel % peak",
                  "quant %", "verdict"]


def _entries_frame(run: ProfileRun) -> pd.DataFrame:
    parts = []
    for title, frame in reports.profile_pass_tables(run):
        mode, pass_ = title.split(": ", 1)
        parts.append(frame[_ENTRY_COLUMNS].assign(mode=mode, **{"pass": pass_}))
    entries = pd.concat(parts)
    return entries[["mode", "pass", *_ENTRY_COLUMNS]]


def _run_details(run: ProfileRun) -> Section:
    """One <details> per mode × pass × GEMM: every recipe's figures and the kernel that ran, and
    TE's reason for what did not run."""
    blocks = []
    for title, frame in reports.profile_pass_tables(run):
        rows = run.gemms.loc[frame.index]
        frame = frame.assign(kernel=rows["kernel"].fillna(""))
        for op, part in frame.groupby("op", sort=False):
            speedups = ", ".join(f"{p} {s}" for p, s in zip(part["precision"], part["speedup"]) if s)
            flagged = int((part["verdict"] == "FALLBACK").sum())
            summary = (f"{title} · {op} ({part['shape (MxKxN)'].iat[0]}): {speedups or 'no speedup measured'}"
                       + (f"; {flagged} flagged" if flagged else ""))
            not_run = rows.loc[part.index][rows.loc[part.index, "status"] != "ok"]
            lines = [f"{precision} did not run ({status}): {reason}"
                     for precision, status, reason in zip(not_run["precision"], not_run["status"],
                                                          not_run["reason"].fillna("(no reason recorded)"))]
            blocks.append(Details(summary, lines, part.drop(columns=["op", "shape (MxKxN)"])))
    return Section("Per GEMM (mode · pass · op)",
                   intro=["Each line opens: every recipe's times, throughput, the reason for its speedup and "
                          "the kernel that ran, and TE's reason for what did not run."],
                   blocks=blocks)


# --- the tables as CSV ----------------------------------------------------------------------------

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


def trace_tables(result: verify.Verification, diagnosis: Diagnosis) -> dict[str, pd.DataFrame]:
    """`traces_report`'s tables for a machine, keyed by file name: the frames of `analyze`'s
    JSON (summary, breakdown, findings) and the per-step breakdown."""
    tables = {}
    if result.expect_map:
        tables["ranges-checked.csv"] = reports.ranges_table(result.ranges_checked)
    tables["gemms-per-module-pass.csv"] = result.summary
    tables["gemms-per-kernel.csv"] = result.groups
    if result.checked:
        tables["mismatches.csv"] = reports.mismatch_groups(result)
    if not result.rank_comparison.empty:
        differing = reports.differing_ranks(result)
        tables["ranks-differing.csv"] = differing.assign(
            differing_ranks=differing["differing_ranks"].map(lambda ranks: " ".join(map(str, ranks))))
    tables["unreadable-traces.csv"] = pd.DataFrame(result.unreadable, columns=["trace", "rank", "error"])
    tables["breakdown-per-rank.csv"] = diagnosis.breakdown
    tables["breakdown-per-step.csv"] = diagnosis.step_times
    findings = diagnosis.findings
    tables["findings.csv"] = pd.DataFrame(findings, columns=["code", "explains_ns", "statement"])
    tables["findings-figures.csv"] = pd.DataFrame(
        [(f["code"], name, value) for f in findings for name, value in _flat(reports._plain(f["figures"]))],
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


def run_tables(run: ProfileRun) -> dict[str, pd.DataFrame]:
    """`run_report`'s tables for a machine, keyed by file name: results.json's per-layer,
    full-model, memory and per-entry figures, the kernels that ran and what did not run. An
    entry that did not run counts no launches: blank, not 0."""
    ran = run.gemms["status"] == "ok"
    entries = run.gemms.assign(gemm_launches=run.gemms["gemm_launches"].astype("Int64").where(ran))
    return {
        "per-layer.csv": reports.profile_per_layer(run),
        "full-model.csv": run.full_model().reset_index(),
        "gemm-entries.csv": entries,
        "gemm-kernels.csv": reports.profile_kernels(run),
        "not-run.csv": reports.profile_not_run_table(run),
        "memory.csv": reports.profile_memory(run),
    }


def csv_text(table: pd.DataFrame) -> str:
    """A table as CSV: a header, a row per row, blank where a value is missing."""
    return table.to_csv(index=False, lineterminator="\n")


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


# --- rendering ------------------------------------------------------------------------------------

_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*(?:x|×|%|ms)?\s*$", re.IGNORECASE)


def _sort_value(value) -> float | None:
    """The number a cell sorts by ("1.66x" → 1.66, "99.5 %" → 99.5), or None for text."""
    value = reports._plain(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = _NUMBER.match(str(value))
    return float(match[1]) if match else None


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2125;
       margin: 0 auto; padding: 1.2em 2em 3em; max-width: 1500px; }
h1 { font-size: 1.45em; margin: 0.2em 0 0.6em; }
h2 { font-size: 1.2em; margin: 1.8em 0 0.5em; border-bottom: 1px solid #d0d7de; padding-bottom: 0.2em; }
h3 { font-size: 1em; margin: 1.2em 0 0.4em; }
#verdict { border: 2px solid; border-radius: 6px; padding: 0.6em 1em; margin-bottom: 1em; }
#verdict.pass { border-color: #1a7f37; background: #f0fff4; }
#verdict.fail { border-color: #cf222e; background: #fff5f5; }
#verdict.unchecked { border-color: #9a6700; background: #fffbea; }
#verdict .status { font-weight: 700; font-size: 1.1em; margin-bottom: 0.3em; }
#verdict.pass .status { color: #1a7f37; } #verdict.fail .status { color: #cf222e; }
#verdict.unchecked .status { color: #9a6700; }
#verdict dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.15em 1em; margin: 0; }
#verdict dt { font-weight: 600; }
#verdict dd { margin: 0; }
.scroll { overflow: auto; max-width: 100%; max-height: 40em; }
table { border-collapse: collapse; font-size: 12.5px; margin: 0.3em 0 1em; }
th, td { border: 1px solid #d0d7de; padding: 2px 7px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.short { white-space: nowrap; } td.prose { min-width: 18em; }
thead th { background: #f3f4f6; position: sticky; top: 0; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th:hover { background: #e5e7eb; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
tbody tr:nth-child(even) { background: #fafbfc; }
details { margin: 0.15em 0; }
details > summary { cursor: pointer; padding: 1px 0; }
details[open] { margin-bottom: 0.6em; }
details .lines { margin: 0.3em 0 0.3em 1.4em; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
                 font-size: 12px; white-space: pre-wrap; word-break: break-all; }
figure { margin: 0.5em 0 1em; } figure img { max-width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: 12.5px; }
.empty { color: #57606a; font-style: italic; }
"""

# Click a header: sort its table's rows by that column (numbers by value, else text; empty last).
_SORT_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], column = th.cellIndex;
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = rows.every(function (r) {
      var c = r.cells[column]; return c.textContent.trim() === "" || c.hasAttribute("data-sort");
    });
    function key(r) {
      var c = r.cells[column];
      return numeric ? (c.hasAttribute("data-sort") ? Number(c.getAttribute("data-sort")) : null) : c.textContent;
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || x === "") return 1;
      if (y === null || y === "") return -1;
      var order = numeric ? x - y : x.localeCompare(y);
      return ascending ? order : -order;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def to_html(report: Report) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{e(report.title)}</title>", f"<style>{_CSS}</style></head><body>",
             f"<h1>{e(report.title)}</h1>",
             f'<section id="verdict" class="{report.status}">'
             f'<div class="status">{e(STATUS_WORDS[report.status])}</div><dl>']
    parts += [f"<dt>{e(label)}</dt><dd>{e(text)}</dd>" for label, text in report.verdict]
    parts.append("</dl></section>")
    for section in report.sections + [_environment_section(report)]:
        parts.append(f"<section><h2>{e(section.title)}</h2>")
        parts += [f"<p>{e(p)}</p>" for p in section.intro]
        parts += [_html_block(block, section.title) for block in section.blocks]
        parts.append("</section>")
    parts.append(f"<script>{_SORT_JS}</script></body></html>\n")
    return "\n".join(parts)


def _environment_section(report: Report) -> Section:
    return Section("Environment", blocks=[Table("Environment", pd.DataFrame(report.environment,
                                                                            columns=["what", "value"]))])


def _html_block(block: Table | Figure | Details, section_title: str) -> str:
    e = html.escape
    if isinstance(block, Table):
        heading = f"<h3>{e(block.title)}</h3>" if block.title != section_title else ""
        return heading + _html_table(block.frame, sortable=True)
    if isinstance(block, Figure):
        data = base64.b64encode(block.png).decode("ascii")
        return (f'<figure><img alt="{e(block.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{e(block.caption)}</figcaption></figure>")
    lines = "".join(f"<div>{e(line)}</div>" for line in block.lines)
    body = (f'<div class="lines">{lines}</div>' if lines else "") + (
        _html_table(block.frame, sortable=False) if block.frame is not None else "")
    return f"<details><summary>{e(block.summary)}</summary>{body}</details>"


def _html_table(frame: pd.DataFrame, sortable: bool) -> str:
    e = html.escape
    if frame.empty:
        return '<p class="empty">(none)</p>'
    head = "".join(f"<th>{e(str(c))}</th>" for c in frame.columns)
    rows = []
    for row in frame.itertuples(index=False):
        cells = []
        for value in row:
            number = _sort_value(value)
            text = e(reports._cell(value))
            if number is not None:
                cells.append(f'<td class="num" data-sort="{number!r}">{text}</td>')
            else:  # short text stays on one line; a sentence gets room to wrap in
                cells.append(f'<td class="{"prose" if len(text) > SHORT_TEXT_CHARS else "short"}">{text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    css_class = ' class="sortable"' if sortable else ""
    return (f'<div class="scroll"><table{css_class}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def to_markdown(report: Report) -> str:
    """The same report for an issue comment: GitHub renders <details> in Markdown too."""
    parts = [f"# {report.title}\n", f"**{STATUS_WORDS[report.status]}**\n"]
    parts += [f"- **{label}**: {text}" for label, text in report.verdict]
    for section in report.sections + [_environment_section(report)]:
        parts.append(f"\n## {section.title}\n")
        parts += [f"{p}\n" for p in section.intro]
        for block in section.blocks:
            if isinstance(block, Table):
                parts += ([f"### {block.title}\n"] if block.title != section.title else []) + [
                    reports.markdown_table(block.frame)]
            elif isinstance(block, Figure):
                parts.append(f"_Plot: {block.title} (in the HTML report: `gemmscope report … -o report.html`)._\n")
            else:
                body = "\n".join(f"    {line}" for line in block.lines)
                table = reports.markdown_table(block.frame) if block.frame is not None else ""
                parts.append(f"<details><summary>{html.escape(block.summary)}</summary>\n\n{body}\n\n{table}\n"
                             "</details>\n")
    return "\n".join(parts) + "\n"


def render(report: Report, fmt: str) -> str:
    if fmt not in FORMATS:
        raise InputError(f"unknown report format {fmt!r}: choose from {', '.join(FORMATS)}")
    return to_html(report) if fmt == "html" else to_markdown(report)
