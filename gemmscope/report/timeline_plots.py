"""A job's windows over its steps, as PNGs for the timeline's page (gemmscope timeline --format
html): per window, the share of GEMM time each precision took and the coverage; the step time
against the baseline's spread; the mismatches and quantization's share of GPU busy time.

Each draws a frame of one row per window of the whole job (watching.timeline.window_series),
in the job's order, labelled by its steps (or its traces) and the time it was judged; a window
that was not judged is a hatched grey bar. Drawn as gemmscope.report.plots draws the others.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gemmscope.report.plots import FLAGGED_COLOUR, IDLE_STYLE, PRECISION_COLOURS, Plot, _png, _pyplot

SHARE_PREFIX = "share "
# The baseline's spread of step times, drawn as a band; the alert's bounds beyond it, dashed.
BAND_COLOUR = "#2ca02c"


def timeline_plots(windows: pd.DataFrame, spread_ms: tuple[float, float] | None, factor: float) -> list[Plot]:
    """The timeline's plots of `windows` (window_series), the step time's where any window holds
    one (its traces mark training steps): `spread_ms`, the baseline's fastest and slowest step
    (None: none known), outside which by more than `factor` a window's median alerts."""
    if windows.empty:
        return []
    timed = np.isfinite(_values(windows, "step_median_ms")).any()
    return [_precision_plot(windows), *([_step_plot(windows, spread_ms, factor)] if timed else []),
            _mismatch_plot(windows)]


def _axes(rows: int, windows: pd.DataFrame):
    """A figure of `rows` panels over the windows, its x axis labelled by each window's steps
    and the time it was judged."""
    plt = _pyplot()
    width = min(16.0, max(8.0, 3 + 0.6 * len(windows)))
    fig, axes = plt.subplots(rows, 1, figsize=(width, 0.8 + 2.8 * rows), sharex=True, squeeze=False,
                             layout="constrained")
    x = np.arange(len(windows))
    labels = [f"{label}\n{judged_at[11:19]}" for label, judged_at in zip(windows["label"], windows["judged_at"])]
    axes[-1, 0].set_xticks(x, labels, rotation=30 if len(windows) > 8 else 0, fontsize=8,
                           ha="right" if len(windows) > 8 else "center")
    for ax in axes[:, 0]:
        _not_judged(ax, windows)
    return fig, axes[:, 0], x


def _not_judged(ax, windows: pd.DataFrame) -> None:
    """A hatched grey span over each window that was not judged."""
    for nth, position in enumerate(np.flatnonzero(~windows["judged"].to_numpy(dtype=bool))):
        ax.axvspan(position - 0.4, position + 0.4, label="not judged" if nth == 0 else None,
                   facecolor=IDLE_STYLE["color"], hatch=IDLE_STYLE["hatch"], edgecolor=IDLE_STYLE["edgecolor"])


def _values(windows: pd.DataFrame, column: str) -> np.ndarray:
    return pd.to_numeric(windows[column], errors="coerce").to_numpy(dtype=float)


def _precision_plot(windows: pd.DataFrame) -> Plot:
    fig, (ax,), x = _axes(1, windows)
    bottom = np.zeros(len(windows))
    precisions = [c for c in windows.columns if c.startswith(SHARE_PREFIX)]
    for colour, column in zip(PRECISION_COLOURS * 2, precisions):
        share = np.nan_to_num(_values(windows, column)) * 100
        ax.bar(x, share, bottom=bottom, width=0.8, color=colour, label=column.removeprefix(SHARE_PREFIX))
        bottom += share
    ax.plot(x, _values(windows, "coverage") * 100, color="black", marker="o", label="asked for high precision")
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of GEMM time")
    fig.legend(loc="outside right center", frameon=False)
    fig.suptitle("GEMM time per precision, per window", fontsize=11)
    return Plot("timeline-precision.png", "GEMM time per precision, per window",
                "Per window, the share of its GEMM time each kernel precision took (stacked, over its ranks), and "
                "the coverage: the share asked for high precision (black).", _png(fig),
                windows[["window", "label", *precisions, "coverage"]])


def _step_plot(windows: pd.DataFrame, spread_ms: tuple[float, float] | None, factor: float) -> Plot:
    fig, (ax,), x = _axes(1, windows)
    median = _values(windows, "step_median_ms")
    low, high = median - _values(windows, "step_min_ms"), _values(windows, "step_max_ms") - median
    if spread_ms is not None:
        ax.axhspan(*spread_ms, color=BAND_COLOUR, alpha=0.15, label="baseline's steps (min..max)")
        for bound in (spread_ms[0] / factor, spread_ms[1] * factor):
            ax.axhline(bound, color=BAND_COLOUR, linestyle="--", linewidth=1)
    ax.errorbar(x, median, yerr=np.nan_to_num([low, high]), fmt="o", color="#1f77b4", capsize=4,
                label="median step (bars: fastest..slowest)")
    ax.set_ylabel("ms per step")
    fig.legend(loc="outside right center", frameon=False)
    fig.suptitle("Step time per window", fontsize=11)
    return Plot("timeline-step-time.png", "Step time per window",
                f"Per window, the median of its ranks' median step time, with bars from the fastest to the slowest "
                f"step; the band is the baseline's steps, the dashed lines {factor:.2f}x beyond them, where a "
                f"window alerts.", _png(fig), windows[["window", "label", "step_median_ms", "step_min_ms",
                                                       "step_max_ms"]])


def _mismatch_plot(windows: pd.DataFrame) -> Plot:
    fig, (mismatch_ax, quantize_ax), x = _axes(2, windows)
    mismatch_ax.bar(x, windows["mismatches"], width=0.8, color=FLAGGED_COLOUR, label="mismatches")
    mismatch_ax.set_ylabel("GEMM launches")
    mismatch_ax.set_title("Mismatches: launches that ran another precision than asked", loc="left", fontsize=10)
    quantize_ax.plot(x, _values(windows, "quantization") * 100, color="#ff7f0e", marker="o", label="quantization")
    quantize_ax.set_ylim(bottom=0)
    quantize_ax.set_ylabel("% of GPU busy time")
    quantize_ax.set_title("Quantization's share of GPU busy time", loc="left", fontsize=10)
    fig.legend(loc="outside right center", frameon=False)
    return Plot("timeline-mismatches.png", "Mismatches and quantization per window",
                "Per window, the GEMM launches that ran another precision than asked (summed over its ranks), and "
                "quantization's share of the GPU's busy time (mean over its ranks).", _png(fig),
                windows[["window", "label", "mismatches", "quantization"]])
