"""`gemmscope doctor`: what this machine can run and capture, each check with its reason."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import pandas as pd

from gemmscope.common import scratch
from gemmscope.profilers import nsys_runner

# TE's availability checks, one per recipe (each returns (available, reason)).
_TE_RECIPE_CHECKS = (
    ("fp8-delayed / fp8-current", "is_fp8_available"),
    ("fp8-block", "is_fp8_block_scaling_available"),
    ("mxfp8", "is_mxfp8_available"),
    ("nvfp4", "is_nvfp4_available"),
)


def checks() -> pd.DataFrame:
    rows = []
    nsys = nsys_runner.find_nsys()
    rows.append(("nsys", "ok" if nsys else "missing",
                 f"{nsys}: {nsys_runner.nsys_version(nsys)}" if nsys else "set NSYS or put nsys on PATH"))
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        rows.append(("torch", "missing", "pip install 'gemmscope[gpu]' to profile; analysis works without"))
        return pd.DataFrame(rows, columns=["check", "status", "detail"])
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        rows.append(("gpu", "ok", f"{torch.cuda.get_device_name()} sm{major}{minor}, torch {torch.__version__}"))
    else:
        rows.append(("gpu", "missing", f"torch {torch.__version__} sees no CUDA GPU"))
    try:
        te = importlib.import_module("transformer_engine.pytorch")
    except Exception as exc:  # TE raises more than ImportError when its libraries don't load
        rows.append(("transformer_engine", "missing", f"{type(exc).__name__}: {exc}".splitlines()[0]))
        return pd.DataFrame(rows, columns=["check", "status", "detail"])
    version = getattr(importlib.import_module("transformer_engine"), "__version__", "?")
    rows.append(("transformer_engine", "ok", version))
    for recipe, check in _TE_RECIPE_CHECKS:
        available, reason = getattr(te, check)(return_reason=True)
        rows.append((f"recipe {recipe}", "ok" if available else "unsupported", reason or "available"))
    return pd.DataFrame(rows, columns=["check", "status", "detail"])


@dataclass
class CanaryResult:
    ok: bool
    message: str


def canary_missing(checked: pd.DataFrame) -> str | None:
    """What the canary needs and this machine lacks (nsys, torch with a CUDA GPU, Transformer
    Engine), by the rows of `checks()`, in one line; None when it can run."""
    rows = checked.set_index("check")
    for check in ("nsys", "torch", "gpu", "transformer_engine"):
        if check in rows.index and rows.at[check, "status"] != "ok":
            return f"{check}: {rows.at[check, 'detail']}"
    if "transformer_engine" not in rows.index:  # checks() stopped before it: no GPU or no torch
        return "Transformer Engine was not checked"
    return None


def canary() -> CanaryResult:
    """Plant a BF16 GEMM (a torch.nn.Linear inside an FP8 te.autocast), capture it with nsys and
    check that gemmscope's own detector flags it: proof the check works on this machine."""
    import sys
    import tempfile
    from pathlib import Path

    from gemmscope.judging import judgement
    from gemmscope.traces.read import read_trace

    report = Path(tempfile.mkdtemp(dir=scratch.folder())) / "canary.nsys-rep"
    done = nsys_runner.profile([sys.executable, "-m", "gemmscope.plan.workload", "canary"], report,
                               dict(os.environ, NVTE_NVTX_ENABLED="1"))
    if done.returncode != 0 or not report.exists():
        return CanaryResult(False, f"canary: the planted workload failed (exit {done.returncode})")
    result = judgement.judge(read_trace(nsys_runner.export_sqlite(report)), "fp8-current")
    planted = result.mismatches[result.mismatches["origin"] == "outside-te"]
    if len(planted):
        return CanaryResult(True, f"canary: planted BF16 GEMM flagged as FALLBACK ({planted['name'].iat[0]}, "
                                  f"{len(result.gemms)} GEMM launches checked)")
    return CanaryResult(False, "canary: the planted BF16 GEMM was NOT flagged")
