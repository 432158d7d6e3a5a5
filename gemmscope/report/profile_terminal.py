"""How the terminal lays out a profile run's sections: per mode and pass a row per GEMM and
recipe that ran, grouped by GEMM (its shape said once above), the speedup and what holds it back
(throughput and noise with --verbose); the kernels per mode."""

from __future__ import annotations

import pandas as pd

from gemmscope.report.model import TextSection
from gemmscope.report.terminal import blank_repeats, said_once, shorten_middle, terminal_table

# The figures of `profile_pass_tables` for the terminal: the speedup and what holds it back by
# default, throughput and noise with --verbose (every figure is in report.md and results.json).
_PASS_COLUMNS = {"e2e ms": "e2e\nms", "kernel ms": "kernel\nms", "quant %": "quant\n%", "speedup": "speedup",
                 "kernel % peak": "kernel\n% peak", "speedup reason": "speedup reason", "verdict": "verdict"}
_THROUGHPUT_COLUMNS = {"IQR ms": "IQR\nms", "overhead ms": "overhead\nms", "TFLOP/s": "TFLOP/s", "% peak": "% peak",
                       "kernel TFLOP/s": "kernel\nTFLOP/s", "FLOP/B": "FLOP/B"}


def pass_sections(title: str, frame: pd.DataFrame, ran: pd.Series, detail: str) -> list[TextSection]:
    """One mode and pass (`frame`, profile_pass_tables'), a row per GEMM and recipe that ran
    (`ran`: recipe_ran's), grouped by GEMM; with `detail` "verbose", throughput and noise too."""
    listed = frame[ran.loc[frame.index].to_numpy()]
    if listed.empty:
        return []
    listed = listed.assign(order=pd.Categorical(listed["op"], categories=list(dict.fromkeys(listed["op"]))))
    listed = listed.sort_values("order", kind="stable").drop(columns="order")
    shapes = ", ".join(f"{op} {shape}" for op, shape in dict.fromkeys(zip(listed["op"], listed["shape (MxKxN)"])))
    keys = blank_repeats(listed, ["op"])[["op", "precision"]]
    figures, shared = said_once(listed[list(_PASS_COLUMNS)].rename(columns=_PASS_COLUMNS), ["verdict"])
    before = [f"M×K×N: {shapes}"] + ([f"Every entry's verdict: {verdict}"] if (verdict := shared.get("verdict"))
                                     else [])
    sections = [TextSection(title, terminal_table(pd.concat([keys, figures], axis=1), wrap={"speedup reason"}),
                            before=before)]
    if detail == "verbose":
        throughput = listed[list(_THROUGHPUT_COLUMNS)].rename(columns=_THROUGHPUT_COLUMNS)
        sections.append(TextSection(f"{title}: throughput and noise (% of the GPU's dense peak; FLOP/B: "
                                    "arithmetic intensity)", terminal_table(pd.concat([keys, throughput], axis=1))))
    return sections


def kernel_sections(kernels: pd.DataFrame) -> list[TextSection]:
    """The kernels that ran (profile_kernel_table's), a table per mode."""
    sections = []
    for mode, part in kernels.groupby("mode", sort=False):
        rows = blank_repeats(part, ["precision", "pass"])[["precision", "pass", "kernel", "ran as", "ops"]]
        sections.append(TextSection(f"GEMM kernels that ran, {mode} (per precision and pass)",
                                    terminal_table(rows, {"kernel": shorten_middle}, wrap={"ops"})))
    return sections
