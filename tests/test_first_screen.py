"""Every sentence on the first screen true: what `analyze`, `verify`, `diagnose` and `report` say
first about a committed trace, checked against what the trace holds. What a command wrote is
said one way; a run that launched no GPU kernel gets its document in every format."""

from __future__ import annotations

import json

import pytest

from cli_runner import invoke
from fixture_paths import CORPUS, GPU, GPU_KINETO
from schema_check import assert_valid


def _words(text: str) -> str:
    """A table's text with its wrapped cells joined again: every run of spaces and line breaks one space."""
    return " ".join(text.split())


# --- "wrote FILE": one rule ---------------------------------------------------------------------------


def test_every_writer_says_what_it_wrote_one_way(tmp_path):
    """report, report --tables, scrub, bundle and --plots: `gemmscope: wrote …` on stderr, as every
    other note; stdout keeps only what a command prints."""
    trace = GPU / "te_linear_bf16.sqlite.xz"
    runs = {
        tmp_path / "report.html": invoke("report", trace, "-o", tmp_path / "report.html"),
        tmp_path / "scrubbed.sqlite.xz": invoke("scrub", trace, "-o", tmp_path / "scrubbed.sqlite.xz"),
        tmp_path / "issue.zip": invoke("bundle", trace, "-o", tmp_path / "issue.zip"),
    }
    for path, done in runs.items():
        assert done.exit_code == 0, done.stderr
        assert done.stdout == ""
        assert f"gemmscope: wrote {path}" in done.stderr.splitlines(), done.stderr
    tables = invoke("report", trace, "-o", "-", "--tables", tmp_path / "tables")
    assert tables.stdout.startswith("<!DOCTYPE html>")
    written = len(list((tmp_path / "tables").iterdir()))
    assert f"gemmscope: wrote {written} tables (CSV) into {tmp_path / 'tables'}" in tables.stderr.splitlines()
    plotted = invoke("analyze", trace, "--expect", "bf16", "--quiet", "--plots", tmp_path / "plots")
    assert any(line.startswith(f"gemmscope: wrote plots into {tmp_path / 'plots'}: ")
               for line in plotted.stderr.splitlines()), plotted.stderr
    assert "wrote" not in plotted.stdout


# --- a run that launched no GPU kernel: every format prints its document ----------------------------

# MXFP8 on Hopper: TE raised before the first GEMM, the process launched no GPU kernel (nsys); and a
# torch.profiler trace of a process that only asked CUDA for its devices.
NO_KERNEL = (CORPUS / "grouped_linear_mxfp8_hopper.sqlite.xz", GPU_KINETO / "verify_torch_train_small_mixed" /
             "trace.538.json.gz")
NOTHING_RAN = "ran no GPU kernel: its CUDA calls were captured, and none launched one: no GEMM ran"


@pytest.mark.parametrize("trace", NO_KERNEL, ids=[p.name for p in NO_KERNEL])
@pytest.mark.parametrize("command", ["analyze", "verify"])
def test_a_run_that_launched_no_kernel_prints_its_document_in_every_format(command, trace):
    """analyze and verify of a run that launched nothing: exit 1 and the one line saying so, as
    before, and on stdout the document of each format, JSON with summary.state "fail" (a CI job
    parsing it learns what happened), CSV its header, the table and Markdown their verdict block;
    JSON Lines, one line per GEMM launch, has none to print."""
    given = ["analyze", trace] if command == "analyze" else ["verify", "--trace", trace, "--expect", "mxfp8"]
    said = f"gemmscope: {trace} {NOTHING_RAN}" + (" at mxfp8" if command == "verify" else "")
    for fmt in ("table", "json", "markdown", "csv", "jsonl"):
        done = invoke(*given, "--format", fmt, "--no-redact")
        assert done.exit_code == 1, (fmt, done.stderr)
        assert done.stderr.splitlines() == [said], fmt
        if fmt == "json":
            document = json.loads(done.stdout)
            assert_valid(document, "analyze" if command == "analyze" else "verify")
            summary = document["summary"]
            assert (summary["state"], summary["gemm_launches"], summary["note"]) == ("fail", 0, said.removeprefix(
                "gemmscope: "))
            assert summary["traces_without_kernels"] == [{"trace": trace.name, "rank": None}]
            assert document["findings"] == [] and document["breakdown"]["per_rank"] == []
        elif fmt == "csv":
            assert done.stdout.startswith("kernel,role,precision,") and done.stdout.count("\n") == 1
        elif fmt == "jsonl":
            assert done.stdout == ""  # a line per GEMM launch: none launched
        else:
            first = done.stdout.lstrip("# \n").splitlines()
            assert "MISMATCHES" in done.stdout and NOTHING_RAN in _words(done.stdout), fmt
            assert first, fmt


def test_diagnose_and_report_of_a_run_that_launched_no_kernel_say_so(tmp_path):
    """diagnose prints its verdict block, report writes its page, saying nothing ran; both exit 1,
    as analyze."""
    trace = NO_KERNEL[0]
    done = invoke("diagnose", trace, "--no-redact")
    assert done.exit_code == 1 and done.stdout.startswith("MISMATCHES\n"), done.output
    assert NOTHING_RAN in _words(done.stdout)
    for page in ("report.html", "report.md"):
        done = invoke("report", trace, "-o", tmp_path / page)
        assert done.exit_code == 1, done.stderr
        assert f"gemmscope: {trace.name} {NOTHING_RAN}" in done.stderr.splitlines()
        assert NOTHING_RAN in _words((tmp_path / page).read_text(encoding="utf-8"))
