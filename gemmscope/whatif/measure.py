"""What `gemmscope whatif` measures on a GPU, how it runs the measurement and how it reads it back.

`plan` lists, per group, the module kind and the shapes to time and the recipes to time them at,
or why a group cannot be measured (a grouped GEMM whose member shapes the trace does not hold, a
module no shape was recorded for); a grouped module (TE GroupedLinear) is timed with the m_splits
that stand for its calls (groups.py). `run` runs gemmscope.whatif.runner under nsys into a new
folder (`gemmscope profile`'s way: nsys_runner, the run_marks protocol); `read_measurement`
reads that folder's trace back, anywhere, without a GPU: per (group, shape, recipe) the CUDA-event
median and IQR, and, from the kernels inside the timed range, the GEMM kernel time, the
quantization kernel time and the precision of the GEMM kernel that ran.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope.errors import InputError
from gemmscope.judging.recipes import RECIPES
from gemmscope.plan.profile_run import RUN_TRACES, parse_label, range_label, timed_ranges
from gemmscope.plan.run_marks import PLAN_PREFIX, RESULT_PREFIX
from gemmscope.traces.read import read_trace
from gemmscope.whatif.groups import RunGroups

# The recipes each kind of module is timed at: TE's recipes for TE programs (one the GPU cannot
# run is recorded as unsupported with TE's reason); torchao's float8 recipes for torchao and plain
# torch programs (the change for those is a torchao module filter).
TE_RECIPES = RECIPES
TORCHAO_RECIPES = ("bf16", "fp8-tensorwise", "fp8-rowwise")
# Module classes timed as te.LayerNormLinear (the LayerNorm fused in); other linears as te.Linear.
_LAYERNORM_LINEAR = {"LayerNormLinear", "TELayerNormColumnParallelLinear"}
_GROUPED = {"GroupedLinear", "TEGroupedLinear"}
GROUPED_KIND = "te-grouped-linear"
UNRECORDED_MEMBERS = "a grouped GEMM: the trace holds its summed FLOPs, not its members' shapes"
RESULT_COLUMNS = ["group", "m", "k", "n", "recipe", "kind", "status", "reason", "e2e_ms", "e2e_iqr_ms",
                  "gemm_ms", "quant_ms", "kernel", "kernel_precision"]
SPEC_NAME = "whatif-spec.json"


def kind_of(module_class: str, framework: str) -> str | None:
    """The runner's module kind for a group (runner docstring)."""
    if framework in ("torchao", "torch"):
        return "torchao"
    classes = set(module_class.split("/"))
    if classes & _GROUPED:
        return GROUPED_KIND
    return "te-layernorm-linear" if classes & _LAYERNORM_LINEAR else "te-linear"


def plan(run: RunGroups) -> pd.DataFrame:
    """Per group and distinct module shape: what the runner times (kind, recipes; m_splits for a
    grouped module), or, in `unmeasurable`, why it cannot (never a time of zero); a grouped module
    whose members the trace does not hold has no kind: the runner cannot build it."""
    shapes = run.shapes.merge(run.groups[["group", "name", "module_class"]], on="group")
    shapes["kind"] = shapes["module_class"].map(lambda c: kind_of(c, run.framework))
    unrecorded = (shapes["kind"] == GROUPED_KIND) & shapes["m_splits"].isna()
    shapes.loc[unrecorded, "kind"] = None
    missing = shapes[["tokens", "in_features", "out_features"]].isna().any(axis=1)
    shapes["unmeasurable"] = np.select(
        [unrecorded.to_numpy(), missing.to_numpy()],
        [UNRECORDED_MEMBERS, "no shape recorded for this module's GEMMs"], default="")
    shapes["unmeasurable"] = shapes["unmeasurable"].replace("", None)
    recipes = TORCHAO_RECIPES if run.framework in ("torchao", "torch") else TE_RECIPES
    shapes["recipes"] = [list(recipes)] * len(shapes)
    return shapes


def spec(planned: pd.DataFrame, run: RunGroups, iters: int, warmup: int) -> dict:
    """The runner's spec: each distinct (module kind, shape) timed once, under an `op` naming every
    group that shares it (g2+g5: the reader gives each its own rows); a grouped module's entry
    with its `m_splits` (tokens per member GEMM)."""
    ok = planned[planned["unmeasurable"].isna()].astype({"tokens": "int64", "in_features": "int64",
                                                         "out_features": "int64"})
    ok = ok.assign(m_splits=ok["m_splits"].fillna(""))
    shared = ok.groupby(["kind", "tokens", "in_features", "out_features", "m_splits"], sort=False).agg(
        op=("group", "+".join), recipes=("recipes", "first")).reset_index()
    entries = [{"group": op, "kind": kind, "m": int(m), "k": int(k), "n": int(n), "recipes": list(recipes)}
               | ({"m_splits": [int(t) for t in splits.split(",")]} if splits else {})
               for op, kind, m, k, n, recipes, splits in zip(
                   shared["op"], shared["kind"], shared["tokens"], shared["in_features"], shared["out_features"],
                   shared["recipes"], shared["m_splits"])]
    return {"plan": {"framework": run.framework, "trace_gpu": run.gpu, "groups": run.groups["name"].tolist()},
            "entries": entries, "iters": iters, "warmup": warmup, "gpu_warmup_s": 3.0}


def measuring_possible(framework: str) -> str | None:
    """Why this machine cannot measure (no GPU, no TE for a TE program), or None."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch is not installed here"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU here"
    if framework not in ("torchao", "torch") and importlib.util.find_spec("transformer_engine") is None:
        return "Transformer Engine is not installed here"
    return None


def run(measure_spec: dict, out: Path) -> Path:
    """Run the runner under nsys into the new folder `out` (appears only once complete: gpu_profile.run_module)."""
    from gemmscope.plan.gpu_profile import run_module

    return run_module("gemmscope.whatif.runner", measure_spec, out, SPEC_NAME, "the whatif measurement")


def read_measurement(folder: Path) -> tuple[pd.DataFrame, dict]:
    """A measurement folder read back from its trace: RESULT_COLUMNS, one row per (group, shape,
    recipe) result mark; and the GPU it ran on (name, sm)."""
    trace_path = next((folder / name for name in RUN_TRACES if (folder / name).exists()), None)
    if trace_path is None:
        raise InputError(f"{folder} holds no trace.sqlite: not a gemmscope whatif measurement")
    trace = read_trace(trace_path)
    marks = trace.nvtx.loc[trace.nvtx["kind"] == "mark", "name"].dropna()
    if not marks.str.startswith(PLAN_PREFIX + '{"whatif"').any():
        raise InputError(f"{trace_path} is not a gemmscope whatif measurement (no whatif plan mark)")
    results = [parse_label(name) for name in marks[marks.str.startswith(RESULT_PREFIX)]]
    if not results:
        raise InputError(f"{trace_path} holds no whatif result: the runner stopped before its first module")
    rows = pd.DataFrame(results).rename(columns={"op": "group", "precision": "recipe", "mode": "kind"})
    rows["label"] = [range_label(r) for r in results]
    rows = rows.join(_kernels_per_range(trace), on="label")
    rows = rows.assign(group=rows["group"].str.split("+")).explode("group", ignore_index=True)  # shared shapes
    for column in RESULT_COLUMNS:
        if column not in rows:
            rows[column] = np.nan
    gpu = trace.meta["gpus"][0] if trace.meta.get("gpus") else {"name": None, "sm": None}
    return rows[RESULT_COLUMNS], {"name": gpu["name"], "sm": gpu["sm"]}


def _kernels_per_range(trace) -> pd.DataFrame:
    """Per timed range (its label): GEMM and quantization kernel ms per iteration, and the GEMM
    kernel and precision met most (profile_run.timed_ranges); a range that launched no GEMM has no
    GEMM time, never 0."""
    ranges = pd.DataFrame.from_dict(timed_ranges(trace), orient="index",
                                    columns=["kernel_ms", "quantize_ms", "kernel", "precision", "gemm_launches"])
    return pd.DataFrame({"gemm_ms": ranges["kernel_ms"].where(ranges["gemm_launches"] > 0),
                         "quant_ms": ranges["quantize_ms"], "kernel": ranges["kernel"],
                         "kernel_precision": ranges["precision"]})
