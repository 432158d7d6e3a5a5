"""gemmscope.Analysis, the one analysis the CLI's trace commands stand on: the CLI and the Python
API say the same for the same traces and options (committed real GPU traces); an analysis
computes each result once and never changes what it was given; capture (real nsys on this CPU
machine), report, compare, bundle and scrub are Python calls."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys
import zipfile

import pytest
from click.testing import CliRunner

import gemmscope as gs
from gemmscope import api
from gemmscope.analysis import GEMM_COLUMNS
from gemmscope.cli import main
from gemmscope.judging import judgement

from fixture_paths import CORPUS, GPU

FIRST_LAST_BF16 = CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"
RANKS = [CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz"]
KINETO = GPU / "kineto" / "te_stack_fp8-block_1gpu.rank0.json.gz"
SMALL_BF16, SMALL_FP8 = CORPUS / "fsdp_small_bf16_1gpu.sqlite.xz", CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz"


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # the table format fits the terminal: the same width for both
    monkeypatch.setenv("NO_COLOR", "1")


def cli(*args) -> tuple[int, str, str]:
    done = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return done.exit_code, done.stdout, done.stderr


# --- the CLI and the API say the same -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["table", "json", "markdown", "csv", "jsonl"])
def test_analyze_prints_what_the_analysis_renders(fmt):
    code, out, err = cli("analyze", FIRST_LAST_BF16, "--expect", "fp8-current", "--allow", "output_layer",
                         "--format", fmt)
    analysis = gs.Analysis(FIRST_LAST_BF16, expect="fp8-current", allow=["output_layer"], redact=True)
    assert out == analysis.render(fmt)
    assert code == analysis.check.state.exit_code == gs.State.FAIL.exit_code


def test_verify_and_diagnose_print_what_the_analysis_renders_with_every_option():
    options = gs.Options(expect="fp8-block", allow=("*wgrad*",), strict=True, step_range="step *", workers=1,
                         redact=True)
    arguments = ["--expect", "fp8-block", "--allow", "*wgrad*", "--strict", "--step-range", "step *",
                 "--workers", "1"]
    code, out, err = cli("verify", "--trace", KINETO, *arguments, "--format", "json", "--per-launch")
    analysis = gs.Analysis(KINETO, options)
    assert json.loads(out) == json.loads(analysis.render("json", "verification", per_launch=True))
    assert code == analysis.check.state.exit_code
    # the notes on stderr are the analysis's own (a torch.profiler trace lacks what nsys records)
    assert analysis.notes and all(note in err for note in analysis.notes)
    code, out, _ = cli("diagnose", KINETO, *arguments)
    assert out == analysis.render("table", "diagnosis")
    assert code == analysis.check.state.exit_code


def test_analyze_of_several_ranks_as_the_analysis_of_them():
    code, out, _ = cli("analyze", *RANKS, "--format", "json", "--workers", "2")
    assert json.loads(out) == json.loads(gs.Analysis(RANKS, workers=2, redact=True).render("json"))


def test_compare_prints_what_gs_compare_renders():
    code, out, _ = cli("compare", SMALL_BF16, SMALL_FP8, "--format", "json")
    comparison = gs.compare(SMALL_BF16, SMALL_FP8, redact=True)
    assert code == 0 and json.loads(out) == comparison.to_dict() == json.loads(comparison.render("json"))
    assert cli("compare", SMALL_BF16, SMALL_FP8)[1] == comparison.render("table")
    # the same from two analyses built apart (nothing to redact in these scrubbed traces)
    assert gs.Analysis(SMALL_BF16).compare(gs.Analysis(SMALL_FP8)).to_dict() == comparison.to_dict()


def test_report_writes_what_api_report_renders(tmp_path):
    code, out, err = cli("report", FIRST_LAST_BF16, "-o", "-", "--format", "markdown", "--expect", "fp8-current",
                         "--tables", tmp_path / "tables")
    shared = api.report(FIRST_LAST_BF16, expect="fp8-current")
    assert code == 0 and out == shared.render("markdown")
    assert f"gemmscope: redacted: {shared.redactor.summary()}" in err
    written = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert written == sorted(shared.tables) and "mismatches.csv" in written


def test_bundle_from_python_holds_what_the_cli_bundles(tmp_path):
    assert cli("bundle", FIRST_LAST_BF16, "-o", tmp_path / "cli.zip", "--expect", "fp8-current")[0] == 0
    made = gs.Analysis(FIRST_LAST_BF16, expect="fp8-current").bundle(tmp_path / "python.zip")
    assert made.path == tmp_path / "python.zip" and made.analysis_error is None
    with zipfile.ZipFile(tmp_path / "cli.zip") as by_cli, zipfile.ZipFile(made.path) as by_python:
        assert by_cli.namelist() == by_python.namelist()
        for name in by_cli.namelist():
            if not name.startswith("traces/"):  # compressed traces: compared as read below
                assert by_cli.read(name) == by_python.read(name), name
        analysis = json.loads(by_python.read("analysis.json"))
    assert len(analysis["gemms"]) == 153  # every launch: a bug report keeps them


def test_scrub_from_python_writes_what_the_cli_writes(tmp_path):
    assert cli("scrub", FIRST_LAST_BF16, "-o", tmp_path / "cli.sqlite")[0] == 0
    written, redactor = api.scrub(FIRST_LAST_BF16, tmp_path / "python.sqlite")
    assert written == tmp_path / "python.sqlite"
    tables = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
    for query in (tables, "SELECT id, value FROM StringIds ORDER BY id"):
        rows = [sqlite3.connect(path).execute(query).fetchall() for path in (tmp_path / "cli.sqlite", written)]
        assert rows[0] == rows[1] and rows[0]
    scrubbed, original = gs.check(written).gemms, gs.check(FIRST_LAST_BF16).gemms  # the same GEMMs, another name
    assert set(scrubbed["trace"]) == {"python.sqlite"}
    assert scrubbed.drop(columns="trace").equals(original.drop(columns="trace"))


# --- computed once, nothing it was given changed ----------------------------------------------------


def test_each_result_is_computed_once(monkeypatch):
    calls = []
    judge = judgement.judge
    monkeypatch.setattr(judgement, "judge", lambda *a, **k: calls.append(1) or judge(*a, **k))
    analysis = gs.Analysis(FIRST_LAST_BF16, expect="fp8-current")
    assert analysis.check is analysis.check and analysis.diagnosis is analysis.diagnosis
    assert analysis.report("analysis") is analysis.report("analysis")
    analysis.render("json"), analysis.render("markdown"), analysis.tables
    assert len(calls) == 1
    traces = gs.load(FIRST_LAST_BF16)
    first = traces.gemms
    first.loc[0, "kernel"] = "changed"  # a copy: the next read is the check's own
    assert traces.gemms["kernel"].iloc[0] != "changed" and len(calls) == 2


def test_a_later_check_leaves_an_earlier_result_and_the_loaded_frames_as_they_were():
    """Two analyses of the same loaded traces: the second (both ranks together) gives rank 1's
    GEMMs a rank and trace of its own, and neither the first result (rank 1 alone) nor the frames
    `load` returned change."""
    traces = gs.load(RANKS)
    launches = traces.loaded[1].launches
    columns, copy = list(launches.columns), launches.copy()
    alone = gs.Analysis(api.Traces(traces.loaded[1:], traces.paths[1:])).judgement
    seen = alone.job.kernels[["trace", "rank"]].copy()
    together = gs.Analysis(traces).judgement
    assert alone.job.kernels[["trace", "rank"]].equals(seen)
    assert list(together.job.kernels["trace"].cat.categories) == [p.name for p in RANKS]
    assert list(launches.columns) == columns and launches.equals(copy)
    assert alone.job.kernels is not launches


def test_checking_twice_gives_equal_independent_results():
    traces = gs.load(FIRST_LAST_BF16)
    first, second = gs.check(traces, expect="fp8-current"), gs.check(traces, expect="fp8-current")
    assert first.gemms.equals(second.gemms) and first.to_dict() == second.to_dict()
    first.judgement.gemms.loc[:, "verdict"] = "OK"  # one result changed ...
    assert len(second.mismatches) == 81  # ... leaves the other as it was
    assert len(gs.check(traces, expect="bf16").gemms) == 153 and len(second.mismatches) == 81


def test_options_are_validated_once_and_frozen():
    options = gs.Options(expect_map={"FP8Block_*": "fp8-block"}, allow="output_layer", steps="2-4")
    assert options.expect_map == (("FP8Block_*", "fp8-block"),)
    assert options.allow == ("output_layer",) and options.steps == (2, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.expect = "bf16"  # type: ignore[misc]
    for bad in ({"expect": "fp9"}, {"expect_map": {"x": "fp9"}}, {"steps": (4, 2)}, {"steps": "a-b"},
                {"workers": 0}):
        with pytest.raises(gs.InputError):
            gs.Options(**bad)
    assert gs.Options.of(options, expect="bf16").expect_map == options.expect_map


def test_the_public_gemm_table_is_the_analysis_check():
    analysis = gs.Analysis(FIRST_LAST_BF16)
    assert list(gs.load(FIRST_LAST_BF16).gemms.columns) == list(GEMM_COLUMNS)
    assert analysis.check.gemms[list(GEMM_COLUMNS)].equals(gs.load(FIRST_LAST_BF16).gemms)


# --- capture -------------------------------------------------------------------------------------


def test_an_nsys_window_s_export_is_read_while_the_program_runs_on(nsys_bin, tmp_path):
    """A --delay/--duration window ends seconds before the program does: its export is read then,
    and the analysis takes that read rather than reading the trace again."""
    program = "import time; time.sleep(0.2); time.sleep(6)"
    captured = gs.capture([sys.executable, "-c", program], tmp_path, window=gs.CaptureWindow(delay_s=0.5, duration_s=1),
                          say=lambda _: None)
    assert len(captured.traces) == 1 and list(captured.read) == list(captured.traces)
    assert gs.Analysis(captured, redact=False).traces.loaded[0] is captured.read[captured.traces[0]]


def test_traces_offered_after_the_program_ended_are_left_to_the_check(tmp_path):
    """Several ranks write their traces as they exit: what is still waiting to be read when the
    program has ended is left to the check, which reads them side by side, not one after another.
    At most the trace being read then is kept (two offered, never two read here)."""
    from gemmscope.running.capturing import _ReadWhileRunning

    reads = _ReadWhileRunning()
    reads.offer(GPU / "request_nvfp4.sqlite.xz")
    reads.offer(GPU / "torch_gemms.sqlite.xz")
    read = reads.finished()
    assert len(read) < 2 and all(item.error is None for item in read.values())


def test_capture_is_a_python_call(nsys_bin, tmp_path):
    """A real capture (nsys on this CPU machine) of a program that launches nothing: its trace,
    how it ended, the stages said, and an analysis of it that says no GEMM ran; an NVTX range, a
    window nsys alone collects by, cannot go to torch.profiler."""
    said: list[str] = []
    captured = gs.capture([sys.executable, "-c", "print('no GPU here')"], tmp_path, say=said.append)
    assert captured.exit_code == 0 and not captured.failed and len(captured.traces) == 1
    assert captured.traces[0].parent == tmp_path
    assert captured.outcome == {"exit_code": 0, "capture_window": None, "profiler": "nsys"}
    assert said[0].startswith("gemmscope: [1/3] running the command under nsys")
    result = gs.Analysis(captured, expect="bf16").check
    assert result.state is gs.State.FAIL and result.note == "the command ran no GPU kernel: no GEMM ran at bf16"
    with pytest.raises(gs.InputError, match="nsys's capture window"):
        gs.capture(["true"], profiler="torch", window=gs.CaptureWindow(nvtx_range="step"))
    with pytest.raises(gs.InputError, match="capture window of its own"):
        gs.CaptureWindow(nvtx_range="step", steps=(1, 2))


def test_a_captures_steps_are_the_steps_its_analysis_checks(torch_cpu, tmp_path):
    """A real torch.profiler capture of steps 3-4 of a CPU training loop: Analysis(captured) cuts
    to those steps itself; an analysis told other steps keeps them."""
    program = ("import sys, torch\nsys.modules['gemmscope_torch_profiler'].used_cuda = lambda torch: True\n"
               "m = torch.nn.Linear(8, 8); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
               "for _ in range(8):\n    m(torch.randn(4, 8)).sum().backward(); o.step(); o.zero_grad()\n")
    captured = gs.capture([sys.executable, "-c", program], tmp_path, profiler="torch",
                          window=gs.CaptureWindow(steps=(3, 4)), say=lambda _: None)
    assert captured.traces
    assert gs.Analysis(captured).options.steps == (3, 4)
    assert gs.Analysis(captured, steps=(4, 4)).options.steps == (4, 4)


def test_an_analysis_of_a_command_runs_it_with_the_steps_its_options_ask(torch_cpu, tmp_path):
    """`Analysis.of_command` is verify's one call: it runs the command under torch.profiler with the
    steps Options.steps asks as the capture's window (a real CPU training loop), and its
    command_check says once that nothing ran on a GPU: FAIL, never a pass on nothing."""
    program = ("import torch\nm = torch.nn.Linear(8, 8); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
               "for _ in range(6):\n    m(torch.randn(4, 8)).sum().backward(); o.step(); o.zero_grad()\n")
    said: list[str] = []
    analysis = gs.Analysis.of_command([sys.executable, "-c", program], tmp_path, profiler="torch", steps=(2, 3),
                                      expect="bf16", say=said.append)
    assert analysis.captured is not None and analysis.captured.window.steps == (2, 3)
    assert analysis.captured.exit_code == 0
    result = analysis.command_check
    assert result is not None and result.state is gs.State.FAIL
    nothing_ran = "gemmscope: the command exited 0 and ran no GPU kernel: no GEMM ran at bf16"
    assert said.count(nothing_ran) == 1 and said[-1] == nothing_ran and analysis.notes == [nothing_ran]
    assert said[0].startswith("gemmscope: [1/3]") and "gemmscope: [3/3] checking the GEMMs" in said
