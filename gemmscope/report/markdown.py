"""A report as Markdown, for an issue comment: `analyze --format markdown`, `report -o x.md`, a
bundle's and a profile run's `report.md` are all this one rendering of a report's sections.
GitHub renders <details> in Markdown too; a plot is named, not drawn (a comment cannot show a
data: URI)."""

from __future__ import annotations

import html
from collections.abc import Mapping

import pandas as pd

from gemmscope.common.sinks import for_markdown, for_terminal, markdown_code, markdown_code_span
from gemmscope.report.model import (
    STATUS_WORDS,
    Details,
    Figure,
    Report,
    Table,
    cell,
    page_header,
    page_sections,
    table_parts,
)


def markdown_table(frame: pd.DataFrame, headers: Mapping[str, str] | None = None) -> str:
    """`frame` as a Markdown table under its header words (model.page_header: `headers`, a table's
    own, else HEADER_WORDS')."""
    if frame.empty:
        return "_(none)_\n"
    cells = [[for_markdown(cell(v)) for v in row] for row in frame.itertuples(index=False)]
    header = "| " + " | ".join(for_markdown(page_header(c, headers)) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join([header, rule, *body]) + "\n"


def to_markdown(report: Report) -> str:
    md = for_markdown
    parts = [f"# {md(report.title)}\n"] if report.title else []
    if report.status is not None:
        parts.append(f"**{STATUS_WORDS[report.status]}**\n")
        parts += [f"- **{md(label)}**: {md(text)}" for label, text in report.verdict] + ([""] if report.intro else [])
    parts += [f"{md(p)}\n" for p in report.intro]
    for section in page_sections(report):
        parts.append(f"\n## {md(section.title)}\n")
        parts += [f"{md(p)}\n" for p in [*section.intro, *section.notes]]
        for block in section.blocks:
            if isinstance(block, Table):
                parts += [f"### {md(block.title)}\n"] if block.title != section.title else []
                for part in table_parts(block):
                    parts += [f"### {md(part.heading)}\n"] if part.heading is not None else []
                    parts += [f"{md(part.lead)}.\n"] if part.lead is not None else []
                    parts.append(markdown_table(part.frame, block.headers))
                    parts += [f"- {markdown_code_span(code)}: {md(meaning)}" for code, meaning in part.legend] + (
                        [""] if part.legend else [])
            elif isinstance(block, Figure):
                if block.plot is not None:
                    parts.append(f"_Plot: {md(block.plot.title)} (in the HTML report: `gemmscope report … -o "
                                 "report.html`)._\n")
            elif isinstance(block, Details):
                body = "\n".join(f"    {markdown_code(line)}" for line in block.lines)
                table = markdown_table(block.frame) if block.frame is not None else ""
                parts.append(f"<details><summary>{html.escape(for_terminal(block.summary))}</summary>\n\n{body}\n\n{table}\n"
                             "</details>\n")
    return "\n".join(parts) + "\n"
