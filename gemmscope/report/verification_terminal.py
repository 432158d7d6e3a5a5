"""How the terminal lays out checked traces' sections: mismatches one table per cause, names
shortened to fit, what every row shares said once above it."""

from __future__ import annotations

import pandas as pd
from rich.cells import cell_len

from gemmscope.diagnosis import Diagnosis
from gemmscope.figures import coverage_groups
from gemmscope.findings import Finding
from gemmscope.report.frames import (
    ALLOWED_TITLE,
    LAUNCHES_TITLE,
    MISMATCHES_TITLE,
    RANKS_TITLE,
    SUMMARY_TITLE,
    breakdown_frame,
    breakdown_title,
    differing_ranks,
    findings_frame,
    mismatch_frame,
    several_ranks,
    summary_frame,
    where,
)
from gemmscope.report.model import cell, count
from gemmscope.report.terminal import (
    GAP,
    TERMINAL_WIDTH,
    TextSection,
    legend,
    said_once,
    shorten_gemm_cell,
    shorten_layer,
    shorten_middle,
    table_section,
    terminal_table,
)
from gemmscope.verify import Verification


def coverage_section(result: Verification) -> TextSection:
    groups = coverage_groups(result)
    frame = pd.DataFrame({"layer · module": where(groups["layer"], groups["module"]),
                          "passes": groups["passes"], "asked": groups["asked"],
                          "launches": groups["launches"], "time ms": groups["time_ns"] / 1e6,
                          "of GEMM time": (groups["share"] * 100).round(1).astype(str) + " %"})
    rows, shared = said_once(frame, ["asked"])
    before = ["GEMMs that asked for high precision ran as asked (not a failure): what low precision does not "
              "cover" + (f"; all asked {shared['asked']}" if "asked" in shared else "") + "."]
    return TextSection(f"Coverage: {count(len(result.coverage), 'GEMM launch', 'GEMM launches')} asked for high "
                       "precision", terminal_table(rows, {"layer · module": shorten_layer}), before=before)


def summary_section(result: Verification) -> TextSection:
    """Per module and pass: launches, the share at the expected precision, verdict counts (those
    zero in every row left out) and kernel time."""
    frame = summary_frame(result)
    counts = [c for c in ("ok", "fallback", "expected-substitution", "unknown", "allowed") if c in frame]
    frame = frame.drop(columns=[c for c in counts if len(frame) and (frame[c] == 0).all()])
    at = "expected" if result.expect_map else result.expected if result.strict else "as asked"
    frame = frame.rename(columns={"gemms": "launches", "gemm_time_ms": "time ms", "expected-substitution": "substituted",
                                  "expected_time_share": f"time at\n{at}"})
    return table_section(SUMMARY_TITLE, frame, {"module": shorten_middle})


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


def _cause_text(cause: str, expected: str | None, result: Verification) -> str:
    if cause == "no-record" and result.hook_recorded:
        return _NO_RECORD_WITH_HOOK
    handed = cause.removeprefix("requested-")
    if handed == cause:
        return _CAUSES.get(cause, cause)
    why = (": a layer outside autocast, or a recipe that keeps these GEMMs in high precision"
           if handed in _HIGH_PRECISIONS else "")
    return f"these GEMMs asked for {handed} (TE was handed {handed} operands, or a GEMM outside TE had them), not {expected}{why}"


_GEMM_COLUMN = "layer · module\n  kernel"


def mismatch_sections(result: Verification, allowed: bool) -> list[TextSection]:
    """The mismatches, one table per cause: the cause, and the precision or rank count every row
    shares, said once above it; a row per layer, module, pass and kernel."""
    title = ALLOWED_TITLE if allowed else MISMATCHES_TITLE
    frame = mismatch_frame(result, allowed)
    if frame.empty:
        return [TextSection(f"{title}: none")]
    sections = []
    for cause, part in frame.groupby(frame["cause"].fillna("?"), sort=False):
        columns = {_GEMM_COLUMN: where(part["layer"], part["module"]) + "\n  " + part["kernel"],
                   "pass": part["pass"].fillna("?")}
        if result.expect_map:
            columns["expected"] = part["expected"]
        columns |= {"precision": part["precision"], "launches": part["launches"]}
        if several_ranks(result):
            columns["ranks"] = part["ranks"]
        rows, shared = said_once(pd.DataFrame({**columns, "time ms": part["time_ms"]}),
                                  ["expected", "precision", "ranks"])
        said = ([f"all ran as {shared['precision']}"] if "precision" in shared else []) + (
            [f"on {count(shared['ranks'], 'rank')}"] if "ranks" in shared else [])
        heading = (f"{title}: {cause}, {count(int(part['launches'].sum()), 'launch', 'launches')}, "
                   f"{part['time_ms'].sum():.3f} ms")
        expected = shared.get("expected", result.expected if not result.expect_map else "the expected")
        meaning = _cause_text(cause, expected, result) + (f"; {', '.join(said)}" if said else "") + "."
        sections.append(TextSection(heading, terminal_table(rows, {_GEMM_COLUMN: shorten_gemm_cell}), before=[meaning]))
    return sections


def ranks_section(result: Verification) -> TextSection:
    """Per layer, module and pass where some ranks ran other kernels: what most ranks ran, and
    which ranks differ."""
    title = RANKS_TITLE
    differing = differing_ranks(result)
    if differing.empty:
        return TextSection(f"{title}: none")
    column = "layer · module\n  kernels most ranks ran"
    frame = pd.DataFrame({
        column: where(differing["layer"], differing["module"]) + "\n  "
        + differing["kernels"].str.replace(" + ", "\n  ", regex=False),
        "pass": differing["pass"].fillna("?"), "ranks": differing["ranks"],
        "ranks that differ": differing["differing_ranks"].map(lambda ranks: ", ".join(map(str, ranks))),
    })
    return TextSection(title, terminal_table(frame, {column: shorten_gemm_cell}, wrap={"ranks that differ"}))


def breakdown_sections(diagnosis: Diagnosis) -> list[TextSection]:
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
    chunks: list[list[str]] = []
    chunk: list[str] = []
    used = label_width + 1
    for header in figures.columns:
        column_width = max(cell_len(header), *(len(cell(v)) for v in figures[header])) + GAP
        if chunk and used + column_width > TERMINAL_WIDTH:
            chunks.append(chunk)
            chunk, used = [], label_width + 1
        chunk.append(header)
        used += column_width
    chunks.append(chunk)
    return [TextSection(title if i == 0 else "Where the GPU time went, continued",
                        terminal_table(pd.concat([names.rename("figure"), figures[chunk]], axis=1)))
            for i, chunk in enumerate(chunks)]


def findings_section(title: str, findings: list[Finding]) -> TextSection:
    return table_section(title, findings_frame(findings), wrap={"what it says"})


def launches_section(result: Verification) -> TextSection:
    """Every GEMM launch, one line each: its start, where it ran, its kernel (numbered: the names
    are listed once, under the table), precision, duration and verdict."""
    g = result.gemms
    if g.empty:
        return TextSection(f"{LAUNCHES_TITLE}: none")
    codes, names = pd.factorize(g["name"])
    frame = pd.DataFrame({"start ms": (g["start"] / 1e6).map("{:.3f}".format), "rank": g["rank"],
                          "layer (or module)": g["layer"].where(g["layer"].notna(), g["module"]),
                          "pass": g["te_pass"].fillna("?"), "kernel": "K" + pd.Series(codes + 1, g.index).astype(str),
                          "precision": g["precision"].fillna("unknown"), "µs": g["duration_ns"] / 1e3})
    if result.expect_map:
        frame["expected"] = g["expected"]
    if result.checked:
        frame["verdict"] = g["verdict"] + (": " + g["cause"]).fillna("")
    if not several_ranks(result):
        frame = frame.drop(columns="rank")
    return TextSection(f"{LAUNCHES_TITLE} (the kernels are named under the table)",
                       terminal_table(frame, {"layer (or module)": shorten_layer}),
                       after=["", legend([f"K{i}" for i in range(1, len(names) + 1)], names)])
