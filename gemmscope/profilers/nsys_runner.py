"""Find Nsight Systems, run a command under `nsys profile`, export the report (SQLite, or a
Parquet folder for verify's own captures where pyarrow reads it)."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gemmscope.errors import InputError
from gemmscope.profilers import relay

# Where nsys lives when it is not on PATH: Nsight Systems' own installs, the CUDA toolkit, and
# the copy that ships inside Nsight Compute; then the CPU-only install this project's CI uses.
_SEARCH = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/opt/nsys-cpu/target-linux-x64/nsys",
)

# What every gemmscope capture records: CUDA API + kernels, NVTX, and one row per kernel inside
# CUDA graphs (without `node` a graph launch is a single row); no CPU sampling. A window timed by
# gemmscope (profile) gives the first to `nsys launch`, the others to `nsys start`.
_TRACE_FLAGS = ("--trace=cuda,nvtx", "--cuda-graph-trace=node")
_COLLECT_FLAGS = ("--sample=none", "--cpuctxsw=none")
# GPU memory events, only for captures whose report shows memory (the shape profiler's peak per
# precision): nsys warns that tracking them may cost significant run time, and verify reads none.
_MEMORY_FLAGS = ("--cuda-memory-usage=true",)


def find_nsys() -> str | None:
    """$NSYS, then PATH, then the usual install locations (newest version first)."""
    if os.environ.get("NSYS"):
        return os.environ["NSYS"]
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    for pattern in _SEARCH:
        found = sorted(glob.glob(pattern), reverse=True)
        if found:
            return found[0]
    return None


def require_nsys() -> str:
    nsys = find_nsys()
    if nsys is None:
        raise InputError(
            "nsys not found: install Nsight Systems, put nsys on PATH or set NSYS=/path/to/nsys"
        )
    return nsys


def nsys_version(nsys: str) -> str:
    out = subprocess.run([nsys, "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip()


# What export_parquet names its folder: the report's name with this suffix, so that a folder of
# traces can tell which report an export came from (traces.read.trace_paths).
PARQUET_FOLDER_SUFFIX = ".parquetdir"


def export_sqlite(report: Path, sqlite: Path | None = None) -> Path:
    """Export an .nsys-rep to SQLite (`--lazy=false`: every table, a stable set) as `sqlite`
    (default: beside the report). Reuses an export already there, or beside the report, when it
    is newer; writes through a temporary name, so a failed export leaves nothing half-written."""
    report = Path(report)
    sqlite = Path(sqlite) if sqlite else report.with_suffix(".sqlite")
    for existing in dict.fromkeys((sqlite, report.with_suffix(".sqlite"))):
        if existing.exists() and existing.stat().st_mtime >= report.stat().st_mtime:
            return existing
    return _export(report, sqlite, ["--type", "sqlite", "--lazy=false"])


def export_parquet(report: Path) -> Path:
    """Export an .nsys-rep as a folder of Parquet files beside it (REPORT.parquetdir), through a
    temporary name as export_sqlite. Quicker from report to verdict than SQLite (250 k kernels,
    H100: export and check 5.5 s against 7.2 s; benchmarks/export_formats.py), read with pyarrow."""
    report = Path(report)
    return _export(report, report.with_suffix(PARQUET_FOLDER_SUFFIX), ["--type", "parquetdir"])


def capture_export_format() -> str:
    """The format verify exports its own capture to: Parquet where pyarrow is installed to read it
    (the quicker one from report to verdict), else SQLite. Keys of CAPTURE_EXPORTERS."""
    return "Parquet" if importlib.util.find_spec("pyarrow") else "SQLite"


CAPTURE_EXPORTERS: dict[str, Callable[[Path], Path]] = {"Parquet": export_parquet, "SQLite": export_sqlite}


def _export(report: Path, target: Path, type_flags: list[str]) -> Path:
    nsys = require_nsys()
    partial = target.with_name(target.name + ".partial")
    _remove(partial)
    done = subprocess.run([nsys, "export", *type_flags, "--force-overwrite=true", "-o", str(partial), str(report)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not partial.exists():
        _remove(partial)
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise InputError(f"nsys could not export {report}: {detail[-1] if detail else 'no output'}")
    _remove(target)  # a folder is not replaced by a rename
    partial.replace(target)
    return target


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


# `--capture-range` value that means the CUDA profiler API, not an NVTX range of that name.
PROFILER_API_RANGE = "cudaProfilerApi"


def capture_window_flags(nvtx_range: str | None = None, delay_s: float | None = None) -> list[str]:
    """nsys flags that collect only part of a long run: from the start to the end of the first
    instance of an NVTX range, or between the program's first cudaProfilerStart and Stop
    (`nvtx_range` "cudaProfilerApi", as TE's GEMM benchmark expects), the program then running on
    uncollected; or from `delay_s` on. (A window that ends at a time is timed by `profile`.)"""
    flags = []
    if nvtx_range == PROFILER_API_RANGE:
        flags += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    elif nvtx_range is not None:
        flags += ["--capture-range=nvtx", f"--nvtx-capture={nvtx_range}", "--capture-range-end=stop"]
    if delay_s is not None:
        flags.append(f"--delay={delay_s:g}")
    return flags


def check_window(nvtx_range: str | None = None, delay_s: float | None = None,
                 duration_s: float | None = None) -> None:
    """A window ends at its range's end or after a time, not both (InputError)."""
    if nvtx_range is not None and duration_s is not None:
        raise InputError("a capture window ends at its range's end (--capture-range) or after a time (--duration), "
                         "not both")


def describe_window(nvtx_range: str | None = None, delay_s: float | None = None,
                    duration_s: float | None = None) -> str | None:
    """The capture window in words ("from 40 s after the start to 48 s"), None for the whole run."""
    if nvtx_range == PROFILER_API_RANGE:
        parts = ["from the program's first cudaProfilerStart to its cudaProfilerStop"]
    elif nvtx_range is not None:
        parts = [f"the first instance of NVTX range '{nvtx_range}'"]
    else:
        parts = []
    if delay_s is not None and duration_s is not None:
        parts.append(f"from {delay_s:g} s after the start to {delay_s + duration_s:g} s")
    elif delay_s is not None:
        parts.append(f"from {delay_s:g} s after the start to the end")
    elif duration_s is not None:
        parts.append(f"the first {duration_s:g} s")
    return ", ".join(parts) or None


# What nsys itself prints around a capture (the program's own output shares its streams): held
# back unless asked for, so that the user's stream holds the program's output and gemmscope's.
_NSYS_OWN_TEXT = re.compile("|".join((
    r"Collecting data\.\.\.",
    r"Generating '.*'",
    r"Generated:",
    r"\s+\S+\.(?:nsys-rep|qdrep|qdstrm|sqlite)",
    r"\[\d+/\d+\] \[[= ]*\d+%[= ]*\] .*",  # a progress bar's frame, redrawn after a carriage return
    r"Capture range (?:started|ended).*",
    r"Processing events\.\.\.",
)))
# Runs the command and writes its own exit status to a file: with --kill=none nsys may return at
# the end of a window while the program runs on, and its status is then not the program's.
_RECORD_EXIT_STATUS = 'status_file=$1; shift; "$@"; status=$?; printf %s "$status" > "$status_file"; exit $status'


def profile(command: list[str], report: Path, env: dict[str, str] | None = None,
            nvtx_range: str | None = None, delay_s: float | None = None, duration_s: float | None = None,
            echo_nsys: bool = False, once_written: Callable[[], None] = lambda: None,
            memory_usage: bool = False) -> relay.Capture:
    """Run `command` under nsys, writing `report` (.nsys-rep), collecting only in the capture
    window given (capture_window_flags; `duration_s`: for that long from `delay_s`), until the
    program itself ends (a window may end first). Its output goes to stderr, so that stdout holds
    only gemmscope's report (e.g. clean JSON); nsys's own text too with `echo_nsys`, else it is
    held in the result. The program's own exit status is returned for the caller to judge.
    `once_written` is called as soon as the report is written: at a window's end the program may
    still run for long, and work on the report (its export) need not wait for it. `memory_usage`
    also records GPU memory events (_MEMORY_FLAGS)."""
    nsys = require_nsys()
    report = Path(report)
    report.parent.mkdir(parents=True, exist_ok=True)
    status_file = report.with_name(f".{report.stem}.exit-status")
    status_file.unlink(missing_ok=True)
    program = ["sh", "-c", _RECORD_EXIT_STATUS, "sh", str(status_file), *command]
    trace_flags = [*_TRACE_FLAGS, *(_MEMORY_FLAGS if memory_usage else ())]
    try:
        if duration_s is None:
            # The program holds the streams until it ends, also when nsys returned at a range's
            # end; one that hands them to a daemon of its own has ended once its status is written.
            capture = relay.run(
                [nsys, "profile", *trace_flags, *_COLLECT_FLAGS, *capture_window_flags(nvtx_range, delay_s), "--force-overwrite=true",
                 "-o", str(report.with_suffix("")), *program],
                env, _NSYS_OWN_TEXT, echo_nsys, ended=status_file.exists, once_returned=once_written)
        else:
            check_window(nvtx_range, delay_s, duration_s)
            capture = _profile_timed(nsys, program, report, env, trace_flags, delay_s or 0.0, duration_s, echo_nsys,
                                     once_written)
        own = status_file.read_text().strip() if status_file.exists() else ""
        if own.isdigit():  # else nsys's own status stands
            capture.returncode = int(own)
        return capture
    except BaseException:
        # interrupted (relay.forwarded: the program and nsys have ended): what nsys wrote as it
        # stopped holds the environment and the command line, and it writes it world-readable
        _private(report)
        raise
    finally:
        status_file.unlink(missing_ok=True)


def _private(report: Path) -> None:
    """`report` and its partial outputs beside it readable by their owner alone (0600)."""
    for path in report.parent.glob(f"{glob.escape(report.stem)}.*"):
        if path.is_file():
            path.chmod(0o600)


def _profile_timed(nsys: str, program: list[str], report: Path, env: dict[str, str] | None, trace_flags: list[str],
                   delay_s: float, duration_s: float, echo_nsys: bool, once_written: Callable[[], None]) -> relay.Capture:
    """A window that ends at a time, timed here: the program runs under `nsys launch` for its
    whole life, collection is started (`nsys start`) after `delay_s` and stopped (`nsys stop`,
    which writes the report) `duration_s` later. nsys profile's own --duration ends the whole
    session instead: a process the program starts after it (a subprocess, a compiler's) fails to
    start under nsys 2025.3 ("Failed to connect to Agent"), whatever --kill says."""
    session = f"gemmscope-{os.getpid()}-{time.monotonic_ns()}"
    launch = [nsys, "launch", f"--session-new={session}", *trace_flags]
    start = [nsys, "start", f"--session={session}", *_COLLECT_FLAGS, "--force-overwrite=true",
             "-o", str(report.with_suffix(""))]
    program_ended = threading.Event()
    nsys_text: list[str] = []
    written: list[bool] = []

    def report_written() -> None:
        if report.exists() and not written:
            written.append(True)
            once_written()

    def window() -> None:
        # a program that ends before the window opens leaves no report; one that ends inside it
        # ends the session, and nsys writes the report at its exit
        for command, wait_s in ((start, delay_s), ([nsys, "stop", f"--session={session}"], duration_s)):
            if program_ended.wait(wait_s):
                return
            done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
            nsys_text.extend(line for line in (done.stdout + done.stderr).splitlines() if line.strip())
        report_written()

    timer = threading.Thread(target=window, daemon=True)
    timer.start()
    capture = relay.run([*launch, *program], env, _NSYS_OWN_TEXT, echo_nsys)
    program_ended.set()
    timer.join()
    report_written()
    if echo_nsys and nsys_text:
        sys.stderr.write("".join(f"{line}\n" for line in nsys_text))
    capture.profiler_text += nsys_text
    return capture
