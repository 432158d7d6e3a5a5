"""What gemmscope says, for people and machines: a report model (`model`), one builder per
subject (`verification`, `comparison`, `profile_run`), one renderer per format (`terminal`,
`markdown`, `html`; JSON and CSV here; the tables as CSV files in `tables`; plots in
gemmscope.plots), and `render`, where the format is chosen."""

from __future__ import annotations

import json

from gemmscope.errors import InputError
from gemmscope.report.model import Report

FORMATS = ("table", "json", "csv", "markdown", "html")


def render(report: Report, fmt: str) -> str:
    """`report` as the text of `fmt`: the terminal's table output, its JSON document, its rows
    as CSV, Markdown or a self-contained HTML page."""
    from gemmscope.report import html, markdown, tables, terminal

    if fmt == "table":
        return terminal.to_terminal(report)
    if fmt == "markdown":
        return markdown.to_markdown(report)
    if fmt == "html":
        return html.to_html(report)
    if fmt == "json" and report.document is not None:
        return json.dumps(report.document, indent=2) + "\n"
    if fmt == "csv" and report.rows is not None:
        return tables.csv_text(report.rows())
    available = ["table", "markdown", "html"] + ["json"] * (report.document is not None) + ["csv"] * (
        report.rows is not None)
    raise InputError(f"this report cannot be written as {fmt}: choose from {', '.join(available)}")
