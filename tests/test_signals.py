"""A signal sent to gemmscope alone during `verify -- COMMAND` (a scheduler's SIGTERM, a closed
terminal's SIGHUP, a Ctrl-C delivered to it) ends everything it started: the program and nsys run
in a session of their own, get the signal, and are waited for; gemmscope exits 128 + the signal,
and nothing nsys wrote is left readable by others in $TMPDIR. Real processes on the CPU: a program
under torch.profiler's hook, and under the real nsys of scripts/setup-tests.sh."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runner import REPO

# Writes its process group where the test reads it, then sleeps far past any test.
PROGRAM = """
import os, sys, time
with open(sys.argv[1] + ".partial", "w") as f:
    f.write(str(os.getpgrp()))
os.replace(sys.argv[1] + ".partial", sys.argv[1])
time.sleep(600)
"""


def _verify(tmp_path: Path, profiler: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    """gemmscope verify running PROGRAM, once the program has started: the process and the
    program's process group."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "program.py").write_text(PROGRAM)
    group = tmp_path / "group"
    environment = {**os.environ, **(env or {}), "TMPDIR": str(tmp_path / "tmp"),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    verify = subprocess.Popen([sys.executable, "-m", "gemmscope", "verify", *profiler, "--expect", "bf16", "--",
                               sys.executable, str(tmp_path / "program.py"), str(group)],
                              env=environment, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not group.exists():
        assert verify.poll() is None, verify.communicate()
        assert time.monotonic() < deadline, "the program did not start"
        time.sleep(0.1)
    time.sleep(2)  # nsys collecting, the hook's profiler started
    return verify, int(group.read_text())


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _ended(verify: subprocess.Popen, group: int, tmp_path: Path, signum: int) -> None:
    try:
        _, stderr = verify.communicate(timeout=120)
    finally:
        if _group_alive(group):  # never left running by a failed test
            os.killpg(group, signal.SIGKILL)
        if verify.poll() is None:
            verify.kill()
    assert verify.returncode == 128 + signum, stderr[-2000:]
    # the program's own traceback (a KeyboardInterrupt) is relayed; none of gemmscope's
    assert not [line for line in stderr.splitlines() if line.strip().startswith("File ") and "gemmscope" in line], stderr
    assert not _group_alive(group), "the program's process group outlived gemmscope"
    readable = [path for path in (tmp_path / "tmp").rglob("*")
                if path.is_file() and path.stat().st_size and path.stat().st_mode & 0o004]
    assert not readable, readable  # nsys's report (environment, command line) world-readable


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_during_verify_under_torch_profiler_ends_the_program(tmp_path, signum):
    verify, group = _verify(tmp_path, ["--profiler", "torch"])
    assert group != os.getpgid(verify.pid)  # a session of its own
    verify.send_signal(signum)
    _ended(verify, group, tmp_path, signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_verify_under_nsys_ends_nsys_and_the_program(tmp_path, nsys_bin, signum):
    verify, group = _verify(tmp_path, [], {"NSYS": nsys_bin})
    assert group != os.getpgid(verify.pid)
    verify.send_signal(signum)
    _ended(verify, group, tmp_path, signum)


def test_a_report_kept_with_out_is_readable_by_its_owner_alone(tmp_path, nsys_bin):
    """Stopped with --out, nsys still writes its report as it ends: into OUT, mode 0600."""
    out = tmp_path / "capture"
    verify, group = _verify(tmp_path, ["--out", str(out)], {"NSYS": nsys_bin})
    verify.send_signal(signal.SIGTERM)
    _ended(verify, group, tmp_path, signal.SIGTERM)
    written = [path for path in out.rglob("*") if path.is_file()]
    assert any(path.suffix == ".nsys-rep" for path in written), written
    assert all(path.stat().st_mode & 0o077 == 0 for path in written), [(p, oct(p.stat().st_mode)) for p in written]
