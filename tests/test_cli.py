"""The `gemmscope` command on real traces.

Output formats are checked in-process with click's CliRunner; exit codes and the one-line error
on stderr are checked by running the command in a subprocess, so the real sys.exit paths run."""

import csv
import importlib.util
import io
import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gemmscope.assembly.attribution import launches_with_ranges
from gemmscope.profilers import nsys_runner
from gemmscope.traces.read import read_trace, trace_paths

from cli_runner import REPO, assert_one_line_error, gemmscope, invoke
from fixture_paths import CORPUS, FIXTURES

EXAMPLE = REPO / "gemmscope" / "examples" / "h200-train-mixed-fp8-current.sqlite.xz"  # README's main job's trace
GEMM_FIELDS = {"kernel", "role", "precision", "start_ns", "duration_ns", "thread", "ranges", "te_module", "te_pass"}
MISMATCH_FIELDS = {"kernel", "precision", "te_module", "te_pass", "ranges", "start_ns", "duration_ns"}


# --- analyze ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def te_linear_json(gpu_xz):
    result = invoke("analyze", gpu_xz("te_linear_fp8-current"), "--expect", "fp8-current", "--format", "json",
                    "--per-launch")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_analyze_json_meta(te_linear_json):
    meta = te_linear_json["meta"]
    assert meta["nsys_version"].startswith("2025.3.")
    assert meta["schema_version"].startswith("3.20.")
    assert [(g["name"], g["sm"]) for g in meta["gpus"]] == [("NVIDIA H200", "sm90")]


def test_analyze_json_gemms(te_linear_json, gpu_expected):
    gemms = te_linear_json["gemms"]
    expected = gpu_expected("te_linear_fp8-current")["gemms"]
    assert len(gemms) == sum(expected.values())
    for g in gemms:
        assert GEMM_FIELDS | {"verdict"} <= set(g)
        assert g["role"] == "gemm"
        assert g["precision"] == "fp8"
        assert g["verdict"] == "OK"
        assert isinstance(g["start_ns"], int) and isinstance(g["duration_ns"], int) and g["duration_ns"] > 0
        assert g["te_module"] == "_Linear"
        assert g["ranges"][-1] == "nvte_cublas_gemm_v2"  # innermost last
    assert Counter(g["te_pass"] for g in gemms) == expected
    assert [g["start_ns"] for g in gemms] == sorted(g["start_ns"] for g in gemms)
    forward = [g for g in gemms if g["te_pass"] == "fprop"]
    assert [g["ranges"][0] for g in forward] == ["step 0", "step 1", "step 2"]  # outermost first
    assert {g["thread"] for g in gemms if g["te_pass"] != "fprop"} == {"pt_autograd_0"}


def test_analyze_json_summary(te_linear_json):
    summary = te_linear_json["summary"]
    assert summary["expected"] == "fp8-current"
    assert summary["gemm_launches"] == 9
    assert summary["verdicts"] == {"OK": 9}
    assert summary["mismatches"] == 0
    assert summary["expected_time_share"] == 1
    assert summary["gemm_time_ns"] == sum(g["duration_ns"] for g in te_linear_json["gemms"])
    assert {(r["module"], r["pass"], r["gemms"]) for r in summary["by_module_pass"]} == {
        ("_Linear", p, 3) for p in ("fprop", "dgrad", "wgrad")
    }


def test_json_is_grouped_unless_per_launch_is_asked_for(gpu_xz):
    """A long job has hundreds of thousands of GEMM launches: by default the JSON holds them
    grouped (summary.groups), and the same launches one by one only with --per-launch."""
    trace = gpu_xz("train_mixed")
    analyze = invoke("analyze", trace, "--expect", "fp8-current", "--format", "json")
    verify_ = invoke("verify", "--trace", trace, "--expect", "fp8-current", "--format", "json")
    grouped, checked = json.loads(analyze.stdout), json.loads(verify_.stdout)
    assert "gemms" not in grouped and not {"mismatches", "allowed"} & set(checked)
    per_launch = json.loads(invoke("analyze", trace, "--expect", "fp8-current", "--format", "json",
                                   "--per-launch").stdout)
    assert {k: v for k, v in per_launch.items() if k != "gemms"} == grouped
    launches = Counter((g["layer"], g["te_pass"], g["kernel"], g["verdict"]) for g in per_launch["gemms"])
    groups = Counter()
    for row in grouped["summary"]["groups"]:
        groups[(row["layer"], row["pass"], row["kernel"], row["verdict"])] += row["launches"]
    assert groups == launches and sum(groups.values()) == grouped["summary"]["gemm_launches"] == 81
    fallback = sum(row["launches"] for row in checked["summary"]["groups"] if row["verdict"] == "FALLBACK")
    assert fallback == checked["summary"]["mismatches"] > 0


def test_analyze_json_without_recipe_has_no_verdicts(gpu_xz):
    result = invoke("analyze", gpu_xz("te_linear_bf16"), "--format", "json", "--per-launch")
    assert result.exit_code == 4  # NOT CHECKED, as verify says it
    doc = json.loads(result.stdout)
    assert doc["summary"]["expected"] is None and doc["summary"]["state"] == "not-checked"
    assert all("verdict" not in g for g in doc["gemms"])
    assert {g["precision"] for g in doc["gemms"]} == {"bf16"}


def test_analyze_csv(gpu_xz):
    result = invoke("analyze", gpu_xz("te_linear_fp8-current"), "--expect", "fp8-current", "--format", "csv")
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 9
    assert GEMM_FIELDS | {"verdict"} <= set(rows[0])
    assert Counter(r["te_pass"] for r in rows) == {"fprop": 3, "dgrad": 3, "wgrad": 3}
    assert all(r["ranges"].endswith(" > nvte_cublas_gemm_v2") for r in rows)


def test_analyze_markdown(gpu_xz):
    result = invoke("analyze", gpu_xz("nn_linear_in_fp8_autocast"), "--expect", "fp8-current", "--format", "markdown")
    assert result.exit_code == 1
    text = result.stdout
    assert text.startswith("# gemmscope report: nn_linear_in_fp8_autocast.sqlite.xz\n\n**MISMATCHES**\n")
    assert "## GEMMs per module and pass" in text
    assert "## Mismatches (requested precision did not run)" in text
    assert "| _Linear | fprop |" in text
    # grouped by cause under what it means, then one row per layer × module × pass × kernel, with its launch count
    mismatches = text.split("## Mismatches")[1].split("\n## ")[0]
    assert "### outside-te, 9 launches" in mismatches and "these GEMMs ran outside TE" in mismatches
    mismatch_rows = [line.split(" | ") for line in mismatches.splitlines() if "(outside TE)" in line]
    assert len(mismatch_rows) == 3
    assert {row[2] for row in mismatch_rows} == {"fprop", "dgrad", "wgrad"}
    assert sum(int(row[6]) for row in mismatch_rows) == 9


def test_analyze_table(gpu_xz):
    result = invoke("analyze", gpu_xz("nn_linear_in_fp8_autocast"), "--expect", "fp8-current")
    assert result.exit_code == 1
    text = result.stdout
    assert "NVIDIA H200 (sm90)" in text
    assert text.startswith("MISMATCHES\n") and "9 mismatches" in text  # the verdict block first
    assert "GEMMs per module and pass" in text
    assert "_Linear" in text and "(outside TE)" in text


@pytest.mark.parametrize(
    "name, args, code",
    [
        ("nn_linear_in_fp8_autocast", ["--expect", "fp8-current"], 1),
        ("train_mixed", [], 1),  # recipe from the recorded autocast
        ("train_clean", [], 0),
        ("te_linear_bf16", ["--expect", "fp8-current"], 1),
        ("te_linear_fp8-block", ["--expect", "fp8-block"], 0),
        ("request_mxfp8", ["--expect", "mxfp8"], 1),  # nothing ran at all
        ("nn_linear_in_fp8_autocast", ["--expect", "fp8-current", "--allow", "nvjet_sm90_tst_*"], 0),
    ],
)
def test_analyze_exit_code(gpu_xz, name, args, code):
    result = invoke("analyze", gpu_xz(name), *args, "--format", "json")
    assert result.exit_code == code, result.output


def test_analyze_exit_code_in_a_real_process(gpu_xz):
    done = gemmscope("analyze", gpu_xz("nn_linear_in_fp8_autocast"), "--expect", "fp8-current", "--format", "json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["summary"]["mismatches"] == 9
    done = gemmscope("analyze", gpu_xz("train_clean"), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_analyze_without_trace_uses_bundled_example():
    done = gemmscope("analyze", "--format", "json")
    assert done.returncode == 1, done.stderr
    assert "bundled example" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["meta"]["gpus"][0]["name"] == "NVIDIA H200"
    assert doc["summary"]["expected"] == "fp8-current"
    assert doc["summary"]["mismatches"] > 0


# --- bad input: exit 2, one line on stderr -----------------------------------------------------

def _missing(tmp_path):
    return tmp_path / "no-such-trace.sqlite"


def _text_file(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("not a trace\n")
    return path


def _other_sqlite(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
    return path


def _truncated(tmp_path, gpu_sqlite):
    path = tmp_path / "truncated.sqlite"
    path.write_bytes(gpu_sqlite("train_mixed").read_bytes()[:100_000])
    return path


def _bad_xz(tmp_path):
    path = tmp_path / "broken.sqlite.xz"
    path.write_bytes(b"\xfd7zXZ\x00 this is not really xz")
    return path


def _directory(tmp_path):
    return tmp_path


def _bad_report(tmp_path):
    path = tmp_path / "broken.nsys-rep"
    path.write_text("not a report\n")
    return path


BAD_INPUTS = {
    "missing": _missing,
    "text-file": _text_file,
    "non-nsys-sqlite": _other_sqlite,
    "bad-xz": _bad_xz,
    "directory": _directory,
    "bad-nsys-rep": _bad_report,  # nsys cannot export it (or is missing): an error either way
}


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_trace_is_one_line_exit_2(tmp_path, kind):
    assert_one_line_error(gemmscope("analyze", BAD_INPUTS[kind](tmp_path)))


def test_truncated_export_is_one_line_exit_2(tmp_path, gpu_sqlite):
    assert_one_line_error(gemmscope("analyze", _truncated(tmp_path, gpu_sqlite)))


def test_capture_without_kernels_is_one_line_exit_2(cpu_traces):
    done = gemmscope("analyze", cpu_traces / "empty_capture.sqlite")
    assert_one_line_error(done)
    assert "no GPU kernels" in done.stderr


def test_unknown_expect_is_one_line_exit_2(gpu_xz):
    assert_one_line_error(gemmscope("analyze", gpu_xz("te_linear_bf16"), "--expect", "fp9"))


def test_verify_needs_a_command_or_trace():
    assert_one_line_error(gemmscope("verify"))


def test_verify_refuses_trace_and_command(gpu_xz):
    assert_one_line_error(gemmscope("verify", "--trace", gpu_xz("te_linear_bf16"), "--", "true"))


def test_verify_bad_trace_is_one_line_exit_2(tmp_path):
    assert_one_line_error(gemmscope("verify", "--trace", _other_sqlite(tmp_path)))


# --- verify --trace ------------------------------------------------------------------------------

def test_verify_trace_json(gpu_xz):
    result = invoke("verify", "--trace", gpu_xz("nn_linear_in_fp8_autocast"), "--expect", "fp8-current",
                    "--format", "json", "--per-launch")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert {"summary", "mismatches"} <= set(doc)
    assert "gemms" not in doc
    assert doc["summary"]["mismatches"] == len(doc["mismatches"]) == 9
    for m in doc["mismatches"]:
        assert MISMATCH_FIELDS <= set(m)
        assert m["precision"] == "bf16"
        assert m["te_module"] is None and m["cause"] == "outside-te"
        assert m["te_pass"] in ("fprop", "dgrad", "wgrad")  # from the BF16 kernel's layout letters
        assert isinstance(m["ranges"], list)
    assert doc["allowed"] == []


def test_verify_trace_json_with_allow(gpu_xz):
    result = invoke("verify", "--trace", gpu_xz("train_mixed"), "--allow", "_LayerNormMLP", "--format", "json",
                    "--per-launch")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert len(doc["allowed"]) == 18 and {m["te_module"] for m in doc["allowed"]} == {"_LayerNormMLP"}
    assert len(doc["mismatches"]) == 45 - 18
    assert "_LayerNormMLP" not in {m["te_module"] for m in doc["mismatches"]}


def test_verify_trace_nothing_ran(gpu_xz):
    result = invoke("verify", "--trace", gpu_xz("request_nvfp4"), "--expect", "nvfp4", "--format", "json",
                    "--per-launch")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["mismatches"] == []
    assert doc["summary"]["gemm_launches"] == 0
    assert "no GEMM kernel ran" in doc["summary"]["note"]


def test_verify_trace_clean(gpu_xz):
    result = invoke("verify", "--trace", gpu_xz("train_clean"), "--format", "json", "--per-launch")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["mismatches"] == []
    assert doc["summary"]["verdicts"] == {"OK": 81}


def test_verify_trace_without_a_known_recipe_says_so_and_exits_4(gpu_xz):
    result = invoke("verify", "--trace", gpu_xz("te_linear_fp8-current"))  # made without the hook
    assert result.exit_code == 4
    assert "no recipe to check against" in result.stderr


def test_verify_of_a_failed_command_exits_3(nsys_bin, tmp_path):
    """A real capture (nsys on this CPU machine) of a command that fails: never a pass, even
    when it ran nothing to check; its report says so."""
    done = gemmscope("verify", "--expect", "fp8-current", "--out", tmp_path, "--",
                     sys.executable, "-c", "import sys; sys.exit(5)", timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "the command failed (exit 5)" in done.stderr
    assert done.stdout.startswith("MISMATCHES\n")
    assert ("Ran: the command failed (exit 5); the command ran no GPU kernel: no GEMM ran at fp8-current"
            in " ".join(done.stdout.split()))


# A program that checks what it needs, finds it missing and skips, as TE's GroupedLinear
# benchmark does for MXFP8 on Hopper: it exits 0 having launched nothing.
_SKIPS = "print('MXFP8 is not available on this device: skipping')"
# A program that stops on start, as a script missing a required argument does.
_STOPS_ON_START = (
    "import argparse\n"
    "parser = argparse.ArgumentParser(prog='train.py')\n"
    "parser.add_argument('--model', required=True)\n"
    "parser.parse_args([])\n"
)


def test_verify_of_a_command_that_ran_no_kernel_says_so_and_exits_1(nsys_bin, tmp_path):
    """A real capture (--trace=cuda) of a program that ran no GPU kernel: nothing ran at the asked
    recipe (exit 1), said as such, not as a capture made without CUDA tracing (exit 2)."""
    done = gemmscope("verify", "--expect", "mxfp8", "--out", tmp_path, "--", sys.executable, "-c", _SKIPS,
                     timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "gemmscope: the command exited 0 and ran no GPU kernel: no GEMM ran at mxfp8" in done.stderr
    assert "captured with --trace=cuda" not in done.stderr and "holds no GPU kernels" not in done.stderr
    assert "skipping" in done.stderr  # the program's own output still reaches the user
    # the report still printed, saying so: what a job parsing --format json reads too
    assert done.stdout.startswith("MISMATCHES\n")
    assert "Ran: the command ran no GPU kernel: no GEMM ran at mxfp8" in " ".join(done.stdout.split())


def test_a_trace_with_cuda_calls_and_no_kernel_ran_nothing(gpu_sqlite, tmp_path):
    """A real GPU capture whose program made CUDA calls and launched no kernel (its kernel table
    taken out): exit 1, nothing ran; the CPU capture without CUDA tables stays bad input (exit 2)."""
    trace = tmp_path / "no_kernel.sqlite"
    trace.write_bytes(gpu_sqlite("te_linear_bf16").read_bytes())
    with sqlite3.connect(trace) as db:
        db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    # --no-redact: the path as given (this machine's user name in a temporary folder's name is redacted)
    for command in (("analyze", "--no-redact"), ("verify", "--no-redact", "--expect", "bf16", "--trace")):
        done = gemmscope(*command, trace)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"gemmscope: {trace} ran no GPU kernel: its CUDA calls were captured, and none launched one: no GEMM ran"
            + (" at bf16" if "verify" in command else "")]


def test_verify_of_a_failed_command_leads_with_its_exit_status_and_stderr(nsys_bin, tmp_path):
    """A script that stops on start: gemmscope's first words after the capture are the command's
    exit status and its last stderr lines, then what it ran (nothing); exit 3."""
    done = gemmscope("verify", "--expect", "fp8-current", "--out", tmp_path, "--", sys.executable, "-c",
                     _STOPS_ON_START, timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("gemmscope: ") and "[" not in line[:14]]
    assert said[0] == "gemmscope: the command failed (exit 2); its last lines on stderr:", done.stderr
    tail = done.stderr.split(said[0] + "\n", 1)[1].splitlines()
    assert tail[1] == "    train.py: error: the following arguments are required: --model"
    assert said[1] == "gemmscope: it ran no GPU kernel before it ended"
    assert "no GPU kernels" not in done.stderr
    assert "Ran: the command failed (exit 2); the command ran no GPU kernel" in " ".join(done.stdout.split())


def test_verify_prints_no_nsys_progress_bar(nsys_bin, tmp_path):
    """nsys's own text (its progress bars redrawn with carriage returns, 'Generating', 'Generated:')
    stays out of the user's stream: one gemmscope line per stage instead; --verbose shows it."""
    done = gemmscope("verify", "--expect", "bf16", "--out", tmp_path, "--", sys.executable, "-c", _SKIPS,
                     timeout=300)
    assert "\r" not in done.stderr and "[1/1] [" not in done.stderr and "Generat" not in done.stderr
    stages = [line for line in done.stderr.splitlines() if line.startswith("gemmscope: [")]
    assert [line[:len("gemmscope: [1/3]")] for line in stages] == [
        "gemmscope: [1/3]", "gemmscope: [2/3]", "gemmscope: [3/3]"]
    verbose = gemmscope("verify", "--verbose", "--expect", "bf16", "--out", tmp_path, "--", sys.executable, "-c",
                        _SKIPS, timeout=300)
    assert "[1/1] [" in verbose.stderr and "Generated:" in verbose.stderr


def assert_kept_capture(out: Path, stderr: str) -> Path:
    """verify's capture kept in `out`: the report and its export, Parquet where pyarrow reads it
    (quicker from report to verdict: benchmarks/export_formats.py), else SQLite; the export as
    the one trace of the folder, nothing half-written beside it."""
    parquet = importlib.util.find_spec("pyarrow") is not None
    export = out / ("trace.parquetdir" if parquet else "trace.sqlite")
    assert f"[2/3] exporting the trace to {'Parquet' if parquet else 'SQLite'} ({out / 'trace.nsys-rep'})" in stderr
    assert (out / "trace.nsys-rep").is_file() and (export.is_dir() if parquet else export.is_file())
    assert not (out / "trace.sqlite").exists() if parquet else True
    assert trace_paths([out]) == [export] and not list(out.glob("*.partial"))
    return export


def test_without_pyarrow_verify_exports_its_capture_to_sqlite(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as where it is not installed
    assert nsys_runner.capture_export_format() == "SQLite"


# Runs well past a 1 s window, starts a process of its own, then ends on its own with a status of
# its own.
_OUTLIVES_THE_WINDOW = ("import subprocess, sys, time; time.sleep(10); "
                        "subprocess.run([sys.executable, '-c', 'print(\"started after the window\")'], check=True); "
                        "print('ran to its own end', file=sys.stderr); sys.exit(6)")


def test_a_capture_window_bounds_the_trace_not_the_run(nsys_bin, tmp_path):
    """--duration ends collection, never the program (nsys's default would SIGTERM it, and with
    the session ended a process it starts later fails): the program runs to its own end, a process
    it starts after the window runs, and its exit status is its own; the window is said in words.
    The window's trace is exported while the program runs on, not after it."""
    done = gemmscope("verify", "--expect", "bf16", "--delay", "0.5", "--duration", "1", "--out", tmp_path,
                     "--format", "json", "--", sys.executable, "-c", _OUTLIVES_THE_WINDOW, timeout=300)
    assert "ran to its own end" in done.stderr, done.stderr[-2000:]
    assert "started after the window" in done.stderr
    exported, ended = done.stderr.index("gemmscope: [2/3] exporting"), done.stderr.index("ran to its own end")
    assert exported < ended
    assert_kept_capture(tmp_path, done.stderr)
    assert done.returncode == 3 and "the command failed (exit 6)" in done.stderr
    assert "the trace holds from 0.5 s after the start to 1.5 s; the command ran to its own end" in done.stderr
    assert "{" not in done.stderr  # no Python dict for the window



@pytest.mark.parametrize("duration", [[], ["--duration", "1"]])
def test_a_command_that_ends_before_the_window_opens_is_said_so(nsys_bin, duration):
    done = gemmscope("verify", "--expect", "bf16", "--delay", "3", *duration, "--",
                     sys.executable, "-c", "print('quick')", timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == (
        "gemmscope: error: the command ended before the capture window opened (3 s after the start): nothing was "
        "collected; give a shorter --delay")


@pytest.mark.parametrize("traces", [
    [CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz"],
    [CORPUS / "fsdp_fp8_2gpu_rank*.sqlite.xz"],  # a glob, as a shell would leave it quoted
])
def test_verify_several_rank_traces(traces):
    result = invoke("verify", *[a for t in traces for a in ("--trace", t)], "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["summary"]["ranks"] == [0, 1]
    assert [Path(t["trace"]).name for t in doc["meta"]["traces"]] == [
        "fsdp_fp8_2gpu_rank0.sqlite.xz", "fsdp_fp8_2gpu_rank1.sqlite.xz"]
    assert all(not row["differing_ranks"] for row in doc["summary"]["rank_comparison"])


def test_analyze_a_folder_of_traces_and_a_glob_that_matches_nothing(tmp_path):
    (tmp_path / "notes.txt").write_text("not a trace")
    result = gemmscope("analyze", tmp_path)
    assert result.returncode == 2 and "no trace" in result.stderr
    result = gemmscope("analyze", tmp_path / "rank*.sqlite")
    assert result.returncode == 2 and "no trace matches" in result.stderr


# --- shapes / kernel ------------------------------------------------------------------------------

# Transformer Engine's CodonFM-5B benchmark shapes (hidden 4096, FFN 16384, 24 layers), micro-batch
# 31 x 512 tokens = 15872: (op, pass, M, K, N)
CODONFM_5B = [tuple(row) for row in json.loads(
    (FIXTURES / "codonfm_5b_te_shapes.json").read_text())["shapes"]]


def test_shapes_codonfm_json():
    result = invoke("shapes", "--model", "codonfm-5b", "--micro-batch-size", 31, "--seq-len", 512, "--format", "json")
    assert result.exit_code == 0, result.output
    gemms = json.loads(result.stdout)["gemms"]
    assert len(gemms) == 12
    assert sorted((g["op"], g["pass"], g["m"], g["k"], g["n"]) for g in gemms) == sorted(CODONFM_5B)
    for g in gemms:
        assert g["flops"] == 2 * g["m"] * g["k"] * g["n"]
        assert g["count"] == 24


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_shapes_other_formats(fmt):
    result = invoke("shapes", "--model", "codonfm-5b", "--micro-batch-size", 31, "--seq-len", 512, "--format", fmt)
    assert result.exit_code == 0
    assert "15872" in result.stdout and "mlp_down" in result.stdout


def test_shapes_unknown_model_is_one_line_exit_2():
    assert_one_line_error(gemmscope("shapes", "--model", "no-such-model"))


def test_kernel_json_decodes_torch_gemms(gpu_trace):
    # one kernel per `torch.<precision>` range of torch_gemms: the range says what it ran at
    launched, ranges = launches_with_ranges(gpu_trace("torch_gemms"))
    gemms = launched[launched["role"] == "gemm"]
    want = {}
    for names, name in zip(ranges.lists(gemms.index.to_numpy()), gemms["name"]):
        want[name] = names[-1].removeprefix("torch.")
    result = invoke("kernel", *want, "--format", "json")
    assert result.exit_code == 0, result.output
    decoded = json.loads(result.stdout)["kernels"]
    assert len(decoded) == len(want)
    assert [d["precision"] for d in decoded] == list(want.values())
    assert {d["role"] for d in decoded} == {"gemm"}


def test_kernel_table():
    result = invoke("kernel", "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT")
    assert result.exit_code == 0
    assert "bf16" in result.stdout


# --- breakdown, findings, compare -------------------------------------------------------------------

def test_analyze_json_has_breakdown_and_findings():
    result = invoke("analyze", CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    (rank,) = doc["breakdown"]["per_rank"]
    assert rank["window_ns"] == rank["busy_ns"] + rank["idle_ns"]
    assert doc["findings"][0]["code"] == "gpu-idle"
    assert all({"code", "statement", "explains_ns", "figures", "concerns"} <= set(f) for f in doc["findings"])
    explains = [f["explains_ns"] for f in doc["findings"]]
    assert explains == sorted(explains, reverse=True)


def test_verify_table_ends_with_breakdown_and_findings():
    result = invoke("verify", "--trace", CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz", "--step-range", "step *")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "Where the GPU time went (steps: NVTX ranges matching step *, after the first)" in text
    findings = text.split("Findings, most time at stake first")[1]
    assert findings.index("gemms-healthy") < findings.index("gemm-share")


def test_compare_cli():
    result = invoke("compare", CORPUS / "fsdp_small_bf16_1gpu.sqlite.xz", CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz",
                    "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    t = doc["totals"]
    assert t["window_ns"]["difference"] == t["busy_ns"]["difference"] + t["idle_ns"]["difference"]
    assert t["quantize_ns"]["base"] == 0 < t["quantize_ns"]["new"]
    text = invoke("compare", CORPUS / "fsdp_small_bf16_1gpu.sqlite.xz", CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz").stdout
    assert text.startswith("NEW's GPU window is +")


def test_verify_capture_range_holds_only_the_window(cpu_traces, tmp_path):
    """A real capture on this CPU machine of the NVTX fixture program: only the first instance of
    the named range is collected (no GPU here, so no GEMM ran and verify says so)."""
    done = gemmscope("verify", "--expect", "bf16", "--capture-range", "outer", "--out", tmp_path, "--",
                     cpu_traces / "build" / "nvtx_edge_cases", timeout=300)
    assert "the trace holds the first instance of NVTX range 'outer'" in done.stderr
    assert done.returncode == 1 and "the command exited 0 and ran no GPU kernel" in done.stderr
    names = set(read_trace(assert_kept_capture(tmp_path, done.stderr)).nvtx["name"])
    assert {"outer", "inner", "innermost", "inner-sibling"} <= names  # the window and what it holds
    assert not names & {"registered:hello", "interleave:default", "worker-a:outer"}  # pushed after it


def test_capture_window_does_not_apply_to_a_trace(gpu_xz):
    result = invoke("verify", "--trace", gpu_xz("train_clean"), "--delay", "5")
    assert result.exit_code == 2 and "do not apply to --trace" in result.stderr


def test_a_window_ends_at_a_range_or_after_a_time_not_both():
    result = invoke("verify", "--capture-range", "step_3", "--duration", "5", "--", "true")
    assert result.exit_code == 2 and result.stderr == (
        "gemmscope: error: a capture window ends at its range's end (--capture-range) or after a time "
        "(--duration), not both\n")


BENCH_MAP = ["--expect-map", "BF16_*=bf16", "--expect-map", "FP8Current_*=fp8-current",
             "--expect-map", "FP8Delayed_*=fp8-delayed", "--expect-map", "FP8Block_*=fp8-block"]


def test_expect_map_checks_te_gemm_benchmark_range_by_range():
    """TE's GEMM benchmark (--profile) names a range per recipe; the trace has no other record."""
    result = invoke("analyze", CORPUS / "gemm_bench_4096.sqlite.xz", *BENCH_MAP)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "PASS" and "ranges: 4 OK" in result.stdout
    assert "Ranges checked (--expect-map)" in result.stdout


def test_expect_map_range_whose_recipe_raised_fails():
    result = invoke("verify", "--trace", CORPUS / "gemm_bench_4096_all.sqlite.xz", *BENCH_MAP,
                    "--expect-map", "MXFP8_*=mxfp8", "--format", "json", "--per-launch")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    ranges = {r["range"]: (r["gemms"], r["verdict"]) for r in doc["summary"]["ranges_checked"]}
    assert ranges["MXFP8_4096x4096x4096"] == (0, "NO GEMM")
    assert doc["mismatches"] == [] and doc["summary"]["expected_time_share"] == 1.0
    assert [f["code"] for f in doc["findings"]][0] == "unsupported"


def test_several_recorded_recipes_each_gemm_against_its_own_request():
    # run with gemmscope's hook, the benchmark records three te.autocast recipes: each TE GEMM is
    # checked against what it was handed; its torch.matmul GEMMs, which that older hook did not
    # record, have no recipe of the run to fall back on: not judged, the run is not fully checked
    # (exit 5) until the map checks them range by range
    trace = CORPUS / "gemm_bench_4096_hook.sqlite.xz"
    done = gemmscope("analyze", trace, "--format", "json")
    assert done.returncode == 5, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["mode"] == "per-gemm" and summary["mismatches"] == 0
    assert summary["state"] == "not-fully-checked"
    assert summary["unchecked_gemm_launches"] == summary["unjudged_gemm_launches"] == 111  # the BF16 range's matmuls
    assert invoke("analyze", trace, *BENCH_MAP).exit_code == 0


@pytest.mark.parametrize("item", ["FP8Block_*", "=fp8-block", "FP8Block_*=fp9"])
def test_bad_expect_map_is_one_line_exit_2(item):
    assert_one_line_error(gemmscope("analyze", CORPUS / "gemm_bench_4096.sqlite.xz", "--expect-map", item))


def test_per_launch_lists_what_mapped_ranges_fail_without_a_run_recipe():
    # --expect-map alone (no run-level recipe): the launches that fail their range's recipe are
    # listed one by one too
    result = invoke("verify", "--trace", CORPUS / "gemm_bench_4096.sqlite.xz",
                    "--expect-map", "FP8Current_*=fp8-current", "--expect-map", "nvte_cublas_gemm*=bf16",
                    "--format", "json", "--per-launch")
    doc = json.loads(result.stdout)
    assert doc["summary"]["expected"] is None
    assert len(doc["mismatches"]) == doc["summary"]["mismatches"] > 0
    assert {m["expect_range"] for m in doc["mismatches"]} == {"nvte_cublas_gemm_v2"}


def test_verify_trace_takes_more_traces_without_a_double_dash(gpu_xz):
    """`verify --trace A B` checks two traces; "not both" is said only about a `--` really given."""
    a, b = (gpu_xz("te_linear_fp8-current").parent / "corpus" / f"fsdp_fp8_2gpu_rank{r}.sqlite.xz" for r in (0, 1))
    result = invoke("verify", "--expect", "fp8-delayed", "--format", "json", "--trace", a, b)
    assert "not both" not in result.stderr
    traces = [t["trace"] for t in json.loads(result.stdout)["meta"]["traces"]]
    assert traces == [str(a), str(b)]
    assert "not both" in invoke("verify", "--trace", a, "--", "true").stderr


def test_no_record_is_blamed_on_a_missing_hook_only_without_one(gpu_xz):
    """The shipped example holds the hook's autocast records: its BF16 GEMMs inside TE are not
    blamed on a trace made without the hook; a trace made without it still is."""
    example = invoke("analyze")
    assert "no-record" in example.stdout and "made without gemmscope's hook" not in example.stdout
    assert "gemmscope's hook recorded this run but not these GEMM calls" in example.stdout
    bare = invoke("verify", "--expect", "bf16", "--trace", gpu_xz("te_linear_fp8-current"))
    assert "no-record" in bare.stdout and "a trace made without gemmscope's hook" in bare.stdout


def test_diagnose_is_a_command(gpu_xz):
    result = invoke("diagnose", gpu_xz("train_mixed"))
    assert result.exit_code == 1, result.stderr  # its verdict: mismatches, as analyze says
    assert result.stdout.startswith("MISMATCHES\n")
    assert "Where the GPU time went" in result.stdout and "Findings, most time at stake first" in result.stdout
    assert "Mismatches" not in result.stdout  # the check's tables are analyze's and verify's


@pytest.mark.parametrize("profiler", ["torch", "nsys"])
def test_verify_starts_the_program_before_importing_pandas(profiler, tmp_path):
    """The command line starts without pandas and what stands on it: `verify --` launches its program
    first and imports them while it runs (a torch.profiler --steps run measured ~1 s of its wall time
    before the program began). Python's import log and gemmscope's stage lines share stderr."""
    if profiler == "nsys" and nsys_runner.find_nsys() is None:
        pytest.skip("nsys not installed")
    done = gemmscope("verify", "--profiler", profiler, "--out", tmp_path / "capture", "--", sys.executable, "-c", "pass",
                     cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    lines = done.stderr.splitlines()
    started = next(i for i, line in enumerate(lines) if "[1/3]" in line)
    pandas = next((i for i, line in enumerate(lines) if line.startswith("import time:")
                   and line.split("|")[-1].strip() == "pandas"), len(lines))  # not at all: the program used no CUDA
    assert started < pandas, "\n".join(lines[max(0, pandas - 3):started + 1])


# The command's process, after `gemmscope analyze` has run in it on the shipped example: how many
# threads it holds (OpenBLAS's, started as numpy loads, outlive the command) and the OpenBLAS
# variable the programs it launches would get.
_THREADS_AFTER = """
import os, sys
from gemmscope import __main__ as entry
sys.argv = ["gemmscope", "analyze", sys.argv[1], "--format", "json"]
try:
    entry.run()
except SystemExit:
    pass
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads counted in /proc (Linux)")
def test_numpy_s_blas_starts_no_thread_pool_in_the_command_and_its_programs_get_the_environment_as_given():
    def after(**env: str) -> tuple[int, str]:
        environment = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        done = subprocess.run([sys.executable, "-c", _THREADS_AFTER, str(EXAMPLE)], capture_output=True, text=True,
                              env=environment | env, timeout=60, check=True)
        threads, variable = done.stdout.splitlines()[-1].split()
        return int(threads), variable

    one_blas_thread, _ = after(OPENBLAS_NUM_THREADS="1")
    assert after() == (one_blas_thread, "None")
    if os.cpu_count() == 1:
        pytest.skip("one CPU: OpenBLAS starts no pool to tell apart")
    # as the user set it: for gemmscope, and for what it runs
    assert after(OPENBLAS_NUM_THREADS="2") == (one_blas_thread + 1, "2")
