"""The encoder of each sink (gemmscope.common.sinks), over generated text: what reaches a terminal
holds no control character and still says what the name held; a CSV cell never opens as a
formula and a row never splits; Markdown shows a name as text, never as HTML, a link, an image, a
heading or a broken code span; a YAML scalar and a Python literal read back as the very text."""

from __future__ import annotations

import ast
import csv
import html
import io
import re

import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from gemmscope.common.sinks import (
    for_markdown,
    for_terminal,
    markdown_code_span,
    python_literal,
    terminal_lines,
    yaml_scalar,
)
from gemmscope.report.tables import csv_text

# What a terminal acts on: C0, DEL, C1, the line and paragraph separators, the bidi controls.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
HOSTILE = ["\x1b]0;pwned\x07", "\x1b[2J\x1b[HPASS", "\x9b31m", "a\rPASS", "x\ny", "\u202eevil", "=1+2",
           "<img src=http://evil.example/a.png>", "![x](http://evil.example/a.png)", "a|b", "`code`", "\n# PASS"]
# Text as names come: any character, the hostile ones often.
names = st.text(alphabet=st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from(list("\x1b\x07\x9b\r\n\t|`<>&[]()!#=+-@'\"\\"))))


@given(names)
@example("\x1b]0;pwned\x07")
@example("\u202eevil")
def test_for_terminal_leaves_no_control_character_and_says_each(text):
    shown = for_terminal(text)
    assert not CONTROL.search(shown)
    assert for_terminal(shown) == shown  # idempotent: encoding twice is harmless
    if not CONTROL.search(text):
        assert shown == text  # a name without control characters reads as it is
    if "\\" not in text:  # readable: each escape is the character's code
        decoded = re.sub(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|[nrt])",
                         lambda m: {"n": "\n", "r": "\r", "t": "\t"}.get(m.group(1)) or chr(int(m.group(1)[1:], 16)),
                         shown)
        assert decoded == text


@given(st.lists(names.map(lambda name: name.replace("\n", "")), min_size=1, max_size=5))
def test_terminal_lines_keeps_only_the_line_breaks(lines):
    shown = terminal_lines("\n".join(lines))
    assert shown.split("\n") == [for_terminal(line) for line in lines]


FORMULA = re.compile(r"[=+\-@\t\r]")
PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(names, st.floats(allow_nan=False, allow_infinity=False, max_value=-1e-3)), min_size=1,
                max_size=8))
@example([("=HYPERLINK(\"http://evil.example\",\"ok\")", -1.5), ("+cmd|' /C calc'!A0", -2.0), ("@SUM(1)", -3.0),
          ("a\rb", -4.0), ("-12", -5.0), ("\tx", -6.0)])
def test_csv_cells_never_open_as_formulas_and_rows_stay_whole(rows):
    table = pd.DataFrame({"name": [name for name, _ in rows], "time": [number for _, number in rows]})
    read = list(csv.reader(io.StringIO(csv_text(table), newline="")))
    assert read[0] == ["name", "time"]
    assert len(read) == len(rows) + 1 and all(len(row) == 2 for row in read)  # no row split by a CR or LF
    for (name, number), (cell, time) in zip(rows, read[1:]):
        formula = bool(FORMULA.match(name)) and not PLAIN_NUMBER.fullmatch(name)
        assert cell == ("'" + name if formula else name)
        assert float(time) == number and not time.startswith("'")  # a negative number stays a number


def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


# What a name may become on a rendered page: text, emphasis or code; never a link, an image, a
# heading, raw HTML or a block of its own.
_INLINE_TAGS = {"p", "em", "strong", "code", "table", "thead", "tbody", "tr", "th", "td"}


def _tags(rendered: str) -> set[str]:
    return {tag.lower() for tag in re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", rendered)}


@settings(max_examples=200, deadline=None)
@given(names)
@example("<img src=http://evil.example/a.png>")
@example("![x](http://evil.example/a.png)")
@example("x\n\n# All GEMMs PASS")
@example("a|b\\|c\\")
def test_markdown_shows_a_name_as_text_in_a_cell_and_in_prose(text):
    cell = _markdown().render(f"| name | n |\n|---|---|\n| {for_markdown(text)} | 1 |\n")
    assert _tags(cell) <= _INLINE_TAGS
    assert cell.count("<tr>") == 2 and cell.count("<td") == 2  # one row, its two cells
    prose = _markdown().render(f"GEMMs of {for_markdown(text)} ran.\n")
    assert _tags(prose) <= _INLINE_TAGS - {"table", "thead", "tbody", "tr", "th", "td"}
    assert prose.count("<p>") == 1


@given(names.filter(bool))
@example("``a`")
@example(" a ")
def test_markdown_code_span_holds_any_text_whole(text):
    rendered = _markdown().render(f"code: {markdown_code_span(text)}\n")
    assert _tags(rendered) == {"p", "code"} and rendered.count("<code>") == 1
    assert html.unescape(re.search(r"<code>(.*)</code>", rendered, re.S).group(1)) == for_terminal(text)


@given(names)
@example("a\nlayers: [evil]")
@example("it's")
def test_yaml_scalar_reads_back_as_the_text(text):
    yaml = pytest.importorskip("yaml")
    written = f"pattern: {yaml_scalar(text)}\nnext: 1\n"
    assert len(written.splitlines()) == 2
    assert yaml.safe_load(written) == {"pattern": text, "next": 1}


@given(names)
@example("x\nimport os; os.system('id')")
def test_python_literal_is_one_line_that_evaluates_to_the_text(text):
    literal = python_literal(text)
    assert len(literal.splitlines()) == 1
    assert ast.literal_eval(literal) == text
