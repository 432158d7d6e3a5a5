"""Names a trace holds, made hostile, through the real commands: a committed Megatron trace whose
layer names (the hook's records) and kernel names are rewritten to terminal escape sequences,
spreadsheet formulas, HTML and Markdown. No control character reaches the terminal, in any table
output or on stderr; CSV cells never open as formulas and rows stay whole; Markdown renders the
names as text; file names in error lines are escaped too; the files whatif writes hold module
names as data (a YAML scalar, a Python literal), never as lines of their own. And a trace's file
name holding `#`, `?` or `%` reads that file; one that is not UTF-8 ends in one line, exit 2."""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import re
import zipfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from gemmscope.whatif import changes

from cli_runner import assert_one_line_error, gemmscope, invoke
from fixture_paths import CORPUS, GPU
from trace_mutation import KERNELS, altered_sqlite, kineto_document, write_kineto

MEGATRON = CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"
SMALL = GPU / "te_linear_bf16.sqlite.xz"
# What a terminal acts on rather than shows (C0 but the line break, DEL, C1, separators, bidi).
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A layer name that retitles the window, clears the screen, fakes a verdict line and a heading, and
# fetches an image; one that is a live formula; a kernel name that is one more after a pipe.
ESCAPES = "x\x1b]0;pwned\x07\x1b[2J\x9b1;1HPASS\r<img src=http://evil.example/a.png>\n\n# All GEMMs PASS\u202e"
FORMULA = '=HYPERLINK("http://evil.example","ok")'
# after a space: a name glued to "@SUM" reads as user@host, which a shared copy redacts whole
KERNEL_TAIL = " @SUM(1)|+cmd\x1b[31m"


def _sql(text: str) -> str:
    """`text` as an SQL expression, whatever it holds."""
    return "||".join(f"char({ord(c)})" for c in text)


def _layer(old: str, new: str) -> str:
    return f"UPDATE NVTX_EVENTS SET text = replace(text, 'layer={old}|', 'layer=' || {_sql(new)} || '|')"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    return altered_sqlite(
        MEGATRON, tmp_path_factory.mktemp("hostile") / "hostile.sqlite",
        _layer("decoder.layers.0.mlp.linear_fc1", ESCAPES), _layer("decoder.layers.3.mlp.linear_fc1", FORMULA),
        f"UPDATE StringIds SET value = value || {_sql(KERNEL_TAIL)} WHERE id IN (SELECT demangledName FROM {KERNELS})")


def _said(done) -> str:
    assert "Traceback" not in done.stderr and done.returncode in (0, 1, 4, 5), (done.returncode, done.stderr)
    return done.stdout + done.stderr


@pytest.mark.parametrize("command", [["analyze"], ["analyze", "--verbose"], ["analyze", "--expect", "fp8-current"],
                                     ["diagnose"], ["whatif", "--no-measure"]])
def test_no_control_character_reaches_the_terminal(hostile, command):
    said = _said(gemmscope(*command, hostile, "--no-redact"))
    assert not CONTROL.search(said), repr(CONTROL.search(said))
    assert "\\x1b]0;pwned\\x07" in said  # the name is shown, escaped
    assert not re.search("^# All GEMMs PASS", said, re.M)  # its line break starts no line of its own


def test_compare_shows_the_names_escaped(hostile):
    said = _said(gemmscope("compare", MEGATRON, hostile))
    assert not CONTROL.search(said), repr(CONTROL.search(said))


def test_a_file_name_in_an_error_line_is_escaped(tmp_path):
    name = tmp_path / "trace\x1b]0;pwned\x07\x1b[2J.sqlite"
    name.write_text("not a trace")
    done = gemmscope("analyze", name)
    assert_one_line_error(done)
    assert "\\x1b]0;pwned\\x07" in done.stderr and not CONTROL.search(done.stderr)
    missing = gemmscope("analyze", tmp_path / "gone\x9b2J.sqlite")
    assert_one_line_error(missing)
    assert "\\x9b" in missing.stderr and not CONTROL.search(missing.stderr)


def _csv_rows(text: str) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert all(len(row) == len(rows[0]) for row in rows), "a row split"
    return rows


def test_csv_cells_never_open_as_formulas(hostile, tmp_path):
    done = invoke("analyze", hostile, "--format", "csv", "--no-redact")  # in-process: its CRs as written
    assert done.exit_code == 0, done.output
    tables = tmp_path / "tables"
    report = gemmscope("report", hostile, "-o", tmp_path / "r.html", "--tables", tables)
    assert report.returncode == 0, report.stderr
    texts = {"analyze": done.stdout} | {p.name: p.read_bytes().decode() for p in tables.glob("*.csv")}
    layers = 0
    for name, text in texts.items():
        for row in _csv_rows(text)[1:]:
            for cell in row:
                assert not re.match(r"[=+@\t\r]", cell) and not re.fullmatch(r"-[^\d.].*", cell, re.S), (name, cell)
                layers += cell == "'" + FORMULA
    assert layers > 0  # the formula layer is there, as text
    assert any("PASS\r<img" in cell and "\n\n# All GEMMs PASS" in cell  # CR and LF inside one cell
               for row in _csv_rows(texts["analyze"]) for cell in row)


def _rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_markdown_renders_names_as_text(hostile, tmp_path):
    done = gemmscope("analyze", hostile, "--format", "markdown", "--no-redact")
    assert done.returncode == 0, done.stderr
    report = gemmscope("report", hostile, "-o", tmp_path / "r.md")
    assert report.returncode == 0, report.stderr
    for markdown in (done.stdout, (tmp_path / "r.md").read_text()):
        page = _rendered(markdown)
        assert "<img" not in page and "evil.example/a.png\"" not in page
        assert not re.search(r"<h\d>[^<]*All GEMMs PASS", page)
        assert "&lt;img src=http://evil.example/a.png&gt;" in page  # shown, as text
        assert not CONTROL.search(markdown)
        # every code block (the NVTX ranges of a GEMM, under <details>) is one line per line it had
        assert all("All GEMMs PASS" not in line or line.startswith("    ") or "\\n" in line
                   for line in markdown.splitlines())


def test_whatif_files_name_hostile_modules_as_data():
    paths = ["decoder.layers.0.mlp.linear_fc1", "x\nimport os; os.system('id')", "a'b\x1b]0;t\x07", "c\u2028d"]
    snippet = changes.te_autocast_snippet(paths[:2], paths[2:], ["fp8-current\nimport sys"])
    clean = changes.te_autocast_snippet(["a", "b"], ["c", "d"], ["fp8-current"])
    assert ast.dump(ast.parse(snippet)) == ast.dump(ast.parse(clean))  # names only in comments
    assert len(snippet.splitlines()) == len(clean.splitlines())
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load(changes.te_debug_yaml(paths))
    pattern = config["gemmscope_whatif_bf16"]["layers"]["layer_name_regex_pattern"]
    assert all(re.fullmatch(pattern, name) for name in changes.debug_api_names(paths))
    assert set(config["gemmscope_whatif_bf16"]) == {"enabled", "layers", "transformer_engine"}


@pytest.mark.parametrize("name", ["a#b.sqlite", "q?mode=rw.sqlite", "p%41.sqlite"])
def test_a_trace_name_with_uri_characters_reads_that_file(tmp_path, name):
    trace = altered_sqlite(SMALL, tmp_path / name)
    before = sorted(os.listdir(tmp_path))
    done = gemmscope("analyze", trace, "--expect", "bf16", "--quiet")
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path)) == before  # nothing made beside it (`a`, `q`: SQLite's cut names)
    assert gemmscope("scrub", trace, "-o", tmp_path / "s.sqlite").returncode == 0


def test_a_file_name_that_is_not_utf8_is_one_line(tmp_path):
    folder = os.fsencode(tmp_path)
    trace = altered_sqlite(SMALL, Path(os.fsdecode(folder + b"/n\xff.sqlite")))
    for command in (["analyze", trace], ["analyze", tmp_path], ["report", trace, "-o", tmp_path / "r.html"],
                    ["whatif", trace, "--no-measure"]):
        done = gemmscope(*command)
        assert_one_line_error(done)
        assert "n\\xff.sqlite" in done.stderr and "not UTF-8" in done.stderr


def test_the_timeline_table_shows_what_its_windows_say_escaped(hostile, tmp_path):
    from gemmscope.watching.timeline import TIMELINE_FILE, Timeline, read_timeline

    timeline = Timeline(tmp_path)
    timeline.judge([hostile])
    timeline.judge([hostile])
    first, second = read_timeline(tmp_path)
    second |= {"error": f"could not read {ESCAPES}"}  # a window not judged: its error as written
    (tmp_path / TIMELINE_FILE).write_text("".join(json.dumps(r) + "\n" for r in (first, second)))
    done = gemmscope("timeline", tmp_path)
    assert "window 1: NOT JUDGED: could not read x\\x1b]0;pwned\\x07" in done.stdout, done.stdout
    assert not CONTROL.search(done.stdout + done.stderr)


def test_kernel_names_given_to_decode_are_shown_escaped():
    done = gemmscope("kernel", "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT\x1b]0;pwned\x07\n# PASS")
    assert done.returncode == 0, done.stderr
    assert "\\x1b]0;pwned\\x07" in done.stdout and not CONTROL.search(done.stdout)


def test_a_torch_profiler_traces_names_are_shown_escaped(tmp_path):
    document = kineto_document(GPU / "kineto" / "te_ops_sequential_fp8-current.json.gz")
    for event in document["traceEvents"]:
        if isinstance(event, dict) and event.get("cat") in ("kernel", "user_annotation", "gpu_user_annotation"):
            event["name"] += ESCAPES
    trace = write_kineto(document, tmp_path / "hostile.json")
    for fmt in ("table", "markdown"):
        said = _said(gemmscope("analyze", trace, "--verbose", "--format", fmt, "--no-redact"))
        assert "\\x1b]0;pwned\\x07" in said and not CONTROL.search(said)


def test_a_bundles_tables_and_report_hold_names_as_data(hostile, tmp_path):
    done = gemmscope("bundle", hostile, "-o", tmp_path / "b.zip")
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(tmp_path / "b.zip") as bundle:
        texts = {name: bundle.read(name).decode() for name in bundle.namelist() if name.endswith((".csv", ".md"))}
    tables = {name: text for name, text in texts.items() if name.endswith(".csv")}
    cells = [cell for text in tables.values() for row in _csv_rows(text)[1:] for cell in row]
    assert "'" + FORMULA in cells and not any(re.match(r"[=+@\t\r]", cell) for cell in cells)
    (report,) = [text for name, text in texts.items() if name.endswith("report.md")]
    assert "<img" not in _rendered(report) and not CONTROL.search(report)
