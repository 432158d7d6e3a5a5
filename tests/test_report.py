"""The report model and its renderers: one section list per subject, whatever the format.
`analyze --format markdown`, `report -o x.md` and a bundle's report.md are one Markdown; a
profile run's report.md is what `report RUN -o x.md` makes of it; the terminal shows the same
sections in the same order."""

import html
import json
import re
import zipfile

import pytest
from click.testing import CliRunner

from gemmscope.api import bundle
from gemmscope.cli import EXAMPLE_RUN, main
from gemmscope.diagnosing.diagnosis import diagnose
from gemmscope.errors import InputError
from gemmscope.judging import judgement
from gemmscope.plan.profile_run import load_run
from gemmscope.report import render
from gemmscope.report.documents import analysis_document
from gemmscope.report.model import Table, table_parts
from gemmscope.report.profile import profile_report
from gemmscope.report.verification import verification_report
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS, GPU

# A trace checked against a recipe its first and last layers do not run: mismatches, allowed ones, findings.
MIXED = CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"
OPTIONS = ("--expect", "fp8-current", "--allow", "output_layer")


def cli(*args) -> str:
    done = CliRunner().invoke(main, [*map(str, args)], catch_exceptions=False)
    assert done.exit_code in (0, 1), done.output
    return done.stdout


def without_pngs(page: str) -> str:
    """A page with its plots' PNG data left out (matplotlib's bytes are not the point here)."""
    return re.sub(r"base64,[A-Za-z0-9+/=]+", "base64,PNG", page)


def headings(markdown: str) -> list[str]:
    return re.findall(r"^## (.*)$", markdown, flags=re.MULTILINE)


@pytest.fixture(scope="module")
def checked():
    result = judgement.judge([read_trace(MIXED)], "fp8-current", ("output_layer",))
    return result, diagnose(result)


def test_one_markdown_for_analyze_report_and_bundle(tmp_path, checked):
    analyzed = cli("analyze", MIXED, *OPTIONS, "--format", "markdown")
    cli("report", MIXED, *OPTIONS, "-o", tmp_path / "report.md")
    made = bundle([MIXED], tmp_path / "issue.zip", expect="fp8-current", allow=("output_layer",))
    with zipfile.ZipFile(made.path) as archive:
        bundled = archive.read("report.md").decode()
        bundled_page = archive.read("report.html").decode()
    assert analyzed == (tmp_path / "report.md").read_text() == bundled
    # the bundle's page is `report -o x.html`'s, the same sections as its Markdown
    cli("report", MIXED, *OPTIONS, "-o", tmp_path / "report.html")
    assert without_pngs(bundled_page) == without_pngs((tmp_path / "report.html").read_text())
    assert [html.unescape(h) for h in re.findall(r"<h2>(.*?)</h2>", bundled_page)] == headings(bundled)
    # the section list is the builder's, once, and it has what this trace calls for
    result, diagnosis = checked
    sections = [s.title for s in verification_report(result, diagnosis).sections]
    assert headings(analyzed) == [*sections, "Environment"]
    assert {"Mismatches (requested precision did not run)", "Allowed mismatches", "Where the GPU time went",
            "Findings, most time at stake first", "Per GEMM (layer · module · pass · kernel)"} <= set(sections)


def test_the_terminal_shows_the_sections_in_the_markdowns_order(checked):
    result, diagnosis = checked
    report = verification_report(result, diagnosis)
    text, markdown = render(report, "table"), render(report, "markdown")
    shown = ["GEMMs per module and pass", "Mismatches (requested precision did not run)", "Allowed mismatches",
             "Where the GPU time went", "Findings, most time at stake first"]
    assert [text.index(f"\n{title}") for title in shown] == sorted(text.index(f"\n{title}") for title in shown)
    assert [markdown.index(f"## {title}") for title in shown] == sorted(markdown.index(f"## {title}")
                                                                        for title in shown)
    # details on demand, plots and the environment are for pages only
    assert "Per GEMM (layer · module · pass · kernel)" not in text and "Environment\n" not in text


# A trace and the options it is checked with -> what each FALLBACK cause in it means.
CAUSES = {
    (GPU / "train_mixed.sqlite.xz", ()): {
        "no-record": "gemmscope's hook recorded this run but not these GEMM calls (a TE entry point it does not "
                     "wrap, or an older hook that recorded only the autocast regions)",
        "outside-te": "these GEMMs ran outside TE (a plain torch.nn.Linear, say)"},
    (MIXED, OPTIONS): {
        "requested-bf16": "these GEMMs asked for bf16 (TE was handed bf16 operands, or a GEMM outside TE had them), "
                          "not fp8-current: a layer outside autocast, or a recipe that keeps these GEMMs in high "
                          "precision"},
}


@pytest.mark.parametrize("trace, options", list(CAUSES), ids=["train_mixed", "megatron_first-last-bf16"])
def test_a_fallbacks_cause_reads_the_same_in_every_format(trace, options):
    """Each FALLBACK cause heads its mismatches with what it means, in the same words, in the
    terminal's output, the Markdown and the HTML page (words the terminal wraps at its width)."""
    text = " ".join(cli("analyze", trace, *options).split())
    markdown = cli("analyze", trace, *options, "--format", "markdown")
    page = html.unescape(cli("report", trace, *options, "-o", "-", "--format", "html"))
    for cause, meaning in CAUSES[trace, options].items():
        assert f": {cause}, " in text and meaning in text
        assert re.search(rf"^### {cause}, .*\n\n{re.escape(meaning)}", markdown, flags=re.MULTILINE)
        assert re.search(rf"<h3>{cause}, [^<]*</h3><p>{re.escape(meaning)}", page)
        assert f"cause: {cause}: {meaning}" in markdown and f"cause: {cause}: {meaning}" in page  # each GEMM's details


def test_the_terminal_shows_every_table_the_pages_show(checked):
    """No section is laid out again for the terminal: each table (or each group of its rows) the
    Markdown shows, the terminal shows under the same title, fitted; only paragraphs, plots and
    details on demand are for pages alone."""
    result, diagnosis = checked
    for report in (verification_report(result, diagnosis, detail="verbose"), profile_report(load_run(EXAMPLE_RUN))):
        text, markdown = render(report, "table"), render(report, "markdown")
        for section in report.sections:
            for table in (block for block in section.blocks if isinstance(block, Table)):
                for part in table_parts(table):
                    title = table.title if part.heading is None else f"{table.title}: {part.heading}"
                    heading = part.heading or table.title
                    assert f"\n{title}" in text and (heading == section.title or f"### {heading}\n" in markdown)


def test_quiet_is_the_verdict_alone_in_every_text_format(checked):
    result, diagnosis = checked
    report = verification_report(result, diagnosis, detail="quiet")
    assert render(report, "table").startswith("MISMATCHES\nAsked: ")
    assert headings(render(report, "markdown")) == []


def test_json_and_csv_are_the_document_and_the_launches(checked):
    result, diagnosis = checked
    document = analysis_document(result, None, diagnosis)
    report = verification_report(result, diagnosis, document)
    assert json.loads(render(report, "json")) == json.loads(json.dumps(document))
    assert render(report, "csv").count("\n") == len(result.gemms) + 1
    with pytest.raises(InputError, match="cannot be written as json: choose from table, markdown, html, csv"):
        render(verification_report(result, diagnosis), "json")


def test_a_profile_runs_report_md_is_reports_markdown(tmp_path):
    """The shipped run's report.md is what `gemmscope profile` writes and `report RUN -o x.md`
    makes of the run: one Markdown, whose sections the terminal shows in the same order."""
    cli("report", EXAMPLE_RUN, "-o", tmp_path / "run.md")
    assert (tmp_path / "run.md").read_text() == (EXAMPLE_RUN / "report.md").read_text()
    report = profile_report(load_run(EXAMPLE_RUN), EXAMPLE_RUN)
    markdown, text = render(report, "markdown"), render(report, "table")
    assert markdown == (EXAMPLE_RUN / "report.md").read_text()
    assert headings(markdown) == [*(s.title for s in report.sections), "Environment"]
    shown = ["autocast: fprop", "prequant: wgrad", "GEMM kernels that ran (per mode, precision and pass): autocast",
             "Per layer (codonfm-5b)", "Did not run (TE's reason, once per recipe)"]
    assert [text.index(title) for title in shown] == sorted(text.index(title) for title in shown)
