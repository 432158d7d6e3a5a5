"""scrub: a shareable copy of a real export, without the machine's environment, and with
everything gemmscope reads left as it was."""

import hashlib
import lzma
import os
import re
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import gemmscope
from gemmscope.cli import main
from gemmscope.common import scratch
from gemmscope.common.interruptible import XZ_PRESET
from gemmscope.errors import InputError
from gemmscope.redaction.policy import REDACTED, Redactor
from gemmscope.redaction.scrub import command_lines, recorded_redactor, scrub
from gemmscope.traces.read import read_trace

from fixture_paths import GPU, KINETO
from sqlite_text import all_text

# PYTEST_CURRENT_TEST changes from test to test; the rest is the machine's environment
_NOT_MACHINE = {"PYTEST_CURRENT_TEST"}


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def query(path, sql):
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute(sql).fetchall()


def assert_same_analysis(original, scrubbed):
    before, after = read_trace(original), read_trace(scrubbed)
    for frame in ("kernels", "nvtx", "api_calls", "memops", "gpus", "memory"):
        pd.testing.assert_frame_equal(getattr(before, frame), getattr(after, frame), obj=frame)
    # the same capture, read alike; but the command it launched, which scrub redacts
    assert after.meta == before.meta | {"capture": before.meta["capture"] | {"command": None}}


def assert_no_environment_left(path):
    assert query(path, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'") in (
        [], [("[redacted]",)])
    assert query(path, "SELECT COUNT(*) FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'") == [(0,)]
    # the command line: the program's path and its arguments
    assert {value for (value,) in query(
        path, "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:COMMAND' OR name LIKE 'PROCESS_%:ARGUMENT_%'")
    } == {REDACTED}


@pytest.fixture
def cpu_export(cpu_traces, tmp_path):
    """A private copy of the nsys 2023.4 export of nvtx_edge_cases, made on this machine."""
    path = tmp_path / "in" / "nvtx_edge_cases.sqlite"
    path.parent.mkdir()
    shutil.copyfile(cpu_traces / "nvtx_edge_cases.sqlite", path)
    return path


@pytest.fixture(scope="module")
def fresh_cpu_export(nsys_bin, tmp_path_factory):
    """An nsys 2023.4 export captured now, from this process's environment: `true` profiled with
    OS-runtime tracing, exported as make_traces.sh does."""
    folder = tmp_path_factory.mktemp("fresh-capture")
    program = shutil.which("true") or "/bin/true"
    for command in (
        [nsys_bin, "profile", "--trace=osrt", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
         "-o", str(folder / "true"), program],
        [nsys_bin, "export", "--type", "sqlite", "--lazy=false", "--force-overwrite=true",
         "-o", str(folder / "true.sqlite"), str(folder / "true.nsys-rep")],
    ):
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return folder / "true.sqlite"


def _machine_values() -> dict[str, str]:
    """This process's environment, and the folder the tests run in: the cached nvtx_edge_cases
    export lies under it, so its program's path (recorded in call chains) starts with it."""
    values = {k: v for k, v in os.environ.items() if len(v) > 12 and k not in _NOT_MACHINE}
    return values | {"working directory": os.getcwd()}


@pytest.mark.parametrize("which", ["fresh capture", "nvtx_edge_cases"])
def test_cpu_export_loses_this_machines_environment(which, fresh_cpu_export, cpu_export, tmp_path):
    source = fresh_cpu_export if which == "fresh capture" else cpu_export
    before = "\n".join(all_text(source))
    recorded = {k: v for k, v in _machine_values().items() if v in before}
    # nsys recorded the environment (a cached nvtx_edge_cases export may come from another shell,
    # so PATH is required only of the capture made now)
    if which == "fresh capture":
        assert "PATH" in recorded
    assert len(recorded) >= 3, sorted(recorded)
    assert query(source, "SELECT COUNT(*) FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'")[0][0] > 0
    assert "PATH=" in query(source, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")[0][0]

    digest = sha256(source)
    out = scrub(source, tmp_path / "scrubbed.sqlite")
    assert out == tmp_path / "scrubbed.sqlite"
    assert sha256(source) == digest

    after = "\n".join(all_text(out))
    assert sorted(k for k, v in recorded.items() if v in after) == []
    assert query(out, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'") == [("[redacted]",)]
    assert_no_environment_left(out)
    assert not list(tmp_path.glob("*.partial"))


def test_recorded_paths_are_redacted_where_they_appear_and_nowhere_else(cpu_export, tmp_path):
    """The program ran from its build folder (the recorded working directory): its path in the
    call chains loses that folder; libc, under no recorded path, keeps its own."""
    modules = "SELECT DISTINCT s.value FROM OSRT_CALLCHAINS c JOIN StringIds s ON s.id = c.module"
    before = {value for (value,) in query(cpu_export, modules)}
    (working_dir,) = query(cpu_export, "SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:WORKING_DIR'")[0]
    assert f"{working_dir}/nvtx_edge_cases" in before
    after = {value for (value,) in query(scrub(cpu_export, tmp_path / "scrubbed.sqlite"), modules)}
    assert after == {f"{REDACTED}/nvtx_edge_cases"} | (before - {f"{working_dir}/nvtx_edge_cases"})
    assert any(value.endswith("/libc.so.6") and value.startswith("/") for value in after)


def test_a_text_column_with_nothing_to_redact_does_not_end_its_tables_pass(cpu_export, tmp_path):
    """Every text column of a table is redacted: META_DATA_CAPTURE's key column, which holds
    nothing to redact, and then its value column beside it (a row nsys's removal list does not
    name, with an e-mail address in its value)."""
    with closing(sqlite3.connect(cpu_export)) as db:
        assert [row[1] for row in db.execute("PRAGMA table_info(META_DATA_CAPTURE)")] == ["name", "value"]
        db.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('NOTE', 'mail ops@example.com')")
        db.commit()
    out = scrub(cpu_export, tmp_path / "scrubbed.sqlite")
    assert query(out, "SELECT value FROM META_DATA_CAPTURE WHERE name = 'NOTE'") == [(f"mail {REDACTED}",)]


@pytest.mark.parametrize("which", ["fresh capture", "nvtx_edge_cases"])
def test_each_record_of_nsys_removed_is_counted_once(which, fresh_cpu_export, cpu_export, tmp_path):
    """The redactor's `nsys-record` count is what the scrubbed copy shows gone: the rows deleted
    (the environment variables) and the values now wholly replaced (command line, folders, host
    and user names, the environment nsys kept among its strings), counted from the two files."""
    source = fresh_cpu_export if which == "fresh capture" else cpu_export
    redactor = recorded_redactor([source])
    out = scrub(source, tmp_path / "scrubbed.sqlite", redactor)
    meta_tables = ("META_DATA_CAPTURE", "META_DATA_EXPORT", "TARGET_INFO_SYSTEM_ENV")
    deleted = sum(query(source, f"SELECT COUNT(*) FROM {t}")[0][0] - query(out, f"SELECT COUNT(*) FROM {t}")[0][0]
                  for t in meta_tables)
    replaced = sum(query(path, f"SELECT COUNT(*) FROM {t} WHERE value = '{REDACTED}'")[0][0] * sign
                   for t in meta_tables for path, sign in ((out, 1), (source, -1)))
    # among the strings, the environments (NAME=value...); a string that is a recorded folder's
    # path is wholly replaced too, counted as that
    environments = {i for i, value in query(source, "SELECT id, value FROM StringIds")
                    if value and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", value)}
    strings_replaced = {i for (i,) in query(out, f"SELECT id FROM StringIds WHERE value = '{REDACTED}'")}
    assert deleted > 0 and replaced > 0 and environments and environments <= strings_replaced
    assert redactor.counts["nsys-record"] == deleted + replaced + len(environments)


def test_cpu_export_keeps_what_gemmscope_reads(cpu_export, tmp_path):
    out = scrub(cpu_export, tmp_path / "scrubbed.sqlite")
    assert_same_analysis(cpu_export, out)


@pytest.mark.parametrize("name", ["train_mixed", "te_layernorm_fp8-current", "torch_gemms"])
def test_gpu_export(gpu_sqlite, tmp_path, name):
    source = tmp_path / f"{name}.sqlite"
    shutil.copyfile(gpu_sqlite(name), source)
    digest = sha256(source)
    out = scrub(source, tmp_path / "out.sqlite")
    assert sha256(source) == digest
    assert_no_environment_left(out)
    assert_same_analysis(source, out)


def test_xz_input(gpu_xz, tmp_path):
    out = scrub(gpu_xz("te_linear_bf16"), tmp_path / "out.sqlite")
    assert_no_environment_left(out)
    assert_same_analysis(gpu_xz("te_linear_bf16"), out)


def test_output_must_differ_from_input(cpu_export):
    digest = sha256(cpu_export)
    with pytest.raises(InputError, match="^scrub writes a new file: give an output path other than the input$"):
        scrub(cpu_export, cpu_export)
    with pytest.raises(InputError):  # the same file spelled another way
        scrub(cpu_export, cpu_export.parent / ".." / "in" / cpu_export.name)
    assert sha256(cpu_export) == digest
    assert sorted(p.name for p in cpu_export.parent.iterdir()) == [cpu_export.name]


def test_bad_input_is_input_error(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("not a trace\n")
    with pytest.raises(InputError):
        scrub(text, tmp_path / "out.sqlite")
    with pytest.raises(InputError):
        scrub(tmp_path / "missing.sqlite", tmp_path / "out.sqlite")
    assert not (tmp_path / "out.sqlite").exists()


def test_cli_scrub(cpu_export, tmp_path):
    out = tmp_path / "shared.sqlite"
    result = CliRunner().invoke(main, ["scrub", str(cpu_export), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stderr and str(out) not in result.stdout
    assert_no_environment_left(out)


def test_cli_scrub_onto_itself_is_exit_2(cpu_export):
    result = CliRunner().invoke(main, ["scrub", str(cpu_export), "-o", str(cpu_export)])
    assert result.exit_code == 2
    assert result.stderr.startswith("gemmscope: error: ")
    assert len(result.stderr.splitlines()) == 1


def test_scrub_refuses_to_overwrite_a_compressed_input_and_missing_folders(tmp_path):
    source = tmp_path / "t.sqlite.xz"
    source.write_bytes((GPU / "te_linear_bf16.sqlite.xz").read_bytes())
    before = source.read_bytes()
    with pytest.raises(InputError):
        scrub(source, source)
    with pytest.raises(InputError, match="no such folder"):
        scrub(source, tmp_path / "missing" / "out.sqlite")
    with pytest.raises(InputError, match="is a folder"):
        scrub(source, tmp_path)
    assert source.read_bytes() == before
    work_folders = set(scratch.folder().iterdir())  # the scratch folder's entries so far
    out = scrub(source, tmp_path / "out.sqlite.xz")  # .xz output is compressed
    assert read_trace(out).kernels.equals(read_trace(source).kernels)
    # at xz's quickest preset (interruptible.XZ_PRESET), as one stream of chunks compressed in
    # turn writes it (xz is deterministic: the same bytes)
    assert lzma.compress(lzma.decompress(out.read_bytes()), preset=XZ_PRESET) == out.read_bytes()
    # the unredacted work copy (a folder of its own) is gone once scrub returns, not only when
    # the process exits (a decompressed input may stay, a file, for the process to read again)
    assert not [p for p in set(scratch.folder().iterdir()) - work_folders if p.is_dir()]


def test_damaged_export_is_one_clear_error(tmp_path):
    damaged = tmp_path / "damaged.sqlite"
    data = bytearray(read_trace(GPU / "train_mixed.sqlite.xz").sqlite.read_bytes())
    data[524288:528384] = b"\x07" * 4096
    damaged.write_bytes(bytes(data))
    with pytest.raises(InputError, match="damaged or truncated"):
        read_trace(damaged)


COMMITTED_TRACES = sorted(
    [*GPU.glob("*.sqlite.xz"), *(GPU / "corpus").glob("*.sqlite.xz"),
     *(GPU.parent / "runs").glob("*/trace.sqlite.xz"),
     *(Path(gemmscope.__file__).parent / "examples").rglob("*.sqlite.xz")])


@pytest.mark.parametrize("path", COMMITTED_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_trace_is_scrubbed(path):
    assert_no_environment_left(read_trace(path).sqlite)


# --- the Redactor: secrets, private paths and names, wherever they appear ------------------------

HF = "hf_" + "Ab1" * 12


@pytest.mark.parametrize("text, redacted", [
    (f"loaded {HF}.", "loaded [redacted]."),
    ("ghp_" + "x1" * 18, REDACTED),
    ("gho_" + "x1" * 18, REDACTED),
    ("github_pat_11AAAAAAA0" + "y_2" * 10, REDACTED),
    ("key=sk-" + "z3" * 12 + " next", "key=[redacted] next"),
    ("sk-proj-" + "Q9" * 16, REDACTED),
    ("xoxb-123456789012-abcdefABCDEF", REDACTED),
    ("xoxp-1-2-3-abcdefabcdef", REDACTED),
    ("id AKIAIOSFODNN7EXAMPLE;", "id [redacted];"),
    ('HF_TOKEN=abc123 AWS_REGION="us-east-1" DB_PASSWORD=x',
     "HF_TOKEN=[redacted] AWS_REGION=[redacted] DB_PASSWORD=[redacted]"),
    ("train.py --token abc --api-key=def --password 'two words' --steps 3",
     "train.py --token [redacted] --api-key=[redacted] --password [redacted] --steps 3"),
    ("/home/alice/.venv/lib/torch/x.py:12: UserWarning", "[redacted]/.venv/lib/torch/x.py:12: UserWarning"),
    ("/Users/bob/run and /root/.cache", "[redacted]/run and [redacted]/.cache"),
])
def test_secret_shapes_assignments_and_homes_are_redacted(text, redacted):
    assert Redactor()(text) == redacted


@pytest.mark.parametrize("text", [
    "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x"
    "_cublas",
    "nvjet_sm90_qqtst_192x192_128x4_2x1_v_bz_coopB_bias_TNN",
    "gemmscope.te_gemm|entry=general_gemm|module=Linear|name=attn.key_proj|layer=0.attn.key|pass=fprop"
    "|a=fp8-delayed|b=fp8-delayed",
    "transformer_engine._LayerNormMLP.backward.fc1.wgrad_gemm",
    "task-0123456789abcdefghijklmn",  # sk- inside a word
    "AKIAIOSFODNN7EXAMPLEX",  # one character too many for an AWS key id
    "/rootfs/usr/lib and /opt/myhome/x",
    "TOKENIZERS_PARALLELISM is false",
])
def test_what_is_no_secret_is_left_alone(text):
    assert Redactor(secret_values=["false"], names=["alice"])(text) == text


def test_recorded_values_paths_and_names():
    redact = Redactor(secret_values=["0123456789abcdef"], paths=["/data/alice-proj"], names=["alice", "gpu-node-7"])
    assert redact("key 0123456789abcdef, again0123456789abcdef") == "key [redacted], again[redacted]"
    assert redact("/data/alice-proj/ckpt and /data/alice-project") == "[redacted]/ckpt and /data/[redacted]-project"
    assert redact("alice@gpu-node-7: malice gpu-node-71") == "[redacted]: malice gpu-node-71"  # user@host whole
    assert redact.document({"alice": ["x 0123456789abcdef", 3, None]}) == {REDACTED: ["x [redacted]", 3, None]}


def _export_with_records(path: Path) -> Path:
    """An export holding what nsys records of a run: environment (a user name, secrets, a working
    folder), host name, command line, and an exec's environment block among the strings."""
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript("""
            CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT);
            CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
            CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
            INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES
                ('DeviceEnvironment', 'USER=carol;WANDB_API_KEY=deadbeefcafe01;TOKENIZERS_PARALLELISM=false;PWD=/data/proj-x'),
                ('Hostname', 'dgx-42');
            INSERT INTO META_DATA_CAPTURE VALUES
                ('PROCESS_0:ENVIRONMENT_VARIABLE', 'DB_PASSWORD="pw-hunter22"'),
                ('PROCESS_0:COMMAND', 'python'), ('PROCESS_0:ARGUMENT_0', 'train.py'),
                ('PROCESS_0:ARGUMENT_1', '--secret'), ('PROCESS_0:ARGUMENT_2', 'opensesame'),
                ('PROCESS_0:ARGUMENT_3', '--auth-token=letmein99');
            INSERT INTO StringIds VALUES (1, 'GH_TOKEN=fromstrings1' || char(0) || 'HOME=/home/carol');
        """)
    return path


def test_redactor_of_an_export_learns_its_secret_variables_names_and_command_line(tmp_path):
    path = _export_with_records(tmp_path / "made.sqlite")
    with closing(sqlite3.connect(path)) as conn:
        assert command_lines(conn) == [["python", "train.py", "--secret", "opensesame", "--auth-token=letmein99"]]
    redact = recorded_redactor([path])
    assert redact("carol on dgx-42: deadbeefcafe01 pw-hunter22 opensesame letmein99 fromstrings1 false") == (
        "[redacted] on [redacted]: [redacted] [redacted] [redacted] [redacted] [redacted] false")
    # every path of every removed value, not only the last value's
    assert redact("/data/proj-x/ckpt.pt") == "[redacted]/ckpt.pt"
    # the command and its script were recorded too, but are neither secrets nor names: they stay
    assert redact("python train.py") == "python train.py"


def test_command_lines_of_several_processes_in_process_and_argument_order(tmp_path):
    """Each process's argv in the order of its process number and then its argument numbers (as
    numbers: 10 after 2), COMMAND first; an empty or missing argument is an empty string."""
    path = _export_with_records(tmp_path / "made.sqlite")
    with closing(sqlite3.connect(path)) as conn:
        conn.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [
            ("PROCESS_10:ARGUMENT_0", "worker.py"), ("PROCESS_10:COMMAND", "python3"),
            ("PROCESS_2:COMMAND", "torchrun"), ("PROCESS_2:WORKING_DIR", "/data/proj-x"),
            *[(f"PROCESS_2:ARGUMENT_{i}", f"a{i}") for i in (10, 2, 1, 0)],
            ("PROCESS_2:ARGUMENT_3", ""), ("PROCESS_2:ARGUMENT_4", None)])
        assert command_lines(conn) == [
            ["python", "train.py", "--secret", "opensesame", "--auth-token=letmein99"],
            ["torchrun", "a0", "a1", "a2", "", "", "a10"],
            ["python3", "worker.py"]]


def test_redactor_of_torch_traces_and_an_export_learns_from_each(tmp_path):
    # a torch.profiler trace records only its host name ("vm" here): it adds to what the export
    # before it recorded, and the export after a torch trace is still read; --keep still applies
    kineto = KINETO
    exports = [kineto / "cpu_train.json.gz", _export_with_records(tmp_path / "made.sqlite"),
               kineto / "hta_v100_train_rank0.json.gz"]
    redact = recorded_redactor(exports, keep=["dgx-*"])
    assert redact("carol on vm and dgx-42: opensesame") == "[redacted] on [redacted] and dgx-42: [redacted]"


def test_a_recorded_secret_is_taken_whole_and_each_redaction_counted():
    # a secret whose value starts like another rule's match ("Bearer …") goes whole, counted as recorded
    redact = Redactor(secret_values=["Bearer abcdefghijklmnopqrstu"])
    assert redact("sent Bearer abcdefghijklmnopqrstu") == "sent [redacted]"
    assert redact("mail a@example.org and b@example.org") == "mail [redacted] and [redacted]"
    assert redact.counts == {"recorded-secret": 1, "email": 2}
    assert redact.summary() == "2 email, 1 recorded-secret"


def test_this_machines_names_are_its_user_and_its_host_whole_and_first_label(monkeypatch):
    """What recorded_redactor adds of the machine that writes what is shared: the user name,
    the host name whole and its first label; a uid without a name (a container's) adds none, and
    names shorter than 3 characters are left (common words, parts of other names)."""
    import getpass
    import socket

    from gemmscope.redaction.scrub import _local_names

    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-node-7.cluster.example.org")
    monkeypatch.setattr(getpass, "getuser", lambda: "jane")
    assert _local_names() == ["jane", "gpu-node-7.cluster.example.org", "gpu-node-7"]

    def no_name_for_this_uid() -> str:
        raise KeyError("getpwuid(): uid not found: 1234")

    monkeypatch.setattr(getpass, "getuser", no_name_for_this_uid)
    monkeypatch.setattr(socket, "gethostname", lambda: "vm")
    assert _local_names() == []
    monkeypatch.setattr(socket, "gethostname", lambda: "dgx")
    assert _local_names() == ["dgx", "dgx"]
