"""A `gemmscope profile` run as one report (`profile_report`), listed once for every format:
the verdict, then per mode and pass the GEMMs at each recipe, the kernels that ran, the
per-layer and full-model speedups, what did not run and the memory; and `results.json`,
report.md and the plots written into the run directory."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pandas as pd

from gemmscope import devices
from gemmscope.errors import InputError
from gemmscope.plan.profile_run import ProfileRun
from gemmscope.report import plots
from gemmscope.report.documents import results_document
from gemmscope.report.model import Details, Figure, Fit, Groups, More, Report, Section, Table, count
from gemmscope.report.verdict import environment_line

# What the columns of the per-pass tables mean.
COLUMNS_MEANING = ("e2e: CUDA-event time per iteration (median over the timed loop); kernel: GEMM kernels "
                   "from the trace; overhead: every other kernel inside the timed range (quantization). "
                   "speedup: over BF16, same GEMM and mode. % peak: of the GPU's dense peak at the recipe's "
                   "precision (e2e, and kernel alone). quant %: overhead / the timed range's span. FLOP/B: "
                   "arithmetic intensity (A, B and the BF16 output). speedup reason, the first that applies: the "
                   "kernel fell back; memory-bound (intensity below the ridge point); quantization or idle time "
                   "between kernels, where it costs the speedup more than the kernel's efficiency next to the BF16 "
                   "kernel's; else the kernel's % of peak (rules: `gemmscope.plan.profile_run.with_speed_figures`).")

KERNELS_TITLE = "GEMM kernels that ran (per mode, precision and pass)"

# The figures of `profile_pass_tables` the terminal shows: the speedup and what holds it back (throughput
# and noise with --verbose: `_THROUGHPUT`), under headings of two lines.
_PASS_LABELS = {"e2e ms": "e2e\nms", "kernel ms": "kernel\nms", "quant %": "quant\n%",
                "kernel % peak": "kernel\n% peak", "IQR ms": "IQR\nms", "overhead ms": "overhead\nms",
                "kernel TFLOP/s": "kernel\nTFLOP/s"}
_THROUGHPUT = ("IQR ms", "overhead ms", "TFLOP/s", "% peak", "kernel TFLOP/s", "FLOP/B")


def profile_report(run: ProfileRun, run_dir: Path | None = None, wall_s: float | None = None,
                   detail: str = "normal", written_to: Path | None = None) -> Report:
    """What gemmscope says about a profile run: the verdict, then (unless `detail` is "quiet")
    its sections. `run_dir`: where its results.json (the versions and the wall time it recorded)
    is; `wall_s`: the whole run's wall time, where results.json does not say it yet;
    `written_to`: the run directory the verdict points to for the full report (the terminal's);
    `detail` "verbose": the terminal shows throughput figures too."""
    results = _results_json(run_dir) if run_dir is not None else {}
    wall_s = results.get("wall_s") if wall_s is None else wall_s
    environment = _run_environment(run, results)
    # The terminal's verdict names the device alone: it points to the full report, which has the rest.
    device = f"{run.device['name']} ({run.device['sm']})"
    status, verdict = profile_verdict_block(run, device if written_to is not None else environment_line(environment))
    if wall_s is not None:
        environment.append(("whole run", f"{wall_s:.1f} s (workload under nsys, export, analysis)"))
    if written_to is not None:
        verdict.append(("Full report", f"{written_to}/report.md; gemmscope report {written_to} -o report.html"))
    on = f"{run.plan['model']} on {run.device['name']}"
    title = f"gemmscope report: {run_dir.name} ({on})" if run_dir is not None else f"gemmscope profile: {on}"
    report = Report(title=title, status=status, verdict=verdict, sections=[], tables=run_tables(run),
                    document=results_document(run, wall_s))
    if detail == "quiet":
        return report
    report.intro = [f"gemmscope profile: {on} ({run.device['sm']})", device_line(run)]
    report.environment = environment
    report.sections = _sections(run, detail)
    return report


def _sections(run: ProfileRun, detail: str) -> list[Section]:
    sections = [Section("What the columns say", intro=[COLUMNS_MEANING])]
    # The recipes that ran nowhere are said once, before the first table, and left out of the tables.
    ran = recipe_ran(run)
    skipped = [note] if (note := _skipped_note(run)) else []
    more = More("throughput and noise (% of the GPU's dense peak; FLOP/B: arithmetic intensity)", _THROUGHPUT,
                ("op", "precision"), shown=detail == "verbose")
    fit = Fit(gather="op", repeats=("op",), listed=("M×K×N", "op", "shape (MxKxN)"),
              once={"verdict": lambda verdict: f"Every entry's verdict: {verdict}"},
              more=more, wrap=("speedup reason",))
    for i, (title, frame) in enumerate(profile_pass_tables(run)):
        listed = frame[ran.loc[frame.index].to_numpy()]
        sections.append(Section(title, blocks=[Table(title, listed, fit=fit, headers=_PASS_LABELS)],
                                notes=skipped if i == 0 else []))
    sections.append(_run_details(run))
    kernels = Table(KERNELS_TITLE, profile_kernel_table(run), groups=Groups("mode"),
                    fit=Fit(repeats=("precision", "pass"), shorten={"kernel": "name"}, wrap=("ops",)))
    sections.append(Section(KERNELS_TITLE, blocks=[kernels]))
    for i, (title, frame) in enumerate(profile_summary_tables(run)):
        figures = [Figure(partial(draw, run)) for draw in
                   (plots.profile_layer_plot, plots.profile_speedup_plot, plots.profile_tflops_plot)] if i == 0 else []
        sections.append(Section(title, blocks=[Table(title, frame, fit=Fit(wrap=("why",))), *figures]))
    return sections


def _skipped_note(run: ProfileRun) -> str | None:
    """The recipes none of whose GEMMs ran in a mode, said once."""
    skipped = run.gemms.loc[~recipe_ran(run)].drop_duplicates(["mode", "precision"])
    if skipped.empty:
        return None
    modes = skipped.groupby("precision", sort=False)["mode"].agg(list)
    every_mode = len(dict.fromkeys(run.gemms["mode"]))
    named = [p if len(m) == every_mode else f"{p} ({', '.join(m)})" for p, m in modes.items()]
    return f"Not in the tables below: {', '.join(named)}: no GEMM ran (TE's reason under \"Did not run\")"


def write_profile_reports(run: ProfileRun, run_dir: Path, wall_s: float | None) -> None:
    """results.json, report.md and the plots (report.png, the per-layer one, first: `plots`)
    into the run directory."""
    from gemmscope.report import render

    run_dir = Path(run_dir)
    (run_dir / "results.json").write_text(json.dumps(results_document(run, wall_s), indent=1) + "\n")
    (run_dir / "report.md").write_text(render(profile_report(run, run_dir, wall_s), "markdown"))
    plots.write(plots.profile_plots(run), run_dir)


def num(value: float, digits: int = 3) -> str:
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
            "e2e ms": grp["e2e_ms"].map(num),
            "IQR ms": grp["e2e_iqr_ms"].map(num),
            "kernel ms": grp["kernel_ms"].map(num),
            "overhead ms": grp["overhead_ms"].map(num),
            "quant %": grp["quantization_pct"].map(lambda v: num(v, 0)),
            "speedup": grp["speedup"].map(lambda v: num(v, 2) + "x" if pd.notna(v) else ""),
            "TFLOP/s": grp["tflops"].map(lambda v: num(v, 0)),
            "% peak": grp["pct_of_peak"].map(lambda v: num(v, 0)),
            "kernel TFLOP/s": grp["kernel_tflops"].map(lambda v: num(v, 0)),
            "kernel % peak": grp["kernel_pct_of_peak"].map(lambda v: num(v, 0)),
            "FLOP/B": grp["intensity"].map(lambda v: num(v, 0)).where(grp["status"] == "ok", ""),
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
    """`profile_kernels` for people, precision by precision."""
    return profile_kernels(run).rename(columns={"kernel_precision": "ran as"})[
        ["mode", "precision", "pass", "kernel", "ran as", "ops"]]


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
    return run.memory


def profile_summary_tables(run) -> list[tuple[str, pd.DataFrame]]:
    layer = profile_per_layer(run)
    full = run.full_model().reset_index()
    per_layer = pd.DataFrame({
        "mode": layer["mode"], "precision": layer["precision"],
        "e2e ms": layer["e2e_ms"].map(num), "kernel ms": layer["kernel_ms"].map(num),
        "overhead ms": layer["overhead_ms"].map(num),
        "speedup vs bf16": layer["speedup_vs_bf16"].map(lambda v: num(v, 2) + "x" if pd.notna(v) else ""),
        "not run": layer["not_ok"],
        "flagged": layer["flagged"].map(lambda v: "" if pd.isna(v) else int(v)),
    })
    model = pd.DataFrame({"mode": full["mode"], "precision": full["precision"],
                          "e2e ms per step": full["e2e_ms"].map(num)})
    tables = [(f"Per layer ({run.plan['model']})", per_layer),
              (f"Full model: {run.plan['num_layers']} layers, one step's GEMMs", model)]
    not_run = profile_not_run_table(run)
    if not not_run.empty:
        tables.append(("Did not run (TE's reason, once per recipe)", not_run))
    if not run.memory.empty:
        memory = profile_memory(run)
        tables.append(("GPU memory while each precision ran (peak above baseline, MiB)",
                       memory.assign(peak_mib=memory["peak_mib"].map(lambda v: num(v, 0)))))
    return tables


def recipe_ran(run) -> pd.Series:
    """Per GEMM entry: whether any entry of its mode and precision ran."""
    g = run.gemms
    return (g["status"] == "ok").groupby([g["mode"], g["precision"]], sort=False).transform("any")


def profile_verdict_block(run: ProfileRun, environment: str) -> tuple[str, list[tuple[str, str]]]:
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
    ran_text = f"{len(ran)} of {count(len(g), 'entry', 'entries')} ran"
    if len(not_run):
        ran_text += (f"; {', '.join(dict.fromkeys(not_run['precision']))} did not "
                     f"({', '.join(dict.fromkeys(not_run['status']))}: TE's reason below)")
    good = checked.loc[checked["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), "kernel_ms"].sum()
    total = checked["kernel_ms"].sum()
    at_precision = (f"{100 * good / total:.1f} % of GEMM kernel time ran at the precision each entry asked "
                    f"for; {count(len(flagged), 'entry', 'entries')} flagged (FALLBACK)"
                    if len(checked) and total else "not checked: the run has no trace (made with --no-nsys)")
    speedups = []
    for mode, by_precision in run.speedups().items():
        done = ", ".join(f"{p} {v:.2f}×" for p, v in by_precision.items() if v is not None)
        quantization = ran[(ran["mode"] == mode) & (ran["precision"] != "bf16")]["quantization_pct"].mean()
        held = f" (quantization {quantization:.0f} % of e2e on average)" if quantization and quantization == quantization else ""
        speedups.append(f"{mode}: {done or 'none ran'}{held}")
    return status, [("Asked", asked), ("Ran", ran_text), ("At the requested precision", at_precision),
                    ("Speedup over BF16, per layer", "; ".join(speedups)), ("Environment", environment)]


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


def _run_details(run: ProfileRun) -> Section:
    """One <details> per mode × pass × GEMM: every recipe's figures and the kernel that ran, and
    what did not run (TE's reason is said once, under "Did not run")."""
    blocks = []
    for title, frame in profile_pass_tables(run):
        rows = run.gemms.loc[frame.index]
        frame = frame.assign(kernel=rows["kernel"].fillna(""))
        for op, part in frame.groupby("op", sort=False):
            speedups = ", ".join(f"{p} {s}" for p, s in zip(part["precision"], part["speedup"]) if s)
            flagged = int((part["verdict"] == "FALLBACK").sum())
            summary = (f"{title} · {op} ({part['shape (MxKxN)'].iat[0]}): {speedups or 'no speedup measured'}"
                       + (f"; {flagged} flagged" if flagged else ""))
            not_run = rows.loc[part.index][rows.loc[part.index, "status"] != "ok"]
            lines = [f"{precision} did not run ({status}: TE's reason under \"Did not run\")"
                     for precision, status in zip(not_run["precision"], not_run["status"])]
            blocks.append(Details(summary, lines, part.drop(columns=["op", "shape (MxKxN)"])))
    return Section("Per GEMM (mode · pass · op)",
                   intro=["Each line opens: every recipe's times, throughput, the reason for its speedup and "
                          "the kernel that ran, and what did not run."],
                   blocks=blocks)


def run_tables(run: ProfileRun) -> dict[str, pd.DataFrame]:
    """`profile_report`'s tables for a machine, keyed by file name: results.json's per-layer,
    full-model, memory and per-entry figures, the kernels that ran and what did not run. An
    entry that did not run counts no launches: blank, not 0."""
    ran = run.gemms["status"] == "ok"
    entries = run.gemms.assign(gemm_launches=run.gemms["gemm_launches"].astype("Int64").where(ran))
    return {
        "per-layer.csv": profile_per_layer(run),
        "full-model.csv": run.full_model().reset_index(),
        "gemm-entries.csv": entries,
        "gemm-kernels.csv": profile_kernels(run),
        "not-run.csv": profile_not_run_table(run),
        "memory.csv": profile_memory(run),
    }
