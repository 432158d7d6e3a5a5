"""The operands of CUTLASS's and CuTe's kernels as their names spell them: CUTLASS 2.x and 3.x
procedural names, CuTe MMA atoms, C++ element types (CUTLASS and CuTe DSL), and DeepGEMM, whose
templates name CUTLASS's element types."""

from __future__ import annotations

import re

from gemmscope.kernels.model import (
    DTYPE_WORDS,
    FP8_TYPES,
    MIXED_PRECISIONS,
    UNKNOWN_OPERANDS,
    Operands,
    joined_precision,
    joined_scale_mode,
    precision_of,
)

# --- CUTLASS 2.x names (cutlass_library's procedural_name for arch < 90, and cuBLAS's cutlass_<arch>_
# copies): cutlass[_<arch>]_<opclass>_[<C>_]<accumulate><mma shape>[<math type>]gemm[_relu][_<A>]_<tile>..._
# <layout>_align<n>. cuBLAS's copies may name a fused ReLU epilogue after gemm:
# cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_* (RTX 4090 in pytorch/pytorch#181718),
# cutlass_80_tensorop_f16_s16816gemm_relu_f16_* (NVIDIA/cutlass#1025).

_CUTLASS2 = re.compile(
    r"cutlass(?:_\d\d)?_(tensorop|simt|wmma_tensorop|sptensorop)_"
    r"(?:(bf16|f16|f32|s32|s8|e4m3|e5m2)_)?([sdhi])(\d*)(tf32|bf16|f16)?gemm(?:_relu)?"
    r"(?:_(s8|u8|bf16|f16|f32|tf32|e4m3|e5m2))?_\d+x\d+(?:_\d+x\d+)?_([nt]{2})_align"
)
_ACCUMULATOR_LETTERS = {"s": "fp32", "h": "fp16", "i": "int32"}


def cutlass2_operands(name: str) -> Operands:
    match = _CUTLASS2.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    opclass, c_word, accumulator, _, math_word, a_word, layout = match.groups()
    accumulate = _ACCUMULATOR_LETTERS.get(accumulator)
    # The A type is spelled only when it differs from the accumulator type.
    a = DTYPE_WORDS.get(a_word) if a_word else accumulate
    if math_word == "tf32" or a == "tf32":
        precision = "tf32"
    elif a in {"bf16", "fp16", "int8"}:
        precision = a
    elif a in FP8_TYPES:
        precision = "fp8"
    elif a == "fp32" and opclass == "simt":
        precision = "fp32"
    else:
        precision = "unknown"
    out = DTYPE_WORDS.get(c_word) if c_word else accumulate
    return Operands(precision, a, a, out, None, layout.upper())


# --- CUTLASS 3.x names (cutlass_library's procedural_name for arch >= 90, and cuBLAS's cutlass3x_ copies):
# cutlass3x_sm<arch>_<opclass>_<core>gemm_<A>_<B>_<accumulate>_<C>_<D>_<tile>_..._<ABC layout>_align<n>...
# where a block-scaled operand reads <scale type>x<element> (ue8m0xe4m3) and a blockwise-scaled one
# <m>x<k><scale type>x<element> (1x128f32xe4m3).

_CUTLASS3 = re.compile(r"cutlass3x_sm\d+_[a-z]*tensorop_([a-z0-9]*?)gemm(?:_block_scaled)?_(\w+)")
_CUTLASS3_OPERAND = re.compile(r"(?:(\d+)x(\d+))?(?:(ue8m0|ue4m3|f32)x)?([a-z0-9]+)")


def _cutlass3_operand(token: str) -> tuple[str | None, str | None]:
    """Element type and scale mode of one operand token."""
    match = _CUTLASS3_OPERAND.fullmatch(token)
    if not match:
        return None, None
    rows, _, scale, element = match.groups()
    if scale == "ue8m0":
        mode = "mx-ue8m0-32"
    elif scale == "ue4m3":
        mode = "nv-ue4m3-16"
    elif scale == "f32" and rows:
        mode = "block-1d" if rows == "1" else "block-2d"
    else:
        mode = None
    return DTYPE_WORDS.get(element), mode


def cutlass3_operands(name: str) -> Operands:
    match = _CUTLASS3.search(name)
    tokens = match[2].split("_") if match else []
    if len(tokens) < 5:
        return UNKNOWN_OPERANDS
    assert match is not None  # without one there are no tokens
    (a, a_mode), (b, b_mode) = _cutlass3_operand(tokens[0]), _cutlass3_operand(tokens[1])
    out, _ = _cutlass3_operand(tokens[4])
    layout = next((t[:2].upper() for t in tokens[5:] if re.fullmatch(r"[tn]{3}", t)), None)
    scale_mode = joined_scale_mode({mode for mode in (a_mode, b_mode) if mode is not None})
    if match[1] == "tf32" and a == b == "fp32":  # f32 operands multiplied as TF32
        precision = "tf32"
    else:
        precision = precision_of(a, b, scale_mode)
    return Operands(precision, a, b, out, None if scale_mode == "conflicting" else scale_mode, layout)


# --- CUTLASS kernels named by their C++ template, as nsys demangles them: cutlass::Kernel<GemmKernel>
# (CUTLASS 2, include/cutlass/gemm/device/gemm.h; grouped: Kernel<BaseKernel> in base_grouped.h) and
# cutlass::device_kernel<GemmKernel> (CUTLASS 3, gemm_universal_adapter.h) in NVIDIA/cutlass@7107b05.
# A CuTe kernel names its MMA atom: SM80_16x8x16_F32BF16BF16F32_TN or SM90::GMMA::MMA_64x16x16_F32BF16BF16_SS
# spell <D><A><B>[<C>] (include/cute/arch/mma_sm80.hpp, mma_sm90_gmma.hpp). The A and B types give the
# precision, except for FP8: how an FP8 GEMM is scaled (per tensor, row, block) is not in the atom.

_CUTE_MMA_ATOM = re.compile(r"\b(?:SM80_|MMA_)\d+x\d+x\d+_([A-Z0-9]+)_[A-Z]{2}(?![A-Za-z0-9])")
_CUTE_TYPE_WORD = re.compile(r"BF16|TF32|F32|F16|E4M3|E5M2|S32|S8|U8")
_CUTE_TYPES = {
    "BF16": "bf16", "TF32": "tf32", "F32": "fp32", "F16": "fp16", "E4M3": "e4m3", "E5M2": "e5m2",
    "S32": "int32", "S8": "int8", "U8": "uint8",
}


def cute_atom_operands(name: str) -> Operands:
    match = _CUTE_MMA_ATOM.search(name)
    types = [_CUTE_TYPES[w] for w in _CUTE_TYPE_WORD.findall(match[1])] if match else []
    if len(types) < 3:
        return UNKNOWN_OPERANDS
    a, b = types[1], types[2]
    precision = a if a == b and a in {"bf16", "fp16", "tf32", "int8"} else "unknown"
    return Operands(precision, a, b)


# --- DeepGEMM (deepseek-ai/DeepGEMM@54e2261, deep_gemm/include/deep_gemm/impls/*.cuh), named by
# its kernel template, which says the operands and their scaling:
# - sm90_fp8_gemm_1d2d_impl: FP8 with FP32 scales per 1x128 block of A and 128x128 block of B
#   (csrc/apis/gemm.hpp dispatches it for FP32 scales whose B granularity is not 1): fp8-block;
# - sm90_fp8_gemm_1d1d_impl: FP32 scales per 1x128 block of both: fp8-block, block-1d;
# - fp8_gemm_kernel (DeepGEMM's first release, a6d97a1 deep_gemm/include/deep_gemm/fp8_gemm.cuh; and
#   fp8_gemm_kernel_swapAB of TRT-LLM's copy): the 1x128 / 128x128 FP32 recipe, fp8-block;
# - sm100_fp8_gemm_1d1d_impl and sm100_fp8_fp4_gemm_1d1d_impl<MajorA, MajorB, kGranKA, kGranKB, ...,
#   a_dtype_t, b_dtype_t, cd_dtype_t, ...>: UE8M0 scales packed in ints, one per kGranK elements
#   of K, kGranK 128 (FP8 block scaling, DeepSeek's recipe served with UE8M0 scales) or 32 (MX);
#   A and B cutlass::float_e4m3_t or FP4 (float_e2m1_unpacksmem_t). The granularities are template
#   arguments: a name cut before them says FP8 with UE8M0 scales but not which block size;
# - sm90/sm100_bf16_gemm_impl: BF16; sm90/sm100_tf32_hc_prenorm_gemm_impl: TF32.
# A GemmType other than Normal (0) is a grouped GEMM (MGroupedContiguous, MGroupedMasked, ...:
# deep_gemm/include/deep_gemm/common/types.cuh), as are the m_grouped / k_grouped entry points.

DEEPGEMM = re.compile(r"\b(?:deep_gemm::)?(?:(sm\d+)_(?:m_grouped_|k_grouped_)?(fp8_fp4|fp8|bf16|tf32)_\w*?gemm_?(1d1d|1d2d)?\w*?_impl|(fp8_gemm_kernel)\w*)<")
_TEMPLATE_ARGUMENT = re.compile(r"\(unsigned int\)(\d+)|\b(\d+)u\b")
_CUTLASS_ELEMENT = re.compile(r"cutlass::(?:detail::)?(float_e4m3_t|float_e5m2_t|float_e2m1\w*?_t|bfloat16_t|half_t)")
_CUTLASS_ELEMENTS = {"float_e4m3_t": "e4m3", "float_e5m2_t": "e5m2", "bfloat16_t": "bf16", "half_t": "fp16"}


def deepgemm_operands(name: str) -> Operands:
    match = DEEPGEMM.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    arch, kind, scaling, legacy = match.groups()
    if legacy or (arch == "sm90" and kind == "fp8" and scaling == "1d2d"):
        return Operands("fp8-block", "e4m3", "e4m3", None, "block-2d")
    if arch == "sm90" and kind == "fp8" and scaling == "1d1d":
        return Operands("fp8-block", "e4m3", "e4m3", None, "block-1d")
    if kind in {"bf16", "tf32"}:
        return Operands(kind, kind, kind)
    arguments = name[match.end():]
    types = [_CUTLASS_ELEMENTS.get(t, "e2m1") for t in _CUTLASS_ELEMENT.findall(arguments)]
    numbers = [int(a or b) for a, b in _TEMPLATE_ARGUMENT.findall(arguments)][:2]
    if len(types) < 3 or len(numbers) < 2:
        # the kernel template of the first sm100 release had no granularity nor A/B types, and
        # profilers cut names short: FP8 or FP4 with UE8M0 scales, block size not in the name
        return Operands("unknown", "e4m3" if kind == "fp8" else None, "e4m3" if kind == "fp8" else None,
                        note="DeepGEMM sm100: UE8M0 scales per 128 (FP8 block) or per 32 (MX) elements, "
                             "the block size a template argument the name does not show")
    a, b, out = types[:3]
    operand = {("e4m3", 128): "fp8-block", ("e4m3", 32): "mxfp8", ("e2m1", 32): "mxfp4"}
    pa, pb = operand.get((a, numbers[0]), "unknown"), operand.get((b, numbers[1]), "unknown")
    precision = joined_precision(pa, pb)
    if precision == "fp8-block":
        mode: str | None = "block-1d-ue8m0"
    elif precision in {"mxfp8", "mxfp4"} or precision in MIXED_PRECISIONS:
        mode = "mx-ue8m0-32"
    else:
        mode = None
    note = None if precision != "unknown" else f"{a} per {numbers[0]} x {b} per {numbers[1]}: no precision gemmscope reports"
    return Operands(precision, a, b, out, mode, None, note)


# --- CUTLASS kernels by their C++ element types, demangled (cutlass::float_e4m3_t) or mangled
# (_ZN7cutlass13device_kernel...NS_12float_e4m3_tE...), and CuTe DSL kernels by the MLIR type names their
# symbols may carry (f8E4M3FN, f4E2M1FN, f8E8M0FNU). CUTLASS's element types (include/cutlass/float8.h,
# float_subbyte.h, NVIDIA/cutlass@7107b05): float_e4m3_t, float_e5m2_t, float_e2m1_t, and the scale
# factor types float_ue8m0_t (MX) and float_ue4m3_t (NVFP4); its block-scaled Blackwell GEMMs pair an
# element with its scale type (nv_float4_t<float_e2m1_t> = E2M1 with UE4M3 per 16, mx_float4_t /
# mx_float8_t with UE8M0 per 32: examples/72_blackwell_narrow_precision_gemm). In CuTe DSL an NVFP4
# scale is Float8E4M3FN (f8E4M3FN) and an MX one Float8E8M0FNU (cutlass/cute/typing.py), so an E4M3
# type beside E2M1 data and no UE8M0 is the NVFP4 scale. A name that spells E2M1 and no scale type
# is FP4 whose scaling it does not tell ("fp4"); FP8 without a scale type or a blockwise mainloop
# (MainloopSm90TmaGmmaWarpSpecializedBlockScalingFP8, ...BlockwiseScaling) says no recipe: unknown.

_ELEMENT_WORDS = re.compile(
    r"(?<![A-Za-z])(float_ue8m0_t|float_ue4m3_t|float_e4m3_t|float_e5m2_t|float_e2m1\w*?_t|bfloat16_t|half_t|tfloat32_t"
    r"|f8E8M0FNU|f8E4M3FN|f8E5M2|f4E2M1FN|Float8E8M0FNU|Float8E4M3FN|Float8E5M2|Float4E2M1FN"
    r"|nv_float4_t|mx_float4_t|mx_float8_t)")
_ELEMENT_KINDS = {
    "float_ue8m0_t": "ue8m0", "f8E8M0FNU": "ue8m0", "Float8E8M0FNU": "ue8m0", "float_ue4m3_t": "ue4m3",
    "float_e4m3_t": "e4m3", "f8E4M3FN": "e4m3", "Float8E4M3FN": "e4m3", "float_e5m2_t": "e5m2", "f8E5M2": "e5m2",
    "Float8E5M2": "e5m2", "f4E2M1FN": "e2m1", "Float4E2M1FN": "e2m1", "bfloat16_t": "bf16", "half_t": "fp16",
    "tfloat32_t": "tf32", "nv_float4_t": "nvfp4", "mx_float4_t": "mxfp4", "mx_float8_t": "mxfp8",
}
_BLOCKWISE_MAINLOOP = re.compile(r"BlockScaling|BlockwiseScaling|GroupwiseScaling|FP8BlockScaledAccum")


def element_operands(name: str, *, dsl: bool = False) -> Operands:
    """Precision of a CUTLASS or CuTe DSL GEMM from the set of element types its name spells."""
    kinds = {_ELEMENT_KINDS.get(w, "e2m1") for w in _ELEMENT_WORDS.findall(name)}
    narrow = kinds & {"e4m3", "e5m2", "e2m1"}
    if dsl and "e2m1" in narrow and "ue8m0" not in kinds and "e4m3" in narrow:
        kinds, narrow = kinds - {"e4m3"} | {"ue4m3"}, {"e2m1"}  # CuTe DSL's NVFP4 scale type
    wrapped = kinds & {"nvfp4", "mxfp4", "mxfp8"}
    if len(wrapped) == 1:
        (precision,) = wrapped
        element = "e4m3" if precision == "mxfp8" else "e2m1"
        return Operands(precision, element, element, None, "mx-ue8m0-32" if precision != "nvfp4" else "nv-ue4m3-16")
    scales = kinds & {"ue8m0", "ue4m3"}
    if narrow == {"e2m1"}:
        if scales == {"ue4m3"}:
            return Operands("nvfp4", "e2m1", "e2m1", None, "nv-ue4m3-16")
        if scales == {"ue8m0"}:
            return Operands("mxfp4", "e2m1", "e2m1", None, "mx-ue8m0-32")
        if not scales:
            return Operands("fp4", "e2m1", "e2m1", note="fp4 (scale type unknown): E2M1 operands, and the name "
                                                        "spells no scale type (UE8M0 per 32: MX; UE4M3 per 16: NV)")
    if narrow and narrow <= FP8_TYPES:
        if scales == {"ue8m0"}:
            return Operands("mxfp8", None, None, None, "mx-ue8m0-32")
        if not scales and _BLOCKWISE_MAINLOOP.search(name):
            return Operands("fp8-block", None, None)
        if not scales:
            return Operands("unknown", note="FP8 operands; how they are scaled (tensor, row, block) is not in the name")
    if not narrow and not scales and len(kinds) == 1 and kinds <= {"bf16", "fp16", "tf32"}:
        (dtype,) = kinds
        return Operands(dtype, dtype, dtype)
    if not kinds:
        return Operands("unknown", note="the name spells no element type")
    return Operands("unknown", note=f"element types {', '.join(sorted(kinds))}: no single precision")


def cutlass_template_operands(name: str) -> Operands:
    """The CuTe MMA atom's A and B types where they give a precision, else the element types."""
    atom = cute_atom_operands(name)
    if atom.precision != "unknown":
        return atom
    elements = element_operands(name)
    return elements if elements.precision != "unknown" else atom


# CuTe DSL kernels are named kernel_cutlass_kernel_<module path><Class>_object_at__<arguments>
# (kernel_cutlass_kernel_flashinfergemmkernelsdense_blockscaled_gemm_sm100Sm100BlockScaledPersistentDenseGemmKernel_object_at__...
# in SGLang profiles of nvidia/DeepSeek-V3.2-NVFP4 on B200); the class says GEMM or attention.
_CUTE_DSL_BLOCK_SCALED = re.compile(r"BlockScaled|blockscaled")


def cute_dsl_operands(name: str) -> Operands:
    elements = element_operands(name, dsl=True)
    if elements.precision == "unknown" and _CUTE_DSL_BLOCK_SCALED.search(name) and elements.note == "the name spells no element type":
        return Operands("unknown", note="a CuTe DSL block-scaled GEMM (MXFP8, MXFP4 or NVFP4): its data and scale "
                                        "types are arguments the name does not spell")
    return elements
