"""Every sentence on the first screen true: what `analyze`, `verify`, `diagnose` and `report` say
first about a committed trace, checked against what the trace holds. What a command wrote is
said one way."""

from __future__ import annotations

from cli_runner import invoke
from fixture_paths import GPU

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
