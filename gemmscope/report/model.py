"""What a report is, whatever it is rendered as: a verdict, sections of tables, figures and
details, the tables for a machine (CSV) and the JSON document.

A builder (`verification`, `comparison`, `profile`) lists a subject's sections once: each
section's title, paragraphs, tables (their columns, their rows' grouping and what the codes in them
mean), figures and details. Each renderer (`terminal`, `markdown`, `html`, and JSON and CSV in
`render`) shows the same sections its own way: pages show everything; the terminal shows the
notes and the tables, each fitted to its width by the folds the table declares (`Fit`: columns
hidden, said once or stacked in one cell, names shortened, rows limited), never another table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from gemmscope.common.jsonable import plain
from gemmscope.errors import State
from gemmscope.redaction.policy import Redactor

if TYPE_CHECKING:
    from gemmscope.report.plots import Plot

# A report's status (errors.State's values) -> the word its verdict block leads with.
STATUS_WORDS = {state.value: state.word for state in State}


def verdict_text(status: str, lines: list[tuple[str, str]]) -> str:
    """The verdict block as lines of text: the status word, then each labelled line."""
    return "\n".join([STATUS_WORDS[status], *(f"{label}: {text}" for label, text in lines)])


def count(n: int, noun: str, plural: str | None = None) -> str:
    """"1 rank", "2 ranks", "1 entry", "3 entries"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def cell(value: Any) -> str:
    """A value as any table shows it: blank where missing, a float to four significant digits."""
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, float):
        # four significant digits, and no exponent where the integer part alone says more
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


_FLOP_UNITS = ("FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP")


def flop_text(flops: float) -> str:
    """A count of floating-point operations in a unit a person reads, to three significant digits:
    "103 GFLOP", "1.23 TFLOP", "15.4 PFLOP"."""
    value, unit = float(flops), 0
    while abs(value) >= 999.5 and unit < len(_FLOP_UNITS) - 1:
        value, unit = value / 1000, unit + 1
    digits = 0 if abs(value) >= 99.95 or unit == 0 else 1 if abs(value) >= 9.995 else 2
    return f"{value:.{digits}f} {_FLOP_UNITS[unit]}"


# How a long value is cut where a line is short: a kernel name in its middle, a layer's attribute
# path keeping its index and its end (terminal.shorten_middle, shorten_layer).
Shorten = Literal["name", "layer"]


@dataclass(frozen=True)
class Stack:
    """Columns shown in one cell where a line is short: the `head` columns on its first line
    ("layer · module", the layer left out where blank), then each of the `under` columns' values,
    indented after its sign, a line per item of a " + "-joined list ("(none)" where blank)."""

    label: str
    head: tuple[str, ...] = ("layer", "module")
    under: tuple[tuple[str, str], ...] = ()  # (column, sign)


@dataclass(frozen=True)
class RowLimit:
    """At most `rows` rows where a glance is wanted: the first half of them and the largest by
    `largest`; `note` (with {shown} and {total}) says so."""

    rows: int
    largest: str
    note: str


@dataclass(frozen=True)
class More:
    """Columns hidden where a line is short, shown (with --verbose) in a further table under
    "TITLE: `title`", each row keyed by the `keys` columns."""

    title: str
    columns: tuple[str, ...]
    keys: tuple[str, ...]
    shown: bool = False


@dataclass(frozen=True)
class Fit:
    """How a table fits a terminal's 100 columns and a glance: folds of the same rows and columns,
    never another table. Pages (Markdown, HTML) show the table whole and ignore these."""

    hide: tuple[str, ...] = ()  # columns left out
    zeros: tuple[str, ...] = ()  # counts left out where zero in every row
    shorten: Mapping[str, Shorten] = field(default_factory=dict)  # column -> how a long name is cut
    wrap: tuple[str, ...] = ()  # columns of prose, which wrap before any name is cut
    missing: Mapping[str, str] = field(default_factory=dict)  # column -> what a blank cell reads
    # column -> the phrase that says, once above the table, the one value it holds in every row
    # (None: the sentence above the table says it already)
    once: Mapping[str, Callable[[Any], str] | None] = field(default_factory=dict)
    listed: tuple[str, str, str] | None = None  # (label, key, column): each key's value on a line above
    stack: Stack | None = None
    joined: tuple[str, str] | None = None  # (column, into): its value after the other's, in one cell ("A: B")
    gather: str | None = None  # rows of one value of this column together, in order of first appearance
    repeats: tuple[str, ...] = ()  # keys said once per run of rows (blank where they repeat the row above)
    numbered: str | None = None  # a column of long names: numbered in the table, listed in full under it
    transpose: str | None = None  # rows become columns headed by this column's values
    limit: RowLimit | None = None
    more: More | None = None


@dataclass(frozen=True)
class Codes:
    """What each code in a table's `column` means ("outside-te": "these GEMMs ran outside TE …"),
    said in every format: as the lead of each group where the rows are grouped by it, else in a
    legend under the table."""

    column: str
    meanings: Mapping[str, str]


@dataclass(frozen=True)
class Groups:
    """Rows shown in groups, one per value of `column` in order of first appearance, each under a
    heading with its value and what `totals` says of its rows ("36 launches, 0.206 ms")."""

    column: str
    totals: Callable[[pd.DataFrame], str] | None = None


# What a table's header says over a column, in every format a person reads (terminal, Markdown,
# HTML), where the frame's own name (snake_case, as CSV and JSON keep it) is not words already; any
# other name is said with its underscores as spaces (window_ms: "window ms"). The one place they
# are written (`header`).
HEADER_WORDS = {
    "gemms": "GEMMs",
    "gemm_time_ms": "time ms",
    "expected_time_share": "time at expected",
    "expected-substitution": "substituted",
    "a_dtype": "A dtype",
    "b_dtype": "B dtype",
    "flops": "FLOPs",
    "total_flops": "total FLOPs",
    "peak_mib": "peak MiB",
}


def header(column: object, own: Mapping[str, str] | None = None) -> str:
    """The words over `column` in a table's header: the table's `own` (Table.headers) where it has
    them, else HEADER_WORDS'; a heading of two lines (the terminal's) keeps its line break here."""
    name = str(column)
    if own and name in own:
        return own[name]
    return HEADER_WORDS.get(name, name.replace("_", " "))


def page_header(column: object, own: Mapping[str, str] | None = None) -> str:
    """`header` on one line, as a page (Markdown, HTML) says it."""
    return " ".join(header(column, own).split("\n"))


@dataclass
class Table:
    """A table under its title (a section's only table under the section's own title has none of
    its own), with a sentence about every row (`lead`), its codes' meanings, its grouping, the
    header words that are its own and how the terminal fits it."""

    title: str
    frame: pd.DataFrame
    lead: str | None = None
    codes: Codes | None = None
    groups: Groups | None = None
    fit: Fit = field(default_factory=Fit)
    # column -> its header words in this table where they are its own ("time at\nfp8-current": on the
    # terminal, a heading of two lines); every other column's are HEADER_WORDS' (`header`)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Part:
    """A table, or one group of its rows, as every renderer shows it: a heading of its own (a
    group's), the sentence above it, its rows and the legend of its codes under it."""

    heading: str | None
    lead: str | None
    frame: pd.DataFrame
    legend: list[tuple[str, str]]


def table_parts(table: Table) -> list[Part]:
    """`table` as the parts every format shows: a part per group (its value and totals the
    heading, its code's meaning the lead, the grouping column left out), or the table whole with
    the meanings of the codes it holds as its legend."""
    frame, codes, groups = table.frame, table.codes, table.groups
    if groups is None or frame.empty:
        legend = [] if codes is None else [(code, codes.meanings[code]) for code in dict.fromkeys(
            frame[codes.column].dropna()) if code in codes.meanings]
        return [Part(None, table.lead, frame, legend)]
    parts = []
    keys = frame[groups.column].fillna("?")
    for key, rows in frame.groupby(keys, sort=False):
        totals = f", {groups.totals(rows)}" if groups.totals is not None else ""
        meaning = codes.meanings.get(str(key)) if codes is not None and codes.column == groups.column else None
        parts.append(Part(f"{key}{totals}", meaning or table.lead, rows.drop(columns=groups.column), []))
    return parts


class Figure:
    """A plot, drawn only when a renderer shows it (matplotlib is slow to draw and not every
    format shows plots): `draw` gives the plot, or None when there is nothing to draw."""

    def __init__(self, draw: Callable[[], Plot | None]):
        self._draw = draw

    @cached_property
    def plot(self) -> Plot | None:
        return self._draw()

    @property
    def caption(self) -> str:
        """The plot's caption followed by what the figure says was not drawn (no plot: none)."""
        plot = self.plot
        if plot is None:
            return ""
        notes = [f"{note[0].upper()}{note[1:]}." for note in plot.notes]
        return " ".join([plot.caption, *notes])


@dataclass
class Details:
    """Something shown on demand: a one-line summary, then lines and a table."""

    summary: str
    lines: list[str] = field(default_factory=list)
    frame: pd.DataFrame | None = None


Block = Table | Figure | Details


@dataclass
class Section:
    """A heading, paragraphs that explain it (`intro`: for pages; the terminal has no room for
    them), short lines every format shows (`notes`) and its blocks."""

    title: str
    intro: list[str] = field(default_factory=list)
    blocks: Sequence[Block] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    title: str
    status: str | None  # an errors.State value: the verdict block's word and colour; None: no verdict
    verdict: list[tuple[str, str]]  # labelled lines
    sections: list[Section]
    environment: list[tuple[str, str]] = field(default_factory=list)  # a last section, where a page has room
    intro: list[str] = field(default_factory=list)  # paragraphs after the verdict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # file name (tables.TABLE_FILES) -> table
    document: dict[str, Any] | None = None  # the JSON document
    rows: Callable[[], pd.DataFrame] | None = None  # what --format csv prints, a row per GEMM launch


def redacted(report: Report, redactor: Redactor) -> Report:
    """`report` with every text in it passed through the redaction policy (redaction.Redactor):
    titles, verdict, environment, paragraphs, tables, details, figures' words, the tables for CSV
    and the JSON document. Redact before rendering: HTML's escapes (&amp;, &quot;) would hide a
    value from a pass over the page. A plot's pixels cannot be redacted: plots are drawn from
    traces already scrubbed. The launch rows are left out: they hold the texts unredacted."""
    r = redactor

    def block(item: Block) -> Block:
        if isinstance(item, Table):
            codes = item.codes and Codes(item.codes.column, {code: r(text) for code, text in item.codes.meanings.items()})
            return Table(r(item.title), r.frame(item.frame), None if item.lead is None else r(item.lead), codes,
                         item.groups, item.fit, item.headers)
        if isinstance(item, Figure):
            plot = item.plot
            return Figure(lambda: None if plot is None else replace(
                plot, title=r(plot.title), caption=r(plot.caption), notes=tuple(map(r, plot.notes))))
        return Details(r(item.summary), [r(line) for line in item.lines],
                       None if item.frame is None else r.frame(item.frame))

    return Report(
        title=r(report.title), status=report.status,
        verdict=[(r(label), r(text)) for label, text in report.verdict],
        sections=[Section(r(s.title), [r(p) for p in s.intro], [block(b) for b in s.blocks],
                          [r(note) for note in s.notes])
                  for s in report.sections],
        environment=[(r(label), r(text)) for label, text in report.environment],
        intro=[r(p) for p in report.intro],
        tables={name: r.frame(table) for name, table in report.tables.items()},
        document=None if report.document is None else r.document(report.document))


def page_sections(report: Report) -> list[Section]:
    """The sections a page shows (HTML, Markdown): the report's, then the environment where it has one."""
    if not report.environment:
        return report.sections
    environment = pd.DataFrame(report.environment, columns=["what", "value"])
    return [*report.sections, Section("Environment", blocks=[Table("Environment", environment)])]
