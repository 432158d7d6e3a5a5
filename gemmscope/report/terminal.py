"""Text for the terminal (`--format table`, the default): rich tables in TERMINAL_WIDTH
columns, and a report rendered as such."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pandas as pd
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from gemmscope.report import model
from gemmscope.report.model import Report, TextSection, cell, verdict_text

# `table` output fits this many columns: the verdict block wraps at it, and the tables after it are
# narrowed to it (prose wrapped, long kernel and layer names shortened in the middle; JSON, CSV,
# Markdown and HTML keep every name whole).
TERMINAL_WIDTH = 100
# Between two columns: a space of padding and the box's blank vertical line; one more space of
# padding closes the last column.
GAP = 2
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
        ((indent, name),) = _INDENT.findall(line)
        lines.append(indent + shorten_middle(name, max(width - len(indent), 1)))
    return "\n".join(lines)


def _text_width(text: str) -> int:
    return max(cell_len(line) for line in text.split("\n"))


def said_once(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The `columns` that hold one value in every row of a table of several rows, taken out of it,
    with that value: the table's heading says it once."""
    if len(frame) < 2:
        return frame, {}
    constant = {c: frame[c].iloc[0] for c in columns if c in frame and frame[c].nunique(dropna=False) == 1}
    return frame.drop(columns=list(constant)), constant


def blank_repeats(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """A grouped table's keys said once per group: each key blank where it and the keys before it
    repeat the row above."""
    out = frame.copy()
    repeats = pd.Series(True, index=frame.index)
    for key in keys:
        text = frame[key].map(cell)
        repeats &= text.eq(text.shift())
        out[key] = text.where(~repeats, "")
    return out


def terminal_table(frame: pd.DataFrame, shorten: dict[str, Shortener] | None = None,
                   wrap: Collection[str] = ()) -> Table:
    """`frame` as a table that fits TERMINAL_WIDTH columns: its `wrap` columns (prose) wrap first, down to
    _PROSE_WIDTH; then its `shorten` columns are cut by their shortener, the widest first, down to
    _NAME_WIDTH. Only the columns of prose wrap: names and numbers stay on their line."""
    shorten = shorten or {}
    cells = {c: frame[c].map(cell) for c in frame.columns}
    natural = {c: max([_text_width(str(c)), *(cells[c].map(_text_width) if len(frame) else [])])
               for c in frame.columns}
    widths = dict(natural)
    room = TERMINAL_WIDTH - 1 - GAP * (len(widths) - 1)
    for narrowable, floor in ((wrap, _PROSE_WIDTH), (shorten, _NAME_WIDTH)):
        floors = {c: max(floor, _text_width(str(c))) for c in narrowable if c in widths}
        while sum(widths.values()) > room:
            over = [c for c in floors if widths[c] > floors[c]]
            if not over:
                break
            widths[max(over, key=lambda c: widths[c])] -= 1
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
        for after in part.after:
            console.print(after, overflow="fold")
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


def table_section(title: str, frame: pd.DataFrame, shorten: dict[str, Shortener] | None = None,
                  wrap: Collection[str] = (), before: Sequence[str] = ()) -> TextSection:
    """A titled table; for an empty frame, the title says "none"."""
    if frame.empty:
        return TextSection(f"{title}: none")
    return TextSection(title, terminal_table(frame, shorten, wrap), before=list(before))


def table_text(title: str, frame: pd.DataFrame, wrap: Collection[str] = ()) -> str:
    """One table under its title, in TERMINAL_WIDTH columns (`shapes`, `doctor`)."""
    return terminal_text(table_section(title, frame, wrap=wrap)).lstrip("\n")


def kernels_text(decoded: pd.DataFrame) -> str:
    """`gemmscope kernel`: what each name says, a row per name, numbered; the names in full under
    the table, where each has the width of the terminal."""
    numbered = decoded.drop(columns="name").rename_axis("#").reset_index()
    numbered["#"] += 1
    return terminal_text(TextSection("kernels", terminal_table(numbered)), "",
                         legend(numbered["#"].astype(str), decoded["name"])).lstrip("\n")


def legend(keys: Sequence[str], names: Sequence[str]) -> Table:
    """Names said once, each after its key, in full: a name longer than the line folds under itself."""
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for key, name in zip(keys, names):
        grid.add_row(key, name)
    return grid


def to_terminal(report: Report) -> str:
    """A report as `table` output: the verdict block, the report's paragraphs (after a blank line),
    then each section in its terminal layout, or its tables under their titles."""
    parts: list[str | Table | TextSection] = []
    if report.status is not None:
        parts.append(verdict_text(report.status, report.verdict))
        if report.intro:
            parts.append("")
    parts += report.intro
    for section in report.sections:
        if section.terminal is not None:
            parts += section.terminal()
        else:
            parts += [table_section(block.title, block.frame) for block in section.blocks
                      if isinstance(block, model.Table)]
    return terminal_text(*parts)
