"""Turn analysis frames into what people read and attach: rich tables, JSON, CSV, Markdown."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from gemmscope import devices, te_ranges
from gemmscope.diagnosis import CATEGORIES, NO_STEPS, Diagnosis
from gemmscope.jsonable import frame_records
from gemmscope.jsonable import plain as _plain
from gemmscope.shapes import Gemm
from gemmscope.traces.model import Trace
from gemmscope.verify import Verification, recorded_recipes

FORMATS = ("table", "json", "jsonl", "csv", "markdown")

# The version of every JSON document gemmscope writes (`schema_version`, a top-level key): it
# changes when a key is removed or renamed, or a value changes type, unit or meaning; a new key or
# a new value of an enumeration leaves it.
SCHEMA_VERSION = "2"

_GEMM_FIELDS = ("kernel", "role", "precision", "start_ns", "duration_ns", "trace", "rank", "thread",
                "ranges", "te_module", "te_name", "layer", "layer_number", "te_pass", "pass_source", "requested_a",
                "requested_b", "requested", "requested_scale", "origin")


def _gemm_fields(result: Verification) -> list[str]:
    return (list(_GEMM_FIELDS) + (["expected", "verdict", "cause", "allowed", "asked_high"] if result.checked else [])
            + (["expect_range"] if result.expect_map else []))


def gemm_records(gemms: pd.DataFrame, result: Verification) -> list[dict]:
    """`gemms` (rows of result.gemms) as JSON-able records, one per launch."""
    g = gemms.rename(columns={"name": "kernel", "start": "start_ns"})
    g["ranges"] = result.ranges.lists(g["kernel_row"].to_numpy()) if len(g) else []
    return [{f: _plain(row[f]) for f in _gemm_fields(result)} for row in g.to_dict("records")]


# GEMM launches formatted at a time by `launch_lines`: what it holds stays bounded however many
# launches a trace has.
JSONL_CHUNK = 10_000


def launch_lines(result: Verification) -> Iterator[str]:
    """`--format jsonl`: one JSON object per GEMM launch, a line each (the records --per-launch
    adds to the JSON document; common.schema.json's gemm_launch), made a chunk at a time."""
    for start in range(0, len(result.gemms), JSONL_CHUNK):
        for record in gemm_records(result.gemms.iloc[start:start + JSONL_CHUNK], result):
            yield json.dumps(record) + "\n"


# A low precision's dense peak over BF16's, on Hopper and Blackwell (FP8 vs BF16): what running a
# GEMM asked for high precision in low precision could gain at most.
LOW_PRECISION_RATE = 2.0


def coverage_groups(result: Verification) -> pd.DataFrame:
    """The GEMMs asked for high precision (Verification.coverage) per layer × module × what was
    asked: the passes, launches, time and share of all GEMM time, in layer order."""
    g = result.gemms
    columns = ["layer", "layer_number", "module", "asked", "passes", "launches", "time_ns", "share"]
    high = result.coverage
    if high.empty:
        return pd.DataFrame(columns=columns)
    keys = ["layer", "layer_number", "module", "expected"]
    out = high.groupby(keys, dropna=False, sort=False).agg(
        passes=("te_pass", lambda p: "+".join(dict.fromkeys(p.fillna("?")))),
        launches=("duration_ns", "size"), time_ns=("duration_ns", "sum")).reset_index()
    out = out.rename(columns={"expected": "asked"})
    out["share"] = out["time_ns"] / g["duration_ns"].sum()
    return out.sort_values(["layer_number", "layer"], na_position="last", ignore_index=True)[columns]


COVERAGE_TITLE = "Coverage: GEMMs that asked for high precision (not a failure)"


def coverage_document(result: Verification) -> dict:
    g = result.gemms
    high = result.coverage
    total = int(g["duration_ns"].sum())
    own = g[g["requested"].notna() & g["expected"].notna()] if "expected" in g else g.iloc[0:0]
    low = own.loc[~own["asked_high"], "duration_ns"].sum()
    high_ns = int(high["duration_ns"].sum())
    return {"gemm_launches": len(high), "time_ns": high_ns, "time_share": _plain(high_ns / total) if total else None,
            "low_precision_time_share": _plain(low / total) if total else None,
            "saved_at_most_ns": int(high_ns * (1 - 1 / LOW_PRECISION_RATE)),
            "groups": frame_records(coverage_groups(result))}


def check_mode(result: Verification) -> str:
    if result.strict:
        return "recipe"
    return "per-gemm" if result.checked else "none"


def summary_document(result: Verification) -> dict:
    g = result.gemms
    doc: dict[str, Any] = {
        "expected": result.expected,
        "mode": check_mode(result),
        "gemm_launches": len(g),
        "gemm_time_ns": int(g["duration_ns"].sum()) if len(g) else 0,
        "gemm_tail_time_ns": result.tails_ns,
        "by_precision": {k: int(v) for k, v in g["precision"].value_counts().items()} if len(g) else {},
        "by_module_pass": frame_records(result.summary),
        "groups": frame_records(result.groups),
        "ranks": sorted(int(r) for r in g["rank"].dropna().unique()) if len(g) else [],
        "rank_comparison": frame_records(result.rank_comparison),
        "unreadable_traces": _plain(result.unreadable),
        "traces_without_kernels": _plain(result.without_kernels),
        "autotuning_gemm_launches": len(result.autotuning),
        "autotuning_gemm_time_ns": int(result.autotuning["duration_ns"].sum()) if len(result.autotuning) else 0,
    }
    if result.expect_map:
        doc["expect_map"] = [{"pattern": p, "recipe": r} for p, r in result.expect_map]
        doc["ranges_checked"] = frame_records(result.ranges_checked)
    if result.checked:
        doc["verdicts"] = {k: int(v) for k, v in g["verdict"].value_counts().items()} if len(g) else {}
        checked = g[g["verdict"].notna()] if len(g) else g
        total = int(checked["duration_ns"].sum()) if len(g) else 0
        ok = checked.loc[checked["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), "duration_ns"].sum() if len(g) else 0
        doc["expected_time_share"] = _plain(ok / total) if total else None
        doc["unchecked_gemm_launches"] = len(g) - len(checked)
        doc["mismatches"] = len(result.mismatches)
        doc["allowed"] = len(result.allowed)
        if not result.strict:
            doc["coverage"] = coverage_document(result)
        if len(g) == 0:
            doc["note"] = f"no GEMM kernel ran: nothing ran at {' or '.join(result.expected_recipes)}"
    elif len(g) == 0:
        doc["note"] = "no GEMM kernel in this trace"
    return doc


def _trace_meta(trace: Trace) -> dict:
    return {
        "trace": str(trace.path),
        "nsys_version": trace.meta["nsys_version"],
        "schema_version": trace.meta["schema_version"],
        "gpus": [{k: _plain(v) for k, v in g.items()} for g in trace.meta["gpus"]],
        "profiler": trace.meta["profiler"],
        "lacks": trace.meta["lacks"],
    }


def _meta(result: Verification, command: dict | None) -> dict:
    """The first trace's meta at the top level (one trace: as before), every trace under
    `traces`, and the profiled command's outcome when gemmscope ran it."""
    metas = [_trace_meta(t) for t in result.traces]
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
        "findings": _plain(diagnosis.findings),
    }


def analysis_document(result: Verification, command: dict | None = None, diagnosis: Diagnosis | None = None,
                      per_launch: bool = False) -> dict:
    """`gemmscope analyze --format json`: meta, summary (GEMMs grouped per layer, module, pass and
    kernel), the breakdown and findings; with `per_launch`, one object per GEMM launch too (a
    long job has hundreds of thousands)."""
    doc = {"schema_version": SCHEMA_VERSION, "meta": _meta(result, command)}
    if per_launch:
        doc["gemms"] = gemm_records(result.gemms, result)
    doc["summary"] = summary_document(result)
    return doc | (diagnosis_document(diagnosis) if diagnosis else {})


def verification_document(result: Verification, command: dict | None = None,
                          diagnosis: Diagnosis | None = None, per_launch: bool = False) -> dict:
    """`gemmscope verify --format json`: summary (mismatches grouped in its `groups`), the
    breakdown and findings; with `per_launch`, the non-allowed and the allowed mismatches one
    object per launch too."""
    doc = {"schema_version": SCHEMA_VERSION, "meta": _meta(result, command), "summary": summary_document(result)}
    if per_launch:
        records = gemm_records(result.gemms[result.gemms["verdict"] == "FALLBACK"], result) if result.checked else []
        doc["mismatches"] = [r for r in records if not r["allowed"]]
        doc["allowed"] = [r for r in records if r["allowed"]]
    return doc | (diagnosis_document(diagnosis) if diagnosis else {})


def breakdown_frame(breakdown: pd.DataFrame) -> pd.DataFrame:
    """The per-rank breakdown for people: milliseconds and shares."""
    out = pd.DataFrame({"rank": breakdown["rank"], "window_ms": breakdown["window_ns"] / 1e6,
                        "idle": (breakdown["idle_share"] * 100).round(1).astype(str) + " %",
                        "launches": breakdown["kernel_launches"]})
    for category in CATEGORIES:
        out[f"{category}_ms"] = breakdown[f"{category}_ns"] / 1e6
    return out


def findings_frame(findings: list[dict]) -> pd.DataFrame:
    return pd.DataFrame({"finding": [f["code"] for f in findings], "what it says": [f["statement"] for f in findings]})


def _summary_frame(result: Verification) -> pd.DataFrame:
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


def mismatch_groups(result: Verification) -> pd.DataFrame:
    """The layer × module × pass × kernel groups whose requested precision did not run, allowed
    ones included (`allowed` says which)."""
    return result.groups[result.groups["verdict"] == "FALLBACK"]


def differing_ranks(result: Verification) -> pd.DataFrame:
    """The layer × module × pass where some ranks ran other kernels than the rest."""
    comparison = result.rank_comparison
    return comparison[comparison["differing_ranks"].map(len) > 0]


def _mismatch_frame(result: Verification, allowed: bool) -> pd.DataFrame:
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


def markdown_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_(none)_\n"
    cells = [[_cell(v) for v in row] for row in frame.itertuples(index=False)]
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    return "\n".join([header, rule, *body]) + "\n"


def _cell(value: Any) -> str:
    value = _plain(value)
    if value is None:
        return ""
    if isinstance(value, float):
        # four significant digits, and no exponent where the integer part alone says more
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


# --- text for the terminal -------------------------------------------------------------------------

# `table` output fits this many columns: the verdict block wraps at it, and the tables after it are
# narrowed to it (prose wrapped, long kernel and layer names shortened in the middle; JSON, CSV,
# Markdown and HTML keep every name whole).
TERMINAL_WIDTH = 100
# Between two columns: a space of padding and the box's blank vertical line; one more space of
# padding closes the last column.
_GAP = 2
# A column of prose (a finding, a reason) wraps, down to this width, before any name is shortened;
# a name is never shortened below _NAME_WIDTH (a kernel name keeps its family, arch and layout).
_PROSE_WIDTH = 24
_NAME_WIDTH = 21
# A cell that reads as a number ("12", "0.4521", "1.73x", "45.6 %"): its column is right-aligned.
_NUMBER_CELL = re.compile(r"[-+]?\d[\d.]*(?:e[-+]?\d+)?(?: ?[x×%])?")
# The indent (and diff sign) before a name on a cell's second and later lines.
_INDENT = re.compile(r"^(\s*(?:[−+] )?)(.*)$")

Shortener = Callable[[str, int], str]


def shorten_middle(text: str, width: int) -> str:
    """A long kernel name cut in the middle, keeping its family at the front and its layout at
    the end: "nvjet_sm90_qqtst_128x…_bz_coopA_TNN"."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def shorten_layer(name: str, width: int) -> str:
    """A long layer name (an attribute path) cut to `width`, keeping the path up to the layer's
    index and as many whole components of its end as fit: "decoder.layers.23.…linear_qkv"; a
    name without an index is cut in the middle."""
    if len(name) <= width:
        return name
    parts = name.split(".")
    index = next((i for i, part in enumerate(parts) if part.isdigit()), None)
    head = ".".join(parts[:index + 1]) + "." if index is not None else ""
    rest = parts[index + 1:] if index is not None else []
    room = width - len(head) - 1
    tails = [".".join(rest[k:]) for k in range(len(rest))]
    tail = next((t for t in tails if len(t) <= room), None)
    if tail is None:
        return shorten_middle(name, width)
    return head + "…" + tail


def _shorten_where(text: str, width: int) -> str:
    """"layer · module" cut to `width`: the layer shortened first, the module kept while it can be."""
    layer, sep, module = text.rpartition(" · ")
    if sep and width - len(sep + module) >= 12:
        return shorten_layer(layer, width - len(sep + module)) + sep + module
    return shorten_layer(text, width)


def shorten_gemm_cell(text: str, width: int) -> str:
    """A cell whose first line says where a GEMM ran ("layer · module") and whose further lines,
    indented, name kernels: each line cut to `width` (names in the middle, the indent kept)."""
    first, *kernel_lines = text.split("\n")
    lines = [_shorten_where(first, width)]
    for line in kernel_lines:
        indent, name = _INDENT.match(line).groups()
        lines.append(indent + shorten_middle(name, max(width - len(indent), 1)))
    return "\n".join(lines)


def _text_width(text: str) -> int:
    return max(cell_len(line) for line in text.split("\n"))


def _said_once(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The `columns` that hold one value in every row of a table of several rows, taken out of it,
    with that value: the table's heading says it once."""
    if len(frame) < 2:
        return frame, {}
    constant = {c: frame[c].iloc[0] for c in columns if c in frame and frame[c].nunique(dropna=False) == 1}
    return frame.drop(columns=list(constant)), constant


def _blank_repeats(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """A grouped table's keys said once per group: each key blank where it and the keys before it
    repeat the row above."""
    out = frame.copy()
    repeats = pd.Series(True, index=frame.index)
    for key in keys:
        text = frame[key].map(_cell)
        repeats &= text.eq(text.shift())
        out[key] = text.where(~repeats, "")
    return out


def terminal_table(frame: pd.DataFrame, shorten: dict[str, Shortener] | None = None,
                   wrap: Collection[str] = ()) -> Table:
    """`frame` as a table that fits TERMINAL_WIDTH columns: its `wrap` columns (prose) wrap first, down to
    _PROSE_WIDTH; then its `shorten` columns are cut by their shortener, the widest first, down to
    _NAME_WIDTH. Only the columns of prose wrap: names and numbers stay on their line."""
    shorten = shorten or {}
    cells = {c: frame[c].map(_cell) for c in frame.columns}
    natural = {c: max([_text_width(str(c)), *(cells[c].map(_text_width) if len(frame) else [])])
               for c in frame.columns}
    widths = dict(natural)
    room = TERMINAL_WIDTH - 1 - _GAP * (len(widths) - 1)
    for narrowable, floor in ((wrap, _PROSE_WIDTH), (shorten, _NAME_WIDTH)):
        floors = {c: max(floor, _text_width(str(c))) for c in narrowable if c in widths}
        while sum(widths.values()) > room:
            over = [c for c in floors if widths[c] > floors[c]]
            if not over:
                break
            widths[max(over, key=widths.get)] -= 1
    for column, shortener in shorten.items():
        if column in cells and widths[column] < natural[column]:
            cut = {v: shortener(v, widths[column]) for v in cells[column].unique()}
            cells[column] = cells[column].map(cut)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    for column in frame.columns:
        filled = cells[column][cells[column] != ""]
        numeric = len(filled) > 0 and filled.str.fullmatch(_NUMBER_CELL).all()
        table.add_column(str(column), justify="right" if numeric else "left", no_wrap=column not in wrap,
                         overflow="fold")
    for row in zip(*cells.values()):
        table.add_row(*row)
    return table


@dataclass
class TextSection:
    """A heading, the lines that say once what holds for every row, a table (none: the heading
    says it all, e.g. "Mismatches: none") and lines under it."""

    title: str
    table: Table | None = None
    before: list[str] = field(default_factory=list)
    after: list[str | Table] = field(default_factory=list)


def terminal_text(*parts: str | Table | TextSection) -> str:
    """Lines of text and sections as `table` output prints them: in TERMINAL_WIDTH columns, a blank
    line before each section, no trailing spaces."""
    console = Console(file=io.StringIO(), width=TERMINAL_WIDTH, record=True, markup=False, highlight=False,
                      emoji=False)
    for part in parts:
        if not isinstance(part, TextSection):
            console.print(part, overflow="fold")
            continue
        console.print()
        for line in [part.title, *part.before]:
            console.print(line, overflow="fold")
        if part.table is not None:
            console.print(part.table)
        for line in part.after:
            console.print(line, overflow="fold")
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


def _section(title: str, frame: pd.DataFrame, shorten: dict[str, Shortener] | None = None,
             wrap: Collection[str] = (), before: Sequence[str] = ()) -> TextSection:
    """A titled table; for an empty frame, the title says "none"."""
    if frame.empty:
        return TextSection(f"{title}: none")
    return TextSection(title, terminal_table(frame, shorten, wrap), before=list(before))


def table_text(title: str, frame: pd.DataFrame, wrap: Collection[str] = ()) -> str:
    """One table under its title, in TERMINAL_WIDTH columns (`shapes`, `doctor`)."""
    return terminal_text(_section(title, frame, wrap=wrap)).lstrip("\n")


def kernels_text(decoded: pd.DataFrame) -> str:
    """`gemmscope kernel`: what each name says, a row per name, numbered; the names in full under
    the table, where each has the width of the terminal."""
    numbered = decoded.drop(columns="name").rename_axis("#").reset_index()
    numbered["#"] += 1
    return terminal_text(TextSection("kernels", terminal_table(numbered)), "",
                         _legend(numbered["#"].astype(str), decoded["name"])).lstrip("\n")


def _legend(keys: Sequence[str], names: Sequence[str]) -> Table:
    """Names said once, each after its key, in full: a name longer than the line folds under itself."""
    legend = Table.grid(padding=(0, 2, 0, 0))
    legend.add_column(no_wrap=True)
    legend.add_column(overflow="fold")
    for key, name in zip(keys, names):
        legend.add_row(key, name)
    return legend


def _headline(result: Verification) -> str:
    doc = summary_document(result)
    first = result.traces[0]
    names = first.path.name if len(result.traces) == 1 else f"{len(result.traces)} traces"
    gpu_names = dict.fromkeys(f"{g['name']} ({g['sm']})" for t in result.traces for g in t.meta["gpus"])
    ranks = f", ranks {', '.join(map(str, doc['ranks']))}" if len(doc["ranks"]) > 1 else ""
    line = (f"{names}: {first.meta['profiler']}, {', '.join(gpu_names) or 'GPU unknown'}{ranks}; "
            f"{doc['gemm_launches']} GEMM launches, {doc['gemm_time_ns'] / 1e6:.3f} ms of GEMM kernels")
    if result.checked:
        share = doc["expected_time_share"]
        line += (f"; expected {_asked_recipes(result)}: {doc['mismatches']} mismatch(es), {doc['allowed']} allowed"
                 + (f", {share * 100:.1f} % of GEMM time at the expected precision" if share is not None else ""))
    if "note" in doc:
        line += f"; {doc['note']}"
    if result.unreadable:
        line += f"; {len(result.unreadable)} trace(s) could not be read"
    return line


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """"1 rank", "2 ranks", "1 entry", "3 entries"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def shares_by_precision(gemms: pd.DataFrame) -> str:
    """"fp8 92.1 %, bf16 7.9 %": each precision's share of GEMM kernel time, largest first."""
    by_precision = gemms.groupby(gemms["precision"].fillna("unknown"))["duration_ns"].sum()
    total = by_precision.sum()
    return ", ".join(f"{p} {100 * t / total:.1f} %" for p, t in by_precision.sort_values(ascending=False).items())


def top_findings(findings: list[dict]) -> str:
    if not findings:
        return "none"
    first, rest = findings[0], [f["code"] for f in findings[1:4]]
    return f"{first['code']}: {first['statement']}" + (f"; then {', '.join(rest)}" if rest else "")


def trace_environment(result: Verification) -> list[tuple[str, str]]:
    gpus = dict.fromkeys(f"{gpu['name']} ({gpu['sm']})" for t in result.traces for gpu in t.meta["gpus"])
    nsys = dict.fromkeys(str(t.meta["nsys_version"]) for t in result.traces)
    profilers = dict.fromkeys(t.meta["profiler"] for t in result.traces)
    ranks = summary_document(result)["ranks"]
    traces = _count(len(result.traces), "file") + (f", ranks {', '.join(map(str, ranks))}" if ranks else "")
    software = next((v for t in result.traces if (v := te_ranges.recorded_software(t.nvtx["name"]))), None)
    if software is None:
        versions = "not recorded (nsys records none; gemmscope verify's hook does)"
    else:
        versions = ", ".join(f"{label} {software.get(key) or 'unknown'}" for key, label in
                             (("torch", "torch"), ("cuda", "CUDA"), ("transformer_engine", "TE"), ("cublaslt", "cuBLASLt")))
    made_by = ("nsys", ", ".join(nsys)) if all(t.sqlite for t in result.traces) else ("profiler", ", ".join(profilers))
    return [("GPU", ", ".join(gpus) or "unknown"), made_by, ("traces", traces),
            ("software", versions)]


def environment_line(environment: list[tuple[str, str]]) -> str:
    return "; ".join(f"{label}: {value}" for label, value in environment)


def verdict_block(result: Verification, diagnosis: Diagnosis) -> tuple[str, list[tuple[str, str]]]:
    """The answer first: a status ("pass", "fail", "unchecked") and five labelled lines (what was
    asked, what ran, the GEMM time at the requested precision, the top findings, the environment)."""
    g = result.gemms
    doc = summary_document(result)
    ranks = doc["ranks"]
    ran = (f"{_count(doc['gemm_launches'], 'GEMM launch', 'GEMM launches')}, {doc['gemm_time_ns'] / 1e6:.3f} ms "
           f"of GEMM kernels, on {_count(len(ranks) or 1, 'rank')}")
    if len(g):
        ran += f": {shares_by_precision(g)} of GEMM time"
    if "note" in doc:
        ran += f"; {doc['note']}"
    if result.checked or result.expect_map:
        status = "fail" if result.failed else "pass"
        asked = _asked_recipes(result)
        share = doc["expected_time_share"]
        at = ("the recipe asked of each" if result.expect_map else result.expected if result.strict
              else "the precision each asked")
        at_precision = ((f"{share * 100:.1f} % of GEMM time" if share is not None else "no GEMM time")
                        + f" at {at}; "
                          f"{_count(doc['mismatches'], 'mismatch', 'mismatches')}, {doc['allowed']} allowed")
        if "coverage" in doc:
            at_precision += "; " + coverage_line(result, doc["coverage"])
        if result.expect_map:
            at_precision += "; ranges: " + _ranges_verdicts(result.ranges_checked)
        if doc.get("unchecked_gemm_launches"):
            at_precision += f"; {_count(doc['unchecked_gemm_launches'], 'GEMM launch', 'GEMM launches')} " \
                            "outside every mapped range, not checked"
    else:
        status = "unchecked"
        asked = "no recipe: no --expect, and the run recorded no enabled te.autocast"
        at_precision = "not checked (no recipe to check against); precisions are listed as they ran"
    if result.unreadable:
        at_precision += f"; {_count(len(result.unreadable), 'trace')} could not be read"
    environment = environment_line(trace_environment(result))
    return status, [("Asked", asked), ("Ran", ran), ("At the requested precision", at_precision),
                    ("Top findings", top_findings(diagnosis.findings)), ("Environment", environment)]


def coverage_line(result: Verification, coverage: dict) -> str:
    """Coverage in one line: the share of GEMM time asked for high precision and where most of it is."""
    if not coverage["gemm_launches"]:
        return "coverage: every GEMM asked for low precision"
    groups = coverage_groups(result)
    numbers = groups["layer_number"].dropna().astype(int).unique().tolist()
    other = groups.loc[groups["layer_number"].isna(), "layer"].dropna().unique().tolist()
    where = ([f"{'layer' if len(numbers) == 1 else 'layers'} {', '.join(map(str, numbers))}"] if numbers else []) + other
    return (f"coverage: {coverage['time_share'] * 100:.1f} % of GEMM time asked for high precision"
            + (f" ({'; '.join(where)})" if where else "")
            + f", at most {coverage['saved_at_most_ns'] / 1e6:.3f} ms to gain in low precision")


def _asked_recipes(result: Verification) -> str:
    """What each GEMM was checked against: "fp8-current (--expect)", each GEMM's own request, or
    the map and what holds outside it."""
    default = None
    if not result.strict and result.checked:
        recorded = recorded_recipes(result.traces)
        default = "what each GEMM asked (gemmscope's hook records)" + (
            f"; te.autocast recipes recorded: {', '.join(recorded)}" if recorded else "")
    elif result.expected:
        recorded = recorded_recipes(result.traces)
        source = ("the recipe the run's te.autocast recorded" if recorded == [result.expected] and not result.strict
                  else "--expect" + (f"; the run's te.autocast recorded {', '.join(recorded)}"
                                     if recorded and recorded != [result.expected] else ""))
        default = f"{result.expected} ({source})"
    if not result.expect_map:
        return default or "nothing"
    mapped = ", ".join(f"{p}={r}" for p, r in result.expect_map)
    return f"by NVTX range (--expect-map): {mapped}; elsewhere {default or 'nothing (not checked)'}"


def _ranges_verdicts(ranges: pd.DataFrame) -> str:
    """"4 OK, 1 NO GEMM (MXFP8_4096x4096x4096)": the mapped ranges' verdicts, the failing ones named."""
    parts = []
    for verdict, rows in ranges.groupby("verdict", sort=False):
        named = "" if verdict == "OK" else " (" + ", ".join(rows["range"].fillna(rows["pattern"]).astype(str)) + ")"
        parts.append(f"{len(rows)} {verdict}{named}")
    return ", ".join(parts)


STATUS_WORDS = {"pass": "PASS", "fail": "MISMATCHES", "unchecked": "NOT CHECKED"}


def _verdict_text(status: str, lines: list[tuple[str, str]]) -> str:
    return "\n".join([STATUS_WORDS[status], *(f"{label}: {text}" for label, text in lines)])


def render_verification(result: Verification, fmt: str, document: dict, diagnosis: Diagnosis | None = None,
                        detail: str = "normal") -> str:
    """Text of an analyze/verify result in `fmt`; `document` is its JSON form."""
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        frame = pd.DataFrame(gemm_records(result.gemms, result), columns=_gemm_fields(result))
        frame["ranges"] = frame["ranges"].map(" > ".join)
        frame.to_csv(buf, index=False)
        return buf.getvalue()
    sections = [("GEMMs per module and pass", _summary_frame(result))]
    if result.expect_map:
        sections.insert(0, ("Ranges checked (--expect-map)", ranges_frame(result.ranges_checked)))
    if result.checked:
        sections.append(("Mismatches (requested precision did not run)", _mismatch_frame(result, False)))
        if len(result.allowed):
            sections.append(("Allowed mismatches", _mismatch_frame(result, True)))
        if not result.coverage.empty:
            sections.append((COVERAGE_TITLE, coverage_groups(result)))
    if not result.rank_comparison.empty:
        sections.append(("Ranks that ran other kernels than the rest", differing_ranks(result)))
    if result.unreadable:
        sections.append(("Traces that could not be read (the others are checked)", pd.DataFrame(result.unreadable)))
    if diagnosis is not None:
        sections.append((breakdown_title(diagnosis), breakdown_frame(diagnosis.breakdown)))
        sections.append(("Findings, most time at stake first", findings_frame(diagnosis.findings)))
    if detail == "verbose":
        launches = pd.DataFrame(gemm_records(result.gemms, result), columns=_gemm_fields(result))
        launches["ranges"] = launches["ranges"].map(" > ".join)
        sections.append(("Every GEMM launch", launches))
    title = ", ".join(t.path.name for t in result.traces)
    verdict = _verdict_text(*verdict_block(result, diagnosis)) if diagnosis is not None else _headline(result)
    if fmt == "markdown":
        parts = [f"# gemmscope: {title}\n", verdict.replace("\n", "  \n") + "\n"]
        if detail == "quiet":
            return "\n".join(parts)
        for title, frame in sections:
            parts += [f"\n## {title}\n", markdown_table(frame)]
        return "\n".join(parts)
    if detail == "quiet":
        return terminal_text(verdict)
    return terminal_text(verdict, *_verification_sections(result, diagnosis, detail))


def diagnosis_text(result: Verification, diagnosis: Diagnosis) -> str:
    """`gemmscope diagnose`: the verdict block, where the GPU time went and the findings."""
    return terminal_text(_verdict_text(*verdict_block(result, diagnosis)), *_diagnosis_sections(diagnosis))


def _diagnosis_sections(diagnosis: Diagnosis) -> list[TextSection]:
    return [*_breakdown_sections(diagnosis), _findings_section("Findings, most time at stake first", diagnosis.findings)]


def _verification_sections(result: Verification, diagnosis: Diagnosis | None, detail: str) -> list[TextSection]:
    """analyze's and verify's tables for the terminal, in the order of their Markdown."""
    sections = [_summary_section(result)]
    if len(result.autotuning):
        sections.insert(0, TextSection(_autotuning_note(result)))
    if result.expect_map:
        sections.insert(0, _section("Ranges checked (--expect-map)", ranges_frame(result.ranges_checked),
                                    {"range": shorten_middle}))
    if result.checked:
        sections += _mismatch_sections(result, allowed=False)
        if len(result.allowed):
            sections += _mismatch_sections(result, allowed=True)
        if not result.coverage.empty:
            sections.append(_coverage_section(result))
    if not result.rank_comparison.empty:
        sections.append(_ranks_section(result))
    if result.unreadable:
        sections.append(_section("Traces that could not be read (the others are checked)",
                                 pd.DataFrame(result.unreadable), wrap={"error"}))
    if diagnosis is not None:
        sections += _diagnosis_sections(diagnosis)
    if detail == "verbose":
        sections.append(_launches_section(result))
    return sections


def _coverage_section(result: Verification) -> TextSection:
    groups = coverage_groups(result)
    frame = pd.DataFrame({"layer · module": _where(groups["layer"], groups["module"]),
                          "passes": groups["passes"], "asked": groups["asked"],
                          "launches": groups["launches"], "time ms": groups["time_ns"] / 1e6,
                          "of GEMM time": (groups["share"] * 100).round(1).astype(str) + " %"})
    rows, shared = _said_once(frame, ["asked"])
    before = ["GEMMs that asked for high precision ran as asked (not a failure): what low precision does not "
              "cover" + (f"; all asked {shared['asked']}" if "asked" in shared else "") + "."]
    return TextSection(f"Coverage: {_count(len(result.coverage), 'GEMM launch', 'GEMM launches')} asked for high "
                       "precision", terminal_table(rows, {"layer · module": shorten_layer}), before=before)


def _autotuning_note(result: Verification) -> str:
    a = result.autotuning
    return (f"Left out of the check: {_count(len(a), 'GEMM launch', 'GEMM launches')} "
            f"({a['duration_ns'].sum() / 1e6:.3f} ms) torch.compile's max-autotune made, benchmarking candidates")


def _where(layer: pd.Series, module: pd.Series) -> pd.Series:
    """Where each GEMM ran: "layers.2.self_attention.proj · _Linear", or the module alone."""
    named = layer.notna() & (layer.astype("string") != "")
    return (layer.astype("string") + " · " + module.astype("string")).where(named, module.astype("string"))


def _several_ranks(result: Verification) -> bool:
    return result.gemms["rank"].nunique() > 1


def _summary_section(result: Verification) -> TextSection:
    """Per module and pass: launches, the share at the expected precision, verdict counts (those
    zero in every row left out) and kernel time."""
    frame = _summary_frame(result)
    counts = [c for c in ("ok", "fallback", "expected-substitution", "unknown", "allowed") if c in frame]
    frame = frame.drop(columns=[c for c in counts if len(frame) and (frame[c] == 0).all()])
    at = "expected" if result.expect_map else result.expected if result.strict else "as asked"
    frame = frame.rename(columns={"gemms": "launches", "gemm_time_ms": "time ms", "expected-substitution": "substituted",
                                  "expected_time_share": f"time at\n{at}"})
    return _section("GEMMs per module and pass", frame, {"module": shorten_middle})


# What each cause of a FALLBACK means (verify's module docstring), said once above its GEMMs.
_CAUSES = {
    "kernel-differs": "TE was handed the requested precision and a kernel of another precision ran",
    "outside-te": "these GEMMs ran outside TE (a plain torch.nn.Linear, say)",
    "no-record": "nothing recorded what TE was handed (a trace made without gemmscope's hook)",
}
# A no-record GEMM in a run the hook did record: a call the hook does not wrap.
_NO_RECORD_WITH_HOOK = ("gemmscope's hook recorded this run but not these GEMM calls (a TE entry point it "
                        "does not wrap, or an older hook that recorded only the autocast regions)")
_HIGH_PRECISIONS = ("bf16", "fp16", "fp32")


def _cause_text(cause: str, expected: str, result: Verification) -> str:
    if cause == "no-record" and result.hook_recorded:
        return _NO_RECORD_WITH_HOOK
    handed = cause.removeprefix("requested-")
    if handed == cause:
        return _CAUSES.get(cause, cause)
    why = (": a layer outside autocast, or a recipe that keeps these GEMMs in high precision"
           if handed in _HIGH_PRECISIONS else "")
    return f"these GEMMs asked for {handed} (TE was handed {handed} operands, or a GEMM outside TE had them), not {expected}{why}"


_GEMM_COLUMN = "layer · module\n  kernel"


def _mismatch_sections(result: Verification, allowed: bool) -> list[TextSection]:
    """The mismatches, one table per cause: the cause, and the precision or rank count every row
    shares, said once above it; a row per layer, module, pass and kernel."""
    title = "Allowed mismatches" if allowed else "Mismatches (requested precision did not run)"
    frame = _mismatch_frame(result, allowed)
    if frame.empty:
        return [TextSection(f"{title}: none")]
    sections = []
    for cause, part in frame.groupby(frame["cause"].fillna("?"), sort=False):
        columns = {_GEMM_COLUMN: _where(part["layer"], part["module"]) + "\n  " + part["kernel"],
                   "pass": part["pass"].fillna("?")}
        if result.expect_map:
            columns["expected"] = part["expected"]
        columns |= {"precision": part["precision"], "launches": part["launches"]}
        if _several_ranks(result):
            columns["ranks"] = part["ranks"]
        rows, shared = _said_once(pd.DataFrame({**columns, "time ms": part["time_ms"]}),
                                  ["expected", "precision", "ranks"])
        said = ([f"all ran as {shared['precision']}"] if "precision" in shared else []) + (
            [f"on {_count(shared['ranks'], 'rank')}"] if "ranks" in shared else [])
        heading = (f"{title}: {cause}, {_count(int(part['launches'].sum()), 'launch', 'launches')}, "
                   f"{part['time_ms'].sum():.3f} ms")
        expected = shared.get("expected", result.expected if not result.expect_map else "the expected")
        meaning = _cause_text(cause, expected, result) + (f"; {', '.join(said)}" if said else "") + "."
        sections.append(TextSection(heading, terminal_table(rows, {_GEMM_COLUMN: shorten_gemm_cell}), before=[meaning]))
    return sections


def _ranks_section(result: Verification) -> TextSection:
    """Per layer, module and pass where some ranks ran other kernels: what most ranks ran, and
    which ranks differ."""
    title = "Ranks that ran other kernels than the rest"
    differing = differing_ranks(result)
    if differing.empty:
        return TextSection(f"{title}: none")
    column = "layer · module\n  kernels most ranks ran"
    frame = pd.DataFrame({
        column: _where(differing["layer"], differing["module"]) + "\n  "
        + differing["kernels"].str.replace(" + ", "\n  ", regex=False),
        "pass": differing["pass"].fillna("?"), "ranks": differing["ranks"],
        "ranks that differ": differing["differing_ranks"].map(lambda ranks: ", ".join(map(str, ranks))),
    })
    return TextSection(title, terminal_table(frame, {column: shorten_gemm_cell}, wrap={"ranks that differ"}))


def breakdown_title(diagnosis: Diagnosis) -> str:
    """Which part of the run the breakdown covers: the steps taken (and which ranges they are),
    or the whole trace, saying that no steps were found."""
    if diagnosis.step_range:
        return f"Where the GPU time went (steps: NVTX ranges matching {diagnosis.step_range}, after the first)"
    return f"Where the GPU time went (the whole trace: {NO_STEPS})"


def _breakdown_sections(diagnosis: Diagnosis) -> list[TextSection]:
    """Where the GPU time went, a column per rank and a row per figure; ranks beyond what fits in
    TERMINAL_WIDTH continue in a further table."""
    title = breakdown_title(diagnosis)
    frame = breakdown_frame(diagnosis.breakdown)
    if frame.empty:
        return [TextSection(f"{title}: none")]
    numbered = pd.to_numeric(frame["rank"], errors="coerce")  # rank 2 before rank 10
    frame = frame.iloc[numbered.reset_index(drop=True).sort_values(kind="stable", na_position="last").index]
    labels = frame["rank"].astype(str)
    headers = labels.map(lambda label: f"rank {label}" if label.isdigit() else label)
    if len(headers) > 1:
        headers = headers.map(lambda header: shorten_middle(header, 24))
    figures = frame.drop(columns="rank").astype(object).T
    figures.columns = list(headers)
    names = pd.Series(figures.index).str.replace("_ms", " ms", regex=False).replace({"launches": "kernel launches"})
    figures = figures.reset_index(drop=True)
    label_width = max(cell_len(n) for n in names)
    chunks, chunk, used = [], [], label_width + 1
    for header in figures.columns:
        column_width = max(cell_len(header), *(len(_cell(v)) for v in figures[header])) + _GAP
        if chunk and used + column_width > TERMINAL_WIDTH:
            chunks.append(chunk)
            chunk, used = [], label_width + 1
        chunk.append(header)
        used += column_width
    chunks.append(chunk)
    return [TextSection(title if i == 0 else "Where the GPU time went, continued",
                        terminal_table(pd.concat([names.rename("figure"), figures[chunk]], axis=1)))
            for i, chunk in enumerate(chunks)]


def _findings_section(title: str, findings: list[dict]) -> TextSection:
    return _section(title, findings_frame(findings), wrap={"what it says"})


def _launches_section(result: Verification) -> TextSection:
    """Every GEMM launch, one line each: its start, where it ran, its kernel (numbered: the names
    are listed once, under the table), precision, duration and verdict."""
    g = result.gemms
    if g.empty:
        return TextSection("Every GEMM launch: none")
    codes, names = pd.factorize(g["name"])
    frame = pd.DataFrame({"start ms": (g["start"] / 1e6).map("{:.3f}".format), "rank": g["rank"],
                          "layer (or module)": g["layer"].where(g["layer"].notna(), g["module"]),
                          "pass": g["te_pass"].fillna("?"), "kernel": "K" + pd.Series(codes + 1, g.index).astype(str),
                          "precision": g["precision"].fillna("unknown"), "µs": g["duration_ns"] / 1e3})
    if result.expect_map:
        frame["expected"] = g["expected"]
    if result.checked:
        frame["verdict"] = g["verdict"] + (": " + g["cause"]).fillna("")
    if not _several_ranks(result):
        frame = frame.drop(columns="rank")
    return TextSection("Every GEMM launch (the kernels are named under the table)",
                       terminal_table(frame, {"layer (or module)": shorten_layer}),
                       after=["", _legend([f"K{i}" for i in range(1, len(names) + 1)], names)])


def comparison_document(comparison: dict) -> dict:
    """`gemmscope compare --format json`: the statement, totals, modules and passes, kernels that
    changed, and each run's findings."""
    return _plain({"schema_version": SCHEMA_VERSION, "statement": comparison["statement"],
                   "totals": comparison["totals"], "by_module": frame_records(comparison["by_module"]),
                   "kernels_changed": frame_records(comparison["kernels_changed"]),
                   "base_findings": comparison["base_findings"], "new_findings": comparison["new_findings"]})


def render_comparison(comparison: dict, fmt: str) -> str:
    """`gemmscope compare`: totals and categories, modules that changed most, kernels that
    changed, and each run's findings."""
    if fmt == "json":
        return json.dumps(comparison_document(comparison), indent=2) + "\n"
    totals = pd.DataFrame([{"figure": k, **v} for k, v in comparison["totals"].items()])
    by_module = comparison["by_module"]
    ms = totals.assign(**{c: totals[c].where(totals["figure"] == "kernel_launches", totals[c] / 1e6)
                          for c in ("base", "new", "difference")})
    ms["figure"] = ms["figure"].str.replace("_ns", " (ms)")
    moved = by_module.head(15).assign(**{c: by_module[c].head(15) / 1e6 for c in ("base", "new", "difference")})
    titles = ["Totals: NEW − BASE (window = busy + idle; busy = categories − overlap)",
              "Modules and passes that moved most (ms)", "GEMM kernels that changed", "Findings, BASE", "Findings, NEW"]
    if fmt == "markdown":
        frames = [ms, moved, comparison["kernels_changed"], findings_frame(comparison["base_findings"]),
                  findings_frame(comparison["new_findings"])]
        return comparison["statement"] + "\n\n" + "\n".join(
            f"## {title}\n\n{markdown_table(frame)}" for title, frame in zip(titles, frames))
    return terminal_text(comparison["statement"], _section(titles[0], ms),
                         _section(titles[1], moved, {"module": shorten_middle}),
                         _kernels_changed_section(titles[2], comparison["kernels_changed"]),
                         _findings_section(titles[3], comparison["base_findings"]),
                         _findings_section(titles[4], comparison["new_findings"]))


def _kernels_changed_section(title: str, changed: pd.DataFrame) -> TextSection:
    """Per layer, module and pass, the kernels BASE ran (−) and those NEW ran (+), a line each."""
    if changed.empty:
        return TextSection(f"{title}: none")
    column = "layer · module\n  − BASE's kernels, + NEW's"

    def listed(kernels: pd.Series, sign: str) -> pd.Series:
        return ("\n  " + sign + " " + kernels.fillna("(none)").str.replace(" + ", f"\n  {sign} ", regex=False))

    frame = pd.DataFrame({column: _where(changed["layer"], changed["module"]) + listed(changed["base"], "−")
                          + listed(changed["new"], "+"), "pass": changed["pass"].fillna("?")})
    return TextSection(title, terminal_table(frame, {column: shorten_gemm_cell}))


def shapes_document(plan: list[Gemm]) -> dict:
    """`gemmscope shapes --format json`: the plan's GEMMs."""
    return {"schema_version": SCHEMA_VERSION, "gemms": [gemm.as_dict() for gemm in plan]}


def kernels_document(decoded: pd.DataFrame) -> dict:
    """`gemmscope kernel --format json`: what each name says (kernels.decode_frame's rows)."""
    return {"schema_version": SCHEMA_VERSION, "kernels": frame_records(decoded)}


# --- profile runs ---------------------------------------------------------------------------------

def _num(value: float, digits: int = 3) -> str:
    return "" if value is None or value != value else f"{value:.{digits}f}"


def profile_pass_tables(run) -> list[tuple[str, pd.DataFrame]]:
    """One table per mode and pass, a row per GEMM and precision: times, throughput against the
    GPU's dense peak, what held the speedup over BF16 back and the verdict (the kernels are in
    `profile_kernel_table`; an entry that did not run says only its status, TE's reason is in
    `profile_not_run_table`)."""
    tables = []
    for (mode, pass_), grp in run.gemms.groupby(["mode", "pass"], sort=False):
        frame = pd.DataFrame({
            "op": grp["op"],
            "shape (MxKxN)": [f"{m}x{k}x{n}" for m, k, n in zip(grp["m"], grp["k"], grp["n"])],
            "precision": grp["precision"],
            "e2e ms": grp["e2e_ms"].map(_num),
            "IQR ms": grp["e2e_iqr_ms"].map(_num),
            "kernel ms": grp["kernel_ms"].map(_num),
            "overhead ms": grp["overhead_ms"].map(_num),
            "speedup": grp["speedup"].map(lambda v: _num(v, 2) + "x" if pd.notna(v) else ""),
            "TFLOP/s": grp["tflops"].map(lambda v: _num(v, 0)),
            "% peak": grp["pct_of_peak"].map(lambda v: _num(v, 0)),
            "kernel TFLOP/s": grp["kernel_tflops"].map(lambda v: _num(v, 0)),
            "kernel % peak": grp["kernel_pct_of_peak"].map(lambda v: _num(v, 0)),
            "quant %": grp["quantization_pct"].map(lambda v: _num(v, 0)),
            "FLOP/B": grp["intensity"].map(lambda v: _num(v, 0)).where(grp["status"] == "ok", ""),
            "speedup reason": grp["speedup_reason"].fillna(""),
            "verdict": grp["verdict"].where(grp["status"] == "ok", grp["status"]).fillna(""),
        })
        tables.append((f"{mode}: {pass_}", frame))
    return tables


def profile_kernels(run) -> pd.DataFrame:
    """The GEMM kernels that ran, per mode, pass and precision, with the ops that ran each."""
    ran = run.gemms[run.gemms["kernel"].notna()]
    grouped = ran.groupby(["mode", "pass", "precision", "kernel", "kernel_precision"], sort=False)
    return grouped["op"].agg(", ".join).rename("ops").reset_index()


def profile_kernel_table(run) -> pd.DataFrame:
    """`profile_kernels` for people."""
    return profile_kernels(run).rename(columns={"kernel_precision": "ran as"})


def _kernels_section(run) -> tuple[str, pd.DataFrame]:
    return "GEMM kernels that ran (per mode, pass and precision)", profile_kernel_table(run)


def profile_not_run_table(run) -> pd.DataFrame:
    """Once per recipe and reason: the entries that did not run, and why (TE's reason)."""
    not_run = run.gemms[run.gemms["status"] != "ok"]
    why = not_run["status"] + ": " + not_run["reason"].fillna("(no reason recorded)")
    grouped = not_run.assign(why=why).groupby(["precision", "why"], sort=False)
    return grouped.agg(modes=("mode", lambda m: ", ".join(dict.fromkeys(m))), gemms=("op", "size")).reset_index()


def device_line(run) -> str:
    """The GPU's figures that % peak and the ridge points use, with their source, or that the GPU
    is not in gemmscope's device table."""
    name = run.device["name"]
    device = devices.lookup(name)
    if device is None:
        return (f"{name} is not in gemmscope's device table (gemmscope/devices.py): % peak, ridge points and "
                "memory-bound checks are left empty.")
    peaks = ", ".join(f"{label} {value:g}" for label, value in device.peak_tflops.items())
    ridges = ", ".join(f"{devices.peak_label(p)} {ridge:.0f}" for p in ("bf16", "fp8", "nvfp4")
                       if (ridge := devices.ridge_point(name, p)) is not None)
    return (f"{name} = {device.part}: dense peaks {peaks} TFLOP/s (INT8: TOP/s), {device.bandwidth_tbps:g} TB/s, "
            f"ridge points {ridges} FLOP/B. Source: {', '.join(device.sources)} ({device.note})")


def profile_per_layer(run) -> pd.DataFrame:
    """Per mode and precision, one layer's GEMMs: times, the speedup over BF16 (BF16's own: 1)
    and the entries flagged; a recipe none of whose GEMMs ran has no speedup and was not
    checked: blank, never 0."""
    layer = run.per_layer().reset_index()
    speedups = run.speedups()
    speedup = [1.0 if p == "bf16" else speedups.get(m, {}).get(p) for m, p in zip(layer["mode"], layer["precision"])]
    ran = layer["not_ok"] < layer["gemms"]
    return layer.assign(speedup_vs_bf16=pd.Series(speedup, index=layer.index, dtype=float).where(ran),
                        flagged=layer["flagged"].astype("Int64").where(ran))


def profile_memory(run) -> pd.DataFrame:
    """GPU memory while each mode and precision ran, MiB above the baseline; a precision none of
    whose GEMMs ran: blank, never 0."""
    if run.memory.empty:  # a run made without nsys: no memory events
        return pd.DataFrame(columns=["mode", "precision", "peak_mib"])
    ok = run.gemms[run.gemms["status"] == "ok"]
    ran = pd.MultiIndex.from_frame(run.memory[["mode", "precision"]]).isin(
        pd.MultiIndex.from_frame(ok[["mode", "precision"]]))
    return run.memory.assign(peak_mib=run.memory["peak_mib"].where(ran))


def profile_summary_tables(run) -> list[tuple[str, pd.DataFrame]]:
    layer = profile_per_layer(run)
    full = run.full_model().reset_index()
    per_layer = pd.DataFrame({
        "mode": layer["mode"], "precision": layer["precision"],
        "e2e ms": layer["e2e_ms"].map(_num), "kernel ms": layer["kernel_ms"].map(_num),
        "overhead ms": layer["overhead_ms"].map(_num),
        "speedup vs bf16": layer["speedup_vs_bf16"].map(lambda v: _num(v, 2) + "x" if pd.notna(v) else ""),
        "not run": layer["not_ok"],
        "flagged": layer["flagged"].map(lambda v: "" if pd.isna(v) else int(v)),
    })
    model = pd.DataFrame({"mode": full["mode"], "precision": full["precision"],
                          "e2e ms per step": full["e2e_ms"].map(_num)})
    tables = [(f"Per layer ({run.plan['model']})", per_layer),
              (f"Full model: {run.plan['num_layers']} layers, one step's GEMMs", model)]
    not_run = profile_not_run_table(run)
    if not not_run.empty:
        tables.append(("Did not run (TE's reason, once per recipe)", not_run))
    if not run.memory.empty:
        memory = profile_memory(run)
        tables.append(("GPU memory while each precision ran (peak above baseline, MiB)",
                       memory.assign(peak_mib=memory["peak_mib"].map(lambda v: _num(v, 0)))))
    return tables


def _recipe_ran(run) -> pd.Series:
    """Per GEMM entry: whether any entry of its mode and precision ran."""
    g = run.gemms
    return (g["status"] == "ok").groupby([g["mode"], g["precision"]], sort=False).transform("any")


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
        "speedups": {m: {p: _plain(v) for p, v in d.items()} for m, d in run.speedups().items()},
        "per_layer": frame_records(run.per_layer().reset_index()),
        "full_model": frame_records(run.full_model().reset_index()),
        "memory": frame_records(run.memory),
        "gemms": frame_records(run.gemms),
    }


def profile_verdict_block(run, environment: str) -> tuple[str, list[tuple[str, str]]]:
    """The answer first for a profile run: a status and five labelled lines (what was asked, what
    ran and what did not, the GEMM time at the precision each entry asked for, the speedups and
    what holds them back, the environment)."""
    g = run.gemms
    ran = g[g["status"] == "ok"]
    checked = ran[ran["verdict"].notna()]
    flagged = checked[checked["verdict"] == "FALLBACK"]
    status = "fail" if len(flagged) else "pass"
    precisions, modes = list(dict.fromkeys(g["precision"])), list(dict.fromkeys(g["mode"]))
    not_run = g[g["status"] != "ok"]
    asked = (f"{run.plan['model']}: {len(run.plan['gemms'])} GEMMs ({run.plan['num_layers']} layers) at "
             f"{', '.join(precisions)}, in {' and '.join(modes)} mode")
    ran_text = f"{len(ran)} of {_count(len(g), 'entry', 'entries')} ran"
    if len(not_run):
        ran_text += (f"; {', '.join(dict.fromkeys(not_run['precision']))} did not "
                     f"({', '.join(dict.fromkeys(not_run['status']))}: TE's reason below)")
    good = checked.loc[checked["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), "kernel_ms"].sum()
    total = checked["kernel_ms"].sum()
    at_precision = (f"{100 * good / total:.1f} % of GEMM kernel time ran at the precision each entry asked "
                    f"for; {_count(len(flagged), 'entry', 'entries')} flagged (FALLBACK)"
                    if len(checked) and total else "not checked: the run has no trace (made with --no-nsys)")
    speedups = []
    for mode, by_precision in run.speedups().items():
        done = ", ".join(f"{p} {v:.2f}×" for p, v in by_precision.items() if v is not None)
        quantization = ran[(ran["mode"] == mode) & (ran["precision"] != "bf16")]["quantization_pct"].mean()
        held = f" (quantization {quantization:.0f} % of e2e on average)" if quantization and quantization == quantization else ""
        speedups.append(f"{mode}: {done or 'none ran'}{held}")
    return status, [("Asked", asked), ("Ran", ran_text), ("At the requested precision", at_precision),
                    ("Speedup over BF16, per layer", "; ".join(speedups)), ("Environment", environment)]


def profile_text(run, run_dir=None, detail: str = "normal") -> str:
    """`gemmscope profile` for the terminal: the answer first, then the tables, in TERMINAL_WIDTH
    columns (detail: "quiet", the verdict block only; "verbose", throughput figures too)."""
    status, lines = profile_verdict_block(run, f"{run.device['name']} ({run.device['sm']})")
    if run_dir is not None:
        lines.append(("Full report", f"{run_dir}/report.md; gemmscope report {run_dir} -o report.html"))
    verdict = _verdict_text(status, lines)
    if detail == "quiet":
        return terminal_text(verdict)
    return terminal_text(verdict, "", f"gemmscope profile: {run.plan['model']} on {run.device['name']} "
                         f"({run.device['sm']})", device_line(run), *_profile_sections(run, detail))


# The figures of `profile_pass_tables` for the terminal: the speedup and what holds it back by
# default, throughput and noise with --verbose (every figure is in report.md and results.json).
_PASS_COLUMNS = {"e2e ms": "e2e\nms", "kernel ms": "kernel\nms", "quant %": "quant\n%", "speedup": "speedup",
                 "kernel % peak": "kernel\n% peak", "speedup reason": "speedup reason", "verdict": "verdict"}
_THROUGHPUT_COLUMNS = {"IQR ms": "IQR\nms", "overhead ms": "overhead\nms", "TFLOP/s": "TFLOP/s", "% peak": "% peak",
                       "kernel TFLOP/s": "kernel\nTFLOP/s", "FLOP/B": "FLOP/B"}


def _profile_sections(run, detail: str) -> list[TextSection]:
    """Per mode and pass, a row per GEMM and recipe that ran, grouped by GEMM (its shape said once
    above); the recipes that ran nowhere in a mode said once; the kernels per mode; the
    summaries."""
    entry_ran = _recipe_ran(run)
    sections = []
    skipped = run.gemms.loc[~entry_ran].drop_duplicates(["mode", "precision"])
    if len(skipped):
        modes = skipped.groupby("precision", sort=False)["mode"].agg(list)
        every_mode = len(dict.fromkeys(run.gemms["mode"]))
        named = [p if len(m) == every_mode else f"{p} ({', '.join(m)})" for p, m in modes.items()]
        sections.append(TextSection(f"Not in the tables below: {', '.join(named)}: no GEMM ran (TE's reason under "
                                    "\"Did not run\")"))
    for title, frame in profile_pass_tables(run):
        listed = frame[entry_ran.loc[frame.index].to_numpy()]
        if listed.empty:
            continue
        listed = listed.assign(order=pd.Categorical(listed["op"], categories=list(dict.fromkeys(listed["op"]))))
        listed = listed.sort_values("order", kind="stable").drop(columns="order")
        shapes = ", ".join(f"{op} {shape}" for op, shape in dict.fromkeys(zip(listed["op"], listed["shape (MxKxN)"])))
        keys = _blank_repeats(listed, ["op"])[["op", "precision"]]
        figures, shared = _said_once(listed[list(_PASS_COLUMNS)].rename(columns=_PASS_COLUMNS), ["verdict"])
        before = [f"M×K×N: {shapes}"] + ([f"Every entry's verdict: {verdict}"] if (verdict := shared.get("verdict"))
                                         else [])
        sections.append(TextSection(title, terminal_table(pd.concat([keys, figures], axis=1), wrap={"speedup reason"}),
                                    before=before))
        if detail == "verbose":
            throughput = listed[list(_THROUGHPUT_COLUMNS)].rename(columns=_THROUGHPUT_COLUMNS)
            sections.append(TextSection(f"{title}: throughput and noise (% of the GPU's dense peak; FLOP/B: "
                                        "arithmetic intensity)", terminal_table(pd.concat([keys, throughput], axis=1))))
    kernels = profile_kernel_table(run)
    for mode, part in kernels.groupby("mode", sort=False):
        rows = _blank_repeats(part, ["precision", "pass"])[["precision", "pass", "kernel", "ran as", "ops"]]
        sections.append(TextSection(f"GEMM kernels that ran, {mode} (per precision and pass)",
                                    terminal_table(rows, {"kernel": shorten_middle}, wrap={"ops"})))
    return sections + [_section(title, frame, wrap={"why"}) for title, frame in profile_summary_tables(run)]


def profile_markdown(run, wall_s: float | None) -> str:
    parts = [f"# gemmscope profile: {run.plan['model']} on {run.device['name']} ({run.device['sm']})\n"]
    if wall_s is not None:
        parts.append(f"Whole run (workload under nsys, export, analysis): {wall_s:.1f} s.\n")
    parts.append(device_line(run) + "\n")
    parts.append("e2e: CUDA-event time per iteration (median over the timed loop); kernel: GEMM kernels "
                 "from the trace; overhead: every other kernel inside the timed range (quantization). "
                 "speedup: over BF16, same GEMM and mode. % peak: of the GPU's dense peak at the recipe's "
                 "precision (e2e, and kernel alone). quant %: overhead / the timed range's span. FLOP/B: "
                 "arithmetic intensity (A, B and the BF16 output). speedup reason, the first that applies: the "
                 "kernel fell back; memory-bound (intensity below the ridge point); quantization or idle time "
                 "between kernels, where it costs the speedup more than the kernel's efficiency next to the BF16 "
                 "kernel's; else the kernel's % of peak (rules: `gemmscope.profile_run.with_speed_figures`).\n")
    for title, frame in profile_summary_tables(run) + profile_pass_tables(run) + [_kernels_section(run)]:
        parts += [f"\n## {title}\n", markdown_table(frame)]
    return "\n".join(parts)


def write_profile_reports(run, run_dir, wall_s: float | None) -> None:
    """results.json, report.md and the plots (report.png, the per-layer one, first: `plots`)
    into the run directory."""
    from pathlib import Path

    from gemmscope import plots

    run_dir = Path(run_dir)
    (run_dir / "results.json").write_text(json.dumps(results_document(run, wall_s), indent=1) + "\n")
    (run_dir / "report.md").write_text(profile_markdown(run, wall_s))
    plots.write(plots.profile_plots(run), run_dir)
