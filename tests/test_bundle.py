"""bundle: a zip for a bug report that holds no secret, and whose report and tables re-derive
from the scrubbed traces it holds.

Secrets are planted in two real captures: secrets_probe (tests/fixtures/cpu) profiled now under
nsys with random tokens in its environment and on its command line, which it prints to stdout
and stderr and names NVTX events after; and a committed GPU trace (TE's FSDP example on an H100)
into whose text columns random tokens are written the way a GPU program's output would hold them,
and whose steps are NVTX ranges named with a token each (names that reach the tables).
"""

import json
import lzma
import os
import shutil
import sqlite3
import string
import subprocess
import zipfile
from contextlib import closing
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from gemmscope.api import bundle
from gemmscope.cli import main
from gemmscope.errors import InputError
from gemmscope.judging import judgement
from gemmscope.plan.profile_run import load_run
from gemmscope.redaction.policy import Redactor
from gemmscope.report import render
from gemmscope.report.documents import results_document
from gemmscope.report.profile import profile_report
from gemmscope.report.tables import csv_text
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS, FIXTURES, GPU
from planted_secrets import Planted, random_text
from schema_check import assert_valid
from sqlite_text import all_text
from test_tables import EVERY_TRACE_REPORT, RUN_REPORT, read, records

GPU_TRACE = CORPUS / "fsdp_fp8_1gpu.sqlite.xz"
RUN_DIR = FIXTURES / "runs" / "h100-codonfm-5b"
# The tables of a checked trace of one rank (the recipe it recorded: mismatches.csv).
CHECKED_TABLES = [f"tables/{name}" for name in EVERY_TRACE_REPORT | {"mismatches.csv"}]




@pytest.fixture(scope="module")
def cpu_capture(cpu_traces, nsys_bin, tmp_path_factory):
    """secrets_probe captured now, as tests/fixtures/cpu/make_traces.sh captures its programs,
    with secrets in its environment and on its command line."""
    planted = Planted()
    environment = {
        "HF_TOKEN": planted.add("HF_TOKEN", "hf_", random_text(34)),
        "GITHUB_TOKEN": planted.add("GITHUB_TOKEN", "ghp_", random_text(36)),
        "AWS_SECRET_ACCESS_KEY": planted.add("AWS_SECRET_ACCESS_KEY", "", random_text(40)),
        "MY_API_KEY": planted.add("MY_API_KEY", "sk-", random_text(48)),
        "SLACK_BOT_TOKEN": planted.add("SLACK_BOT_TOKEN", "xoxb-", f"{random_text(12, string.digits)}-{random_text(24)}"),
        "USER": planted.add("USER", "u", random_text(11, string.ascii_lowercase)),
    }
    arguments = ["--token", planted.add("--token", "hf_", random_text(34)),
                 "--password", planted.add("--password", "", random_text(20))]
    folder = tmp_path_factory.mktemp("secrets-capture")
    profiled = subprocess.run(
        [nsys_bin, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
         "-o", str(folder / "secrets_probe"), str(cpu_traces / "build" / "secrets_probe"), *arguments],
        capture_output=True, text=True, cwd=folder, timeout=300, env={**os.environ, **environment})
    assert profiled.returncode == 0 and "secrets_probe: done" in profiled.stdout, profiled.stdout + profiled.stderr
    exported = subprocess.run(
        [nsys_bin, "export", "--type", "sqlite", "--lazy=false", "--force-overwrite=true",
         "-o", str(folder / "secrets_probe.sqlite"), str(folder / "secrets_probe.nsys-rep")],
        capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stdout[-2000:] + exported.stderr[-2000:]
    return folder / "secrets_probe.sqlite", planted


@pytest.fixture(scope="module")
def gpu_planted(tmp_path_factory):
    """The committed GPU trace with secrets written into its text columns: the program's stdout
    and stderr (as nsys stores them), an extra string, an NVTX mark, and an environment variable
    whose value has no recognisable shape (it is redacted because its name says secret)."""
    planted = Planted()
    path = tmp_path_factory.mktemp("gpu-planted") / "fsdp_fp8_1gpu.sqlite"
    path.write_bytes(lzma.decompress(GPU_TRACE.read_bytes()))
    wandb_key = planted.add("WANDB_API_KEY", "", random_text(40, string.hexdigits.lower()))
    stdout = (f"\nlogged in to the hub with {planted.add('hf stdout', 'hf_', random_text(34))}"
              f"\nwandb: using key {wandb_key}\ncheckpoint /home/{planted.add('home user', 'a', random_text(9))}/ckpt\n")
    stderr = (f"\nGITHUB_TOKEN={planted.add('github stderr', 'github_pat_', random_text(60))}"
              f" slack {planted.add('slack stderr', 'xoxp-', random_text(30))}\n")
    with closing(sqlite3.connect(path)) as conn:
        (thread,) = conn.execute("SELECT globalTid FROM NVTX_EVENTS WHERE globalTid IS NOT NULL").fetchone()
        for suffix, text in (("stdout", stdout), ("stderr", stderr)):
            conn.execute("UPDATE StringIds SET value = value || ? WHERE id IN (SELECT p.contentId FROM "
                         "ProcessStreams p JOIN StringIds f ON f.id = p.filenameId WHERE f.value LIKE ?)",
                         (text, f"%{suffix}.log"))
        key_id = planted.add("aws key id", "AKIA", random_text(16, string.ascii_uppercase + string.digits))
        openai_key = planted.add("openai nvtx", "sk-proj-", random_text(40))
        conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, ? FROM StringIds",
                     (f"aws key id {key_id}",))
        conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                     "VALUES (1, NULL, 34, ?, ?, 0)", (f"openai {openai_key}", thread))
        conn.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                     (f'WANDB_API_KEY="{wandb_key}"',))
        conn.commit()
    for label in ("hf stdout", "WANDB_API_KEY", "github stderr", "openai nvtx", "aws key id"):
        assert planted[label] in "\n".join(all_text(path)), label
    return path, planted


def _members(archive: Path, tmp_path: Path) -> dict[str, bytes]:
    """Every member's bytes, .xz members decompressed; those also extracted under tmp_path/unzipped."""
    unzipped = tmp_path / "unzipped"
    contents = {}
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(unzipped)
        for name in zipped.namelist():
            data = zipped.read(name)
            contents[name] = lzma.decompress(data) if name.endswith(".xz") else data
    return contents


def assert_nothing_planted_survives(contents: dict[str, bytes], tmp_path: Path, planted: list[str]) -> None:
    """No planted secret, nor its random part, in any member's bytes, nor in any text value of a
    bundled trace (a long value can straddle SQLite pages, where its bytes are not contiguous)."""
    for name, data in contents.items():
        found = [s for s in planted if s.encode() in data]
        assert found == [], name
    for trace in (tmp_path / "unzipped").rglob("*.sqlite.xz"):
        sqlite = tmp_path / (trace.name + ".sqlite")
        sqlite.write_bytes(lzma.decompress(trace.read_bytes()))
        text = "\n".join(all_text(sqlite))
        assert [s for s in planted if s in text] == [], trace.name


def assert_report_gives_the_tables(targets: list[str], contents: dict[str, bytes], tmp_path: Path,
                                   options: tuple[str, ...] = ()) -> None:
    """`gemmscope report TARGETS --tables DIR` writes the bundle's tables/, file for file."""
    folder = tmp_path / "report-tables"
    done = CliRunner().invoke(main, ["report", *targets, *options, "-o", str(tmp_path / "report.md"),
                                     "--tables", str(folder)])
    assert done.exit_code == 0, done.output
    bundled = {name.removeprefix("tables/"): data for name, data in contents.items() if name.startswith("tables/")}
    assert bundled and {p.name: p.read_bytes() for p in folder.iterdir()} == bundled


def test_cpu_capture_recorded_what_was_planted(cpu_capture):
    """Every secret is in the raw export: in the environment nsys recorded, the command line,
    the program's output or its NVTX text."""
    path, planted = cpu_capture
    text = "\n".join(all_text(path))
    assert [label for label, (value, _) in planted.values.items() if value not in text] == []
    with closing(sqlite3.connect(path)) as conn:
        nvtx = [t for (t,) in conn.execute("SELECT text FROM NVTX_EVENTS WHERE text IS NOT NULL")]
    assert f"step with key {planted['MY_API_KEY']}" in nvtx and f"aws {planted['AWS_SECRET_ACCESS_KEY']}" in nvtx


def test_bundle_of_a_cpu_capture_holds_no_planted_secret(cpu_capture, tmp_path):
    """A trace with no GPU kernel cannot be analyzed: the bundle says so in report.md (no
    analysis.json), and still holds the scrubbed trace and the environment, the command line
    redacted."""
    path, planted = cpu_capture
    result = CliRunner().invoke(main, ["bundle", str(path), "-o", str(tmp_path / "issue.zip")])
    assert result.exit_code == 0, result.output
    assert "could not be analyzed" in result.stderr and "holds no GPU kernels" in result.stderr
    contents = _members(tmp_path / "issue.zip", tmp_path)
    assert sorted(contents) == ["environment.json", "report.md", "traces/secrets_probe.sqlite.xz"]
    assert_nothing_planted_survives(contents, tmp_path, planted.strings())
    assert "traces/secrets_probe.sqlite.xz holds no GPU kernels" in contents["report.md"].decode()
    environment = json.loads(contents["environment.json"])
    assert_valid(environment, "environment")
    (trace,) = environment["traces"]
    assert trace["trace"] == "traces/secrets_probe.sqlite.xz"
    assert trace["gpus"] == [] and trace["driver"] is None and trace["nsys"].startswith("2023.4.")
    assert [trace["torch"], trace["transformer_engine"], trace["cublas"], environment["recipes"]] == [None] * 4
    (command_line,) = trace["command_lines"]
    assert command_line.endswith("--token [redacted] --password [redacted]")


def test_bundle_of_a_gpu_trace_holds_no_planted_secret_and_reanalyzes(gpu_planted, tmp_path, monkeypatch):
    path, planted = gpu_planted
    made = bundle([path], tmp_path / "issue.zip")
    assert made.analysis_error is None
    contents = _members(made.path, tmp_path)
    assert sorted(contents) == sorted(["analysis.json", "environment.json", "report.html", "report.md", *CHECKED_TABLES,
                                       "traces/fsdp_fp8_1gpu.sqlite.xz"])
    assert_nothing_planted_survives(contents, tmp_path, planted.strings())

    # offline, the bundled trace gives the committed trace's verdicts
    bundled = judgement.judge([read_trace(tmp_path / "unzipped" / "traces" / "fsdp_fp8_1gpu.sqlite.xz")])
    original = judgement.judge([read_trace(GPU_TRACE)])
    assert len(bundled.gemms) == len(original.gemms) == 72
    assert bundled.gemms["verdict"].value_counts().to_dict() == original.gemms["verdict"].value_counts().to_dict()
    # and `gemmscope analyze` of the unzipped bundle gives its report and analysis.json again
    monkeypatch.chdir(tmp_path / "unzipped")
    for options, member in ((["--format", "json", "--per-launch"], "analysis.json"),
                            (["--format", "markdown"], "report.md")):
        analyzed = CliRunner().invoke(main, ["analyze", "traces/fsdp_fp8_1gpu.sqlite.xz", *options])
        assert analyzed.exit_code == 0, analyzed.output
        assert analyzed.stdout == contents[member].decode()
    # and `gemmscope report --tables` of it gives its tables
    assert_report_gives_the_tables(["traces/fsdp_fp8_1gpu.sqlite.xz"], contents, tmp_path)
    analysis = json.loads(contents["analysis.json"])
    assert analysis["summary"]["verdicts"] == {"OK": 72} and analysis["findings"]

    environment = json.loads(contents["environment.json"])
    assert_valid(environment, "environment")
    assert environment["recipes"] == ["fp8-delayed"]
    (trace,) = environment["traces"]
    assert [g["name"] for g in trace["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert (trace["driver"], trace["cuda_driver"], trace["nsys"]) == ("580.159.04", "13.0", "2025.3.2.0")
    assert trace["command_lines"] == [" ".join(["[redacted]"] * 11)]  # the committed trace was scrubbed
    # captured before gemmscope's hook marked software versions: null, not guessed
    assert (trace["torch"], trace["cuda"], trace["transformer_engine"], trace["cublas"]) == (None,) * 4


def test_bundle_says_the_software_versions_the_hook_recorded(tmp_path):
    """TE's GEMM benchmark run as gemmscope verify runs it: the hook marked the versions the GPU
    machine's set-up printed (torch 2.11.0+cu130, TE 2.20.2), which no nsys table records."""
    made = bundle([CORPUS / "gemm_bench_4096_hook.sqlite.xz"], tmp_path / "issue.zip",
                  expect_map=(("BF16_*", "bf16"), ("FP8Current_*", "fp8-current")))
    contents = _members(made.path, tmp_path)
    environment = json.loads(contents["environment.json"])
    assert_valid(environment, "environment")
    (trace,) = environment["traces"]
    assert (trace["torch"], trace["cuda"], trace["transformer_engine"], trace["cublas"]) == (
        "2.11.0+cu130", "13.0", "2.20.2", "13.1.0")
    assert "software: torch 2.11.0+cu130, CUDA 13.0, TE 2.20.2, cuBLASLt 13.1.0" in contents["report.md"].decode()


def test_what_one_trace_recorded_is_redacted_in_all(cpu_capture, gpu_planted, tmp_path):
    """Ranks bundled together: the CPU capture's --password (no shape: known only from its
    command line) is redacted where the GPU trace's program printed it too. The capture without
    GPU kernels is reported as unreadable, the GPU trace checked."""
    (cpu, cpu_planted), (gpu_source, gpu_planted_values) = cpu_capture, gpu_planted
    gpu = tmp_path / "fsdp_fp8_1gpu.sqlite"
    shutil.copyfile(gpu_source, gpu)
    with closing(sqlite3.connect(gpu)) as conn:
        conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, ? FROM StringIds",
                     (f"connecting with {cpu_planted['--password']}",))
        conn.commit()
    made = bundle([cpu, gpu], tmp_path / "issue.zip")
    assert made.analysis_error is None
    contents = _members(made.path, tmp_path)
    (unreadable,) = json.loads(contents["analysis.json"])["summary"]["unreadable_traces"]
    assert unreadable["trace"] == "secrets_probe.sqlite.xz" and "holds no GPU kernels" in unreadable["error"]
    assert sorted(contents) == sorted(["analysis.json", "environment.json", "report.html", "report.md", *CHECKED_TABLES,
                                       "traces/fsdp_fp8_1gpu.sqlite.xz", "traces/secrets_probe.sqlite.xz"])
    assert records(tmp_path / "unzipped" / "tables" / "unreadable-traces.csv") == [unreadable]
    assert_nothing_planted_survives(contents, tmp_path, cpu_planted.strings() + gpu_planted_values.strings())


def test_tables_of_a_bundle_hold_no_planted_secret_and_reanalyze(gpu_planted, tmp_path, monkeypatch):
    """Steps of the planted GPU trace as NVTX ranges named with a token each, cut by --step-range
    and mapped by --expect-map: their names reach breakdown-per-step.csv and ranges-checked.csv,
    redacted; no planted secret is left in any member; unzipped, `gemmscope report --tables` with
    the same options gives the same tables."""
    source, planted = gpu_planted
    steps = Planted()
    path = tmp_path / "fsdp_fp8_1gpu.sqlite"
    shutil.copyfile(source, path)
    with closing(sqlite3.connect(path)) as conn:
        (thread,) = conn.execute("SELECT globalTid FROM NVTX_EVENTS WHERE globalTid IS NOT NULL").fetchone()
        first, last = conn.execute("SELECT min(r.start), max(r.end) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                                   "JOIN CUPTI_ACTIVITY_KIND_KERNEL k USING (correlationId)").fetchone()
        length = (last - first) // 3 + 1
        for step in range(3):
            name = f"step {step} " + steps.add(f"step {step}", "sk-proj-", random_text(40))
            start = first + step * length
            conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                         "VALUES (?, ?, 59, ?, ?, 0)", (start, start + length, name, thread))
        conn.commit()
    options = ("--step-range", "step *", "--expect-map", "step *=fp8-delayed")
    made = bundle([path], tmp_path / "issue.zip", step_range="step *", expect_map=[("step *", "fp8-delayed")])
    assert made.analysis_error is None
    contents = _members(made.path, tmp_path)
    assert sorted(contents) == sorted(["analysis.json", "environment.json", "report.html", "report.md", *CHECKED_TABLES,
                                       "tables/ranges-checked.csv", "traces/fsdp_fp8_1gpu.sqlite.xz"])
    assert_nothing_planted_survives(contents, tmp_path, planted.strings() + steps.strings())
    tables = tmp_path / "unzipped" / "tables"
    assert list(read(tables / "breakdown-per-step.csv")["name"]) == ["step 1 [redacted]", "step 2 [redacted]"]
    ranges = read(tables / "ranges-checked.csv")
    assert list(ranges["range"]) == ["step 0 [redacted]", "step 1 [redacted]", "step 2 [redacted]"]
    mapped = [g for g in json.loads(contents["analysis.json"])["gemms"] if g["expect_range"] is not None]
    assert ranges["gemms"].sum() == len(mapped) > 0 and {g["verdict"] for g in mapped} == {"OK"}
    monkeypatch.chdir(tmp_path / "unzipped")
    assert_report_gives_the_tables(["traces/fsdp_fp8_1gpu.sqlite.xz"], contents, tmp_path, options)


def test_a_table_is_redacted_before_csv_quotes_it():
    """CSV writes a value's " as "": a secret holding one would slip past a pass over the CSV
    text alone, so the cells (and column names) are redacted first."""
    random_part = random_text(20)
    secret = 'pa"ss' + random_part
    redactor = Redactor(secret_values=[secret])
    table = pd.DataFrame({"range": [f"login {secret}", "step 1"], f"by {secret}": [1, 2]})
    assert secret.replace('"', '""') in redactor(csv_text(table))
    text = redactor(csv_text(redactor.frame(table)))
    assert random_part not in text
    assert text == "range,by [redacted]\nlogin [redacted],1\nstep 1,2\n"


def test_scrub_alone_redacts_planted_secrets(cpu_capture, gpu_planted, tmp_path):
    for source, planted in (cpu_capture, gpu_planted):
        out = CliRunner().invoke(main, ["scrub", str(source), "-o", str(tmp_path / source.name)])
        assert out.exit_code == 0, out.output
        text = "\n".join(all_text(tmp_path / source.name))
        assert [s for s in planted.strings() if s in text] == []


def test_bundle_of_a_profile_run_directory(tmp_path):
    """The run's report.md and results.json re-derived from its scrubbed trace, which the zip
    holds as trace.sqlite.xz: unzipped, it is a run directory."""
    made = bundle([RUN_DIR], tmp_path / "run.zip")
    assert made.analysis_error is None
    contents = _members(made.path, tmp_path)
    assert sorted(contents) == sorted(["environment.json", "report.html", "report.md", "results.json", "trace.sqlite.xz",
                                       *(f"tables/{name}" for name in RUN_REPORT)])
    wall_s = json.loads((RUN_DIR / "results.json").read_text())["wall_s"]
    original = load_run(RUN_DIR)
    assert contents["report.md"].decode() == render(profile_report(original, RUN_DIR, wall_s), "markdown")
    assert json.loads(contents["results.json"]) == json.loads(json.dumps(results_document(original, wall_s)))
    assert load_run(tmp_path / "unzipped").gemms.equals(original.gemms)
    assert_report_gives_the_tables([str(tmp_path / "unzipped")], contents, tmp_path)
    assert_report_gives_the_tables([str(RUN_DIR)], contents, tmp_path)  # the run's own, from its own trace
    environment = json.loads(contents["environment.json"])
    assert_valid(environment, "environment")
    assert environment["recipes"] == list(dict.fromkeys(original.gemms["precision"]))
    assert [t["trace"] for t in environment["traces"]] == ["trace.sqlite.xz"]


def test_traces_sharing_a_name_get_numbered(tmp_path):
    for rank in ("rank0", "rank1"):  # one trace per rank, each in its rank's folder
        (tmp_path / rank).mkdir()
        shutil.copyfile(GPU_TRACE.parent / f"fsdp_fp8_2gpu_{rank}.sqlite.xz", tmp_path / rank / "trace.sqlite.xz")
    made = bundle([tmp_path / "rank0", tmp_path / "rank1"], tmp_path / "issue.zip")
    with zipfile.ZipFile(made.path) as zipped:
        names = zipped.namelist()
        analysis = json.loads(zipped.read("analysis.json"))
    assert [n for n in names if n.startswith("traces/")] == ["traces/trace.sqlite.xz", "traces/trace-2.sqlite.xz"]
    assert [t["trace"] for t in analysis["meta"]["traces"]] == ["traces/trace.sqlite.xz", "traces/trace-2.sqlite.xz"]


@pytest.mark.parametrize("arguments, message", [
    (["missing.sqlite"], "no such file"),
    (["notes.sqlite"], "not an SQLite export"),
    ([str(RUN_DIR), str(GPU_TRACE)], "bundle it alone"),
    ([str(RUN_DIR), "--expect", "bf16"], "are for traces"),
    ([str(GPU_TRACE), "-o", "."], "is a folder"),
    ([str(GPU_TRACE), "-o", "missing/issue.zip"], "no such folder"),
    ([str(GPU_TRACE), "-o", str(GPU_TRACE)], "writes a new file"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(arguments, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.sqlite").write_text("not a trace\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    output = [] if "-o" in arguments else ["-o", "issue.zip"]
    result = CliRunner().invoke(main, ["bundle", *arguments, *output])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("gemmscope: error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_nothing_to_bundle(tmp_path):
    with pytest.raises(InputError, match="nothing to bundle"):
        bundle([], tmp_path / "issue.zip")
    assert CliRunner().invoke(main, ["bundle", "-o", str(tmp_path / "issue.zip")]).exit_code == 2
    assert list(tmp_path.iterdir()) == []


def test_a_trace_named_as_long_as_the_system_allows_is_bundled_under_its_name(tmp_path):
    """A 250-character file name every other command reads: bundle scrubs it under a short name of
    its own and zips it under the trace's name (the scratch folder's path and a temporary suffix
    around the name made it too long, and the error named the internal path)."""
    name = "a" * 240 + ".sqlite.xz"
    shutil.copy(GPU / "train_clean.sqlite.xz", tmp_path / name)
    done = CliRunner().invoke(main, ["bundle", str(tmp_path / name), "-o", str(tmp_path / "issue.zip")])
    assert done.exit_code == 0, done.output
    with zipfile.ZipFile(tmp_path / "issue.zip") as zipped:
        assert f"traces/{name}" in zipped.namelist()
        assert json.loads(zipped.read("analysis.json"))["summary"]["gemm_launches"] > 0
