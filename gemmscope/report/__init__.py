"""What gemmscope says, for people and machines: a report model (`model`), one builder per
subject (`verification`, `comparison`, `profile`), one renderer per format (`terminal`,
`markdown`, `html`; JSON and CSV here; the tables as CSV files in `tables`; plots in
gemmscope.report.plots), and `render`, where the format is chosen."""

from __future__ import annotations

import json
from collections.abc import Callable

from gemmscope.errors import InputError
from gemmscope.report.model import Report

# Each format a report's sections are rendered in: a renderer of its own over the report model
# (model.py). JSON and CSV are the report's document and rows.
SECTION_FORMATS = ("table", "markdown", "html")


def renderer(fmt: str) -> Callable[[Report], str]:
    """The renderer of a format of SECTION_FORMATS, its module imported only when that format is
    asked for (the terminal's brings in rich: a JSON document needs none of them)."""
    if fmt == "table":
        from gemmscope.report.terminal import to_terminal

        return to_terminal
    if fmt == "markdown":
        from gemmscope.report.markdown import to_markdown

        return to_markdown
    from gemmscope.report.html import to_html

    return to_html


def render(report: Report, fmt: str) -> str:
    """`report` as the text of `fmt`: the terminal's table output, its JSON document, its rows
    as CSV, Markdown or a self-contained HTML page."""
    from gemmscope.report import tables

    if fmt in SECTION_FORMATS:
        return renderer(fmt)(report)
    if fmt == "json" and report.document is not None:
        return json.dumps(report.document, indent=2) + "\n"
    if fmt == "csv" and report.rows is not None:
        return tables.csv_text(report.rows())
    available = [*SECTION_FORMATS] + ["json"] * (report.document is not None) + ["csv"] * (report.rows is not None)
    raise InputError(f"this report cannot be written as {fmt}: choose from {', '.join(available)}")
