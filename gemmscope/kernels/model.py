"""What a kernel name can say: precisions, scale modes, roles, and the record of one decoded name
(KernelInfo), the operands a family's decoder reads (Operands) and a row of the table (Rule)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

PRECISIONS = (
    "fp32", "tf32", "bf16", "fp16", "fp8", "fp8-rowwise", "fp8-block", "mxfp8", "nvfp4", "mxfp4",
    "int8", "fp4", "mxfp4×mxfp8", "mxfp8×mxfp4", "bf16×mxfp4", "fp16×mxfp4", "bf16×int4", "fp16×int4",
    "unknown",
)
# "fp4": E2M1 operands whose name does not say whether their scales are MX (UE8M0 per 32) or NV
# (UE4M3 per 16). "a×b": A and B at different precisions: MXFP4 weights against MXFP8
# activations (TRT-LLM-gen's and DeepGEMM's MoE GEMMs), in the order the name gives them; and the
# weight-only GEMMs, 16-bit activations against MXFP4 or int4 weights (gpt-oss's MoE in
# triton_kernels and TRT-LLM-gen, CUTLASS's mixed-input GEMMs), written activations first
# whatever the name's order: the 16-bit operand is the activation, the narrow one the weight.
MIXED_PRECISIONS = frozenset(p for p in PRECISIONS if "×" in p)
WEIGHT_ONLY_PRECISIONS = frozenset(p for p in MIXED_PRECISIONS if p.split("×")[0] in {"bf16", "fp16"})
# How a GEMM's operands are scaled (KernelInfo.scale_mode): one scalar per tensor, one per row, FP32
# per 1x128 / 128x128 block, UE8M0 per 1x128 block (DeepGEMM on sm100), MX (UE8M0 per 32), NVFP4
# (UE4M3 per 16).
SCALE_MODES = ("tensor", "rowwise", "block-1d", "block-2d", "block-1d-ue8m0", "mx-ue8m0-32", "nv-ue4m3-16")
ROLES = ("gemm", "gemm-tail", "quantize", "attention", "other")


@dataclass(frozen=True)
class KernelInfo:
    """What one kernel name says about the kernel."""

    name: str  # the name as given
    family: str  # nvjet | xmma | cutlass | cublas | cublaslt | te | torch | triton | flash | cudnn | nccl | trtllm-gen | deepgemm | deepseek | cute-dsl | ... | unknown
    arch: str | None  # "sm90", "sm100", ... where the name encodes it
    role: str  # one of ROLES
    precision: str | None  # one of PRECISIONS for role gemm / gemm-tail, else None
    a_dtype: str | None  # operand and output element types where the name encodes them
    b_dtype: str | None
    out_dtype: str | None
    scale_mode: str | None  # "tensor", "rowwise", "block-1d", "block-2d", "mx-ue8m0-32", "nv-ue4m3-16"
    layout: str | None  # transpose letters of A and B, e.g. "TN"
    rule: str  # id of the rule that matched
    grouped: bool  # a grouped or batched GEMM (MoE experts, bmm) by its name; still role gemm
    note: str | None  # why a GEMM's precision is "unknown" or "fp4"; a quantize kernel's target
    # Whether the family's names spell a GEMM's operand types: False where they never do (Triton's
    # kernels, CuTe DSL classes launched with TMA atoms), so its precision must come from elsewhere
    # (the compiled kernel's signature, the operator's input types, the hook's record); True where
    # they do (a name cut short may still have lost them); None for a GEMM no rule places and for
    # kernels that are not GEMMs.
    dtype_in_name: bool | None


# The columns the reports' per-GEMM tables show (the three last fields came later and stay out of them).
TABLE_COLUMNS = ("family", "arch", "role", "precision", "a_dtype", "b_dtype", "out_dtype", "scale_mode", "layout",
                 "rule")


@dataclass(frozen=True)
class Operands:
    """What a name says about a kernel's arithmetic (nothing, for kernels that are not GEMMs)."""

    precision: str | None
    a_dtype: str | None = None
    b_dtype: str | None = None
    out_dtype: str | None = None
    scale_mode: str | None = None
    layout: str | None = None
    note: str | None = None
    dtype_in_name: bool | None = None  # None: as the rule says (Rule.dtype_in_name)


UNKNOWN_OPERANDS = Operands("unknown")
NOT_A_GEMM = Operands(None)
# Why a GEMM of a family whose names never spell the operand types has precision "unknown".
DTYPE_ELSEWHERE = ("the precision comes from elsewhere (the compiled kernel's signature, the operator's input types, "
                   "the hook's record)")


class Matcher(Protocol):
    """What a rule matches names with: a compiled regex, or a reader of a name's tokens
    (tokens.py). Either runs in time linear in the name."""

    def search(self, string: str) -> object: ...


@dataclass(frozen=True)
class Rule:
    """One row of the table: names matching ``pattern`` are kernels of ``family`` in ``role``."""

    id: str
    pattern: Matcher
    family: str
    role: str
    operands: Callable[[str], Operands] | None = None  # decodes the precision of gemm / gemm-tail names
    note: str | None = None  # why the family's names leave the precision unknown (or what they quantize to)
    dtype_in_name: bool | None = True  # whether the family's names spell a GEMM's operand types


FP8_TYPES = frozenset({"e4m3", "e5m2"})


def precision_of(a: str | None, b: str | None, scale_mode: str | None) -> str:
    """Precision of a GEMM from its operands' element types and how they are scaled (None: the name
    says no scaling)."""
    if a in FP8_TYPES and b in FP8_TYPES:
        return {
            None: "fp8",
            "tensor": "fp8",
            "rowwise": "fp8-rowwise",
            "block-1d": "fp8-block",
            "block-2d": "fp8-block",
            "mx-ue8m0-32": "mxfp8",
        }.get(scale_mode, "unknown")
    if a == b == "e2m1":
        # an unscaled FP4 GEMM (scale_mode None) is no key: it is "unknown"
        return {"nv-ue4m3-16": "nvfp4", "mx-ue8m0-32": "mxfp4"}.get(scale_mode, "unknown")  # type: ignore[arg-type]
    if a == b and a in {"bf16", "fp16", "int8"} and scale_mode is None:
        return a
    if a is not None and b is not None and {a, b} & {"bf16", "fp16"} and "int4" in {a, b}:
        return joined_precision(a, b)  # a 16-bit activation against int4 weights (CUTLASS's mixed input)
    return "unknown"


def joined_precision(a: str, b: str) -> str:
    """The precision of a GEMM whose operands run at precisions `a` and `b`: theirs when they agree,
    a mixed precision gemmscope knows ("mxfp4×mxfp8"), a weight-only one with the 16-bit operand
    first ("bf16×mxfp4" for MXFP4 × BF16 too), else "unknown"."""
    if a == b:
        return a
    for mixed in (f"{a}×{b}", f"{b}×{a}"):
        if mixed in WEIGHT_ONLY_PRECISIONS:
            return mixed
    mixed = f"{a}×{b}"
    return mixed if mixed in MIXED_PRECISIONS else "unknown"


# Element-type words as CUTLASS and xmma names spell them. CUTLASS's "f4" is its runtime-typed FP4,
# and E2M1 is the only FP4 format.
DTYPE_WORDS = {
    "tf32": "tf32", "bf16": "bf16", "f16": "fp16", "f32": "fp32", "e4m3": "e4m3", "e5m2": "e5m2",
    "e2m1": "e2m1", "f4": "e2m1", "s8": "int8", "s32": "int32", "s4": "int4",
}


def joined_scale_mode(modes: set[str]) -> str | None:
    """The scale mode of a GEMM from those of its operands: "block-2d" where 128x128 blocks on one
    operand meet 1x128 vectors on the other, "conflicting" for a mix no recipe makes."""
    if modes == {"block-2d", "block-1d"}:
        return "block-2d"
    if len(modes) > 1:
        return "conflicting"
    return next(iter(modes), None)
