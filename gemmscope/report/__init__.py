"""What gemmscope says, for people and machines: a report model (`model`), one builder per
subject (`verification`, `comparison`, `profile_run`), one renderer per format (`terminal`,
`markdown`, `html`; JSON and CSV here; the tables as CSV files in `tables`; plots in
gemmscope.report.plots), and `render`, where the format is chosen."""

from __future__ import annotations

import json
from collections.abc import Callable

from gemmscope.errors import InputError
from gemmscope.report.model import Report


def renderers() -> dict[str, Callable[[Report], str]]:
    """Each format a report's sections are rendered in, and its renderer: a module of its own over
    the report model (model.py), named here. JSON and CSV are the report's document and rows."""
    from gemmscope.report import html, markdown, terminal

    return {"table": terminal.to_terminal, "markdown": markdown.to_markdown, "html": html.to_html}


def render(report: Report, fmt: str) -> str:
    """`report` as the text of `fmt`: the terminal's table output, its JSON document, its rows
    as CSV, Markdown or a self-contained HTML page."""
    from gemmscope.report import tables

    pages = renderers()
    if fmt in pages:
        return pages[fmt](report)
    if fmt == "json" and report.document is not None:
        return json.dumps(report.document, indent=2) + "\n"
    if fmt == "csv" and report.rows is not None:
        return tables.csv_text(report.rows())
    available = [*pages] + ["json"] * (report.document is not None) + ["csv"] * (report.rows is not None)
    raise InputError(f"this report cannot be written as {fmt}: choose from {', '.join(available)}")
