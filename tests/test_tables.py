"""`gemmscope report --tables DIR`: each table of the report as a CSV file, read back with pandas
and held against the JSON document of the same analysis (`analyze --format json`, a run's
results.json), on committed real traces and the shipped run directory."""

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from gemmscope.cli import EXAMPLE_RUN, main
from gemmscope.report.tables import TABLE_FILES

from cli_runner import assert_one_line_error, gemmscope
from fixture_paths import CORPUS

# Two ranks in one trace, three layers of which one runs BF16 under an FP8 block-scaling autocast
# (fallbacks), cut into steps by the range each rank pushes three times.
STACK_2GPU = [CORPUS / "te_stack_fp8-block_2gpu.sqlite.xz", "--expect", "fp8-block", "--step-range",
              "gemmscope.autocast(recipe=Float8BlockScaling)"]
# TE's GEMM benchmark range by range: BF16 ran, MXFP8 raised on Hopper (a mapped range with no GEMM).
BENCH_MAPPED = [CORPUS / "gemm_bench_4096_all.sqlite.xz",
                "--expect-map", "BF16_*=bf16", "--expect-map", "MXFP8_*=mxfp8"]

EVERY_TRACE_REPORT = {"gemms-per-module-pass.csv", "gemms-per-kernel.csv", "unreadable-traces.csv",
                      "breakdown-per-rank.csv", "breakdown-per-step.csv", "findings.csv", "findings-figures.csv",
                      "findings-concerns.csv", "kernels-decoded.csv"}
RUN_REPORT = {"per-layer.csv", "full-model.csv", "gemm-entries.csv", "gemm-kernels.csv", "not-run.csv", "memory.csv"}


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def report_tables(folder: Path, *targets) -> Path:
    """`gemmscope report TARGETS -o folder/report.html --tables folder/tables`; the tables folder."""
    done = invoke("report", *targets, "-o", folder / "report.html", "--tables", folder / "tables")
    assert done.exit_code == 0, done.output
    return folder / "tables"


def analysis_json(*args) -> dict:
    done = invoke("analyze", *args, "--format", "json", "--per-launch")  # the launches one by one too
    assert done.exit_code in (0, 1), done.output  # 1: mismatches, the document written all the same
    return json.loads(done.stdout)


def read(path: Path, **options) -> pd.DataFrame:
    """A table as pandas reads it back: a blank cell is missing, no other text is."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""], **options)


def records(path: Path, **options) -> list[dict]:
    """A table's rows as JSON-like records: missing values None, numbers Python numbers."""
    frame = read(path, **options).astype(object)
    return frame.where(frame.notna(), None).to_dict("records")


def figure_value(text):
    """A figure of findings-figures.csv as JSON says it: a number, null, or text."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> tuple[Path, dict]:
    return report_tables(tmp_path_factory.mktemp("stack"), *STACK_2GPU), analysis_json(*STACK_2GPU)


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[Path, dict]:
    return report_tables(tmp_path_factory.mktemp("bench"), *BENCH_MAPPED), analysis_json(*BENCH_MAPPED)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict]:
    return (report_tables(tmp_path_factory.mktemp("run"), EXAMPLE_RUN),
            json.loads((EXAMPLE_RUN / "results.json").read_text()))


# --- which files --------------------------------------------------------------------------------

def test_the_files_are_the_tables_the_report_has(stack, bench, run):
    names = {case: {p.name for p in folder.iterdir()} for case, (folder, _) in
             {"stack": stack, "bench": bench, "run": run}.items()}
    assert names["stack"] == EVERY_TRACE_REPORT | {"mismatches.csv", "ranks-differing.csv"}  # checked, two ranks
    assert names["bench"] == EVERY_TRACE_REPORT | {"ranges-checked.csv", "mismatches.csv"}  # --expect-map, one rank
    assert names["run"] == RUN_REPORT
    assert set().union(*names.values()) == set(TABLE_FILES)


def test_names_are_whole(stack, run):
    """Kernel and layer names as the JSON has them, however long: never shortened."""
    folder, document = stack
    text = "".join(p.read_text() for p in [*folder.iterdir(), *run[0].iterdir()])
    assert "…" not in text
    longest = max((g["kernel"] for g in document["gemms"]), key=len)
    assert len(longest) > 70 and longest in set(read(folder / "gemms-per-kernel.csv")["kernel"])
    layers = {g["layer"] for g in document["gemms"] if g["layer"]}
    assert layers == set(read(folder / "gemms-per-kernel.csv")["layer"].dropna())


# --- from traces: the figures of analyze's JSON -------------------------------------------------

def test_gemm_tables_are_the_summary(stack):
    folder, document = stack
    summary = document["summary"]
    assert records(folder / "gemms-per-module-pass.csv") == summary["by_module_pass"]
    assert records(folder / "gemms-per-kernel.csv") == summary["groups"]
    mismatches = records(folder / "mismatches.csv")
    assert mismatches == [g for g in summary["groups"] if g["verdict"] == "FALLBACK"]
    assert sum(m["launches"] for m in mismatches if not m["allowed"]) == summary["mismatches"] == 90
    assert {m["cause"] for m in mismatches} == {"requested-bf16", "outside-te"}


def test_ranks_that_differ(stack):
    """Two ranks that ran the same kernels: the table is there, with its header and no row."""
    folder, document = stack
    comparison = document["summary"]["rank_comparison"]
    assert len(comparison) > 0 and not any(row["differing_ranks"] for row in comparison)
    table = read(folder / "ranks-differing.csv")
    assert table.empty and list(table.columns) == list(comparison[0])


def test_breakdown_per_rank_and_per_step(stack):
    folder, document = stack
    per_rank = document["breakdown"]["per_rank"]
    assert records(folder / "breakdown-per-rank.csv", dtype={"rank": str}) == per_rank  # a rank is a label
    steps = read(folder / "breakdown-per-step.csv")
    # the steps after the first, per rank: two each, adding up to the rank's figures
    assert sorted(zip(steps["rank"], steps["step"])) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert set(steps["name"]) == {"gemmscope.autocast(recipe=Float8BlockScaling)"}
    figures = [c for c in steps.columns if c.endswith("_ns") or c == "kernel_launches"]
    assert steps.astype({"rank": str}).groupby("rank")[figures].sum().reset_index().to_dict("records") == [
        {k: rank[k] for k in ["rank", *figures]} for rank in per_rank]


def test_findings(stack):
    folder, document = stack
    findings = document["findings"]
    assert [f["code"] for f in findings][:2] == ["gpu-idle", "launch-bound"]
    assert records(folder / "findings.csv") == [
        {"code": f["code"], "explains_ns": f["explains_ns"], "statement": f["statement"]} for f in findings]
    figures: dict = {f["code"]: {} for f in findings}
    for row in records(folder / "findings-figures.csv"):  # "amdahl.s=2": figure amdahl, its key s=2
        name, _, key = row["figure"].partition(".")
        value = figure_value(row["value"])
        if key:
            figures[row["code"]].setdefault(name, {})[key] = value
        else:
            figures[row["code"]][name] = value
    assert figures == {f["code"]: f["figures"] for f in findings}
    assert records(folder / "findings-concerns.csv") == [
        {"code": f["code"], **concern} for f in findings for concern in f["concerns"]]
    assert read(folder / "findings-concerns.csv")["code"].unique().tolist() == ["fallback"]


def test_kernels_decoded(stack):
    folder, document = stack
    decoded = records(folder / "kernels-decoded.csv")
    names = [row["name"] for row in decoded]
    assert sorted(names) == sorted({g["kernel"] for g in document["summary"]["groups"]})
    done = invoke("kernel", *names, "--format", "json")
    assert decoded == json.loads(done.stdout)["kernels"]


def test_no_unreadable_trace_is_a_header(stack):
    table = read(stack[0] / "unreadable-traces.csv")
    assert table.empty and list(table.columns) == ["trace", "rank", "error"]


def test_ranges_checked_leave_what_ran_no_gemm_blank(bench):
    """MXFP8 raised on Hopper: its range ran no GEMM, so no time and no share (JSON: 0 ns, null),
    never 0; the BF16 range's figures as the JSON has them."""
    folder, document = bench
    ranges = document["summary"]["ranges_checked"]
    table = records(folder / "ranges-checked.csv")
    assert [r["range"] for r in table] == ["BF16_4096x4096x4096", "MXFP8_4096x4096x4096"]
    ran, not_run = table
    assert ran == ranges[0] and ran["gemms"] == 111 and ran["expected_time_share"] == 1.0
    assert ranges[1]["gemms"] == 0 and ranges[1]["gemm_time_ns"] == 0
    assert not_run == ranges[1] | {"gemm_time_ns": None, "expected_time_share": None}
    assert not_run["verdict"] == "NO GEMM"
    assert "MXFP8_4096x4096x4096,mxfp8,1,0,,,0," in (folder / "ranges-checked.csv").read_text()
    assert records(folder / "gemms-per-module-pass.csv") == document["summary"]["by_module_pass"]
    assert records(folder / "mismatches.csv") == []  # every mapped GEMM ran as asked


# --- from a profile run directory: results.json's figures ---------------------------------------

def test_gemm_entries_are_results_json(run):
    """Every GEMM × recipe × mode; an entry that did not run (MXFP8 and NVFP4 on Hopper) has no
    figure and no launch count (results.json: 0), and keeps TE's reason."""
    folder, results = run
    entries = records(folder / "gemm-entries.csv")
    assert len(entries) == len(results["gemms"]) == 144
    not_run = [e for e in results["gemms"] if e["status"] != "ok"]
    assert len(not_run) == 48 and {e["gemm_launches"] for e in not_run} == {0}
    assert entries == [e | {"gemm_launches": None} if e["status"] != "ok" else e for e in results["gemms"]]
    assert all(e["reason"].startswith("Device compute capability 10.0") for e in entries if e["status"] != "ok")


def test_per_layer_and_full_model(run):
    folder, results = run
    per_layer = records(folder / "per-layer.csv")
    expected = []
    for row in results["per_layer"]:
        ran = row["not_ok"] < row["gemms"]
        speedup = 1.0 if row["precision"] == "bf16" else results["speedups"][row["mode"]][row["precision"]]
        expected.append(row | {"speedup_vs_bf16": speedup, "flagged": row["flagged"] if ran else None})
    assert per_layer == expected
    assert {(r["mode"], r["precision"]) for r in per_layer if r["flagged"] is None} == {
        (mode, p) for mode in ("autocast", "prequant") for p in ("mxfp8", "nvfp4")}
    assert [r["speedup_vs_bf16"] for r in per_layer if r["precision"] == "fp8-delayed"] == [
        pytest.approx(1.6591837421410758), pytest.approx(1.99834212843268)]
    assert records(folder / "full-model.csv") == results["full_model"]


def test_memory_not_run_is_blank(run):
    folder, results = run
    ran = {(e["mode"], e["precision"]) for e in results["gemms"] if e["status"] == "ok"}
    assert records(folder / "memory.csv") == results["memory"]
    # results.json as the CSV: a recipe that raised has no peak, never 0 (MXFP8 and NVFP4 on an H200)
    assert {(m["mode"], m["precision"]) for m in results["memory"] if m["peak_mib"] is None} == {
        (mode, p) for mode in ("autocast", "prequant") for p in ("mxfp8", "nvfp4")}
    assert all(m["peak_mib"] > 0 for m in results["memory"] if (m["mode"], m["precision"]) in ran)


def test_kernels_and_what_did_not_run(run):
    folder, results = run
    ran = [e for e in results["gemms"] if e["kernel"] is not None]
    kernels = records(folder / "gemm-kernels.csv")
    keys = ["mode", "pass", "precision", "kernel"]
    assert {tuple(k[c] for c in keys) for k in kernels} == {tuple(e[c] for c in keys) for e in ran}
    for row in kernels:
        ops = [e["op"] for e in ran if all(e[c] == row[c] for c in keys)]
        assert row["ops"] == ", ".join(ops)
        assert {e["kernel_precision"] for e in ran if all(e[c] == row[c] for c in keys)} == {row["kernel_precision"]}
    not_run = records(folder / "not-run.csv")
    assert [(r["precision"], r["modes"], r["gemms"]) for r in not_run] == [
        ("mxfp8", "autocast, prequant", 24), ("nvfp4", "autocast, prequant", 24)]
    assert all(r["why"].startswith("unsupported: Device compute capability 10.0 or higher") for r in not_run)


# --- the folder -----------------------------------------------------------------------------------

def test_tables_of_another_report_are_replaced_not_mixed(run, tmp_path):
    """A run's tables, then a trace's into the same folder: only the trace's are left, besides a
    file gemmscope did not write. With `-o -` the tables are written all the same."""
    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "notes.csv").write_text("mine\n")
    for name in RUN_REPORT:
        (folder / name).write_text((run[0] / name).read_text())
    done = invoke("report", CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz", "-o", "-", "--format", "markdown",
                  "--tables", folder)
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("# gemmscope report: fsdp_small_fp8_1gpu.sqlite.xz")
    assert {p.name for p in folder.iterdir()} == EVERY_TRACE_REPORT | {"mismatches.csv", "notes.csv"}
    assert (folder / "notes.csv").read_text() == "mine\n"


def test_a_tables_folder_that_cannot_be_made_is_one_line_exit_2(tmp_path):
    page = tmp_path / "page.html"
    (tmp_path / "file").write_text("")
    trace = CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz"
    assert_one_line_error(gemmscope("report", trace, "-o", page, "--tables", tmp_path / "file"))
    assert_one_line_error(gemmscope("report", trace, "-o", page, "--tables", tmp_path / "file" / "tables"))
    assert not page.exists()
