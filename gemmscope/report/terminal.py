"""Text for the terminal (`--format table`, the default): rich tables in TERMINAL_WIDTH
columns, and a report rendered as such: the verdict, then each section's notes and tables, each
table fitted by the folds it declares (model.Fit); paragraphs, figures and details are for pages."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from gemmscope.common.sinks import for_terminal, terminal_column, terminal_lines, text_columns
from gemmscope.report.model import Fit, Part, Report, Section, cell, header, table_parts, verdict_text
from gemmscope.report.model import Table as ReportTable

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
# A cell that reads as a number ("12", "0.4521", "1.73x", "45.6 %", "1.23 TFLOP"): its column is right-aligned.
_NUMBER_CELL = re.compile(r"[-+]?\d[\d.]*(?:e[-+]?\d+)?(?: ?(?:[x×%]|[kMGTPE]?FLOP))?")
# The indent (and diff sign) before a name on a cell's second and later lines.
_INDENT = re.compile(r"^(\s*(?:[−+] )?)(.*)$")

Shortener = Callable[[str, int], str]


@dataclass
class TextSection:
    """A heading, the lines that say once what holds for every row, a table (none: the heading
    says it all, e.g. "Mismatches: none") and lines under it."""

    title: str
    table: Table | None = None
    before: list[str] = field(default_factory=list)
    after: list[str | Table] = field(default_factory=list)


def shorten_middle(text: str, width: int) -> str:
    """A long kernel name cut in the middle, keeping its family at the front and its layout at
    the end: "nvjet_sm90_qqtst_128x…_bz_coopA_TNN"."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def _is_layer_index(part: str) -> bool:
    """A path component that says which layers: a number, or a pattern's `*` or set `{1,2}`
    (whatif's groups): the part that tells two rows of one module apart."""
    return part.isdigit() or part == "*" or (part.startswith("{") and part.endswith("}"))


def shorten_layer(name: str, width: int) -> str:
    """A long layer name (an attribute path, or a pattern of them) cut to `width`, keeping the path
    up to the layer's index (or set) and as many whole components of its end as fit:
    "decoder.layers.23.…linear_qkv", "decoder.layers.{0,3}.…linear_fc2"; where the path before
    the index cannot stay, the index and the leaf: "…{1,2}.…linear_fc2". A name without an
    index is cut in the middle."""
    if len(name) <= width:
        return name
    parts = name.split(".")
    index = next((i for i, part in enumerate(parts) if _is_layer_index(part)), None)
    if index is None:
        return shorten_middle(name, width)
    head = ".".join(parts[:index + 1]) + "."
    rest = parts[index + 1:]
    tails = [".".join(rest[k:]) for k in range(len(rest))]
    tail = next((t for t in tails if len(t) <= width - len(head) - 1), None)
    if tail is not None:
        return head + "…" + tail
    kept = f"…{parts[index]}.…{rest[-1]}" if rest else f"…{parts[index]}"
    return kept if len(kept) <= width else shorten_middle(name, width)


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
    cells = {c: frame[c].map(lambda value: terminal_lines(cell(value))) for c in frame.columns}
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
            console.print(_encoded(part), overflow="fold")
            continue
        console.print()
        for line in [part.title, *part.before]:
            console.print(_encoded(line), overflow="fold")
        if part.table is not None:
            console.print(part.table)
        for after in part.after:
            console.print(_encoded(after), overflow="fold")
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


def _encoded(part: str | Table) -> str | Table:
    """A line of text as the terminal may print it (sinks.terminal_lines); a table's cells are
    encoded as it is made (terminal_table, legend)."""
    return terminal_lines(part) if isinstance(part, str) else part


def headed(frame: pd.DataFrame, own: Mapping[str, str] | None = None) -> pd.DataFrame:
    """`frame` under its header words (model.header: the table's `own`, else HEADER_WORDS')."""
    return frame.rename(columns={c: header(c, own) for c in frame.columns})


def table_section(title: str, frame: pd.DataFrame, wrap: Collection[str] = ()) -> TextSection:
    """A titled table under its header words (model.header); for an empty frame, the title says "none"."""
    if frame.empty:
        return TextSection(f"{title}: none")
    return TextSection(title, terminal_table(headed(frame), wrap={header(c) for c in wrap}))


def table_text(title: str, frame: pd.DataFrame, wrap: Collection[str] = ()) -> str:
    """One table under its title, in TERMINAL_WIDTH columns (`shapes`, `doctor`)."""
    return terminal_text(table_section(title, frame, wrap=wrap)).lstrip("\n")


def kernels_text(decoded: pd.DataFrame) -> str:
    """`gemmscope kernel`: what each name says, a row per name, numbered; the names in full under
    the table, where each has the width of the terminal."""
    numbered = decoded.drop(columns="name").rename_axis("#").reset_index()
    numbered["#"] += 1
    return terminal_text(TextSection("kernels", terminal_table(headed(numbered))), "",
                         legend(numbered["#"].astype(str), decoded["name"])).lstrip("\n")


def legend(keys: Sequence[str], names: Sequence[str]) -> Table:
    """Names said once, each after its key, in full: a name longer than the line folds under itself."""
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for key, name in zip(keys, names):
        grid.add_row(terminal_lines(str(key)), terminal_lines(str(name)))
    return grid


def to_terminal(report: Report) -> str:
    """A report as `table` output: the verdict block, the report's paragraphs (after a blank line),
    then each section's notes and tables."""
    parts: list[str | Table | TextSection] = []
    if report.status is not None:
        # each line one line, whatever a name in it holds (a line break would start a line of its own)
        parts.append(verdict_text(report.status, [(label, for_terminal(text)) for label, text in report.verdict]))
        if report.intro:
            parts.append("")
    parts += map(for_terminal, report.intro)
    for section in report.sections:
        parts += section_text(section)
    return terminal_text(*parts)


def section_text(section: Section) -> list[TextSection]:
    """A section as the terminal shows it: its notes, then its tables, each fitted."""
    shown = [TextSection(for_terminal(note)) for note in section.notes]
    for block in section.blocks:
        if isinstance(block, ReportTable):
            shown += _transposed(block, section.title) if block.fit.transpose else [
                text for part in table_parts(block) for text in _part_text(block, part)]
    return shown


def _part_text(table: ReportTable, part: Part) -> list[TextSection]:
    """A table or a group of its rows, folded to fit (model.Fit): its heading, the sentence above it
    with what every row shares said once, the table, the legend of its codes and of its numbered
    names, and the columns --verbose adds in a further table."""
    fit = table.fit
    title = table.title if part.heading is None else f"{table.title}: {for_terminal(part.heading)}"
    if part.frame.empty:
        return [TextSection(f"{title}: none")]
    frame, before = _shown_rows(_names_shown(part.frame), fit)
    frame = frame.drop(columns=[c for c in fit.hide if c in frame])
    frame = frame.assign(**{c: frame[c].fillna(text) for c, text in fit.missing.items() if c in frame})
    if fit.stack is not None:
        frame = _stacked(frame, fit)
    if fit.joined is not None:
        column, into = fit.joined
        frame = frame.assign(**{into: frame[into] + (": " + frame.pop(column)).fillna("")})
    frame = frame.drop(columns=[c for c in fit.zeros if c in frame and len(frame) and (frame[c] == 0).all()])
    frame, shared = said_once(frame, list(fit.once))
    said = [phrase(value) for c, value in shared.items() if (phrase := fit.once[c]) is not None]
    if fit.listed is not None:
        label, key, column = fit.listed
        pairs = dict.fromkeys(zip(frame[key], frame[column]))
        before.append(f"{label}: " + ", ".join(f"{k} {v}" for k, v in pairs))
        frame = frame.drop(columns=column)
    if part.lead is not None:
        before.append(for_terminal(part.lead) + (f"; {', '.join(said)}" if said else "") + ".")
    else:
        before += said
    more = frame
    if fit.more is not None:
        frame = frame.drop(columns=list(fit.more.columns))
    frame = blank_repeats(frame, fit.repeats)
    after: list[str | Table] = []
    if fit.numbered is not None:
        codes, names = pd.factorize(frame[fit.numbered])
        frame = frame.assign(**{fit.numbered: "K" + pd.Series(codes + 1, frame.index).astype(str)})
        title += f" (the {fit.numbered}s are named under the table)"
        after += ["", legend([f"K{i}" for i in range(1, len(names) + 1)], list(names))]
    if part.legend:
        after += ["", legend([f"{code}:" for code, _ in part.legend], [meaning for _, meaning in part.legend])]
    shown = [TextSection(title, _fitted_table(frame, table), before=before, after=after)]
    if fit.more is not None and fit.more.shown:
        keys = blank_repeats(more, fit.repeats)[list(fit.more.keys)]
        shown.append(TextSection(f"{title}: {fit.more.title}",
                                 _fitted_table(pd.concat([keys, more[list(fit.more.columns)]], axis=1), table)))
    return shown


def _names_shown(frame: pd.DataFrame) -> pd.DataFrame:
    """Every text of a table from a trace as the terminal shows it (for_terminal: a name's line
    break too), before the folds below join cells with line breaks of their own."""
    out = frame.copy()
    for column in text_columns(frame):
        out[column] = terminal_column(frame[column])
    return out


def _shown_rows(frame: pd.DataFrame, fit: Fit) -> tuple[pd.DataFrame, list[str]]:
    """The rows the terminal shows, in its order (`fit.gather`, `fit.limit`), and a line that says
    which where some are left out."""
    if fit.gather:
        order = pd.Categorical(frame[fit.gather], categories=list(dict.fromkeys(frame[fit.gather])))
        frame = frame.iloc[pd.Series(order).argsort(kind="stable").to_numpy()]
    if fit.limit is None or len(frame) <= fit.limit.rows:
        return frame, []
    half = fit.limit.rows // 2
    shown = frame.loc[frame.index[:half].union(frame.nlargest(half, fit.limit.largest).index)]
    return shown, [fit.limit.note.format(shown=len(shown), total=len(frame))]


_SHORTENERS: dict[str, Shortener] = {"name": shorten_middle, "layer": shorten_layer}


def _fitted_table(frame: pd.DataFrame, table: ReportTable) -> Table:
    """`frame` (rows of `table`) under its header words (model.header), its names cut and its prose
    wrapped as the table's Fit says."""
    fit = table.fit
    label = {c: header(c, table.headers) for c in frame.columns}
    shorten = {label[c]: _SHORTENERS[kind] for c, kind in fit.shorten.items() if c in frame}
    if fit.stack is not None and fit.stack.label in frame:
        shorten[fit.stack.label] = shorten_gemm_cell
    return terminal_table(frame.rename(columns=label), shorten, wrap={label[c] for c in fit.wrap if c in frame})


def _stacked(frame: pd.DataFrame, fit: Fit) -> pd.DataFrame:
    """`fit.stack`'s columns as one cell, in place of the first of them."""
    stack = fit.stack
    assert stack is not None
    head = frame[list(stack.head)].astype("string")
    first = head.iloc[:, -1]
    for column in reversed(stack.head[:-1]):  # a blank layer leaves the module alone
        named = head[column].notna() & (head[column] != "")
        first = (head[column] + " · " + first).where(named, first)
    text = first.fillna("")
    for column, sign in stack.under:
        lead = "\n  " + (f"{sign} " if sign else "")
        text += lead + frame[column].fillna("(none)").astype(str).str.replace(" + ", lead, regex=False)
    at = list(frame.columns).index(stack.head[0])
    out = frame.drop(columns=[*stack.head, *(c for c, _ in stack.under)])
    out.insert(min(at, len(out.columns)), stack.label, text)
    return out


def _transposed(table: ReportTable, section_title: str) -> list[TextSection]:
    """A table whose rows are few and whose columns are many (a rank's figures), turned: a row per
    column, a column per row, headed by `fit.transpose`'s values (numbers in order); columns beyond
    what fits in TERMINAL_WIDTH continue in a further table."""
    key = table.fit.transpose
    frame = table.frame
    if frame.empty:
        return [TextSection(f"{table.title}: none")]
    numbered = pd.to_numeric(frame[key], errors="coerce")  # rank 2 before rank 10
    frame = frame.iloc[numbered.reset_index(drop=True).sort_values(kind="stable", na_position="last").index]
    labels = frame[key].astype(str)
    headers = labels.map(lambda label: f"{key} {label}" if label.isdigit() else label)
    if len(headers) > 1:
        headers = headers.map(lambda heading: shorten_middle(heading, 24))
    figures = frame.drop(columns=key).astype(object).T
    figures.columns = list(headers)
    names = pd.Series([header(c, table.headers) for c in figures.index])
    figures = figures.reset_index(drop=True)
    label_width = max(cell_len(n) for n in names)
    chunks: list[list[str]] = []
    chunk: list[str] = []
    used = label_width + 1
    for heading in figures.columns:
        column_width = max(cell_len(heading), *(len(cell(v)) for v in figures[heading])) + GAP
        if chunk and used + column_width > TERMINAL_WIDTH:
            chunks.append(chunk)
            chunk, used = [], label_width + 1
        chunk.append(heading)
        used += column_width
    chunks.append(chunk)
    return [TextSection(table.title if i == 0 else f"{section_title}, continued",
                        terminal_table(pd.concat([names.rename("figure"), figures[chunk]], axis=1)))
            for i, chunk in enumerate(chunks)]
