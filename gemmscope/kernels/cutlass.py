"""The operands of CUTLASS's and CuTe's kernels as their names spell them: CUTLASS 2.x and 3.x
procedural names, CuTe MMA atoms, C++ element types (CUTLASS and CuTe DSL), and DeepGEMM, whose
templates name CUTLASS's element types."""

from __future__ import annotations

import re

from gemmscope.kernels.model import (
    DTYPE_ELSEWHERE,
    DTYPE_WORDS,
    FP8_TYPES,
    MIXED_PRECISIONS,
    UNKNOWN_OPERANDS,
    Operands,
    joined_precision,
    joined_scale_mode,
    precision_of,
)
from gemmscope.kernels.tokens import cute_dsl_callable

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
# cutlass3x_sm<arch>_<opclass>_<core>_<A>_<B>_<accumulate>_<C>_<D>_<tile>_..._<ABC layout>_align<n>...
# read token by token. The opclass is simt, tensorop, wmma_tensorop, sptensorop, bstensorop or
# bssptensorop (OpcodeClassNames in python/cutlass_library/library.py). The core token is
# GemmOperation.core_name: CUTLASS 3.x before v4.0 wrote <accumulate letter><MxNxK instruction
# shape><math type>gemm (s128x64x8tf32gemm, s64x128x32gemm, and sgemm for SIMT, which has no
# instruction shape: "s" is an FP32 accumulator), later releases only <math type>gemm (tf32gemm,
# gemm); the math type is written when the MMA consumes another type than A's (f32 operands
# multiplied as TF32 or BF16). A block-scaled operand reads <scale type>x<element> (ue8m0xe4m3) and a
# blockwise-scaled one <m>x<k><scale type>x<element> (1x128f32xe4m3).

_CUTLASS3 = re.compile(r"cutlass3x_sm\d+_((?:wmma_)?[a-z]*tensorop|simt)_(\w+)")
_CUTLASS3_CORE = re.compile(r"([sdhicz])?(?:\d+x\d+x\d+|\d+)?(?:fastaccum|xor|and)?(tf32|bf16|f16|f32|e4m3|e5m2)?((?:bssp|sp)?gemm)")
_CUTLASS3_OPERAND = re.compile(r"(?:(\d+)x(\d+))?(?:(ue8m0|ue4m3|f32)x)?([a-z0-9]+)")
_CUTLASS3_TILE = re.compile(r"\d+x\d+x\d+")


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
    if not match:
        return UNKNOWN_OPERANDS
    opclass, rest = match.groups()
    tokens = rest.split("_")
    core = _CUTLASS3_CORE.fullmatch(tokens[0])
    if not core:
        return UNKNOWN_OPERANDS
    # the operand tokens, A B accumulator C D, run from after the core (and a "block_scaled" or
    # "grouped" kind) to the tile; a name cut before the tile must still hold all five
    operands: list[str] = []
    end = 1
    while end < len(tokens) and (tokens[end] in {"block", "scaled", "grouped", "void"}
                                 or _cutlass3_operand(tokens[end])[0] is not None):
        if tokens[end] not in {"block", "scaled", "grouped"}:
            operands.append(tokens[end])
        end += 1
    tiled = end < len(tokens) and bool(_CUTLASS3_TILE.fullmatch(tokens[end]))
    if len(operands) < (4 if tiled else 5):
        return UNKNOWN_OPERANDS
    (a, a_mode), (b, b_mode) = _cutlass3_operand(operands[0]), _cutlass3_operand(operands[1])
    out, _ = _cutlass3_operand(operands[-1])
    layout = next((t[:2].upper() for t in tokens[end:] if re.fullmatch(r"[tn]{3}", t)), None)
    scale_mode = joined_scale_mode({mode for mode in (a_mode, b_mode) if mode is not None})
    accumulator, math_type = core.group(1), core.group(2)
    if a == b == "fp32" and math_type in {"tf32", "bf16", "f16"}:  # f32 operands multiplied as TF32 / BF16 / FP16
        precision = DTYPE_WORDS[math_type]
    elif opclass == "simt" and a == b and a in {"fp32", "fp16"} and scale_mode is None and accumulator in {"s", "h", None}:
        precision = a  # the CUDA cores' FFMA / HFMA2
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


# --- vLLM's CUTLASS scaled_mm kernels named by vLLM's own structs: the kernel is the struct's
# GemmKernel (struct GemmKernel : public KernelType {} in
# vllm-project/vllm csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_fp8_dispatch.cuh), so nsys and
# cuda-gdb name it cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<cutlass::float_e4m3_t,
# cutlass::bfloat16_t, vllm::c3x::ScaledEpilogue, <tile>, <cluster>, <schedules>, false>::GemmKernel>
# (vLLM's blog post on CUDA debugging, 2025-12-03). The struct's template arguments are ElementAB,
# ElementD and the epilogue. The ScaledEpilogue family (csrc/cutlass_extensions/epilogue/
# scaled_mm_epilogues_c3x.hpp) takes a scale per tensor or one per token of A and per channel of B,
# as the scale tensors' sizes say at run time: an FP8 name says FP8, not which scaling (fp8 or
# fp8-rowwise); int8 has one precision whatever its scales; a blockwise struct is DeepSeek's recipe.

VLLM_CUTLASS = re.compile(r"\bvllm::(cutlass_[23]x_(?:group_)?gemm(?:_[a-z0-9]+)*)<")
_VLLM_TYPE = re.compile(r"\s*([\w:]+(?: [\w:]+)?)")
_VLLM_ELEMENTS = {"cutlass::float_e4m3_t": "e4m3", "cutlass::float_e5m2_t": "e5m2", "signed char": "int8",
                  "int8_t": "int8", "char": "int8", "cutlass::bfloat16_t": "bf16", "cutlass::half_t": "fp16"}


def vllm_cutlass_operands(name: str) -> Operands:
    match = VLLM_CUTLASS.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    struct_words = set(match[1].split("_"))
    # the first two template arguments, each a type name ("cutlass::float_e4m3_t", "signed char")
    arguments = [_VLLM_TYPE.match(argument) for argument in name[match.end():match.end() + 400].split(",")[:2]]
    element, out = (_VLLM_ELEMENTS.get(a[1]) if a else None for a in arguments + [None] * (2 - len(arguments)))
    if element is None:
        return Operands("unknown", out_dtype=out, note="a vLLM CUTLASS GEMM whose element type is cut from the name")
    if element == "int8" or element in {"bf16", "fp16"}:
        return Operands(element, element, element, out)
    if "blockwise" in struct_words:
        return Operands("fp8-block", element, element, out, "block-2d")
    return Operands("unknown", element, element, out,
                    note="FP8 operands under vLLM's ScaledEpilogue, which scales per tensor or per token and "
                         "channel as its scale tensors say at run time: fp8 or fp8-rowwise, not in the name")


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
    r"|nv_float4_t|mx_float4_t|mx_float8_t|int4b_t|uint4b_t)")
_ELEMENT_KINDS = {
    "float_ue8m0_t": "ue8m0", "f8E8M0FNU": "ue8m0", "Float8E8M0FNU": "ue8m0", "float_ue4m3_t": "ue4m3",
    "float_e4m3_t": "e4m3", "f8E4M3FN": "e4m3", "Float8E4M3FN": "e4m3", "float_e5m2_t": "e5m2", "f8E5M2": "e5m2",
    "Float8E5M2": "e5m2", "f4E2M1FN": "e2m1", "Float4E2M1FN": "e2m1", "bfloat16_t": "bf16", "half_t": "fp16",
    "tfloat32_t": "tf32", "nv_float4_t": "nvfp4", "mx_float4_t": "mxfp4", "mx_float8_t": "mxfp8",
    "int4b_t": "int4", "uint4b_t": "int4",
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
    if not narrow and not scales and "int4" in kinds and len(kinds) == 2 and kinds - {"int4"} <= {"bf16", "fp16"}:
        # CUTLASS's mixed-input GEMMs: 16-bit activations against int4 weights (their group scales
        # share the 16-bit type), weight-only
        (dtype,) = kinds - {"int4"}
        return Operands(joined_precision(dtype, "int4"))
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


# A tensor or pointer argument spells its element type first: tensorptrf8E4M3FNgmemalign16o..., ptrf8E8M0FNU...
# (CuTe's str() of a tensor, punctuation dropped). Only the narrow types are read: they are operands
# or their scales, while a 16-bit or 32-bit tensor beside a TMA operand that spells none may be the
# output, a bias or the scales of another recipe.
_CUTE_DSL_NARROW_ARGUMENT = re.compile(r"(?<![A-Za-z0-9])(?:tensor)?ptr(f8E4M3FN|f8E5M2|f4E2M1FN|f8E8M0FNU)")


def cute_dsl_operands(name: str) -> Operands:
    spelled = " ".join(_CUTE_DSL_NARROW_ARGUMENT.findall(name))
    elements = element_operands(f"{name} {spelled}", dsl=True)
    if elements.precision == "unknown" and elements.note == "the name spells no element type":
        # a class launched with TMA atoms names its tiled MMA, not its operands' types
        note = ("a CuTe DSL block-scaled GEMM (MXFP8, MXFP4 or NVFP4): its data and scale types are arguments the name "
                "does not spell" if _CUTE_DSL_BLOCK_SCALED.search(name) else
                "a CuTe DSL GEMM whose name spells no operand type (a TMA operand's tensor spells none); " + DTYPE_ELSEWHERE)
        return Operands("unknown", note=note, dtype_in_name=False)
    return elements


# What a CuTe DSL quantize kernel quantizes to, by its callable's words (FlashInfer's
# NVFP4QuantizeSwizzledKernel, MXFP8QuantizeLinearKernel, MXFP4QuantizeSwizzledKernel).
_CUTE_DSL_QUANTIZE_TARGETS = (
    ("nvfp4", "e2m1", "nv-ue4m3-16"), ("mxfp4", "e2m1", "mx-ue8m0-32"), ("mxfp8", "e4m3", "mx-ue8m0-32"),
    ("fp4", "e2m1", None), ("fp8", "fp8", None),
)


def cute_dsl_quantize_operands(name: str) -> Operands:
    words = (cute_dsl_callable(name) or "").lower()
    target, mode = next(((t, m) for word, t, m in _CUTE_DSL_QUANTIZE_TARGETS if word in words), (None, None))
    return Operands(None, out_dtype=target, scale_mode=mode, note=f"quantizes to {target or 'a type the name does not spell'}")
