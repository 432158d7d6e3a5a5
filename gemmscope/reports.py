"""Turn analysis frames into what people read and attach: rich tables, JSON, CSV, Markdown."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from gemmscope import devices
from gemmscope.diagnose import CATEGORIES, Diagnosis
from gemmscope.shapes import Gemm
from gemmscope.trace_parser import Trace
from gemmscope.verify import Verification, recorded_recipes

FORMATS = ("table", "json", "csv", "markdown")

# The version of every JSON document gemmscope writes (`schema_version`, a top-level key): it
# changes when a key is removed or renamed, or a value changes type, unit or meaning; a new key or
# a new value of an enumeration leaves it.
SCHEMA_VERSION = "1"

_GEMM_FIELDS = ("kernel", "role", "precision", "start_ns", "duration_ns", "trace", "rank", "thread",
                "ranges", "te_module", "te_name", "layer", "te_pass", "pass_source", "requested_a", "requested_b",
                "requested", "origin")


def _plain(value: Any) -> Any:
    """numpy/pandas scalars → JSON-able Python values (NaN → None), inside lists and dicts too."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def frame_records(frame: pd.DataFrame) -> list[dict]:
    """A DataFrame as JSON-able records."""
    return [{k: _plain(v) for k, v in r.items()} for r in frame.to_dict("records")]


def _gemm_fields(result: Verification) -> list[str]:
    return (list(_GEMM_FIELDS) + (["expected", "verdict", "cause", "allowed"] if result.checked else [])
            + (["expect_range"] if result.expect_map else []))


def gemm_records(result: Verification) -> list[dict]:
    g = result.gemms.rename(columns={"name": "kernel", "start": "start_ns"})
    return [{f: _plain(row[f]) for f in _gemm_fields(result)} for row in g.to_dict("records")]


def summary_document(result: Verification) -> dict:
    g = result.gemms
    doc: dict[str, Any] = {
        "expected": result.expected,
        "gemm_launches": len(g),
        "gemm_time_ns": int(g["duration_ns"].sum()) if len(g) else 0,
        "gemm_tail_time_ns": result.tails_ns,
        "by_precision": {k: int(v) for k, v in g["precision"].value_counts().items()} if len(g) else {},
        "by_module_pass": frame_records(result.summary),
        "groups": frame_records(result.groups),
        "ranks": sorted(int(r) for r in g["rank"].dropna().unique()) if len(g) else [],
        "rank_comparison": frame_records(result.rank_comparison),
        "unreadable_traces": _plain(result.unreadable),
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


def analysis_document(result: Verification, command: dict | None = None, diagnosis: Diagnosis | None = None) -> dict:
    """`gemmscope analyze --format json`: meta, one object per GEMM launch, summary, and the
    breakdown and findings."""
    doc = {"schema_version": SCHEMA_VERSION, "meta": _meta(result, command), "gemms": gemm_records(result),
           "summary": summary_document(result)}
    return doc | (diagnosis_document(diagnosis) if diagnosis else {})


def verification_document(result: Verification, command: dict | None = None,
                          diagnosis: Diagnosis | None = None) -> dict:
    """`gemmscope verify --format json`: summary, the non-allowed mismatches, the breakdown and
    findings."""
    mismatches = [r for r in gemm_records(result) if r.get("verdict") == "FALLBACK" and not r["allowed"]]
    allowed = [r for r in gemm_records(result) if r.get("verdict") == "FALLBACK" and r["allowed"]]
    doc = {"schema_version": SCHEMA_VERSION, "meta": _meta(result, command), "summary": summary_document(result),
           "mismatches": mismatches, "allowed": allowed}
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


def ranges_frame(ranges: pd.DataFrame) -> pd.DataFrame:
    """The mapped ranges for people: milliseconds and shares; a range that ran no GEMM shows no
    time, not 0."""
    ran = ranges["gemms"] > 0
    return pd.DataFrame({
        "range": ranges["range"].fillna("(no range matches " + ranges["pattern"] + ")"),
        "expected": ranges["expected"],
        "instances": ranges["instances"],
        "gemms": ranges["gemms"],
        "gemm_ms": (ranges["gemm_time_ns"] / 1e6).where(ran),
        "at_expected": ((ranges["expected_time_share"] * 100).round(1).astype(str) + " %").where(ran),
        "fallbacks": ranges["fallbacks"],
        "verdict": ranges["verdict"],
    })


def _mismatch_frame(result: Verification, allowed: bool) -> pd.DataFrame:
    """Mismatches grouped by layer × module × pass × kernel, with counts."""
    g = result.groups
    rows = g[(g["verdict"] == "FALLBACK") & (g["allowed"] == allowed)]
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
        return f"{value:.4g}"
    return str(value)


def rich_table(frame: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in frame.columns:
        numeric = pd.api.types.is_numeric_dtype(frame[column])
        table.add_column(str(column), justify="right" if numeric else "left", overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def print_table(frame: pd.DataFrame, title: str) -> None:
    Console(width=200).print(rich_table(frame, title))


def _headline(result: Verification) -> str:
    doc = summary_document(result)
    first = result.traces[0]
    names = first.path.name if len(result.traces) == 1 else f"{len(result.traces)} traces"
    gpu_names = dict.fromkeys(f"{g['name']} ({g['sm']})" for t in result.traces for g in t.meta["gpus"])
    ranks = f", ranks {', '.join(map(str, doc['ranks']))}" if len(doc["ranks"]) > 1 else ""
    line = (f"{names}: nsys {first.meta['nsys_version']}, {', '.join(gpu_names) or 'GPU unknown'}{ranks}; "
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
    ranks = summary_document(result)["ranks"]
    traces = _count(len(result.traces), "file") + (f", ranks {', '.join(map(str, ranks))}" if ranks else "")
    return [("GPU", ", ".join(gpus) or "unknown"), ("nsys", ", ".join(nsys)), ("traces", traces),
            ("TE / torch versions", "not recorded in nsys traces")]


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
        at_precision = ((f"{share * 100:.1f} % of GEMM time" if share is not None else "no GEMM time")
                        + f" at {'the recipe asked of each' if result.expect_map else result.expected}; "
                          f"{_count(doc['mismatches'], 'mismatch', 'mismatches')}, {doc['allowed']} allowed")
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


def _asked_recipes(result: Verification) -> str:
    """What each GEMM was checked against: "fp8-current (--expect)", or the map and what holds
    outside it."""
    default = None
    if result.expected:
        source = ("the recipe the run's te.autocast recorded"
                  if recorded_recipes(result.traces) == [result.expected] else "--expect")
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
        frame = pd.DataFrame(gemm_records(result), columns=_gemm_fields(result))
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
    if not result.rank_comparison.empty:
        differing = result.rank_comparison[result.rank_comparison["differing_ranks"].map(len) > 0]
        sections.append(("Ranks that ran other kernels than the rest", differing))
    if result.unreadable:
        sections.append(("Traces that could not be read (the others are checked)", pd.DataFrame(result.unreadable)))
    if diagnosis is not None:
        window = f" (steps matching {diagnosis.step_range}, after the first)" if diagnosis.step_range else ""
        sections.append((f"Where the GPU time went{window}", breakdown_frame(diagnosis.breakdown)))
        sections.append(("Findings, most time at stake first", findings_frame(diagnosis.findings)))
    if detail == "verbose":
        launches = pd.DataFrame(gemm_records(result), columns=_gemm_fields(result))
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
    console = Console(file=io.StringIO(), width=TERMINAL_WIDTH, record=True)
    console.print(verdict, overflow="fold")
    if detail == "quiet":
        return console.export_text()
    console.width = TABLE_WIDTH
    console.print()
    for title, frame in sections:
        console.print(rich_table(_for_terminal(frame), title) if not frame.empty else f"{title}: none")
    return console.export_text()


# The verdict block fits this many columns; the tables after it are wider (one row per module,
# pass and kernel). JSON, CSV and HTML keep full kernel names.
TERMINAL_WIDTH = 100
TABLE_WIDTH = 160
KERNEL_NAME_WIDTH = 36


def shorten_middle(text: str, width: int = KERNEL_NAME_WIDTH) -> str:
    """A long kernel name cut in the middle, keeping its family at the front and its layout at
    the end: "nvjet_sm90_qqtst_128x…_bz_coopA_TNN"."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def _for_terminal(frame: pd.DataFrame) -> pd.DataFrame:
    """Kernel names shortened in the middle; counts that are zero in every row left out."""
    out = frame.copy()
    for column in ("kernel", "kernels"):
        if column in out:
            out[column] = out[column].map(lambda v: shorten_middle(v) if isinstance(v, str) else v)
    zero = [c for c in out.columns if pd.api.types.is_integer_dtype(out[c]) and len(out) and (out[c] == 0).all()]
    return out.drop(columns=zero)


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
    sections = [("Totals: NEW − BASE (window = busy + idle; busy = categories − overlap)", ms),
                ("Modules and passes that moved most (ms)", moved),
                ("GEMM kernels that changed", comparison["kernels_changed"]),
                ("Findings, BASE", findings_frame(comparison["base_findings"])),
                ("Findings, NEW", findings_frame(comparison["new_findings"]))]
    if fmt == "markdown":
        return comparison["statement"] + "\n\n" + "\n".join(
            f"## {title}\n\n{markdown_table(frame)}" for title, frame in sections)
    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(comparison["statement"])
    for title, frame in sections:
        console.print(rich_table(frame, title) if not frame.empty else f"{title}: none")
    return console.export_text()


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


def profile_kernel_table(run) -> pd.DataFrame:
    """The GEMM kernels that ran, per mode, pass and precision, with the ops that ran each."""
    ran = run.gemms[run.gemms["kernel"].notna()]
    grouped = ran.groupby(["mode", "pass", "precision", "kernel", "kernel_precision"], sort=False)
    return grouped["op"].agg(", ".join).rename("ops").reset_index().rename(columns={"kernel_precision": "ran as"})


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


def profile_summary_tables(run) -> list[tuple[str, pd.DataFrame]]:
    layer = run.per_layer().reset_index()
    full = run.full_model().reset_index()
    speedups = run.speedups()
    per_layer = pd.DataFrame({
        "mode": layer["mode"], "precision": layer["precision"],
        "e2e ms": layer["e2e_ms"].map(_num), "kernel ms": layer["kernel_ms"].map(_num),
        "overhead ms": layer["overhead_ms"].map(_num),
        "speedup vs bf16": [_num(speedups.get(m, {}).get(p), 2) + "x" if speedups.get(m, {}).get(p) else
                            ("1.00x" if p == "bf16" else "") for m, p in zip(layer["mode"], layer["precision"])],
        "not run": layer["not_ok"], "flagged": layer["flagged"],
    })
    model = pd.DataFrame({"mode": full["mode"], "precision": full["precision"],
                          "e2e ms per step": full["e2e_ms"].map(_num)})
    tables = [(f"Per layer ({run.plan['model']})", per_layer),
              (f"Full model: {run.plan['num_layers']} layers, one step's GEMMs", model)]
    not_run = profile_not_run_table(run)
    if not not_run.empty:
        tables.append(("Did not run (TE's reason, once per recipe)", not_run))
    if not run.memory.empty:
        tables.append(("GPU memory while each precision ran (peak above baseline, MiB)",
                       run.memory.assign(peak_mib=run.memory["peak_mib"].map(lambda v: _num(v, 0)))))
    return tables


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


# Free-text columns of the profile tables: the only ones that wrap, so numbers stay on one line.
_WRAPPING = {"speedup reason", "why", "ops"}


def _profile_rich_table(frame: pd.DataFrame, title: str) -> Table:
    """A profile table for the terminal: a header wider than its column's cells is broken after
    its first word, and only the free-text columns wrap."""
    table = Table(title=title, title_justify="left")
    for column in frame.columns:
        widest = frame[column].map(_cell).str.len().max() if len(frame) else 0
        header = str(column).replace(" ", "\n", 1) if len(str(column)) > widest else str(column)
        table.add_column(header, no_wrap=column not in _WRAPPING, overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


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


def print_profile(run, run_dir=None, quiet: bool = False) -> None:
    """The answer first, in 100 columns; then the tables (wider: one row per GEMM and recipe)."""
    console = Console(width=TERMINAL_WIDTH)
    status, lines = profile_verdict_block(run, f"{run.device['name']} ({run.device['sm']})")
    if run_dir is not None:
        lines.append(("Full report", f"{run_dir}/report.md; gemmscope report {run_dir} -o report.html"))
    console.print(_verdict_text(status, lines), overflow="fold")
    if quiet:
        return
    console = Console(width=200)
    console.print()
    console.print(f"gemmscope profile: {run.plan['model']} on {run.device['name']} ({run.device['sm']})")
    console.print(device_line(run))
    for title, frame in profile_pass_tables(run) + [_kernels_section(run)] + profile_summary_tables(run):
        console.print(_profile_rich_table(frame, title))


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
                 "kernel's; else the kernel's % of peak (rules: `gemmscope.profile.with_speed_figures`).\n")
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
