"""`gemmscope profile` on a GPU: writes a spec of the plan's GEMMs, runs `gemmscope.plan.workload`
(under nsys unless told not to) into a new run directory and exports its trace, which
gemmscope.plan.profile_run reads back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gemmscope.errors import InputError
from gemmscope.judging.recipes import RECIPES
from gemmscope.plan import shapes
from gemmscope.plan.model_config import ModelConfig
from gemmscope.plan.profile_run import MODES

if TYPE_CHECKING:
    from gemmscope.profilers.relay import Capture


def spec_for(config: ModelConfig, plan: list[shapes.Gemm], precisions, modes, iters, warmup) -> dict:
    return {
        "model": config.name,
        "num_layers": config.num_layers,
        "gemms": [g.as_dict() for g in plan],
        "precisions": list(precisions),
        "modes": list(modes),
        "iters": iters,
        "warmup": warmup,
        "gpu_warmup_s": 3.0,
    }


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def run(spec: dict, out: Path, use_nsys: bool = True) -> Path:
    """Run the workload (under nsys unless told not to) into a new run directory `out`; it
    appears only once complete (built as `out.partial`)."""
    for p in spec["precisions"]:
        if p not in RECIPES:
            raise InputError(f"unknown precision {p!r}: choose from {', '.join(RECIPES)}")
    for m in spec["modes"]:
        if m not in MODES:
            raise InputError(f"unknown mode {m!r}: choose from {', '.join(MODES)}")
    return run_module("gemmscope.plan.workload", spec, out, use_nsys=use_nsys, memory_usage=True)


def run_module(module: str, spec: dict, out: Path, spec_name: str = "spec.json", what: str = "the workload",
               use_nsys: bool = True, memory_usage: bool = False) -> Path:
    """`python -m MODULE SPEC` into the new folder `out`, which appears only once complete (built as
    `out.partial`, removed on any failure): `spec` written there first as `spec_name`, with
    `events_out` (where the program writes its CUDA-event times); the program run under nsys
    (`memory_usage`: GPU memory too) and its trace exported, or without nsys. `what`: the program,
    as its failure names it. `gemmscope profile` and `gemmscope whatif` measure this way."""
    if out.exists():
        raise InputError(f"{out} exists: give a new folder")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    (partial / spec_name).write_text(json.dumps(dict(spec, events_out=str(partial / "events.json")), indent=1))
    command = [sys.executable, "-m", module, str(partial / spec_name)]
    done: Capture | subprocess.CompletedProcess[bytes]  # how the program ended, under nsys or not
    try:
        if use_nsys:
            from gemmscope.profilers import nsys_runner

            done = nsys_runner.profile(command, partial / "trace.nsys-rep", dict(os.environ),
                                       memory_usage=memory_usage)
            if done.returncode != 0:
                raise InputError(f"{what} failed under nsys (exit {done.returncode}): see its output above")
            nsys_runner.export_sqlite(partial / "trace.nsys-rep")
        else:
            done = subprocess.run(command, check=False)
            if done.returncode != 0:
                raise InputError(f"{what} failed (exit {done.returncode}): see its output above")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(out)
    return out
