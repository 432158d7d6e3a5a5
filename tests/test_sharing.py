"""Safe to share: secrets planted in a real trace (in free text and in nsys's named fields) appear
nowhere in what report (HTML, Markdown, tables), bundle (every member, the trace inside included)
and scrub write, and the output says how many of each kind went; no unscrubbed copy of a trace
is left behind, nor one readable by other users; failures are one line with their exit code."""

import lzma
import os
import secrets
import shutil
import signal
import sqlite3
import string
import subprocess
import sys
import time
import zipfile
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmscope.cli import main

from fixture_paths import GPU
from planted_secrets import plant, random_text
from sqlite_text import all_text


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A copy of a real H200 trace with secrets of every kind in an NVTX range around every GEMM
    launch (so that they reach the report's per-GEMM ranges), in a string the program printed,
    and in nsys's named fields (host, user, command line, environment). The secrets, and the
    kinds the output must say it redacted."""
    user = "u" + random_text(8, string.ascii_lowercase)
    values = {
        "hf": "hf_" + random_text(34), "aws": "AKIA" + random_text(16, string.ascii_uppercase + string.digits),
        "ghp": "ghp_" + random_text(36), "password": random_text(14), "wandb": random_text(40, "0123456789abcdef"),
        "email": f"{user}.smith@example-corp.com", "host": f"gpu-node-{random_text(4, string.digits)}.corp.example.com",
        "ip": f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 1}",
        "jwt": f"eyJ{random_text(20)}.eyJ{random_text(20)}.{random_text(20)}", "user": user,
    }
    text = (f"rank 0 {values['email']} on {values['host']} ({values['ip']}) token {values['hf']} key {values['aws']}"
            f" {values['ghp']} /home/{user}/ckpt --password={values['password']} WANDB_API_KEY={values['wandb']}"
            f" jwt {values['jwt']}")
    path = tmp_path_factory.mktemp("planted") / "train.sqlite"
    path.write_bytes(lzma.decompress((GPU / "train_mixed.sqlite.xz").read_bytes()))
    with closing(sqlite3.connect(path)) as conn:
        plant(conn, text, arguments=[f"--password={values['password']}"],
              environment=f'WANDB_API_KEY="{values["wandb"]}"', user=user, host=values["host"])
    assert all(v in "\n".join(all_text(path)) for v in values.values())
    kinds = {"email", "host-name", "ip-address", "hugging-face-token", "aws-key-id", "github-token",
             "home-path", "secret-assignment", "jwt"}
    return path, values, kinds


def _leaks(data: bytes | str, values: dict[str, str]) -> list[str]:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    return [label for label, value in values.items() if value in text]


def test_the_planted_secrets_reach_what_is_not_redacted(planted):
    """analyze --no-redact (for local debugging) shows them: every output would, without the
    redaction; by default none does."""
    path, values, _ = planted
    done = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--per-launch", "--no-redact"])
    assert done.exit_code == 1, done.output  # the trace's planted fallbacks
    assert sorted(_leaks(done.stdout, values)) == sorted(values)
    done = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--per-launch"])
    assert done.exit_code == 1, done.output
    assert _leaks(done.stdout + done.stderr, values) == []


@pytest.mark.parametrize("name", ["report.html", "report.md"])
def test_report_holds_no_planted_secret_and_says_what_it_redacted(planted, tmp_path, name):
    path, values, kinds = planted
    done = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / name), "--tables",
                                     str(tmp_path / "tables")])
    assert done.exit_code == 0, done.output
    assert _leaks((tmp_path / name).read_bytes(), values) == []
    assert "[redacted]" in (tmp_path / name).read_text()
    for table in (tmp_path / "tables").iterdir():
        assert _leaks(table.read_bytes(), values) == [], table.name
    said = done.stderr.splitlines()[-1]
    assert said.startswith("gemmscope: redacted: ")
    assert {part.split(" ", 1)[1] for part in said.removeprefix("gemmscope: redacted: ").split(", ")} >= kinds
    assert not any(v in done.stderr for v in values.values())


def test_report_keeps_what_keep_names(planted, tmp_path):
    path, values, _ = planted
    out = tmp_path / "report.md"
    done = CliRunner().invoke(main, ["report", str(path), "-o", str(out), "--keep", "*.corp.example.com"])
    assert done.exit_code == 0, done.output
    assert _leaks(out.read_bytes(), values) == ["host"]


def test_bundle_and_scrub_hold_no_planted_secret(planted, tmp_path):
    path, values, kinds = planted
    done = CliRunner().invoke(main, ["bundle", str(path), "-o", str(tmp_path / "issue.zip")])
    assert done.exit_code == 0, done.output
    with zipfile.ZipFile(tmp_path / "issue.zip") as archive:
        for member in archive.namelist():
            data = archive.read(member)
            if member.endswith(".xz"):
                (tmp_path / "bundled.sqlite").write_bytes(lzma.decompress(data))
                data = "\n".join(all_text(tmp_path / "bundled.sqlite"))
            assert _leaks(data, values) == [], member
    assert "gemmscope: redacted: " in done.stderr
    done = CliRunner().invoke(main, ["scrub", str(path), "-o", str(tmp_path / "shared.sqlite.xz")])
    assert done.exit_code == 0, done.output
    (tmp_path / "scrubbed.sqlite").write_bytes(lzma.decompress((tmp_path / "shared.sqlite.xz").read_bytes()))
    assert _leaks("\n".join(all_text(tmp_path / "scrubbed.sqlite")), values) == []
    said = done.stderr.splitlines()[-1]
    assert all(kind in said for kind in kinds) and "nsys-record" in said


# --- no copies left behind ------------------------------------------------------------------------

def gemmscope(*args: str, env: dict | None = None, cwd: Path | None = None, prefix: tuple[str, ...] = (),
              **kwargs) -> subprocess.CompletedProcess:
    """The installed command's entry point, in its own process (what a user runs); `prefix`: a
    command it runs under."""
    return subprocess.run([*prefix, sys.executable, "-m", "gemmscope", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300, **kwargs)


def _trace_files_readable_by_others(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.stat().st_mode & 0o004
            and p.read_bytes()[:16] in (b"SQLite format 3\x00",)]


@pytest.fixture
def nsys_rep(cpu_traces, tmp_path):
    """A real .nsys-rep, in a folder nobody may write to (where an export beside it fails)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    shutil.copyfile(cpu_traces / "nvtx_edge_cases.nsys-rep", folder / "edge.nsys-rep")
    folder.chmod(0o555)
    yield folder / "edge.nsys-rep"
    folder.chmod(0o755)


def test_xz_and_nsys_rep_inputs_leave_nothing_behind(nsys_rep, tmp_path, nsys_bin):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {"TMPDIR": str(temporary), "NSYS": nsys_bin}
    out = tmp_path / "out"
    out.mkdir()
    runs = [gemmscope("scrub", str(GPU / "te_linear_bf16.sqlite.xz"), "-o", str(out / "a.sqlite"), env=env),
            gemmscope("analyze", str(GPU / "te_linear_bf16.sqlite.xz"), env=env),
            gemmscope("scrub", str(nsys_rep), "-o", str(out / "b.sqlite"), env=env),
            gemmscope("verify", "--expect", "bf16", "--trace", str(nsys_rep), env=env)]
    for done in runs:
        assert "Traceback" not in done.stderr, done.stderr
    assert [r.returncode for r in runs[:3]] == [0, 4, 0], [r.stderr for r in runs]  # 4: analyze, NOT CHECKED
    assert runs[3].returncode == 2 and runs[3].stderr.count("\n") == 1  # a CPU trace: no GPU kernels
    assert sorted(p.name for p in nsys_rep.parent.iterdir()) == ["edge.nsys-rep"]
    assert list(temporary.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["a.sqlite", "b.sqlite"]


def test_scratch_folder_is_private_while_it_lives():
    from gemmscope.common import scratch

    assert scratch.folder().stat().st_mode & 0o777 == 0o700


# --- one line, the documented exit code -----------------------------------------------------------

def _one_line(done: subprocess.CompletedProcess, code: int, starts: str = "gemmscope: error: ") -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(starts), done.stderr


# Root writes into read-only folders unless it gives up overriding file permissions (the CI runs as root)
_AS_A_USER = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--") if os.geteuid() == 0 else ()


def _can_run_as_a_user() -> bool:
    return not _AS_A_USER or (shutil.which("setpriv") is not None
                              and subprocess.run([*_AS_A_USER, "true"], capture_output=True).returncode == 0)


@pytest.mark.skipif(not _can_run_as_a_user(),
                    reason="root writes into read-only folders, and util-linux's setpriv cannot stop it here")
def test_read_only_output_folder_is_one_line(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    for command in ("scrub", "bundle"):
        _one_line(gemmscope(command, str(GPU / "te_linear_bf16.sqlite.xz"), "-o", str(folder / "x.zip"),
                            prefix=_AS_A_USER), 2)
    assert list(folder.iterdir()) == []


def test_unwritable_output_is_one_line(tmp_path):
    """A file where the output's folder should be: refused by the system even to root."""
    (tmp_path / "file").write_text("x")
    for command in ("scrub", "bundle", "report"):
        _one_line(gemmscope(command, str(GPU / "te_linear_bf16.sqlite.xz"), "-o",
                            str(tmp_path / "file" / "out.sqlite")), 2)


@pytest.mark.parametrize("command", ["analyze", "scrub", "bundle", "report"])
def test_names_too_long_are_one_line(command, tmp_path):
    long_name = str(tmp_path / ("x" * 300 + ".sqlite"))
    output = [] if command == "analyze" else ["-o", str(tmp_path / "out.zip")]
    _one_line(gemmscope(command, long_name, *output), 2)
    if command != "analyze":
        _one_line(gemmscope(command, str(GPU / "te_linear_bf16.sqlite.xz"), "-o", long_name), 2)


class _Stopped(subprocess.CompletedProcess):
    """A command sent SIGINT, and how long it took to end after the signal."""

    stop_s: float


def _interrupted_after(seconds: float, *args: str, group: bool = True,
                       sigint: signal.Handlers = signal.SIG_DFL) -> _Stopped:
    """`gemmscope ARGS` sent SIGINT after `seconds`: as Ctrl-C does, to every process of its group,
    or (`group` False) to the CLI's own process alone, as a worker started after a Ctrl-C finds it.
    `sigint`: how the CLI starts out handling SIGINT: by default, as from a terminal (whatever
    this test run was given: a shell's background job starts with it ignored), or ignored."""
    process = subprocess.Popen([sys.executable, "-m", "gemmscope", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    time.sleep(seconds)
    if group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    signalled = time.perf_counter()
    # the pipes close when every process that holds them has ended: a worker left behind hangs this
    stdout, stderr = process.communicate(timeout=120)
    done = _Stopped(process.args, process.returncode, stdout, stderr)
    done.stop_s = time.perf_counter() - signalled
    return done


@pytest.mark.parametrize("seconds", [0.15, 2.5])
def test_ctrl_c_is_interrupted_exit_130_also_in_workers(seconds, tmp_path):
    """Ctrl-C while the CLI starts, and while worker processes read several traces."""
    traces = [str(p) for p in sorted((GPU / "corpus").glob("*.sqlite.xz"))]
    done = _interrupted_after(seconds, "analyze", "--expect", "fp8-current", "--workers", "2", *traces)
    if done.returncode in (0, 1) or "not ranks of one job" in done.stderr:  # the corpus is many runs
        pytest.skip("the analysis finished before the interrupt")
    _one_line(done, 130, "gemmscope: interrupted")


def test_a_cli_that_ignores_ctrl_c_keeps_its_workers_reading():
    """Started with SIGINT ignored (a shell's background job), the CLI's workers ignore it too: a
    SIGINT to the whole group ends nothing, where a worker ended alone read as one lost."""
    traces = [str(p) for p in sorted((GPU / "corpus").glob("*.sqlite.xz"))]
    done = _interrupted_after(2.5, "analyze", "--expect", "fp8-current", "--workers", "2", *traces,
                              sigint=signal.SIG_IGN)
    # read to the end: the corpus's runs are then told apart (not ranks of one job, exit 2)
    assert done.returncode in (0, 1) or "not ranks of one job" in done.stderr, done.stderr[-2000:]
    assert "stopped before it finished" not in done.stderr


def test_ctrl_c_the_workers_never_got_ends_them_too():
    """SIGINT to the CLI alone while two workers read traces: it exits 130 at once and leaves no
    worker behind reading the rest (they hold its output pipes: the wait below would time out)."""
    traces = [str(p) for p in sorted((GPU / "corpus").glob("*.sqlite.xz"))]
    started = time.perf_counter()
    done = _interrupted_after(2.5, "analyze", "--expect", "fp8-current", "--workers", "2", *traces, group=False)
    if done.returncode in (0, 1) or "not ranks of one job" in done.stderr:  # the corpus is many runs
        pytest.skip("the analysis finished before the interrupt")
    _one_line(done, 130, "gemmscope: interrupted")
    assert time.perf_counter() - started < 60


# The long trace (63 k kernels, a 25 MB export): each delay stops another stage of the work:
# decompressing and reading, the scrubbed copy's SQL, its compression, the analysis and the zip.
BIG_TRACE = GPU / "corpus" / "fsdp_8x100_fp8_1gpu.sqlite.xz"


def test_bundle_interrupted_leaves_nothing(tmp_path):
    out = tmp_path / "issue.zip"
    done = _interrupted_after(2.0, "bundle", str(BIG_TRACE), "-o", str(out))
    if done.returncode == 0:
        pytest.skip("the bundle was written before the interrupt")
    _one_line(done, 130, "gemmscope: interrupted")
    assert list(tmp_path.iterdir()) == []


# scrub of the long trace takes ~2.5 s on the CI's machine (~4 s on a 2-core VM), bundle ~7 s
# (benchmarks/share_speed.py): the delays stay inside the work, so that each stops it
@pytest.mark.parametrize(("command", "seconds"), [*(("scrub", s) for s in (0.4, 0.8, 1.2, 1.6)),
                                                  *(("bundle", s) for s in (0.8, 1.6, 2.4, 3.2, 4.0))])
def test_ctrl_c_stops_bundle_and_scrub_of_a_long_trace_within_a_second(command, seconds, tmp_path):
    """Ctrl-C acts within 1 s of the signal, whatever the work is at (no single call into C runs
    longer: xz a chunk at a time, SQLite statements checking for it), and leaves nothing."""
    out = tmp_path / ("issue.zip" if command == "bundle" else "shared.sqlite.xz")
    done = _interrupted_after(seconds, command, str(BIG_TRACE), "-o", str(out))
    if done.returncode == 0:
        pytest.skip(f"{command} finished before the interrupt")
    _one_line(done, 130, "gemmscope: interrupted")
    assert done.stop_s < 1.0, f"{command} took {done.stop_s:.2f} s to stop"
    assert list(tmp_path.iterdir()) == []


def test_doctor_canary_without_torch_or_a_gpu_is_one_line():
    """Without torch (a plain `pip install gemmscope`) or with a torch that sees no GPU (CI's CPU
    build): one line naming what is missing."""
    try:
        import torch
    except ImportError:
        missing = "torch: pip install 'gemmscope[gpu]' to profile; analysis works without"
    else:
        if torch.cuda.is_available():
            pytest.skip("a CUDA GPU is here")
        missing = f"gpu: torch {torch.__version__} sees no CUDA GPU"
    done = gemmscope("doctor", "--canary")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [f"gemmscope: error: --canary cannot run here: {missing}"]


def test_profile_of_a_model_without_a_gpu_says_so():
    from gemmscope.plan.gpu_profile import gpu_available

    if gpu_available():
        pytest.skip("a GPU is here")
    done = gemmscope("profile", "--model", "llama-3-8b")
    _one_line(done, 2)
    assert "no CUDA GPU here" in done.stderr and done.stdout == ""
    shipped = gemmscope("profile", "--quiet")  # no model options: the shipped run, as before
    assert shipped.returncode == 0 and "codonfm-5b" in shipped.stdout
