"""Find Nsight Systems, run a command under `nsys profile`, export the report to SQLite."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gemmscope.errors import InputError

# Where nsys lives when it is not on PATH: Nsight Systems' own installs, the CUDA toolkit, and
# the copy that ships inside Nsight Compute; then the CPU-only install this project's CI uses.
_SEARCH = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/opt/nsys-cpu/target-linux-x64/nsys",
)

# What every gemmscope capture records: CUDA API + kernels, NVTX, GPU memory events, and one row
# per kernel inside CUDA graphs (without `node` a graph launch is a single row).
PROFILE_FLAGS = (
    "--trace=cuda,nvtx",
    "--cuda-memory-usage=true",
    "--cuda-graph-trace=node",
    "--sample=none",
    "--cpuctxsw=none",
)


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


def export_sqlite(report: Path, sqlite: Path | None = None) -> Path:
    """Export an .nsys-rep to SQLite (`--lazy=false`: every table, a stable set) as `sqlite`
    (default: beside the report). Reuses an export already there, or beside the report, when it
    is newer; writes through a temporary name, so a failed export leaves nothing half-written."""
    report = Path(report)
    sqlite = Path(sqlite) if sqlite else report.with_suffix(".sqlite")
    for existing in dict.fromkeys((sqlite, report.with_suffix(".sqlite"))):
        if existing.exists() and existing.stat().st_mtime >= report.stat().st_mtime:
            return existing
    nsys = require_nsys()
    partial = sqlite.with_name(sqlite.name + ".partial")
    partial.unlink(missing_ok=True)
    done = subprocess.run(
        [nsys, "export", "--type", "sqlite", "--lazy=false", "--force-overwrite=true",
         "-o", str(partial), str(report)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise InputError(f"nsys could not export {report}: {detail[-1] if detail else 'no output'}")
    partial.replace(sqlite)
    return sqlite


# `--capture-range` value that means the CUDA profiler API, not an NVTX range of that name.
PROFILER_API_RANGE = "cudaProfilerApi"


def capture_window_flags(nvtx_range: str | None = None, delay_s: float | None = None,
                         duration_s: float | None = None) -> list[str]:
    """nsys flags that collect only part of a long run: from the start to the end of the first
    instance of an NVTX range, or between the program's first cudaProfilerStart and Stop
    (`nvtx_range` "cudaProfilerApi", as TE's GEMM benchmark expects), the program then running on
    uncollected; or from `delay_s` for `duration_s` seconds."""
    flags = []
    if nvtx_range == PROFILER_API_RANGE:
        flags += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    elif nvtx_range is not None:
        flags += ["--capture-range=nvtx", f"--nvtx-capture={nvtx_range}", "--capture-range-end=stop"]
    if delay_s is not None:
        flags.append(f"--delay={delay_s:g}")
    if duration_s is not None:
        flags.append(f"--duration={duration_s:g}")
    return flags


def profile(command: list[str], report: Path, env: dict[str, str] | None = None,
            window: list[str] = ()) -> subprocess.CompletedProcess:
    """Run `command` under nsys profile, writing `report` (.nsys-rep), with the capture
    `window` flags (capture_window_flags). Its output and nsys's go to stderr, so that stdout
    holds only gemmscope's report (e.g. clean JSON); the exit status is returned for the caller
    to judge."""
    nsys = require_nsys()
    report = Path(report)
    report.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [nsys, "profile", *PROFILE_FLAGS, *window, "--force-overwrite=true", "-o", str(report.with_suffix("")),
         *command],
        env=env, check=False, stdout=sys.stderr,
    )
