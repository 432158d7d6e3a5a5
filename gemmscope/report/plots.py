"""Plots people read, as PNGs: files for the terminal user (a `profile` run directory, or
`analyze` / `verify --plots DIR`) and inlined in the HTML report (gemmscope.report.html).

A profile run (`profile_plots`): per layer, the GEMM kernel and quantization / other kernel
time per mode and recipe (report.png); per GEMM, the speedup of each recipe over BF16; per GEMM,
each recipe's kernel TFLOP/s against the GPU's dense peak.

Checked traces (`trace_plots`): where each rank's GPU time went; per GEMM (layer × module × pass
× call shape × precision), its TFLOP/s against the dense peak of its precision, which needs the
FLOPs gemmscope's hook records; for a training trace cut by its steps, the time per step.

Flagged GEMMs are marked the same way everywhere: a red ring (a red outline on a bar), in the
legend with their count. Each `Plot` keeps the frame it drew (`data`), so what a plot shows can
be checked without reading pixels. matplotlib is imported only when a plot is drawn, with the
Agg backend: no display is needed.
"""

from __future__ import annotations

import io
import itertools
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope import devices
from gemmscope.diagnosing.diagnosis import CATEGORIES, Diagnosis
from gemmscope.diagnosing.throughput import device_name, gemm_group_throughput
from gemmscope.errors import InputError
from gemmscope.judging.judgement import Judgement
from gemmscope.judging.recipes import recipe_precision
from gemmscope.plan.profile_run import ProfileRun

DPI = 110
FLAGGED_COLOUR = "#d62728"
IDLE_STYLE = {"color": "#e4e4e4", "hatch": "//", "edgecolor": "#a0a0a0"}
# Above this many ranks the per-step plot shows the mean rank, not one panel each.
MAX_RANK_PANELS = 4
# Above this many steps only every n-th step is labelled on the axis.
MAX_STEP_LABELS = 30
# Red is kept for what is flagged: FALLBACK GEMM time, and the rings and outlines of flagged GEMMs.
RECIPE_COLOURS = {"bf16": "#1f77b4", "fp8-delayed": "#ff7f0e", "fp8-current": "#2ca02c", "fp8-block": "#9467bd",
                  "mxfp8": "#8c564b", "nvfp4": "#17becf"}
CATEGORY_COLOURS = {"gemm": "#1f77b4", "gemm-fallback": FLAGGED_COLOUR, "gemm-tail": "#aec7e8",
                    "quantize": "#ff7f0e", "attention": "#2ca02c", "communication": "#9467bd", "memcpy": "#8c564b",
                    "memset": "#c49c94", "other": "#7f7f7f"}
# Kernel precisions of traces, in the order they get colours (red left out).
PRECISION_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#e377c2")
PASS_MARKERS = {"fprop": "o", "dgrad": "s", "wgrad": "^"}
OTHER_PASS_MARKER = "D"


@dataclass
class Plot:
    """One figure: its file name, title and caption, the PNG, the frame it drew, and what the
    figure says in words besides (what was not drawn, and why)."""

    filename: str
    title: str
    caption: str
    png: bytes
    data: pd.DataFrame
    notes: tuple[str, ...] = ()


def write(plots: list[Plot], directory: Path) -> list[Path]:
    """Each plot as `directory/<filename>` (the folder made if missing); the paths written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = [directory / plot.filename for plot in plots]
        for plot, path in zip(plots, paths):
            path.write_bytes(plot.png)
    except OSError as exc:
        raise InputError(f"cannot write plots into {directory}: {exc.strerror}") from None
    return paths


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig, dpi: int = DPI) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    _pyplot().close(fig)
    return buffer.getvalue()


def _peak_lines(ax, peaks: pd.Series) -> None:
    """A dashed horizontal line per datasheet row (peak label → TFLOP/s), labelled at its right."""
    for label, peak in peaks.items():
        ax.axhline(peak, color="#555555", linestyle="--", linewidth=1)
        ax.annotate(f"{label} dense peak {peak:g}", (1, peak), xycoords=("axes fraction", "data"),
                    xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", fontsize=8, color="#333333")


def _flagged_handle(count: int, what: str):
    from matplotlib.lines import Line2D

    return Line2D([], [], marker="o", linestyle="", markersize=11, markerfacecolor="none",
                  markeredgecolor=FLAGGED_COLOUR, markeredgewidth=2, label=f"flagged, {what}: {count}")


# --- a profile run ----------------------------------------------------------------------------------

def profile_plots(run: ProfileRun) -> list[Plot]:
    """The plots of a `gemmscope profile` run, report.png (per layer) first."""
    return [profile_layer_plot(run), profile_speedup_plot(run), profile_tflops_plot(run)]


def profile_layer_plot(run: ProfileRun) -> Plot:
    return Plot("report.png", "Per-layer GEMM time",
                "Per layer, per mode and precision: GEMM kernels and quantization / other kernels (ms); "
                "a precision with flagged GEMMs is outlined in red.",
                profile_png(run), run.per_layer().reset_index())


def profile_png(run: ProfileRun) -> bytes:
    """Per-layer stacked bars, GEMM kernels vs quantization overhead, per mode and precision;
    a precision with flagged GEMMs is outlined in red and labelled."""
    plt = _pyplot()
    layer = run.per_layer().reset_index()
    labels = [f"{m}\n{p}" for m, p in zip(layer["mode"], layer["precision"])]
    kernel = layer["kernel_ms"].fillna(0)
    overhead = layer["overhead_ms"].fillna(0)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(layer)), 4.5))
    ax.bar(labels, kernel, label="GEMM kernels", color="#4C72B0")
    ax.bar(labels, overhead, bottom=kernel, label="quantization / other kernels", color="#DD8452")
    statuses = run.gemms[run.gemms["per_layer"]].groupby(["mode", "precision"], sort=False)["status"]
    for i, row in layer.iterrows():  # one bar per mode and precision
        if row["not_ok"]:
            why = "/".join(sorted(set(statuses.get_group((row["mode"], row["precision"]))) - {"ok"}))
            ax.text(i, 0, why, ha="center", va="bottom", rotation=90, fontsize=8)
        elif row["flagged"]:
            ax.bar(labels[i], kernel[i] + overhead[i], fill=False, edgecolor="red", linewidth=2)
            ax.text(i, kernel[i] + overhead[i], f"{row['flagged']} flagged", ha="center", va="bottom",
                    color="red", fontsize=8)
    ax.set_ylim(0, 1.15 * max((kernel + overhead).max(), 1e-3))
    ax.set_ylabel("ms per layer (one step's GEMMs)")
    ax.set_title(f"{run.plan['model']} on {run.device['name']}: per-layer GEMM time")
    ax.legend()
    fig.tight_layout()
    return _png(fig, dpi=120)


def _profile_rows(run: ProfileRun) -> pd.DataFrame:
    """Every entry of the run with its GEMM label and whether it is flagged: FALLBACK, as the
    run's tables and verdict block count it (an EXPECTED-SUBSTITUTION is TE's design, not a flag)."""
    g = run.gemms
    flagged = g["verdict"] == "FALLBACK"
    return g.assign(gemm=g["op"] + "\n" + g["pass"], flagged=flagged)


def _not_run_notes(rows: pd.DataFrame, drawn: list[str]) -> list[str]:
    """["not run: mxfp8, nvfp4 (unsupported)"] for the recipes of `rows` not among `drawn`."""
    missing = rows[~rows["precision"].isin(drawn)]
    if missing.empty:
        return []
    statuses = ", ".join(sorted(set(missing["status"]) - {"ok"})) or "no figure for them"
    return [f"not run: {', '.join(dict.fromkeys(missing['precision']))} ({statuses})"]


def _suptitle(fig, title: str, notes: list[str]) -> None:
    fig.suptitle("\n".join([title, *notes]), fontsize=11)


def _recipe_peaks(rows: pd.DataFrame) -> pd.Series:
    """Datasheet row → dense peak (TFLOP/s) of the recipes among profile `rows`, where known."""
    label = rows["precision"].map(lambda recipe: devices.peak_label(recipe_precision(recipe)))
    return rows.assign(label=label).dropna(subset=["peak_tflops", "label"]).groupby("label")["peak_tflops"].first()


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _dodge(count: int, width: float = 0.8) -> np.ndarray:
    """Offsets of `count` side-by-side items around a category's tick."""
    return (np.arange(count) - (count - 1) / 2) * width / max(count, 1)


def _per_gemm_axes(plt, rows: pd.DataFrame, recipes: list[str], dodge_width: float, share_y: bool):
    """A profile run's figure of one panel per mode and one tick per GEMM: the figure, its axes,
    the modes and GEMMs in order, each GEMM's tick and each recipe's offset from it."""
    modes = list(dict.fromkeys(rows["mode"]))
    gemms = list(dict.fromkeys(rows["gemm"]))
    fig, axes = plt.subplots(len(modes), 1, figsize=(max(8.0, 0.85 * len(gemms) + 3), 1.2 + 3.0 * len(modes)),
                             sharex=True, sharey=share_y, squeeze=False, layout="constrained")
    offsets = dict(zip(recipes, _dodge(len(recipes), dodge_width)))
    position = {gemm: i for i, gemm in enumerate(gemms)}
    return fig, axes, modes, gemms, position, offsets


def _run_plot(fig, run: ProfileRun, headline: str, notes: list[str], data: pd.DataFrame, file_name: str,
              title: str, caption: str) -> Plot:
    """A profile run's figure, titled with its model and GPU and what was not drawn, as a Plot."""
    _suptitle(fig, f"{run.plan['model']} on {run.device['name']}: {headline}", notes)
    return Plot(file_name, title, caption, _png(fig), data, tuple(notes))


def profile_speedup_plot(run: ProfileRun) -> Plot:
    """Per GEMM and mode, each recipe's speedup over BF16 (CUDA-event time), with the peak ratio
    the recipe's precision has over BF16 on this GPU."""
    plt = _pyplot()
    rows = _profile_rows(run)
    data = rows.loc[rows["precision"] != "bf16",
                    ["mode", "op", "pass", "gemm", "precision", "speedup", "verdict", "flagged"]]
    drawn = data[data["speedup"].notna()]
    recipes = list(dict.fromkeys(drawn["precision"]))
    colours = RECIPE_COLOURS
    fig, axes, modes, gemms, position, offsets = _per_gemm_axes(plt, rows, recipes, 0.8, share_y=False)
    width = 0.8 / max(len(recipes), 1)
    bf16_peak = devices.peak_tflops(run.device["name"], "bf16")
    peaks = _recipe_peaks(rows[rows["precision"].isin(recipes)])
    peak_ratios = peaks / bf16_peak if bf16_peak else peaks.iloc[0:0]
    for ax, mode in zip(axes[:, 0], modes):
        here = drawn[drawn["mode"] == mode]
        for recipe, part in here.groupby("precision", sort=False):
            x = part["gemm"].map(position) + offsets[recipe]
            ax.bar(x, part["speedup"], width=width, color=colours[recipe], label=recipe)
            flagged = part[part["flagged"]]
            ax.bar(x[part["flagged"]], flagged["speedup"], width=width, fill=False, edgecolor=FLAGGED_COLOUR,
                   linewidth=2)
        ax.axhline(1.0, color="black", linewidth=1)
        for label, ratio in peak_ratios.items():
            ax.axhline(ratio, color="#555555", linestyle="--", linewidth=1)
            ax.annotate(f"{label} peak / BF16 peak = {ratio:g}×", (1, ratio), xycoords=("axes fraction", "data"),
                        xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", fontsize=8,
                        color="#333333")
        ax.set_ylim(0, 1.15 * max(drawn["speedup"].max() if len(drawn) else 1.0, 2.0))
        ax.set_ylabel("speedup over BF16 (×)")
        ax.set_title(f"{mode} mode", loc="left", fontsize=10)
    axes[-1, 0].set_xticks(range(len(gemms)), gemms, fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[r]) for r in recipes]
    labels = list(recipes)
    flagged_count = int(drawn["flagged"].sum())
    handles.append(plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor=FLAGGED_COLOUR, linewidth=2))
    labels.append(f"flagged (FALLBACK): {flagged_count}")
    fig.legend(handles, labels, loc="outside right upper", frameon=False)
    notes = _not_run_notes(rows[rows["precision"] != "bf16"], recipes)
    return _run_plot(fig, run, "speedup over BF16 per GEMM (CUDA-event time)", notes, data, "speedup-vs-bf16.png",
                     "Speedup over BF16 per GEMM",
                     "Per GEMM and mode: BF16's end-to-end (CUDA-event) time for the same GEMM over each recipe's; "
                     "the line at 1× is BF16, the dashed line the ratio of the recipe's dense peak to BF16's on this "
                     "GPU; flagged entries are outlined in red.")


def profile_tflops_plot(run: ProfileRun) -> Plot:
    """Per GEMM and mode, each recipe's GEMM kernel TFLOP/s, with the dense peak of each
    precision that ran."""
    plt = _pyplot()
    rows = _profile_rows(run)
    data = rows[["mode", "op", "pass", "gemm", "precision", "kernel_precision", "kernel_tflops", "peak_tflops",
                 "verdict", "flagged"]]
    drawn = data[data["kernel_tflops"].notna()]
    recipes = list(dict.fromkeys(drawn["precision"]))
    colours = RECIPE_COLOURS
    fig, axes, modes, gemms, position, offsets = _per_gemm_axes(plt, rows, recipes, 0.6, share_y=True)
    peaks = _recipe_peaks(drawn)
    for ax, mode in zip(axes[:, 0], modes):
        here = drawn[drawn["mode"] == mode]
        for recipe, part in here.groupby("precision", sort=False):
            x = part["gemm"].map(position) + offsets[recipe]
            ax.scatter(x, part["kernel_tflops"], color=colours[recipe], s=36, zorder=3)
            ax.scatter(x[part["flagged"]], part.loc[part["flagged"], "kernel_tflops"], s=160, facecolors="none",
                       edgecolors=FLAGGED_COLOUR, linewidths=2, zorder=4)
        _peak_lines(ax, peaks)
        ax.set_ylabel("GEMM kernel TFLOP/s")
        ax.set_title(f"{mode} mode", loc="left", fontsize=10)
    top = max(peaks.max() if len(peaks) else 0, drawn["kernel_tflops"].max() if len(drawn) else 1)
    axes[0, 0].set_ylim(0, 1.12 * top)
    axes[-1, 0].set_xticks(range(len(gemms)), gemms, fontsize=8)
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=colours[r], label=r) for r in recipes]
    handles.append(_flagged_handle(int(drawn["flagged"].sum()), "FALLBACK"))
    fig.legend(handles=handles, loc="outside right upper", frameon=False)
    if drawn.empty:
        notes = ["no GEMM kernel times: the run has no trace (made with --no-nsys)"]
    else:
        notes = _not_run_notes(rows, recipes)
        if not len(peaks):
            notes.append(f"no peak line: {run.device['name']} is not in gemmscope's device table")
    return _run_plot(fig, run, "GEMM kernel throughput against the dense peak", notes, data, "gemm-tflops.png",
                     "GEMM kernel TFLOP/s against the GPU's dense peak",
                     "Per GEMM and mode: each recipe's GEMM kernel throughput (2·M·K·N over the kernel time), one "
                     "marker per GEMM and recipe; dashed lines: the GPU's dense tensor-core peak of each precision "
                     "that ran (gemmscope/devices.py); flagged entries are ringed in red.")


# --- checked traces -----------------------------------------------------------------------------------

def trace_plots(result: Judgement, diagnosis: Diagnosis) -> list[Plot]:
    """The plots of checked traces: per rank, per step where the run was cut by its steps, and
    GEMM throughput where any GEMM ran."""
    made = [breakdown_plot(diagnosis), steps_plot(diagnosis), trace_tflops_plot(result)]
    return [plot for plot in made if plot is not None]


def breakdown_plot(diagnosis: Diagnosis) -> Plot | None:
    if diagnosis.breakdown.empty:
        return None
    return Plot("gpu-time-per-rank.png", "Where the GPU time went, per rank",
                "Per rank, in ms: the GPU window (kernel time per category, then idle time), and the kernel time "
                "per category alone.", breakdown_png(diagnosis.breakdown), diagnosis.breakdown)


def breakdown_png(breakdown: pd.DataFrame) -> bytes:
    """Per rank, horizontal stacked bars (ms): above, the GPU window as each category's kernel
    time then idle time; below, the kernel time by category alone, which idle time can dwarf."""
    plt = _pyplot()
    ranks = [f"rank {r}" if str(r).isdigit() else str(r) for r in breakdown["rank"]]
    present = [c for c in CATEGORIES if breakdown[f"{c}_ns"].any()]
    colours = CATEGORY_COLOURS
    fig, (window_ax, busy_ax) = plt.subplots(2, 1, figsize=(11, 2.6 + 0.9 * len(ranks)), layout="constrained")
    for ax, with_idle in ((window_ax, True), (busy_ax, False)):
        left = pd.Series(0.0, index=breakdown.index)
        for category in present:
            ms = breakdown[f"{category}_ns"] / 1e6
            ax.barh(ranks, ms, left=left, color=colours[category], label=category if with_idle else None)
            left += ms
        if with_idle:
            ax.barh(ranks, breakdown["idle_ns"] / 1e6, left=left, label="idle", **IDLE_STYLE)
        ax.invert_yaxis()  # rank 0 on top
        ax.set_xlabel("ms")
    window_ax.set_title("GPU window: kernel time per category, then idle")
    busy_ax.set_title("Kernel time per category (no idle)")
    fig.legend(loc="outside right center", frameon=False)
    return _png(fig)


def steps_plot(diagnosis: Diagnosis) -> Plot | None:
    """Per step after the first, stacked bars of each category's kernel time then idle time (ms):
    one panel per rank, or the mean over ranks when there are more than MAX_RANK_PANELS."""
    steps = diagnosis.step_times
    if steps.empty:
        return None
    plt = _pyplot()
    ranks = list(dict.fromkeys(steps["rank"]))
    columns = [*(f"{c}_ns" for c in CATEGORIES), "idle_ns"]
    names = steps.drop_duplicates("step").set_index("step")["name"].sort_index()
    if len(ranks) > MAX_RANK_PANELS:
        panels = [(f"mean over {len(ranks)} ranks", steps.groupby("step")[columns].mean())]
    else:  # a rank that launched nothing in a step has an empty bar there
        panels = [(f"rank {r}" if str(r).isdigit() else str(r),
                   steps[steps["rank"] == r].set_index("step")[columns].reindex(names.index, fill_value=0))
                  for r in ranks]
    # a step's own name where the names tell steps apart ("step 3"), else its place
    labels = names if names.is_unique and names.notna().all() else pd.Series(
        [f"step #{i}" for i in names.index], index=names.index)
    present = [c for c in CATEGORIES if steps[f"{c}_ns"].any()]
    colours = CATEGORY_COLOURS
    count = len(names)
    width = min(16.0, max(8.0, 3 + 0.45 * count))
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 1.4 + 3.2 * len(panels)), sharex=True, squeeze=False,
                             layout="constrained")
    for ax, (title, frame) in zip(axes[:, 0], panels):
        x = np.arange(len(frame))
        bottom = np.zeros(len(frame))
        for category in present:
            ms = frame[f"{category}_ns"].to_numpy(dtype=float) / 1e6
            ax.bar(x, ms, bottom=bottom, color=colours[category], label=category if ax is axes[0, 0] else None)
            bottom += ms
        ax.bar(x, frame["idle_ns"].to_numpy(dtype=float) / 1e6, bottom=bottom,
               label="idle" if ax is axes[0, 0] else None, **IDLE_STYLE)
        ax.set_ylabel("ms per step")
        ax.set_title(title, loc="left", fontsize=10)
    every = max(1, int(np.ceil(count / MAX_STEP_LABELS)))
    ticks = np.arange(count)[::every]
    crowded = count > 10
    axes[-1, 0].set_xticks(ticks, labels.iloc[::every], rotation=30 if crowded else 0,
                           ha="right" if crowded else "center", fontsize=8)
    fig.legend(loc="outside right center", frameon=False)
    fig.suptitle(f"GPU time per training step, after the first ({count} steps)\nstep ranges: "
                 f"{_shorten(str(diagnosis.step_range), 60)}", fontsize=11)
    return Plot("time-per-step.png", "GPU time per training step",
                "Per step after the first (warm-up left out), in ms: each category's kernel time, then the time the "
                "GPU idled (kernels of several streams at once add up to more than the step). A step runs on the GPU "
                "from its first kernel to the next step's first; the steps add up to the per-rank breakdown.",
                _png(fig), steps)


def trace_tflops_plot(result: Judgement) -> Plot | None:
    """Per GEMM (layer × module × pass × call shape × precision), its TFLOP/s against its FLOPs
    per launch, marker area by its time, with the dense peak of each precision; or, where the
    hook recorded no FLOPs, a figure that says so."""
    if result.gemms.empty:
        return None
    plt = _pyplot()
    data = gemm_group_throughput(result)
    drawn = data[data["tflops"].notna()]
    hidden = data[data["tflops"].isna()]
    device = device_name(result) or "an unnamed GPU"
    flagged_total = int(data["flagged"].sum())
    title, caption = "GEMM TFLOP/s against the GPU's dense peak", (
        "One marker per GEMM (layer × module × pass × call shape × precision): its FLOPs per launch (the hook's "
        "record of the call's shape) and its TFLOP/s over its kernel time; marker area: its share of GEMM time; "
        "dashed lines: the GPU's dense peak per precision (gemmscope/devices.py); FALLBACK GEMMs ringed in red.")
    if drawn.empty:
        note = (f"GEMM TFLOP/s unknown: gemmscope's hook recorded no GEMM shape in these traces, so no FLOPs "
                f"({len(data)} GEMMs, {flagged_total} flagged FALLBACK); `gemmscope verify -- COMMAND` records them")
        fig, ax = plt.subplots(figsize=(10, 1.6), layout="constrained")
        ax.axis("off")
        ax.text(0.5, 0.5, textwrap.fill(note, 110), ha="center", va="center", fontsize=10)
        ax.set_title(f"{title} ({device})", fontsize=11)
        return Plot("gemm-tflops.png", title, caption, _png(fig), data, (note,))
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogFormatter

    colours = dict(zip(sorted(drawn["precision"].unique()), itertools.cycle(PRECISION_COLOURS)))
    fig, ax = plt.subplots(figsize=(11, 5.5), layout="constrained")
    area = 25 + 275 * drawn["time_ns"] / drawn["time_ns"].max()
    gflop = drawn["flops_per_launch"] / 1e9
    marker = drawn["pass"].map(PASS_MARKERS).fillna(OTHER_PASS_MARKER)
    for (precision, shape), part in drawn.groupby([drawn["precision"], marker]):
        ax.scatter(gflop[part.index], part["tflops"], s=area[part.index], color=colours[precision], marker=shape,
                   alpha=0.75, edgecolors="white", linewidths=0.5, zorder=3)
    flagged = drawn[drawn["flagged"]]
    ax.scatter(gflop[flagged.index], flagged["tflops"], s=area[flagged.index] * 1.4 + 40, facecolors="none",
               edgecolors=FLAGGED_COLOUR, linewidths=1.5, zorder=4)
    peaks = (drawn.assign(label=drawn["precision"].map(devices.peak_label))
             .dropna(subset=["peak_tflops", "label"]).groupby("label")["peak_tflops"].first())
    _peak_lines(ax, peaks)
    ax.set_xscale("log")
    ax.set_xlim(gflop.min() / 2, gflop.max() * 2)
    # plain numbers (2000, not 2×10³); minor ticks labelled only where the axis spans few decades
    ax.xaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    ax.set_ylim(0, 1.12 * max(peaks.max() if len(peaks) else 0, drawn["tflops"].max()))
    ax.set_xlabel("GFLOP per launch (log scale)")
    ax.set_ylabel("TFLOP/s")
    handles = [Line2D([], [], marker="o", linestyle="", markersize=8, color=colours[p], label=p) for p in colours]
    passes = list(dict.fromkeys(drawn["pass"].fillna("pass unknown")))
    handles += [Line2D([], [], marker=PASS_MARKERS.get(p, OTHER_PASS_MARKER), linestyle="", markersize=8,
                       color="#555555", label=p) for p in passes]
    handles.append(_flagged_handle(len(flagged), "FALLBACK"))
    ax.legend(handles=handles, loc="lower right", fontsize=9, title="colour: precision; shape: pass;\n"
              "area: GEMM time", title_fontsize=8)
    notes = []
    if len(hidden):
        notes.append(f"{len(hidden)} GEMMs ({hidden['time_ns'].sum() / 1e6:.3f} ms, "
                     f"{int(hidden['flagged'].sum())} flagged) have no hook record of their shape: not drawn")
    if not len(peaks):
        notes.append(f"no peak line: {device} has no dense peak in gemmscope's device table for these precisions")
    ax.set_title("\n".join([f"{title}: {len(drawn)} GEMMs on {device}", *notes]), fontsize=11)
    return Plot("gemm-tflops.png", title, caption, _png(fig), data, tuple(notes))
