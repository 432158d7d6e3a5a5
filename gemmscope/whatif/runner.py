"""The GPU side of `gemmscope whatif`: each group's module, at each of its shapes, forward and
backward at BF16 and at every low-precision recipe, the way the program runs it. Needs torch and
a GPU, and Transformer Engine or torchao for their groups.

    python -m gemmscope.whatif.runner SPEC.json

The protocol is `gemmscope profile`'s (gemmscope.plan.workload, run_marks): each timed loop inside a
process-wide NVTX start/end range (the backward's kernels are launched from torch's autograd
thread) ``gemmscope.gemm|op=<groups>|pass=fwd+bwd|precision=<recipe>|mode=<kind>|m=…|k=…|n=…|iters=…``
followed by a result mark with its CUDA-event median and IQR, or ``status=unsupported`` /
``status=failed`` with the library's own message; the reader (measure.read_measurement) takes the
kernels inside each range from the nsys trace. `m, k, n` are the module's tokens, in- and
out-features; `op` the groups that share the shape, joined by `+`; a grouped module's entry also
has ``m_splits=a,b,…``, its tokens per member GEMM (m their sum).

Kinds (`mode`): ``te-linear`` (te.Linear), ``te-layernorm-linear`` (te.LayerNormLinear, the
LayerNorm fused in as TE runs it), ``te-grouped-linear`` (te.GroupedLinear, one GEMM per
m_splits member, called with the m_splits as the program's MoE experts call it), each under
``te.autocast(recipe)`` (BF16: no autocast); ``torchao`` (an nn.Linear; low precision: torchao's
convert_to_float8_training with the recipe's Float8LinearConfig, as a torchao program converts it).
"""

from __future__ import annotations

import json
import sys

import torch

from gemmscope.plan.run_marks import PLAN_PREFIX
from gemmscope.plan.workload import Entry, run_entry, te_modules, te_recipe, warm_up_gpu
from gemmscope.whatif.measure import GROUPED_KIND

# torchao's recipe names (Float8LinearConfig.from_recipe_name) per whatif recipe.
TORCHAO_RECIPE_NAMES = {"fp8-tensorwise": "tensorwise", "fp8-rowwise": "rowwise"}
# torchao's float8 training needs FP8 tensor cores: compute capability 8.9 (Ada) or newer.
TORCHAO_MIN_CAPABILITY = (8, 9)


def _te_step(entry: Entry):
    te, _, _ = te_modules()
    if entry.mode == GROUPED_KIND:
        grouped = te.GroupedLinear(len(entry.m_splits), entry.k, entry.n, bias=False, params_dtype=torch.bfloat16)
        splits = list(entry.m_splits)

        def layer(x):
            return grouped(x, splits)
    else:
        layer = (te.LayerNormLinear if entry.mode == "te-layernorm-linear" else te.Linear)(
            entry.k, entry.n, bias=False, params_dtype=torch.bfloat16)
    x = torch.randn(entry.m, entry.k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(entry.m, entry.n, device="cuda", dtype=torch.bfloat16)
    recipe = te_recipe(entry.precision)

    def step():
        with te.autocast(enabled=recipe is not None, recipe=recipe):
            out = layer(x)
        out.backward(grad)

    return step


def _torchao_step(entry: Entry):
    layer = torch.nn.Sequential(torch.nn.Linear(entry.k, entry.n, bias=False)).to("cuda", torch.bfloat16)
    if entry.precision != "bf16":
        if torch.cuda.get_device_capability() < TORCHAO_MIN_CAPABILITY:
            raise RuntimeError("torchao float8 training is not supported below compute capability 8.9")
        try:
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        except ImportError as exc:
            raise RuntimeError(f"torchao float8 is not supported here: torchao is not installed ({exc})") from exc
        config = Float8LinearConfig.from_recipe_name(TORCHAO_RECIPE_NAMES[entry.precision])
        convert_to_float8_training(layer, config=config)
    x = torch.randn(entry.m, entry.k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(entry.m, entry.n, device="cuda", dtype=torch.bfloat16)

    def step():
        layer(x).backward(grad)

    return step


def _step(entry: Entry):
    return _torchao_step(entry) if entry.mode == "torchao" else _te_step(entry)


def entries(spec: dict) -> list[Entry]:
    """Recipe-major, then the spec's order: each recipe's memory is one stretch of the trace."""
    recipes = list(dict.fromkeys(r for item in spec["entries"] for r in item["recipes"]))
    return [Entry(item["group"], "fwd+bwd", item["m"], item["k"], item["n"], recipe, item["kind"], spec["iters"],
                  tuple(item.get("m_splits", ())))
            for recipe in recipes for item in spec["entries"] if recipe in item["recipes"]]


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    torch.cuda.nvtx.mark(PLAN_PREFIX + json.dumps({"whatif": spec["plan"]}, separators=(",", ":")))
    warm_up_gpu(spec["gpu_warmup_s"])
    results = []
    for entry in entries(spec):
        members = f" m_splits={','.join(map(str, entry.m_splits))}" if entry.m_splits else ""
        print(f"whatif: {entry.op} {entry.mode} {entry.precision} {entry.m}x{entry.k}x{entry.n}{members}", file=sys.stderr)
        # the backward runs on torch's autograd thread: process-wide ranges hold its kernels too
        results.append(run_entry(entry, spec["warmup"], make_step=_step, process_wide=True))
    major, minor = torch.cuda.get_device_capability()
    with open(spec["events_out"], "w") as f:
        json.dump({"results": results, "device": {"name": torch.cuda.get_device_name(), "sm": f"sm{major}{minor}"}},
                  f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
