"""A report as one self-contained HTML page to attach to an issue.

The page loads nothing from anywhere: its CSS and its few lines of JavaScript (click a table
header to sort) are inline, and its plots are PNGs inlined as data: URIs. It opens with the
verdict block, then the report's sections: sortable tables, details on demand (<details>),
plots, and the environment last. Every text from a trace or a run goes through html.escape.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping

import pandas as pd

from gemmscope.common.jsonable import plain
from gemmscope.report.model import (
    STATUS_WORDS,
    Block,
    Figure,
    Report,
    Table,
    cell,
    page_header,
    page_sections,
    table_parts,
)

# A table cell's text up to this long is kept on one line (names, precisions, kernel names are
# one word anyway); longer text is a sentence that may wrap.
SHORT_TEXT_CHARS = 24
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*(?:x|×|%|ms)?\s*$", re.IGNORECASE)


def _sort_value(value) -> float | None:
    """The number a cell sorts by ("1.66x" → 1.66, "99.5 %" → 99.5), or None for text."""
    value = plain(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = _NUMBER.match(str(value))
    return float(match[1]) if match else None


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2125;
       margin: 0 auto; padding: 1.2em 2em 3em; max-width: 1500px; }
h1 { font-size: 1.45em; margin: 0.2em 0 0.6em; }
h2 { font-size: 1.2em; margin: 1.8em 0 0.5em; border-bottom: 1px solid #d0d7de; padding-bottom: 0.2em; }
h3 { font-size: 1em; margin: 1.2em 0 0.4em; }
#verdict { border: 2px solid; border-radius: 6px; padding: 0.6em 1em; margin-bottom: 1em; }
#verdict.pass { border-color: #1a7f37; background: #f0fff4; }
#verdict.fail { border-color: #cf222e; background: #fff5f5; }
#verdict.not-checked, #verdict.not-fully-checked { border-color: #9a6700; background: #fffbea; }
#verdict .status { font-weight: 700; font-size: 1.1em; margin-bottom: 0.3em; }
#verdict.pass .status { color: #1a7f37; } #verdict.fail .status { color: #cf222e; }
#verdict.not-checked .status, #verdict.not-fully-checked .status { color: #9a6700; }
#verdict dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.15em 1em; margin: 0; }
#verdict dt { font-weight: 600; }
#verdict dd { margin: 0; }
.scroll { overflow: auto; max-width: 100%; max-height: 40em; }
table { border-collapse: collapse; font-size: 12.5px; margin: 0.3em 0 1em; }
th, td { border: 1px solid #d0d7de; padding: 2px 7px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.short { white-space: nowrap; } td.prose { min-width: 18em; }
thead th { background: #f3f4f6; position: sticky; top: 0; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th:hover { background: #e5e7eb; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
tbody tr:nth-child(even) { background: #fafbfc; }
details { margin: 0.15em 0; }
details > summary { cursor: pointer; padding: 1px 0; }
details[open] { margin-bottom: 0.6em; }
details .lines { margin: 0.3em 0 0.3em 1.4em; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
                 font-size: 12px; white-space: pre-wrap; word-break: break-all; }
figure { margin: 0.5em 0 1em; } figure img { max-width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: 12.5px; }
.empty { color: #57606a; font-style: italic; }
dl.legend { display: grid; grid-template-columns: max-content 1fr; gap: 0.1em 1em; margin: -0.5em 0 1em;
            font-size: 12.5px; } dl.legend dt { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
dl.legend dd { margin: 0; }
"""

# Click a header: sort its table's rows by that column (numbers by value, else text; empty last).
_SORT_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], column = th.cellIndex;
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = rows.every(function (r) {
      var c = r.cells[column]; return c.textContent.trim() === "" || c.hasAttribute("data-sort");
    });
    function key(r) {
      var c = r.cells[column];
      return numeric ? (c.hasAttribute("data-sort") ? Number(c.getAttribute("data-sort")) : null) : c.textContent;
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || x === "") return 1;
      if (y === null || y === "") return -1;
      var order = numeric ? x - y : x.localeCompare(y);
      return ascending ? order : -order;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def to_html(report: Report) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{e(report.title)}</title>", f"<style>{_CSS}</style></head><body>",
             f"<h1>{e(report.title)}</h1>"]
    if report.status is not None:
        parts.append(f'<section id="verdict" class="{report.status}">'
                     f'<div class="status">{e(STATUS_WORDS[report.status])}</div><dl>')
        parts += [f"<dt>{e(label)}</dt><dd>{e(text)}</dd>" for label, text in report.verdict]
        parts.append("</dl></section>")
    parts += [f"<p>{e(p)}</p>" for p in report.intro]
    for section in page_sections(report):
        parts.append(f"<section><h2>{e(section.title)}</h2>")
        parts += [f"<p>{e(p)}</p>" for p in [*section.intro, *section.notes]]
        parts += [_html_block(block, section.title) for block in section.blocks]
        parts.append("</section>")
    parts.append(f"<script>{_SORT_JS}</script></body></html>\n")
    return "\n".join(parts)


def _html_block(block: Block, section_title: str) -> str:
    e = html.escape
    if isinstance(block, Table):
        shown = [f"<h3>{e(block.title)}</h3>"] if block.title != section_title else []
        for part in table_parts(block):
            shown += [f"<h3>{e(part.heading)}</h3>"] if part.heading is not None else []
            shown += [f"<p>{e(part.lead)}.</p>"] if part.lead is not None else []
            shown.append(_html_table(part.frame, sortable=True, headers=block.headers))
            if part.legend:
                shown.append("<dl class=\"legend\">" + "".join(f"<dt>{e(code)}</dt><dd>{e(meaning)}</dd>"
                                                               for code, meaning in part.legend) + "</dl>")
        return "".join(shown)
    if isinstance(block, Figure):
        plot = block.plot
        if plot is None:
            return ""
        data = base64.b64encode(plot.png).decode("ascii")
        return (f'<figure><img alt="{e(plot.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{e(block.caption)}</figcaption></figure>")
    lines = "".join(f"<div>{e(line)}</div>" for line in block.lines)
    body = (f'<div class="lines">{lines}</div>' if lines else "") + (
        _html_table(block.frame, sortable=False) if block.frame is not None else "")
    return f"<details><summary>{e(block.summary)}</summary>{body}</details>"


def _html_table(frame: pd.DataFrame, sortable: bool, headers: Mapping[str, str] | None = None) -> str:
    e = html.escape
    if frame.empty:
        return '<p class="empty">(none)</p>'
    head = "".join(f"<th>{e(page_header(c, headers))}</th>" for c in frame.columns)
    rows = []
    for row in frame.itertuples(index=False):
        cells = []
        for value in row:
            number = _sort_value(value)
            text = e(cell(value))
            if number is not None:
                cells.append(f'<td class="num" data-sort="{number!r}">{text}</td>')
            else:  # short text stays on one line; a sentence gets room to wrap in
                cells.append(f'<td class="{"prose" if len(text) > SHORT_TEXT_CHARS else "short"}">{text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    css_class = ' class="sortable"' if sortable else ""
    return (f'<div class="scroll"><table{css_class}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")
