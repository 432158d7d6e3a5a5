"""The recipe tables: which recipes there are and what each runs, in one place.

verify judges GEMMs by them, profile and the plots name a recipe's peak by them, the GPU side of
profile (workload) checks what it was asked against them, and diagnosis says which recipes a GPU
cannot run. Plain data, no pandas: the workload, which runs on the GPU, imports it cheaply.
"""

from __future__ import annotations

from gemmscope.errors import InputError

RECIPES = ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")

# The GEMM precisions each recipe runs (kernel precisions as `kernels` names them).
RECIPE_PRECISIONS = {
    "bf16": {"bf16"},
    "fp8-delayed": {"fp8"},
    "fp8-current": {"fp8"},
    "fp8-block": {"fp8-block"},
    "mxfp8": {"mxfp8"},
    "nvfp4": {"nvfp4"},
}
# (what was asked, dispatched precision): lowest SM generation where it is by design: TE runs FP8
# block scaling as MXFP8 on sm100+; PyTorch runs an FP32 GEMM in TF32 when the program allows it
# (torch.backends.cuda.matmul.allow_tf32).
EXPECTED_SUBSTITUTIONS = {("fp8-block", "mxfp8"): 100, ("fp32", "tf32"): 0}
# A row-wise float8 request that torchao runs as a tensor-wise _scaled_mm plus a rescale of its
# own (float8_ops.addmm_float8_unwrapped, when use_fast_accum is off; the hook records the scaling
# as "rowwise-rescaled"): the tensor-wise kernel is what that request runs.
RESCALED = ("fp8-rowwise", "fp8", "rowwise-rescaled")
# Precisions a GEMM asked for that are high precision: GEMMs asked so are coverage, not dispatch.
HIGH_PRECISIONS = ("bf16", "fp16", "fp32", "tf32", "fp64")

# TE recipe classes as the autocast hook records them (`gemmscope.autocast(recipe=<class>)`).
RECIPE_BY_CLASS = {
    "DelayedScaling": "fp8-delayed",
    "Float8CurrentScaling": "fp8-current",
    "Float8BlockScaling": "fp8-block",
    "MXFP8BlockScaling": "mxfp8",
    "NVFP4BlockScaling": "nvfp4",
}
# The lowest SM generation each recipe runs on (TE: MXFP8 and NVFP4 need compute capability 10.0).
RECIPE_MIN_SM = {"mxfp8": 100, "nvfp4": 100}


def recipe_precision(recipe: str) -> str:
    """The kernel precision a recipe's GEMMs run at (RECIPE_PRECISIONS): the precision
    whose peak, ridge point and operand size apply to the recipe's rows."""
    if recipe not in RECIPE_PRECISIONS:
        raise InputError(f"the run used recipe {recipe!r}, which gemmscope does not know ({', '.join(RECIPES)})")
    # One precision per recipe today; a recipe with several would need a rule for which peak applies.
    (precision,) = RECIPE_PRECISIONS[recipe]
    return precision
