"""`gemmscope verify --profiler torch -- COMMAND`: the command runs with real torch (a CPU build
here) and gemmscope's hook, which runs the real torch.profiler in its processes; the traces they
write are read back as gemmscope reads any. Nothing of the profiler is mocked.

On a CPU no process uses CUDA, so none would write its trace: the programs below stand for one
that did by replacing the hook's `used_cuda` (as the hook's own tests replace `launches_kernel`),
and what their trace then holds is what a CPU trace can (operators and their shapes, no kernel).
The GPU run of the same command is tests/test_gpu.py's."""

import gzip
import json
import os
import re
import sys
from pathlib import Path

import pytest

import gemmscope as gemmscope_api

from cli_runner import assert_one_line_error, gemmscope

# A small torch program: one GEMM (F.linear), its pid said on stderr, its exit status from argv.
_PROGRAM = """\
import os, sys
import torch

if "--as-if-cuda" in sys.argv:  # count as a process that used CUDA: the hook writes its trace
    sys.modules["gemmscope_torch_profiler"].used_cuda = lambda torch: True
print(f"program pid {os.getpid()}", file=sys.stderr)
if "--own-profiler" in sys.argv:  # a program that profiles itself, as many do
    with torch.profiler.profile() as own:
        torch.randn(2, 2) @ torch.randn(2, 2)
    print(f"own profiler: {len(own.events())} events", file=sys.stderr)
torch.nn.functional.linear(torch.randn(4, 8), torch.randn(16, 8))
if "--remove-the-trace-folder" in sys.argv:  # the hook cannot write: the program must not notice
    import shutil
    shutil.rmtree(os.environ["GEMMSCOPE_TORCH_TRACE_FOLDER"])
sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
"""
# A launcher, as torchrun is: a Python process that imports torch, uses no CUDA, and starts a
# worker (with RANK set, as torchrun sets it) that does.
_LAUNCHER = """\
import os, subprocess, sys
import torch

print(f"launcher pid {os.getpid()}", file=sys.stderr)
sys.exit(subprocess.run([sys.executable, sys.argv[1], "--as-if-cuda"], env={**os.environ, "RANK": "0"}).returncode)
"""
# What Kineto prints at each start and stop of a capture: held back like nsys's own text.
_KINETO_LINE = re.compile(r"^(USDT|STAGE):", re.MULTILINE)


@pytest.fixture
def program(torch_cpu, tmp_path):
    path = tmp_path / "program.py"
    path.write_text(_PROGRAM)
    return path


def _verify_torch(out, *command, extra=()):
    return gemmscope("verify", "--profiler", "torch", "--expect", "bf16", "--out", out, *extra, "--",
                     sys.executable, *map(str, command), timeout=300)


def _pids(stderr: str, who: str) -> list[str]:
    return re.findall(rf"^{who} pid (\d+)$", stderr, re.MULTILINE)


def _gemmscope_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gemmscope: ")]


@pytest.mark.parametrize("window", [("--capture-range", "step_3"), ("--capture-range", "cudaProfilerApi"),
                                    ("--capture-range", "step_3", "--delay", "1")])
def test_an_nvtx_capture_range_is_refused_with_torch(window):
    """nsys's NVTX capture range has no torch.profiler counterpart here: refused, never ignored."""
    done = gemmscope("verify", "--profiler", "torch", *window, "--", sys.executable, "-c", "pass")
    assert_one_line_error(done)
    assert "--capture-range is nsys's capture window: --profiler torch records each process" in done.stderr


# A program that calls F.linear every 10 ms for argv[1] seconds after importing torch, then says
# how many calls it made and which traces its folder held by then. Its GEMMs count as CUDA ones:
# the hook records them (its window opens and closes at its records) and writes the trace.
_TIMED_PROGRAM = """\
import os, sys, time
import torch

sys.modules["gemmscope_torch_profiler"].used_cuda = lambda torch: True
sys.modules["gemmscope_torch_gemms"].launches_kernel = lambda tensor: True
# a CPU torch has no NVTX
torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop, torch.cuda.nvtx.mark = lambda label: 0, lambda: 0, lambda label: None
start, calls = time.monotonic(), 0
while time.monotonic() - start < float(sys.argv[1]):
    torch.nn.functional.linear(torch.randn(4, 8), torch.randn(16, 8))
    calls += 1
    time.sleep(0.01)
print(f"calls {calls}, written by then: {sorted(os.listdir(os.environ['GEMMSCOPE_TORCH_TRACE_FOLDER']))}",
      file=sys.stderr)
"""


def test_a_time_window_records_that_time_alone_and_writes_as_it_stops(torch_cpu, tmp_path):
    """--delay 1 --duration 1 on a program that runs on for 8 s after importing torch: the trace
    holds about a second of its calls, is written when the window closes (before the program
    ends), and verify reads it (a CPU trace: no GPU kernel ran, exit 1)."""
    program = tmp_path / "timed.py"
    program.write_text(_TIMED_PROGRAM)
    out = tmp_path / "out"
    done = _verify_torch(out, program, "8", extra=("--delay", "1", "--duration", "1"))
    assert done.returncode == 1, done.stderr[-2000:]
    assert ("gemmscope: [1/3] running the command under torch.profiler, in each of its processes that imports "
            "torch, collecting from 1 s after the start to 2 s") in done.stderr
    said = re.search(r"^calls (\d+), written by then: \['(trace\.\d+\.json\.gz)'\]$", done.stderr, re.MULTILINE)
    assert said, done.stderr[-2000:]
    with gzip.open(out / said[2], "rt") as trace:
        events = json.load(trace)["traceEvents"]
    linear = sorted(e["ts"] for e in events if e.get("name") == "aten::linear")
    assert 10 <= len(linear) < int(said[1]) / 3  # about a second of eight
    assert linear[-1] - linear[0] < 1.5e6  # µs: one second's window, not the run


def test_a_time_window_that_never_opened_is_one_line(torch_cpu, tmp_path):
    """A job that ends before --delay: nothing written, one line, exit 2, as for --steps a job does
    not reach and for nsys's window."""
    program = tmp_path / "timed.py"
    program.write_text(_TIMED_PROGRAM)
    done = _verify_torch(tmp_path / "out", program, "0.5", extra=("--delay", "60"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert re.search(r"^calls \d+, written by then: \[\]$", done.stderr, re.MULTILINE)
    assert done.stderr.splitlines()[-1] == (
        "gemmscope: error: the command ended before the capture window opened (60 s after the start): nothing was "
        "collected; give a shorter --delay")


@pytest.mark.parametrize("arguments, said", [
    (("--profiler", "torch", "--trace", "x.json.gz"), "they do not apply to --trace"),
    (("--profiler", "ncu", "--", "true"), "'ncu' is not one of 'nsys', 'torch'"),
])
def test_profiler_option_is_checked(arguments, said):
    done = gemmscope("verify", *arguments)
    assert_one_line_error(done)
    assert said in done.stderr


def test_a_run_that_used_no_cuda_writes_no_trace(program, tmp_path, monkeypatch):
    """A program that ran no CUDA (on this CPU): no process writes a trace, and verify says the run
    used no CUDA and ran no GEMM (exit 1, as under nsys); nsys is never needed."""
    monkeypatch.setenv("NSYS", str(tmp_path / "no-nsys-here"))
    done = _verify_torch(tmp_path / "out", program)
    assert done.returncode == 1, done.stderr[-2000:]
    assert _gemmscope_lines(done.stderr)[-1] == ("gemmscope: the command exited 0 and used no CUDA (no process of "
                                                 "it wrote a torch.profiler trace): no GEMM ran at bf16")
    assert "gemmscope: [2/3] 0 torch.profiler traces written" in done.stderr
    assert _pids(done.stderr, "program")  # the program's own output reaches the user
    assert not _KINETO_LINE.search(done.stderr)
    # its report still printed, saying so: what a job parsing --format json reads too
    assert done.stdout.startswith("MISMATCHES\n")
    assert ("Ran: the command used no CUDA (no process of it wrote a torch.profiler trace): no GEMM ran at bf16"
            in " ".join(done.stdout.split()))
    assert not list((tmp_path / "out").iterdir())


def test_a_process_that_used_cuda_writes_its_trace_and_out_keeps_it(program, torch_cpu, tmp_path):
    """The process writes trace.<pid>.json.gz into --out, whole: torch.profiler recorded the
    program's operators with their shapes; verify reads it as it reads any torch.profiler trace (a
    CPU one: no GPU kernel ran, exit 1). A previous capture's trace there is not read."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "trace.1.json.gz").write_bytes(b"a previous capture")
    done = _verify_torch(out, program, "--as-if-cuda", extra=("--verbose",))
    assert done.returncode == 1, done.stderr[-2000:]
    assert _gemmscope_lines(done.stderr)[-1] == "gemmscope: the command exited 0 and ran no GPU kernel: no GEMM ran at bf16"
    assert f"gemmscope: [2/3] 1 torch.profiler trace written, one per process that used CUDA ({out})" in done.stderr
    if torch_cpu.version.cuda is None:  # a CUDA build's Kineto prints no such text on a machine without a GPU
        assert _KINETO_LINE.search(done.stderr)  # --verbose shows the profiler's own text
    [pid] = _pids(done.stderr, "program")
    assert sorted(p.name for p in out.iterdir()) == [f"trace.{pid}.json.gz"]
    with gzip.open(out / f"trace.{pid}.json.gz", "rt") as trace:
        events = json.load(trace)["traceEvents"]
    gemms = [e for e in events if e.get("name") in ("aten::linear", "aten::addmm", "aten::mm")]
    assert gemms and any(e["args"].get("Input Dims", [])[:2] == [[4, 8], [16, 8]] for e in gemms)


def test_a_failed_command_exits_3_with_its_stderr_first(program, tmp_path):
    """A command that fails before using CUDA wrote no trace; one that fails after wrote its trace
    (at exit, whatever the status): either way exit 3, its status and last stderr lines said first."""
    before = _verify_torch(tmp_path / "before", program, "5")
    after = _verify_torch(tmp_path / "after", program, "--as-if-cuda", "5")
    for done, then in ((before, "gemmscope: it wrote no torch.profiler trace: no process of it used CUDA before it ended"),
                       (after, "gemmscope: it ran no GPU kernel before it ended")):
        assert done.returncode == 3, done.stderr[-2000:]
        said = [line for line in _gemmscope_lines(done.stderr) if not line.startswith("gemmscope: [")]
        assert said[0] == "gemmscope: the command failed (exit 5); its last lines on stderr:", done.stderr
        assert said[1] == then
        tail = done.stderr.split(said[0] + "\n", 1)[1].splitlines()
        assert re.fullmatch(r"    program pid \d+", tail[0])
        assert done.stdout.startswith("MISMATCHES\n")  # its report, saying the command failed and what ran
        assert "Ran: the command failed (exit 5); the command " in " ".join(done.stdout.split())
    assert len(list((tmp_path / "after").glob("trace.*.json.gz"))) == 1
    assert not list((tmp_path / "before").iterdir())


def test_a_launcher_writes_no_trace_its_worker_does(program, tmp_path):
    """torchrun's shape: the launcher imports torch and uses no CUDA, its worker (RANK=0) does:
    one trace, the worker's, its rank in its name."""
    launcher = tmp_path / "launcher.py"
    launcher.write_text(_LAUNCHER)
    out = tmp_path / "out"
    done = _verify_torch(out, launcher, program)
    assert done.returncode == 1, done.stderr[-2000:]
    [worker] = _pids(done.stderr, "program")
    [parent] = _pids(done.stderr, "launcher")
    assert sorted(p.name for p in out.iterdir()) == [f"trace.rank0.{worker}.json.gz"]
    assert parent != worker


def test_a_trace_that_cannot_be_written_never_breaks_the_program(program, tmp_path):
    """The folder gone by the time the process exits: the hook says so in one line, and the
    program's own exit status stands."""
    done = _verify_torch(tmp_path / "out", program, "--as-if-cuda", "--remove-the-trace-folder", "7")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "the command failed (exit 7)" in done.stderr
    [note] = [line for line in done.stderr.splitlines() if line.startswith("gemmscope hook: ")]
    assert note.startswith("gemmscope hook: torch.profiler trace not written (")
    assert "Traceback" not in done.stderr
    assert not os.path.exists(tmp_path / "out")


def test_a_program_that_runs_torch_profiler_itself_keeps_it(program, tmp_path):
    """The program's own torch.profiler ends the hook's (Kineto runs one at a time): the program's
    profiler works, and the hook says in one line that it wrote no trace and what to read instead."""
    done = _verify_torch(tmp_path / "out", program, "--as-if-cuda", "--own-profiler")
    assert done.returncode == 1, done.stderr[-2000:]
    assert re.search(r"^own profiler: [1-9]\d* events$", done.stderr, re.MULTILINE)
    [note] = [line for line in done.stderr.splitlines() if line.startswith("gemmscope hook: ")]
    assert note == ("gemmscope hook: torch.profiler was stopped by the program (does it run torch.profiler itself? "
                    "Then check its traces with gemmscope verify --trace): no trace written")
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(("cuda", "user_setting", "teardown"), [
    ("13.0", None, "1"), ("12.6", None, "1"), ("12.4", None, None), (None, None, None), ("13.0", "0", "0")])
def test_a_window_asks_kineto_to_let_cupti_go_where_that_is_safe(cuda, user_setting, teardown, monkeypatch):
    """After a window the job goes on: Kineto detaches CUPTI only with TEARDOWN_CUPTI=1, which is unsafe
    with CUDA graphs before CUDA 12.6; a user's own setting stands."""
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "gemmscope" / "autocast_hook"))
    from gemmscope_torch_profiler import tear_down_cupti_after_window

    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    if user_setting is not None:
        monkeypatch.setenv("TEARDOWN_CUPTI", user_setting)
    tear_down_cupti_after_window(SimpleNamespace(version=SimpleNamespace(cuda=cuda)))
    assert os.environ.get("TEARDOWN_CUPTI") == teardown


def test_a_window_trace_is_read_while_the_program_runs_on(torch_cpu, tmp_path):
    """The trace of a window that closes seconds before the program ends is read and attributed
    meanwhile (Captured.read), and the check takes it as it is rather than reading it again."""
    program = tmp_path / "timed.py"
    program.write_text(_TIMED_PROGRAM)
    captured = gemmscope_api.capture([sys.executable, str(program), "4"], tmp_path / "out", profiler="torch",
                                     window=gemmscope_api.CaptureWindow(delay_s=0.5, duration_s=0.5), say=lambda _: None)
    [trace] = captured.traces
    assert list(captured.read) == [trace]  # read as a CPU trace: "no CUDA activity", its error
    analysis = gemmscope_api.Analysis(captured, redact=False)
    assert analysis.traces.loaded[0] is captured.read[trace]
