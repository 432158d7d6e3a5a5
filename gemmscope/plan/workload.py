"""The GPU side of `gemmscope profile`: every GEMM of a plan through Transformer Engine, at each
recipe and mode, timed with CUDA events inside NVTX ranges. Needs torch, TE and a GPU.

    python -m gemmscope.plan.workload SPEC.json

The trace is the record: each timed loop runs inside an NVTX range
``gemmscope.gemm|op=…|pass=…|precision=…|mode=…|m=…|k=…|n=…|iters=…`` (an entry of a grouped
module, `gemmscope whatif`'s, with ``|m_splits=a,b,…`` before ``iters``) and is followed by an NVTX
mark ``gemmscope.result|<same keys>|status=ok|e2e_ms=<median>|e2e_iqr_ms=…|e2e_mean_ms=…``
(CUDA-event times per iteration); an entry that cannot run leaves only a mark with
``status=unsupported`` or ``status=failed`` and ``reason=<TE's message>`` (always last).
`gemmscope.plan.profile_run` reads all of it back from the trace alone.

Modes:
- ``autocast``: what training does, quantization included: a ``te.Linear(k, n)`` forward on an
  (m, k) input under ``te.autocast(recipe)`` (BF16: the same module without autocast);
- ``prequant``: operands quantized once with TE's quantizers, then only TE's GEMM is timed, with
  the operand layout each pass has inside TE (fprop TN, dgrad NN, wgrad NT).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass

import torch

from gemmscope.judging.recipes import RECIPES
from gemmscope.plan.run_marks import PLAN_PREFIX, RANGE_PREFIX, RESULT_PREFIX, WARMUP_PREFIX


@dataclass(frozen=True)
class Entry:
    op: str
    pass_: str
    m: int
    k: int
    n: int
    precision: str
    mode: str
    iters: int
    m_splits: tuple[int, ...] = ()  # a grouped module's tokens per member GEMM (m their sum)

    def label(self, prefix: str) -> str:
        splits = f"|m_splits={','.join(map(str, self.m_splits))}" if self.m_splits else ""
        return (f"{prefix}op={self.op}|pass={self.pass_}|precision={self.precision}|mode={self.mode}"
                f"|m={self.m}|k={self.k}|n={self.n}{splits}|iters={self.iters}")


def te_modules():
    """Transformer Engine's torch modules, its extension and its recipes, imported on first use."""
    import transformer_engine.pytorch as te
    import transformer_engine_torch as tex
    from transformer_engine.common import recipe

    return te, tex, recipe


def te_recipe(precision: str):
    """The TE recipe object for a precision (None for BF16: no autocast)."""
    if precision == "bf16":
        return None
    _, _, recipe = te_modules()
    return {
        "fp8-delayed": recipe.DelayedScaling,
        "fp8-current": recipe.Float8CurrentScaling,
        "fp8-block": recipe.Float8BlockScaling,
        "mxfp8": recipe.MXFP8BlockScaling,
        "nvfp4": recipe.NVFP4BlockScaling,
    }[precision]()


def unsupported_reason(precision: str) -> str | None:
    """TE's own reason why this GPU cannot run the recipe, or None (BF16: none, TE not needed)."""
    if precision == "bf16":
        return None
    te, _, _ = te_modules()
    check = {
        "bf16": None,
        "fp8-delayed": te.is_fp8_available,
        "fp8-current": te.is_fp8_available,
        "fp8-block": te.is_fp8_block_scaling_available,
        "mxfp8": te.is_mxfp8_available,
        "nvfp4": te.is_nvfp4_available,
    }[precision]
    if check is None:
        return None
    available, reason = check(return_reason=True)
    return None if available else reason


def _autocast_step(entry: Entry):
    te, _, _ = te_modules()
    layer = te.Linear(entry.k, entry.n, bias=False, params_dtype=torch.bfloat16)
    x = torch.randn(entry.m, entry.k, device="cuda", dtype=torch.bfloat16)
    if entry.precision == "bf16":
        return lambda: layer(x)
    recipe = te_recipe(entry.precision)

    def step():
        with te.autocast(enabled=True, recipe=recipe):
            return layer(x)

    return step


def _quantizer(precision: str, role: str):
    """TE's quantizer for one GEMM operand (`role`: weight, input or grad) under the recipe's
    defaults: HYBRID formats put gradients in E5M2, block scaling uses the recipe's 1D/2D dims."""
    te, tex, recipe_module = te_modules()
    recipe = te_recipe(precision)
    hybrid = getattr(recipe, "fp8_format", None) == recipe_module.Format.HYBRID
    fp8 = tex.DType.kFloat8E5M2 if (role == "grad" and hybrid) else tex.DType.kFloat8E4M3
    if precision == "fp8-delayed":
        return te.Float8Quantizer(torch.ones(1, device="cuda"), torch.zeros(1, device="cuda"), fp8)
    if precision == "fp8-current":
        return te.Float8CurrentScalingQuantizer(fp8, device=torch.device("cuda"))
    if precision == "fp8-block":
        dims = {"weight": recipe.w_block_scaling_dim, "input": recipe.x_block_scaling_dim,
                "grad": recipe.grad_block_scaling_dim}
        return te.Float8BlockQuantizer(fp8, rowwise=True, columnwise=True, block_scaling_dim=dims[role])
    if precision == "mxfp8":
        return te.MXFP8Quantizer(fp8)
    if precision == "nvfp4":
        return te.NVFP4Quantizer(tex.DType.kFloat4E2M1)
    raise ValueError(precision)


# Per pass: the plan's (m, k, n) as (tokens, in-features, out-features), and TE's operands and
# layout for that GEMM (TE's module/linear.py: fprop W·X "TN", dgrad W·dY "NN", wgrad X·dY "NT").
_PASS = {
    "fprop": (lambda m, k, n: (m, k, n), ("weight", "input"), "TN"),
    "dgrad": (lambda m, k, n: (m, n, k), ("weight", "grad"), "NN"),
    "wgrad": (lambda m, k, n: (k, m, n), ("input", "grad"), "NT"),
}


def _prequant_step(entry: Entry):
    from transformer_engine.pytorch.cpp_extensions import general_gemm

    dims, roles, layout = _PASS[entry.pass_]
    tokens, in_features, out_features = dims(entry.m, entry.k, entry.n)
    shape = {"weight": (out_features, in_features), "input": (tokens, in_features),
             "grad": (tokens, out_features)}
    operands = []
    for role in roles:
        t = torch.randn(*shape[role], device="cuda", dtype=torch.bfloat16)
        operands.append(t if entry.precision == "bf16" else _quantizer(entry.precision, role).quantize(t))
    a, b = operands
    grad = entry.pass_ != "fprop"
    return lambda: general_gemm(a, b, out_dtype=torch.bfloat16, layout=layout, grad=grad)


def _classify(exc: BaseException) -> str:
    """TE states combinations a GPU cannot run as "... supported ..."; anything else failed."""
    text = str(exc)
    return "unsupported" if "supported" in text or "compute capability" in text else "failed"


def _open_range(label: str, process_wide: bool):
    """Push an NVTX range; returns what closes it. `process_wide`: a start/end range, which holds
    the kernels every thread of the process launches while it is open (a backward pass runs on
    torch's autograd thread), not a push/pop range of this thread alone."""
    if process_wide:
        handle = torch.cuda.nvtx.range_start(label)
        return lambda: torch.cuda.nvtx.range_end(handle)
    torch.cuda.nvtx.range_push(label)
    return torch.cuda.nvtx.range_pop


def run_entry(entry: Entry, warmup: int, make_step=None, process_wide: bool = False) -> str:
    """Time one entry; returns its result mark, which it also leaves in the trace. `make_step`
    builds the timed step from the entry (default: by its mode, autocast or prequant); a
    precision that is no TE recipe (torchao's) is left to the step to refuse. `process_wide`:
    the ranges are start/end ranges (_open_range), for a step that runs a backward pass."""
    result: dict[str, str | float] = {"status": "ok"}
    reason = unsupported_reason(entry.precision) if entry.precision in RECIPES else None
    if reason is not None:
        result = {"status": "unsupported", "reason": reason}
    else:
        try:
            step = (make_step or (_autocast_step if entry.mode == "autocast" else _prequant_step))(entry)
            close = _open_range(entry.label(WARMUP_PREFIX), process_wide)
            for _ in range(warmup):
                step()
            close()
            torch.cuda.synchronize()
            events = [torch.cuda.Event(enable_timing=True) for _ in range(entry.iters + 1)]
            close = _open_range(entry.label(RANGE_PREFIX), process_wide)
            events[0].record()
            for i in range(entry.iters):
                step()
                events[i + 1].record()
            close()
            torch.cuda.synchronize()
            times = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
            q1, _, q3 = statistics.quantiles(times, n=4)
            result.update(e2e_ms=statistics.median(times), e2e_iqr_ms=q3 - q1,
                          e2e_mean_ms=statistics.fmean(times))
        except Exception as exc:  # reported per entry, the sweep goes on
            torch.cuda.synchronize()
            message = " ".join(str(exc).split())[:300] or type(exc).__name__
            result = {"status": _classify(exc), "reason": f"{type(exc).__name__}: {message}"}
        finally:
            torch.cuda.empty_cache()
    # "reason" goes last: it is free text
    result = {k: v for k, v in result.items() if k != "reason"} | (
        {"reason": result["reason"]} if "reason" in result else {})
    mark = entry.label(RESULT_PREFIX) + "".join(f"|{k}={v}" for k, v in result.items())
    torch.cuda.nvtx.mark(mark)
    return mark


def entries_from_spec(spec: dict) -> list[Entry]:
    """Mode-major, then precision, then the plan's order: each precision's GPU memory is one
    contiguous stretch of the trace."""
    return [
        Entry(g["op"], g["pass"], g["m"], g["k"], g["n"], precision, mode, spec["iters"])
        for mode in spec["modes"]
        for precision in spec["precisions"]
        for g in spec["gemms"]
    ]


def warm_up_gpu(seconds: float) -> None:
    """Sustained BF16 matmuls so clocks settle before the first timed loop."""
    import time

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def main(spec_path: str) -> None:
    from rich.progress import Progress

    with open(spec_path) as f:
        spec = json.load(f)
    assert all(p in RECIPES for p in spec["precisions"])
    entries = entries_from_spec(spec)
    plan = {k: spec[k] for k in ("model", "num_layers", "gemms")}
    torch.cuda.nvtx.mark(PLAN_PREFIX + json.dumps(plan, separators=(",", ":")))
    warm_up_gpu(spec["gpu_warmup_s"])
    results = []
    with Progress(transient=False) as progress:
        task = progress.add_task("GEMMs", total=len(entries))
        for entry in entries:
            progress.update(task, description=f"{entry.mode} {entry.precision:<11} {entry.pass_} {entry.op}")
            results.append(run_entry(entry, spec["warmup"]))
            progress.advance(task)
    # the same result marks as in the trace, for runs without nsys
    with open(spec["events_out"], "w") as f:
        json.dump({"plan": plan, "results": results, "device": _device()}, f, indent=1)


def _device() -> dict:
    major, minor = torch.cuda.get_device_capability()
    return {"name": torch.cuda.get_device_name(), "sm": f"sm{major}{minor}"}


def canary() -> None:
    """`gemmscope doctor --canary`'s workload: a plain torch.nn.Linear inside an FP8 autocast
    runs a BF16 GEMM, next to a te.Linear that runs FP8."""
    te, _, _ = te_modules()
    te_layer = te.Linear(256, 256, bias=False, params_dtype=torch.bfloat16)
    planted = torch.nn.Linear(256, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    with te.autocast(enabled=True, recipe=te_recipe("fp8-current")):
        planted(te_layer(x))
    torch.cuda.synchronize()


if __name__ == "__main__":
    canary() if sys.argv[1] == "canary" else main(sys.argv[1])
