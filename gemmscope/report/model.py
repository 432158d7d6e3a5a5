"""What a report is, whatever it is rendered as: a verdict, sections of tables, figures and
details, the tables for a machine (CSV) and the JSON document.

A builder (`verification`, `comparison`, `profile_run`) lists a subject's sections once; each
renderer (`terminal`, `markdown`, `html`, and JSON and CSV in `render`) shows all of them its own
way. Where the terminal lays a section out otherwise than as its tables (grouped rows, names
shortened to fit 100 columns), the section carries that layout (`Section.terminal`), made from
the same data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pandas as pd

from gemmscope.errors import State
from gemmscope.jsonable import plain
from gemmscope.redaction import Redactor

if TYPE_CHECKING:
    from rich.table import Table as RichTable

    from gemmscope.plots import Plot

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


@dataclass
class Table:
    """A table under its title (a section's only table under the section's own title has none of its own)."""

    title: str
    frame: pd.DataFrame


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
class TextSection:
    """A heading, the lines that say once what holds for every row, a table (none: the heading
    says it all, e.g. "Mismatches: none") and lines under it."""

    title: str
    table: RichTable | None = None
    before: list[str] = field(default_factory=list)
    after: list[str | RichTable] = field(default_factory=list)


@dataclass
class Section:
    title: str
    intro: list[str] = field(default_factory=list)  # paragraphs before the blocks
    blocks: Sequence[Block] = field(default_factory=list)
    # The terminal's own layout of this section (None: each table under its title; an empty list:
    # the section is not for the terminal, as details on demand are not).
    terminal: Callable[[], list[TextSection]] | None = None


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
    traces already scrubbed. The terminal's layouts and the launch rows are left out: they hold
    the texts unredacted."""
    r = redactor

    def block(item: Block) -> Block:
        if isinstance(item, Table):
            return Table(r(item.title), r.frame(item.frame))
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
                          None)
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
