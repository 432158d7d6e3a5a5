"""Text from a trace or a path, encoded for the sink it is written to: one function per sink,
used by every renderer and every line the CLI prints. A trace is input nobody vouches for: a
layer, range, kernel or file name may hold a terminal's escape sequences, a spreadsheet formula,
HTML or Markdown. Each encoder leaves what is safe as it was (a name without such characters
reads the same in every sink) and is idempotent. JSON is written as is (json.dumps escapes
control characters itself)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas only where a frame is encoded: the CLI's lines need none (it starts without it)
    import pandas as pd

# What a terminal acts on rather than shows: C0 controls, DEL, the C1 controls (0x9b alone is a CSI
# on some terminals), the line and paragraph separators, and the bidirectional overrides and
# isolates that reorder what a line shows ("Trojan Source", CVE-2021-42574).
_CONTROL_BUT_NEWLINE_CHARS = "\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\n{_CONTROL_BUT_NEWLINE_CHARS}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[{_CONTROL_BUT_NEWLINE_CHARS}]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def for_terminal(text: str) -> str:
    """One piece of text from a trace or a path (a name, a file name in an error line), as the
    terminal shows it: every control character written as its escape (`\\x1b`, `\\n`, `\\u202e`),
    never acted on. Backslashes stay as they are, so that the encoding is idempotent."""
    return _CONTROL.sub(_shown, text)


def terminal_column(values: pd.Series) -> pd.Series:
    """for_terminal over a column of text (a value that is not text stays as it is)."""
    hit = values.astype("string").str.contains(_CONTROL.pattern, regex=True).fillna(False).astype(bool)
    if not hit.any():
        return values
    out = values.copy()
    out[hit] = values[hit].map(lambda v: for_terminal(v) if isinstance(v, str) else v)
    return out


def terminal_lines(text: str) -> str:
    """Lines for the terminal (a rendered report, a note): for_terminal's encoding of all but the
    line breaks between them."""
    return _CONTROL_BUT_NEWLINE.sub(_shown, text)


# A cell a spreadsheet reads as a formula (OWASP's CSV injection: = + - @, tab and CR first)...
_FORMULA_LEAD = re.compile(r"[=+\-@\t\r]")
# ...unless it is a plain number ("-12", "+0.5", "-1e-3"), which stays a number.
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def text_columns(frame: pd.DataFrame) -> list[Any]:
    """The columns of `frame` that may hold text (object or string dtype)."""
    from pandas.api.types import is_string_dtype

    return [c for c in frame.columns if frame[c].dtype == object or is_string_dtype(frame[c].dtype)]


def csv_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Every text cell of `frame` as a spreadsheet shows it as text: one starting as a formula gets a
    leading `'` (OWASP's CSV-injection guidance), a plain number stays a number; line breaks are the
    CSV writer's to quote (tables.csv_text). A column at a time."""
    out = frame.copy()
    for column in text_columns(frame):
        values = frame[column]
        text = values.astype("string")  # a number among text reads as a plain number: left as it is
        formula = text.str.match(_FORMULA_LEAD.pattern) & ~text.str.fullmatch(_PLAIN_NUMBER.pattern)
        out[column] = values.where(~formula.fillna(False).astype(bool), "'" + text)
    return out


# Markdown: HTML as text, and what would make a link or an image (`](`) broken; a table cell's pipe
# escaped. Emphasis and the like are left: they change how a name looks, not what the page does.
_MARKDOWN_SPECIAL = re.compile(r"[&<>|]|\](?=\()")
_MARKDOWN_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "]": "]\\"}


def for_markdown(text: str) -> str:
    """Text from a trace in Markdown, prose or a table cell: its control characters (line breaks
    included) escaped as for the terminal, so that it never starts a block of its own; HTML shown
    as text; a link or image not formed; pipes escaped."""
    return _MARKDOWN_SPECIAL.sub(lambda m: _MARKDOWN_ESCAPES[m.group()[0]], for_terminal(text))


def markdown_code(text: str) -> str:
    """A line of an indented code block: shown literally, its control characters escaped so that it
    stays one line inside the block."""
    return for_terminal(text)


def markdown_code_span(text: str) -> str:
    """`text` (not empty) as a Markdown code span that it cannot close: fenced by one backtick more
    than its longest run of them; padded by a space on each side where it starts or ends with a
    backtick, or with a space on both sides (CommonMark strips one space of each side then)."""
    text = for_terminal(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = text[:1] == "`" or text[-1:] == "`" or (text[:1] == text[-1:] == " " and text.strip(" ") != "")
    pad = " " if padded else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# What a single-quoted YAML scalar carries as is: YAML's printable characters, less every line
# break (one would fold into a space) and the byte-order mark.
_YAML_QUOTABLE = "\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff"
_YAML_SINGLE_QUOTABLE = re.compile(f"[{_YAML_QUOTABLE}]*")
_YAML_ESCAPED = re.compile(f'[^{_YAML_QUOTABLE}]|[\\\\"]')


def _yaml_escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in '\\"':
        return "\\" + char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def yaml_scalar(text: str) -> str:
    """`text` as a YAML scalar that is one value on one line: single-quoted, or, where it holds a
    character a single-quoted scalar cannot carry as is (a line break, a control character),
    double-quoted with that character escaped (`\\x1b`, `\\u2028`)."""
    if _YAML_SINGLE_QUOTABLE.fullmatch(text):
        return "'" + text.replace("'", "''") + "'"
    return '"' + _YAML_ESCAPED.sub(_yaml_escape, text) + '"'


def yaml_text(mapping: dict, indent: int = 0) -> str:
    """`mapping` (nested dicts, strings, booleans) as a YAML block mapping for a program to load,
    every key and string a yaml_scalar, so that a name from a trace loads back as exactly itself,
    never as YAML syntax, a number or a boolean; an empty dict is `{}`."""
    lines = []
    pad = "  " * indent
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{yaml_scalar(key)}:\n{yaml_text(value, indent + 1)}")
        elif isinstance(value, dict):
            lines.append(f"{pad}{yaml_scalar(key)}: {{}}\n")
        elif isinstance(value, bool):
            lines.append(f"{pad}{yaml_scalar(key)}: {'true' if value else 'false'}\n")
        elif isinstance(value, str):
            lines.append(f"{pad}{yaml_scalar(key)}: {yaml_scalar(value)}\n")
        else:
            raise TypeError(f"yaml_text writes dicts, strings and booleans, not {type(value).__name__}")
    return "".join(lines)


def python_literal(text: str) -> str:
    """`text` as a Python string literal (repr): one line, whatever it holds."""
    return repr(text)
