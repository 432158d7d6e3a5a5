"""Everything gemmscope knows about CUDA kernel names, as one ordered table of rules.

A trace names each kernel; this module says what the kernel is: which library it comes from, what it
does (a GEMM, the tail of one, a quantization step, attention, anything else) and, for GEMMs, the
precision the name encodes. No other module matches kernel names.

``RULES`` is read top to bottom and the first rule whose pattern matches wins, so specific shapes
come before general ones. Each rule's comment says where the evidence for it comes from: "seen on
H200" means a name in a trace captured by this project on an H200 with cuBLAS 13; everything else
cites a public source (docs/kernel-names.md has the same table with links). A name is never guessed
into a precision: a GEMM whose name does not say is precision "unknown".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np
import pandas as pd

PRECISIONS = (
    "fp32", "tf32", "bf16", "fp16", "fp8", "fp8-rowwise", "fp8-block", "mxfp8", "nvfp4", "mxfp4",
    "int8", "fp4", "mxfp4×mxfp8", "mxfp8×mxfp4", "unknown",
)
# "fp4": E2M1 operands whose name does not say whether their scales are MX (UE8M0 per 32) or NV
# (UE4M3 per 16). "a×b": A and B at different precisions (MXFP4 weights against MXFP8
# activations in TRT-LLM-gen's and DeepGEMM's MoE GEMMs), in the order the name gives them.
MIXED_PRECISIONS = frozenset(p for p in PRECISIONS if "×" in p)
# How a GEMM's operands are scaled (KernelInfo.scale_mode): one scalar per tensor, one per row, FP32
# per 1x128 / 128x128 block, UE8M0 per 1x128 block (DeepGEMM on sm100), MX (UE8M0 per 32), NVFP4
# (UE4M3 per 16).
SCALE_MODES = ("tensor", "rowwise", "block-1d", "block-2d", "block-1d-ue8m0", "mx-ue8m0-32", "nv-ue4m3-16")
ROLES = ("gemm", "gemm-tail", "quantize", "attention", "other")


@dataclass(frozen=True)
class KernelInfo:
    """What one kernel name says about the kernel."""

    name: str  # the name as given
    family: str  # nvjet | xmma | cutlass | cublas | cublaslt | te | torch | triton | flash | cudnn | nccl | unknown
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


# The columns the reports' per-GEMM tables show (the two last fields came later and stay out of them).
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


UNKNOWN_OPERANDS = Operands("unknown")
NOT_A_GEMM = Operands(None)


@dataclass(frozen=True)
class Rule:
    """One row of the table: names matching ``pattern`` are kernels of ``family`` in ``role``."""

    id: str
    pattern: re.Pattern[str]
    family: str
    role: str
    operands: Callable[[str], Operands] | None = None  # decodes the precision of gemm / gemm-tail names
    note: str | None = None  # why the family's names leave the precision unknown (or what they quantize to)


_FP8 = frozenset({"e4m3", "e5m2"})


def _precision(a: str | None, b: str | None, scale_mode: str | None) -> str:
    """Precision of a GEMM from its operands' element types and how they are scaled (None: the name
    says no scaling)."""
    if a in _FP8 and b in _FP8:
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
    return "unknown"


# --- nvjet (cuBLAS 12.8+ / 13): nvjet_[sm<arch>_]<types>_<tile>_<stages>_<cluster>_<variants>_<layout>

# One letter per type in the type code: <A><B><C><compute><D>, or <AB><compute><D> when A and B share
# a type. t/h/q/r are measured on H200 (tst = BF16, hsh = FP16, qqtst = FP8 e4m3, qrtst = e4m3 x
# e5m2); o is E2M1 (the NVFP4 names below); s is cuBLAS's letter for fp32 (cublasSgemm).
_NVJET_TYPE_LETTERS = {"t": "bf16", "h": "fp16", "s": "fp32", "q": "e4m3", "r": "e5m2", "o": "e2m1"}

# Variant tokens that name how A and B are scaled. They spell the cublasLtMatmulMatrixScale_t modes
# (VEC32_UE8M0, VEC16_UE4M3, OUTER_VEC_32F, VEC128_32F, BLK128x128_32F) that Transformer Engine
# requests for MXFP8, NVFP4 and FP8 block scaling (transformer_engine/common/gemm/cublaslt_gemm.cu).
_NVJET_SCALE_TOKENS = {
    "Avec32UE8M0": "mx-ue8m0-32", "Bvec32UE8M0": "mx-ue8m0-32",
    "Avec16UE4M3": "nv-ue4m3-16", "Bvec16UE4M3": "nv-ue4m3-16",
    "ovscale": "rowwise",
    "Ablk128": "block-2d", "Bblk128": "block-2d",
    "Avec128": "block-1d", "Bvec128": "block-1d",
}


def _scale_mode(modes: set[str]) -> str | None:
    """The scale mode of a GEMM from those of its operands: "block-2d" where 128x128 blocks on one
    operand meet 1x128 vectors on the other, "conflicting" for a mix no recipe makes."""
    if modes == {"block-2d", "block-1d"}:
        return "block-2d"
    if len(modes) > 1:
        return "conflicting"
    return next(iter(modes), None)


def _nvjet_operands(name: str) -> Operands:
    match = re.search(r"nvjet_\S+", name)
    tokens = match.group().split("_")[1:] if match else []
    if tokens and re.fullmatch(r"sm\d+[a-z]?", tokens[0]):
        tokens = tokens[1:]
    if not tokens:
        return UNKNOWN_OPERANDS
    layout = tokens[-1][:2] if re.fullmatch(r"[TN]{2,3}", tokens[-1]) else None
    code = tokens[0]
    if len(code) == 5:
        letters = code[0], code[1], code[4]
    elif len(code) == 3:
        letters = code[0], code[0], code[2]
    else:
        return Operands("unknown", layout=layout)
    a, b, out = (_NVJET_TYPE_LETTERS.get(letter) for letter in letters)
    scale_mode = _scale_mode({_NVJET_SCALE_TOKENS[t] for t in tokens[1:] if t in _NVJET_SCALE_TOKENS})
    if scale_mode is None and {a, b} <= _FP8 | {"e2m1"}:
        scale_mode = "tensor"  # no scale token: cuBLASLt scales each narrow operand by one scalar (SCALAR_32F)
    precision = _precision(a, b, scale_mode)
    return Operands(precision, a, b, out, None if scale_mode == "conflicting" else scale_mode, layout)


# --- xmma (cuBLAS, and TensorRT's copies): sm<arch>_xmma_gemm_<AB><CD>_<math><accumulate>_<type>_<layout>_...
# The first token is the type of A and B, then of C and D: "e4m3bf16 means tensor A/B in fp8, C/D in
# bf16" (NVIDIA/TransformerEngine#1391, on sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_...). TensorRT's
# sm89_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_... (FP8 out, forkni/StreamDiffusion
# docs/profiling/unet_ncu_roofline_2026-05-24.md) reads the same way. The third token is not decoded.

_XMMA = re.compile(r"sm\d+_xmma_gemm_([a-z0-9]+)_([a-z0-9]+)_([a-z0-9]+)_([nt]{2})_")
_TYPE_WORD = re.compile(r"tf32|bf16|f16|f32|f64|e4m3|e5m2|s8|s32")

# Element-type words as CUTLASS and xmma names spell them. CUTLASS's "f4" is its runtime-typed FP4,
# and E2M1 is the only FP4 format.
_DTYPE_WORDS = {
    "tf32": "tf32", "bf16": "bf16", "f16": "fp16", "f32": "fp32", "e4m3": "e4m3", "e5m2": "e5m2",
    "e2m1": "e2m1", "f4": "e2m1", "s8": "int8", "s32": "int32",
}


def _xmma_operands(name: str) -> Operands:
    match = _XMMA.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    storage = [_DTYPE_WORDS.get(w) for w in _TYPE_WORD.findall(match[1])]
    math = [_DTYPE_WORDS.get(w) for w in _TYPE_WORD.findall(match[2])]
    a, out = storage if len(storage) == 2 else (None, None)
    # One word names A and B. cuBLASLt pairs e4m3 with e5m2 in FP8 GEMMs, so for FP8 the word does
    # not say which format B has.
    b = None if a in _FP8 else a
    math_type = math[0] if math else None
    # The math type is what the tensor cores (or, for f32, the FFMA units) compute in.
    if math_type in {"tf32", "fp32", "bf16", "fp16", "int8"}:
        precision = math_type
    elif math_type in _FP8:
        precision = "fp8"
    else:
        precision = "unknown"
    return Operands(precision, a, b, out, None, match[4].upper())


# --- cuBLAS before xmma and nvjet: <generation>_[<AB>_]<accumulate><mma shape>gemm[_<CD>]_<tile>_..._<layout>
# (ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_nn, ampere_sgemm_64x64_tn). cuBLAS does
# not document these names; they spell types and MMA shapes with the letters of CUTLASS's names, as
# NVIDIA/cutlass#1025 shows side by side (ampere_fp16_s16816gemm_fp16_... beside
# cutlass_80_tensorop_f16_s16816gemm_relu_f16_...). Read are the two shapes public traces show: sgemm
# with no operand word (FP32 on the CUDA cores) and <bf16|fp16>_s<mma>gemm_<bf16|fp16> (16-bit
# operands, FP32 accumulate). Any other letter (h, c, d, i) stays unknown.

# The GPU generations these names start with (seen: volta, turing, ampere), as the first SM of each.
_CUBLAS_GENERATIONS = {"volta": "sm70", "turing": "sm75", "ampere": "sm80"}
_GENERATION = r"(?<![A-Za-z0-9])(" + "|".join(_CUBLAS_GENERATIONS) + ")_"
_CUBLAS_LEGACY = re.compile(_GENERATION + r"(?:(bf16|fp16)_)?([a-z])(\d*)gemm(?:_(bf16|fp16))?_\d+x\d+")
_CUBLAS_LAYOUT = re.compile(r"_([nt]{2})$")


def _cublas_legacy_operands(name: str) -> Operands:
    match = _CUBLAS_LEGACY.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    _, ab_word, accumulator, mma_shape, cd_word = match.groups()
    layout_match = _CUBLAS_LAYOUT.search(name)
    layout = layout_match[1].upper() if layout_match else None
    if accumulator == "s" and ab_word and mma_shape:
        ab = ab_word  # the bf16 / fp16 words are this module's names already
        return Operands(ab, ab, ab, cd_word, None, layout)
    if accumulator == "s" and not (ab_word or mma_shape or cd_word):
        return Operands("fp32", "fp32", "fp32", "fp32", None, layout)
    return Operands("unknown", layout=layout)


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


def _cutlass2_operands(name: str) -> Operands:
    match = _CUTLASS2.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    opclass, c_word, accumulator, _, math_word, a_word, layout = match.groups()
    accumulate = _ACCUMULATOR_LETTERS.get(accumulator)
    # The A type is spelled only when it differs from the accumulator type.
    a = _DTYPE_WORDS.get(a_word) if a_word else accumulate
    if math_word == "tf32" or a == "tf32":
        precision = "tf32"
    elif a in {"bf16", "fp16", "int8"}:
        precision = a
    elif a in _FP8:
        precision = "fp8"
    elif a == "fp32" and opclass == "simt":
        precision = "fp32"
    else:
        precision = "unknown"
    out = _DTYPE_WORDS.get(c_word) if c_word else accumulate
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
    return _DTYPE_WORDS.get(element), mode


def _cutlass3_operands(name: str) -> Operands:
    match = _CUTLASS3.search(name)
    tokens = match[2].split("_") if match else []
    if len(tokens) < 5:
        return UNKNOWN_OPERANDS
    assert match is not None  # without one there are no tokens
    (a, a_mode), (b, b_mode) = _cutlass3_operand(tokens[0]), _cutlass3_operand(tokens[1])
    out, _ = _cutlass3_operand(tokens[4])
    layout = next((t[:2].upper() for t in tokens[5:] if re.fullmatch(r"[tn]{3}", t)), None)
    scale_mode = _scale_mode({mode for mode in (a_mode, b_mode) if mode is not None})
    if match[1] == "tf32" and a == b == "fp32":  # f32 operands multiplied as TF32
        precision = "tf32"
    else:
        precision = _precision(a, b, scale_mode)
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


def _cute_atom_operands(name: str) -> Operands:
    match = _CUTE_MMA_ATOM.search(name)
    types = [_CUTE_TYPES[w] for w in _CUTE_TYPE_WORD.findall(match[1])] if match else []
    if len(types) < 3:
        return UNKNOWN_OPERANDS
    a, b = types[1], types[2]
    precision = a if a == b and a in {"bf16", "fp16", "tf32", "int8"} else "unknown"
    return Operands(precision, a, b)


# --- cuBLAS kernels named by C++ template: the cuBLASLt GEMM tails (split-K reduction, bias-gradient
# epilogue) and cuBLAS's GEMV and small-GEMM kernels.

_TEMPLATE_TYPES = {"__nv_bfloat16": "bf16", "__half": "fp16", "float": "fp32"}


def _template_operands(name: str) -> Operands:
    """Precision of a kernel from its template arguments: the one 16-bit type among them (the data it
    reads and writes; float beside it is the accumulator), fp32 when all are float. A short name has
    no template arguments, and a name cut short (as torch.profiler prints them) may have lost the
    16-bit type: neither says anything."""
    arguments, closed, _ = name.partition("<")[2].partition(">(")
    if not closed:
        return UNKNOWN_OPERANDS
    types = {_TEMPLATE_TYPES[t] for t in re.findall(r"\b(?:__nv_bfloat16|__half|float)\b", arguments)}
    data = types - {"fp32"} or types
    if len(data) != 1:
        return UNKNOWN_OPERANDS
    dtype = data.pop()
    return Operands(dtype, out_dtype=dtype)


# Transformer Engine kernels that cast, scale, transpose, Hadamard-transform or swizzle tensors for a
# quantized GEMM. Stems are the __global__ names in transformer_engine/common (cast/, transpose/,
# recipe/, swizzle/, hadamard_transform/, NVIDIA/TransformerEngine@d0067d0); they match both the
# demangled names and the short names nsys shows.
_TE_QUANTIZE_STEMS = (
    r"\w*cast_transpose\w*",  # cast_transpose_optimized_kernel, block_scaled_1d_cast_transpose_kernel (seen on H200)
    r"\btranspose_(?:optimized|general)_kernel",  # transposes of FP8 data (seen on H200)
    r"\btranspose_dbias_kernel\w*",
    r"\w*quantize\w*_kernel\w*",  # quantize_mxfp8_kernel, quantize_transpose_nvfp4_kernel, dequantize_kernel
    r"\w*cast_fp8\w*_kernel\w*",
    r"\w*_partial_cast_kernel",
    r"\w*amax\w*_kernel",  # amax_kernel, zero_amax_kernel, compute_scale_from_amax_kernel (seen on H200)
    r"\w*Amax\w*Kernel",  # HadamardAmaxTmaKernel, ZeroAmaxKernel
    r"\bHadamardTransformKernel",
    r"\bupdate_tensor_scale_inv_kernel",
    r"\bnvfp4_\w*_kernel",
    r"\w*swizzle\w*_kernel\w*",  # swizzle_row_scaling_kernel: scale factors into the GEMM's layout
    r"\bdelayed_scaling_recipe::.*\bkernel_bulk\b",  # amax history and scale update (seen on H200)
    r"^kernel_bulk$",  # its short name
    r"\btransformer_engine::unary_kernel<.*\bidentity\b",  # a plain cast to FP8 (seen on H200)
)

def _joined(a: str, b: str) -> str:
    """The precision of a GEMM whose operands run at precisions `a` and `b`: theirs when they agree,
    a mixed precision this module knows ("mxfp4×mxfp8"), else "unknown"."""
    if a == b:
        return a
    mixed = f"{a}×{b}"
    return mixed if mixed in MIXED_PRECISIONS else "unknown"


# --- TensorRT-LLM-gen (TRT-LLM's and FlashInfer's Blackwell GEMM and MoE cubins):
# {bmm|gemm|gemmGatedAct}_<D>_<A><B>_<accumulate>[_A|bA<block>_B|bB<block>_C|bC<block>][tok<type>]_t<tile>..._sm100[af]
# e.g. bmm_MxE4m3_MxE2m1MxE4m3_Fp32_bA32_bB32_bC32_t128x8x512u2_... (kernel list of
# NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/trtllmGenKernels/batchedGemm/trtllmGen_bmm_export/KernelMetaInfo.h).
# The type words are trtllm::gen::Dtype's (dtypeToString in trtllm/gen/DtypeDecl.h of the same folder):
# E2m1 is NVFP4 (a block format whose scales are E4m3, one per 16 elements: dtypeGetBlockSfType,
# dtypeNumEltsPerSf), MxE2m1 / MxE4m3 the MX formats (UE8m0 scales per 32). E4m3 operands are scaled
# per tensor unless the name carries dsFp8, DeepSeek's FP8 block scaling (128x128 weight blocks,
# 1x128 activation blocks: QuantMode "dsFp8" next to "perTensorFp8" in TRT-LLM's and FlashInfer's MoE
# tests). bmm_* kernels are batched: one GEMM per expert of a MoE layer.

_TRTLLM_GEN_TYPE = r"(?:Mx)?(?:E2m1|E4m3|E5m2|E2m3|E3m2|Int4)|Bfloat16|Fp16|Fp32|Int8|UInt8"
_TRTLLM_GEN = re.compile(
    r"(?<![A-Za-z0-9])(?P<kind>[bB]mm|[gG]emm(?:GatedAct)?)_(?P<d>" + _TRTLLM_GEN_TYPE + r")_"
    r"(?P<a>" + _TRTLLM_GEN_TYPE + r")(?P<b>" + _TRTLLM_GEN_TYPE + r")_(?P<acc>Fp32|Fp16|Int32)(?P<rest>\w*)")
_TRTLLM_GEN_DTYPES = {"E2m1": "e2m1", "MxE2m1": "e2m1", "E4m3": "e4m3", "MxE4m3": "e4m3", "E5m2": "e5m2",
                      "Bfloat16": "bf16", "Fp16": "fp16", "Fp32": "fp32", "Int8": "int8"}


def _trtllm_gen_operand(word: str, block: str | None, ds_fp8: bool) -> tuple[str, str | None]:
    """Precision and scale mode of one trtllm-gen operand type word (and its block size token)."""
    if word == "E2m1":
        return ("nvfp4", "nv-ue4m3-16") if block in (None, "16") else ("unknown", None)
    if word in {"MxE2m1", "MxE4m3"}:
        return ("mxfp4" if word == "MxE2m1" else "mxfp8", "mx-ue8m0-32") if block in (None, "32") else ("unknown", None)
    if word in {"E4m3", "E5m2"}:
        return ("fp8-block", "block-2d") if ds_fp8 else ("fp8", "tensor")
    if word in {"Bfloat16", "Fp16"}:
        return _TRTLLM_GEN_DTYPES[word], None
    return "unknown", None


def _trtllm_gen_operands(name: str) -> Operands:
    match = _TRTLLM_GEN.search(name)
    if not match:
        return Operands("unknown", note="a trtllm-gen kernel named in a form this module does not read")
    rest = match["rest"]
    blocks = {side: re.search(rf"_(?:{side}b|b{side})(\d+)", rest) for side in "AB"}
    block_a, block_b = ((m[1] if m else None) for m in blocks.values())
    ds_fp8 = "_dsFp8" in rest
    if re.search(r"tok(?:Fp32|Bfloat16)", rest) and "E2m1" not in (match["a"], match["b"]):
        # a per-token scale on top of the operand's own: no recipe of this module's
        return Operands("unknown", note="per-token scales on an operand whose other scaling the name does not pair")
    pa, mode_a = _trtllm_gen_operand(match["a"], block_a, ds_fp8)
    pb, mode_b = _trtllm_gen_operand(match["b"], block_b, ds_fp8)
    precision = _joined(pa, pb)
    scale_mode = mode_a if mode_a == mode_b else None
    layout = next((t for t in rest.split("_") if t in {"TN", "NT", "NN", "TT"}), None)
    note = None if precision != "unknown" else f"operand types {match['a']} x {match['b']} pair to no precision gemmscope reports"
    return Operands(precision, _TRTLLM_GEN_DTYPES.get(match["a"]), _TRTLLM_GEN_DTYPES.get(match["b"]),
                    _TRTLLM_GEN_DTYPES.get(match["d"]), scale_mode if precision != "unknown" else None, layout, note)


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

_DEEPGEMM = re.compile(r"\b(?:deep_gemm::)?(?:(sm\d+)_(?:m_grouped_|k_grouped_)?(fp8_fp4|fp8|bf16|tf32)_\w*?gemm_?(1d1d|1d2d)?\w*?_impl|(fp8_gemm_kernel)\w*)<")
_TEMPLATE_ARGUMENT = re.compile(r"\(unsigned int\)(\d+)|\b(\d+)u\b")
_CUTLASS_ELEMENT = re.compile(r"cutlass::(?:detail::)?(float_e4m3_t|float_e5m2_t|float_e2m1\w*?_t|bfloat16_t|half_t)")
_CUTLASS_ELEMENTS = {"float_e4m3_t": "e4m3", "float_e5m2_t": "e5m2", "bfloat16_t": "bf16", "half_t": "fp16"}


def _deepgemm_operands(name: str) -> Operands:
    match = _DEEPGEMM.search(name)
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
    precision = _joined(pa, pb)
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


def _element_operands(name: str, *, dsl: bool = False) -> Operands:
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
    if narrow and narrow <= _FP8:
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


def _cutlass_template_operands(name: str) -> Operands:
    """The CuTe MMA atom's A and B types where they give a precision, else the element types."""
    atom = _cute_atom_operands(name)
    if atom.precision != "unknown":
        return atom
    elements = _element_operands(name)
    return elements if elements.precision != "unknown" else atom


# CuTe DSL kernels are named kernel_cutlass_kernel_<module path><Class>_object_at__<arguments>
# (kernel_cutlass_kernel_flashinfergemmkernelsdense_blockscaled_gemm_sm100Sm100BlockScaledPersistentDenseGemmKernel_object_at__...
# in SGLang profiles of nvidia/DeepSeek-V3.2-NVFP4 on B200); the class says GEMM or attention.
_CUTE_DSL_BLOCK_SCALED = re.compile(r"BlockScaled|blockscaled")


def _cute_dsl_operands(name: str) -> Operands:
    elements = _element_operands(name, dsl=True)
    if elements.precision == "unknown" and _CUTE_DSL_BLOCK_SCALED.search(name) and elements.note == "the name spells no element type":
        return Operands("unknown", note="a CuTe DSL block-scaled GEMM (MXFP8, MXFP4 or NVFP4): its data and scale "
                                        "types are arguments the name does not spell")
    return elements


# --- Triton GEMMs by their @triton.jit function names:
# - _mxfp8_block_scaled_matmul_kernel: MXFP8 (SGLang python/sglang/srt/layers/quantization/fp8_utils.py,
#   adapted from triton-lang/triton python/tutorials/10-block-scaled-matmul.py);
# - _w8a8_block_fp8_matmul (vLLM, SGLang: FP8 with per-block scales, DeepSeek's recipe): fp8-block;
# - block_scaled_matmul_kernel (the tutorial): MXFP8, MXFP4 or NVFP4 by its arguments: unknown;
# - triton_kernels' MoE matmul _matmul_ogs_<layout>_<types>_<tile>... / _p_matmul_ogs_ (triton-lang/triton
#   python/triton_kernels/triton_kernels/matmul_ogs.py), e.g. _matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu
#   for gpt-oss: BF16 activations against MXFP4 weights, which no precision of this module names.

_TRITON_GEMMS = (
    (re.compile(r"\b_?mxfp8_block_scaled_matmul"), Operands("mxfp8", "e4m3", "e4m3", None, "mx-ue8m0-32")),
    (re.compile(r"\b_?w8a8_block_fp8_matmul"), Operands("fp8-block", "e4m3", "e4m3", None, "block-2d")),
)


def _triton_gemm_operands(name: str) -> Operands:
    decoded = next((operands for pattern, operands in _TRITON_GEMMS if pattern.search(name)), None)
    if decoded is not None:
        return decoded
    types = re.search(r"matmul_ogs_[A-Z]{2,3}_(\w+?)x(\w+?)x(\w+?)_\d", name)
    if types:
        return Operands("unknown", note=f"Triton MoE matmul of {types[2]} against {types[3]} weights: no precision "
                                        "gemmscope reports")
    return Operands("unknown", note="a Triton GEMM takes its dtypes as arguments; the name does not spell them")


# --- Quantization kernels outside TE: what they quantize to (out_dtype) and how they scale
# (scale_mode), where the name says. TensorRT-LLM's quantize_with_block_size<BlockScaleQuantizationType,
# T, SF_VEC_SIZE, UE8M0_SF, ...> (FlashInfer's fp4/mxfp8 quantize; enum FP16_TO_FP4 = 0, FP8_TO_FP4 = 1,
# FP16_TO_MXFP8 = 2 in NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/quantization.h); vLLM's and FlashInfer's
# cvt_fp16_to_fp4<T, UE8M0_SF> (NVFP4 unless UE8M0); SGLang's per_token_group_quant_8bit_kernel<...,
# c10::Float8_e4m3fn, ...> (sgl-kernel/csrc/gemm/per_token_group_quant_8bit.cu); vLLM's
# dynamic_per_token_scaled_fp8_quant_kernel, scaled_fp8_quant_kernel, dynamic_scaled_fp8_quant
# (csrc/quantization/fp8/common.cu).

_QUANTIZE_TYPE_WORDS = (
    (re.compile(r"Float8_e4m3|__nv_fp8_e4m3|float_e4m3_t"), "e4m3"),
    (re.compile(r"Float8_e5m2|__nv_fp8_e5m2|float_e5m2_t"), "e5m2"),
    (re.compile(r"(?<![A-Za-z])(?:nv|mx)?fp4|e2m1", re.IGNORECASE), "e2m1"),
    (re.compile(r"\bint8_t\b|int8_quant|_int8_"), "int8"),
    (re.compile(r"fp8|8bit", re.IGNORECASE), "fp8"),
)
_BLOCK_QUANTIZE = re.compile(r"quantize_with_block_size<\(?(?:tensorrt_llm::)?(?:BlockScaleQuantizationType\)?:*)?(\w+?)\)?, [^,]+, (\d+), (\w+)")
_BLOCK_QUANTIZE_TYPES = {"0": "e2m1", "FP16_TO_FP4": "e2m1", "1": "e2m1", "FP8_TO_FP4": "e2m1", "2": "e4m3",
                         "FP16_TO_MXFP8": "e4m3"}


def _quantize_operands(name: str) -> Operands:
    block = _BLOCK_QUANTIZE.search(name)
    if block:
        target = _BLOCK_QUANTIZE_TYPES.get(block[1])
        ue8m0 = block[3] in {"true", "1"}
        block_mode = ("mx-ue8m0-32" if ue8m0 and block[2] == "32" else
                      "nv-ue4m3-16" if not ue8m0 and block[2] == "16" else None)
        return Operands(None, out_dtype=target, scale_mode=block_mode, note=f"quantizes to {target or 'an unnamed type'}")
    target = next((dtype for pattern, dtype in _QUANTIZE_TYPE_WORDS if pattern.search(name)), None)
    if re.search(r"cvt_\w*to_fp4<[^,>]+, (?:false|0)\b", name):
        mode: str | None = "nv-ue4m3-16"
    elif re.search(r"cvt_\w*to_fp4<[^,>]+, (?:true|1)\b|mxfp8", name):
        mode = "mx-ue8m0-32"
    elif re.search(r"per_token_group|per_group", name):
        mode = "block-1d"
    elif re.search(r"per_token", name):
        mode = "rowwise"
    elif re.search(r"per_tensor|static_scaled|dynamic_scaled|scaled_fp8_quant", name):
        mode = "tensor"
    else:
        mode = None
    return Operands(None, out_dtype=target, scale_mode=mode, note=f"quantizes to {target or 'a type the name does not spell'}")


_QUANTIZE_STEMS = (
    r"\bper_token_group_quant\w*", r"\bper_token_quant\w*", r"\bper_tensor_quant\w*", r"\b_?per_token_quant\w*",
    r"\b\w*scaled_fp8_quant\w*", r"\b\w*scaled_int8_quant\w*", r"\bscaled_fp4_quant\w*", r"\b\w*fp8_quant\w*_kernel",
    r"\b_?(?:static|dynamic)_quant_fp8\w*", r"\b\w*mxfp8_quantize\w*", r"\bsegmented_max_reduction\b",
    r"\b_?per_token_group_quant_fp8\w*",
)


# The table. Order matters: attention and quantization kernels that mention "gemm" or "cutlass"
# come before the GEMM rules, PyTorch's and Triton's kernels before the Transformer Engine stems that
# could match inside their names, and the catch-all comes last.
RULES: tuple[Rule, ...] = (
    # Flash attention: PyTorch's vendored FlashAttention-2 (pytorch_flash::flash_fwd_kernel, seen on
    # H200), Dao-AILab flash-attn, and FlashAttention-3 (cutlass::device_kernel<flash::...>, in the
    # profiler tables of pytorch/ao torchao/prototype/fp8_sdpa_inference/outputs/).
    Rule("flash-attention", re.compile(r"\bpytorch_flash::|\bflash_(?:fwd|bwd)_|\bflash::|\bflash_attn"), "flash", "attention"),
    # cuDNN SDPA engines: cudnn_generated_<...>_sdpa_sm<arch>_flash_{fprop,bprop}_<...>, e.g. in
    # NVIDIA/cudnn-frontend include/cudnn_frontend/experimental/sm100_sdpa_prefill_engine.h.
    Rule("cudnn-sdpa", re.compile(r"\bcudnn_generated_\w*sdpa"), "cudnn", "attention"),
    # Transformer Engine's own attention kernels (THD packing, context parallelism, sequence lengths)
    # live in these namespaces of transformer_engine/common/fused_attn/.
    Rule("te-attention", re.compile(r"\btransformer_engine::(?:fused_attn|context_parallel|flash_attention)::"), "te", "attention"),
    # FlashInfer's attention kernels (include/flashinfer/attention/prefill.cuh, decode.cuh, mla*.cuh,
    # cascade.cuh in flashinfer-ai/flashinfer): BatchPrefillWithPagedKVCacheKernel,
    # BatchDecodeWithPagedKVCacheKernel, Single*WithKVCacheKernel, BatchMLAPagedAttentionKernel, the
    # merge of partial states (MergeStatesKernel, PersistentVariableLengthMergeStatesKernel).
    Rule("flashinfer-attention", re.compile(
        r"\b(?:Batch|Single)(?:Prefill|Decode)With\w*Kernel|\bBatchMLAPaged\w*Attention\w*|\bflashinfer::mla::"
        r"|\b\w*MergeStates\w*Kernel|\bBatch(?:Prefill|Decode)\w*Kernel(?:<|\b)"), "flashinfer", "attention"),
    # TRT-LLM's fused attention, also run by FlashInfer's trtllm-gen backend:
    # fmhaSm100fKernel_QkvE4m3OBfloat16H... (SemiAnalysisAI/InferenceX#863, B200), and CuTe DSL attention
    # classes (kernel_cutlass_kernel_..._FlashAttentionForwardSm100_object_at__..., FA4; CUTLASS's
    # BlackwellFusedMultiHeadAttentionForward example).
    Rule("trtllm-fmha", re.compile(r"\bfmha\w*Kernel_|\bfmha_v2_"), "trtllm", "attention"),
    Rule("cute-dsl-attention", re.compile(r"\bkernel_cutlass_kernel_\w*(?:Attention|Fmha|flash_fwd|flash_bwd|Mla)"), "cute-dsl",
         "attention"),
    # DeepGEMM's DeepSeek sparse-attention indexer: sm90_fp8_mqa_logits, sm100_fp8_paged_mqa_logits
    # (deep_gemm/include/deep_gemm/impls/sm*_mqa_logits.cuh), attention scores, not a linear layer.
    Rule("deepgemm-mqa-logits", re.compile(r"\b(?:deep_gemm::)?sm\d+_\w*mqa_logits"), "deepgemm", "attention"),
    # Any other fused multi-head attention.
    Rule("attention", re.compile(r"fmha|sdpa", re.IGNORECASE), "unknown", "attention"),
    # TE's NVFP4 random Hadamard transform fused with the cast: a quantization kernel although it
    # runs a 16x16 GEMM. TE profiles it as "row_col_rht_gemm_device" on B200
    # (benchmarks/linear/benchmark_linear.py); the family is in hadamard_transform/.
    Rule("te-rht", re.compile(r"rht_gemm"), "te", "quantize"),
    # torch casts to float8 (at::native::float8_copy_kernel_cuda, seen on H200).
    Rule("torch-float8-copy", re.compile(r"\bfloat8_copy_kernel_cuda\b"), "torch", "quantize"),
    # torch zeroing an int32 tensor (at::native::FillFunctor<int>, seen on H200). Autotuners clear
    # the L2 cache with it before each launch they time: triton.testing.do_bench (the NVIDIA driver's
    # clear_cache: cache.zero_() of a 256 MB int32 buffer) and Inductor's benchmarker
    # (InductorBenchmarker.benchmark_gpu in torch/_inductor/runtime/benchmarking.py: an int32 buffer
    # of the L2's size, zeroed before every timed launch). A program may zero int tensors too
    # (is_cache_flush).
    Rule("torch-int-fill", re.compile(r"\bFillFunctor<int>"), "torch", "other"),
    # PyTorch's other kernels: elementwise, reductions, copies, optimizers, softmax (seen on H200).
    Rule("torch", re.compile(r"\bat::native::|\bat::cuda::|\bsoftmax_warp_(?:forward|backward)\b|\b(?:vectorized_|unrolled_)?elementwise_kernel\b"), "torch", "other"),
    # TorchInductor names a kernel triton_<category[:3]>_<fused name>_<n> (define_kernel in
    # torch/_inductor/codegen/triton.py): "tem" for a template, "poi", "red", "per" for pointwise and
    # reduction kernels (get_kernel_category_by_source_code in torch/_inductor/wrapper_benchmark.py), the
    # fused name listing the aten ops fused. A template over an mm op (mm, addmm, bmm, baddbmm,
    # _scaled_mm) is a GEMM whose precision is a template argument, not in its name: precision unknown
    # (triton_tem_fused_baddbmm next to nvjet in cfregly/ai-performance-engineering
    # code/docs/gb300-upstream-patches.md). FlexAttention is a template too
    # (triton_tem_fused_flex_attention_0 in pytorch/pytorch#180278). Other kernels are not GEMMs.
    Rule("triton-attention", re.compile(r"\btriton_tem_\w*flex_attention"), "triton", "attention"),
    Rule("triton-gemm", re.compile(r"\btriton_tem_fused_\w*mm"), "triton", "gemm",
         note="an Inductor GEMM template takes its dtype as an argument; the name does not spell it"),
    # While it autotunes (max-autotune), Inductor launches each candidate of a GEMM template on its
    # own, named triton_<template name> (TritonTemplate.generate in torch/_inductor/select_algorithm.py:
    # kernel_name = f"triton_{self.name}"). The GEMM templates: "mm", "mm_persistent_tma",
    # "mm_persistent", "scaled_mm_device_tma_epilogue_scaling", "scaled_mm_device_tma_main_loop_scaling",
    # "blackwell_ws_persistent_device_tma" (torch/_inductor/kernel/mm.py; "scaled_mm",
    # "scaled_mm_device_tma" in older mm_scaled.py), "bmm" (kernel/bmm.py), "mm_plus_mm"
    # (kernel/mm_plus_mm.py), "grouped_mm" and "scaled_grouped_mm" (kernel/mm_grouped.py). The dtype
    # is a template argument: precision unknown. The compiled program runs the chosen one as
    # triton_tem_fused_* (above): these names are the autotuner's alone (is_autotune_candidate).
    Rule("triton-autotune-gemm", re.compile(
        r"\btriton_(?:b?mm|mm_plus_mm|mm_persistent(?:_tma)?|(?:scaled_)?grouped_mm|scaled_mm\w*"
        r"|blackwell_ws_persistent_device_tma\w*)(?![A-Za-z])"), "triton", "gemm",
         note="an Inductor GEMM template takes its dtype as an argument; the name does not spell it"),
    # An Inductor kernel whose fused ops include a quantization (triton_poi_fused_dynamic_per_token_scaled_fp8_quant_mul_silu_slice_1
    # in vLLM's ROCm profiles): quantization work.
    Rule("triton-quantize", re.compile(r"\btriton_(?:poi|red|per)_fused_\w*quant"), "triton", "quantize", _quantize_operands),
    Rule("triton", re.compile(r"\btriton_"), "triton", "other"),  # inductor's fused kernels (seen on H200)
    Rule("nccl", re.compile(r"nccl", re.IGNORECASE), "nccl", "other"),
    Rule("te-quantize", re.compile("|".join(_TE_QUANTIZE_STEMS)), "te", "quantize"),
    # Quantization kernels of TRT-LLM / FlashInfer / vLLM / SGLang, decoded above.
    Rule("trtllm-quantize", re.compile(r"\bquantize_with_block_size<|\b\w*cvt_(?:fp16|fp8|bf16)_to_fp4\b"), "trtllm", "quantize",
         _quantize_operands),
    Rule("serving-quantize", re.compile("|".join(_QUANTIZE_STEMS)), "unknown", "quantize", _quantize_operands),
    # cuBLASLt split-K reduction (seen on H200 as cublasLt::splitKreduce_kernel; after nvjet
    # *_splitK_* GEMMs on B200 in Dao-AILab/quack#157) and its bias-gradient epilogue
    # (cublasLt::epilogue::impl::globalKernelBgradAB_v1, seen on H200).
    Rule("cublaslt-splitk", re.compile(r"\bsplitKreduce_kernel\b"), "cublaslt", "gemm-tail", _template_operands),
    Rule("cublaslt-epilogue", re.compile(r"\bcublasLt::epilogue::|\bglobalKernelBgrad"), "cublaslt", "gemm-tail", _template_operands),
    # The reduction after a split cuBLAS GEMV: reduce_1Block_kernel<float, 128, 7, cublasGemvT... in
    # vllm-project/vllm-omni#553 (torch.profiler, name cut short there).
    Rule("cublas-gemv-splitk", re.compile(r"\breduce_1Block_kernel<[^>]*\bcublasGemv"), "cublas", "gemm-tail", _template_operands),
    # Implicit-GEMM convolutions are convolutions, not linear layers: cuDNN's
    # sm90_xmma_fprop_implicit_gemm_* and CUTLASS's cutlass3x_sm100_tensorop_*implicit_gemm_fprop_*,
    # both in the B200/H100 profile of zaitrarrio/fastvideo-rs docs/perf/datacenter-profile.md.
    Rule("xmma-conv", re.compile(r"\bsm\d+_xmma_\w*implicit_gemm"), "xmma", "other"),
    Rule("cutlass-conv", re.compile(r"\bcutlass\w*implicit_gemm"), "cutlass", "other"),
    # cuDNN's own convolutions, which name a GEMM or a cuBLAS-like generation prefix:
    # cudnn::detail::implicit_convolve_sgemm and turing_fp16_s1688cudnn_fp16_* (nvprof in
    # ryujaehun/pytorch-gpu-benchmark#6), volta_fp16_s884cudnn_fp16_* (NVIDIA/apex#666), and its CUTLASS
    # copy cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_*> (nsys in
    # CodeGandee/llm-perf-opt reports/20251107-dsocr/nsys/per-stage/sam/).
    Rule("cudnn-conv", re.compile(r"\bimplicit_convolve_sgemm\b|" + _GENERATION + r"\w*?cudnn|\bcutlass__5x_cudnn::"), "cudnn", "other"),
    # TensorRT-LLM-gen batched (MoE) and dense GEMMs, decoded above.
    Rule("trtllm-gen", _TRTLLM_GEN, "trtllm-gen", "gemm", _trtllm_gen_operands),
    # Older trtllm-gen cubins (BatchedGemmKernel_BatchN_E2m1E2m1Fp32_Bfloat16_Tile..., GemmGatedActKernel_E4m3_E4m3_Fp32_tile...
    # in TRT-LLM's trtllmGenKernels/*/cubin folders): GEMMs, their type order not read.
    Rule("trtllm-gen-legacy", re.compile(r"\b(?:Batched)?Gemm(?:GatedAct)?Kernel_(?:Batch[MN]_)?[A-Z][a-z0-9]+"), "trtllm-gen", "gemm",
         note="an older trtllm-gen kernel name, whose type order this module does not read"),
    # DeepGEMM, decoded above (its indexer logits are attention, above).
    Rule("deepgemm", _DEEPGEMM, "deepgemm", "gemm", _deepgemm_operands),
    Rule("deepgemm-other-gemm", re.compile(r"\bdeep_gemm::\w*gemm"), "deepgemm", "gemm",
         note="a DeepGEMM kernel whose template this module does not read"),
    # DeepGEMM's other kernels (layout transforms, logits cleaning): "gemm" is only in the namespace.
    Rule("deepgemm-aux", re.compile(r"\bdeep_gemm::"), "deepgemm", "other"),
    # CuTe DSL GEMMs (kernel_cutlass_kernel_<module><Class>_object_at__...): a GEMM class, its types
    # read where the symbol spells them.
    Rule("cute-dsl-gemm", re.compile(r"\bkernel_cutlass_kernel_\w*(?:Gemm|gemm|GEMM)"), "cute-dsl", "gemm", _cute_dsl_operands),
    # CUTLASS kernels as mangled symbols (torch.profiler and CUDA-graph traces keep some unmangled):
    # _ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversal... in SGLang's profiles of NVFP4 and FP8
    # models on B200; types read as in the demangled form.
    Rule("cutlass-mangled", re.compile(r"\b_ZN7cutlass(?:13device_kernel|6Kernel|7Kernel2)I\w*gemm"), "cutlass", "gemm",
         _element_operands),
    # Triton GEMMs by function name, decoded above.
    Rule("triton-jit-gemm", re.compile(r"\b_?(?:mxfp8_block_scaled_matmul|w8a8_block_fp8_matmul|block_scaled_matmul)\w*"
                                       r"|\b(?:_p)?_matmul_ogs_[A-Z]{2,3}_"), "triton", "gemm", _triton_gemm_operands),
    # cuBLAS nvjet GEMMs; the type code and scale tokens are decoded above (seen on H200; Blackwell
    # names in docs/kernel-names.md).
    Rule("nvjet", re.compile(r"\bnvjet_"), "nvjet", "gemm", _nvjet_operands),
    # cuBLAS xmma GEMMs: sm90_xmma_gemm_f32f32_tf32f32_f32_* (TF32) and
    # sm80_xmma_gemm_f32f32_f32f32_f32_*_ffma_* (FP32 on FFMA units), seen on H200.
    Rule("xmma", re.compile(r"\bsm\d+_xmma_gemm_"), "xmma", "gemm", _xmma_operands),
    # CUTLASS GEMMs named by template, decoded above. Grouped: CUTLASS 3's GroupProblemShape (an
    # nsys cuda_gpu_kern_sum of vLLM's MoE on H100 in gujialiang123/MOEresearch
    # results/4way_bench/2x2_nsys/nsys_evidence/AT_OFF_CG_OFF_top10_kernels.txt; TE's
    # NVTE_USE_CUTLASS_GROUPED_GEMM path, transformer_engine/common/gemm/cutlass_grouped_gemm.cuh) and
    # CUTLASS 2's GemmGrouped (include/cutlass/gemm/kernel/gemm_grouped.h).
    Rule("cutlass-grouped", re.compile(r"\bcutlass::gemm::GroupProblemShape<|\bcutlass::gemm::kernel::GemmGrouped<"), "cutlass", "gemm", _cutlass_template_operands),
    # Callers may wrap the kernel in an architecture guard, as vLLM's vllm::enable_sm80_to_sm89<Kernel>
    # (csrc/quantization/cutlass_w8a8/scaled_mm_c2x.cuh), which then sits between the two.
    Rule("cutlass-template", re.compile(r"\bcutlass::(?:device_kernel|Kernel2?)<(?:[\w:]+<)?cutlass::gemm::kernel::"), "cutlass", "gemm", _cutlass_template_operands),
    # CUTLASS 3.x naming (python/cutlass_library/gemm_operation.py in NVIDIA/cutlass); cuBLAS runs
    # such kernels too (cutlass3x_sm100_* for a TF32 matmul on GB300 in
    # cfregly/ai-performance-engineering code/docs/gb300-upstream-patches.md).
    Rule("cutlass3x", re.compile(r"\bcutlass3x_"), "cutlass", "gemm", _cutlass3_operands),
    # CUTLASS 2.x naming, including cuBLAS's cutlass_80_tensorop_i16832gemm_s8_* (int8, seen on H200).
    Rule("cutlass2x", re.compile(r"\bcutlass(?:_\d\d)?_(?:tensorop|simt|wmma_tensorop|sptensorop)_\w*gemm"), "cutlass", "gemm", _cutlass2_operands),
    # cuBLAS's GEMMs before xmma and nvjet, decoded above: ampere_bf16_s16816gemm_bf16_* and
    # ampere_bf16_s1688gemm_bf16_* (RTX 3060 in karpathy/nanochat#105, RTX 4090 in pytorch/pytorch#181718),
    # ampere_fp16_s16816gemm_fp16_* (NVIDIA/cutlass#1025), ampere_sgemm_* (Nsight Systems in
    # forums.developer.nvidia.com/t/232209, discuss.pytorch.org/t/194741), volta_sgemm_*
    # (official-stockfish/nnue-pytorch#96), volta_cgemm_* (NVIDIA/apex#666).
    Rule("cublas-legacy", _CUBLAS_LEGACY, "cublas", "gemm", _cublas_legacy_operands),
    # cuBLAS's matrix-vector and small-GEMM kernels, which run a layer's GEMM when one side is a single
    # row or K is 1: a GEMM of the layer, its precision in its template arguments.
    # std::enable_if<...>::type internal::gemvx::kernel<int, int, __nv_bfloat16, ...> and
    # gemmk1_kernel<int, float, ...> in nsys on an RTX 5090 (CodeGandee/llm-perf-opt
    # reports/20251107-dsocr/nsys/per-stage/decode/), gemv2T_kernel_val<int, int, float, ... in
    # official-stockfish/nnue-pytorch#96; their template arguments include cuBLAS's GEMV parameter types.
    Rule("cublas-gemv", re.compile(r"\binternal::gemvx::kernel<|\bgemv2[NT]_kernel|\bgemmk1_kernel<|\bcublasGemv(?:TensorStridedBatched|ParamsEx)\b"), "cublas", "gemm", _template_operands),
    # Everything else of Transformer Engine: normalization, activations, RoPE, MoE, userbuffers, the
    # grouped-GEMM argument setup (seen on H200: ln_*_kernel, unary_kernel, unary_grad_kernel).
    Rule("te-other", re.compile(r"\btransformer_engine::|\bsetup_grouped_gemm_kernel\b|\bkuserbuffers_"), "te", "other"),
    # A GEMM (or cuBLAS GEMV) that no rule above can place: role gemm, precision unknown.
    Rule("gemm-unplaced", re.compile(r"gemm|gemv", re.IGNORECASE), "unknown", "gemm"),
    Rule("unknown", re.compile(r""), "unknown", "other"),
)

# sm<N>, CUTLASS 2's cutlass_<N>_ and the GPU generation of cuBLAS's older names: the architecture a
# kernel was built for, which a later GPU may run (cuBLAS runs ampere_* and cutlass_80_* kernels on an
# RTX 4090 in pytorch/pytorch#181718).
_ARCH = re.compile(r"(?<![A-Za-z0-9])sm_?(\d{2,3})[a-z]?(?![0-9])|\bcutlass_(\d\d)_|" + _GENERATION)
_GEMM_ROLES = frozenset({"gemm", "gemm-tail"})


def _arch(name: str) -> str | None:
    match = _ARCH.search(name)
    if not match:
        return None
    return _CUBLAS_GENERATIONS[match[3]] if match[3] else f"sm{match[1] or match[2]}"


# Names that say a GEMM is grouped or batched (a MoE layer's experts, a batched matmul): CUTLASS's
# grouped problem shapes, trtllm-gen's bmm_ and BatchedGemm kernels, DeepGEMM's GemmType other than
# Normal and its m_/k_grouped entry points, grouped-GEMM classes of CuTe DSL, Triton's matmul_ogs and
# Inductor's bmm and grouped_mm templates.
_GROUPED = re.compile(
    r"GroupProblemShape|GemmGrouped|GroupedGemm|grouped_gemm|[mk]_grouped|(?<![A-Za-z])[bB]mm_|BatchedGemm"
    r"|GemmType\)[1-9]|GemmType::(?!Normal)[A-Z]|matmul_ogs|triton_(?:scaled_)?grouped_mm|triton_tem_fused_\w*bmm|triton_bmm"
    r"|_bmm_|Batched_GEMV|\bbmm\b")
_UNSPELLED = "the name does not spell the operand types"


@functools.cache
def decode(name: str) -> KernelInfo:
    """Classify one kernel name, short (nvjet_sm90_tst_...) or demangled (void ns::kernel<...>(...))."""
    text = name.strip()
    rule = next(r for r in RULES if r.pattern.search(text))
    if rule.operands is not None:
        operands = rule.operands(text)
    elif rule.role in _GEMM_ROLES:
        operands = UNKNOWN_OPERANDS
    else:
        operands = NOT_A_GEMM
    gemm = rule.role in _GEMM_ROLES
    note = operands.note or rule.note
    if gemm and operands.precision == "unknown" and note is None:
        note = _UNSPELLED
    return KernelInfo(
        name=name,
        family=rule.family,
        arch=_arch(text),
        role=rule.role,
        precision=operands.precision,
        a_dtype=operands.a_dtype,
        b_dtype=operands.b_dtype,
        out_dtype=operands.out_dtype,
        scale_mode=operands.scale_mode,
        layout=operands.layout,
        rule=rule.id,
        grouped=rule.role == "gemm" and bool(_GROUPED.search(text)),
        note=note if (not gemm or operands.precision in {"unknown", "fp4"}) else None,
    )


# Rules whose kernels only an autotuner launches, each candidate on its own, never the program it tunes.
_AUTOTUNE_CANDIDATE_RULES = frozenset({"triton-autotune-gemm"})
# Rules whose kernels autotuners launch to clear the L2 cache before each launch they time.
_CACHE_FLUSH_RULES = frozenset({"torch-int-fill"})


def is_autotune_candidate(names: np.ndarray) -> np.ndarray:
    """Per kernel name, whether only an autotuner launches it (torch.compile's max-autotune
    benchmarking a GEMM template's candidates); each distinct name decoded once."""
    return _matched_by(names, _AUTOTUNE_CANDIDATE_RULES)


def is_cache_flush(names: np.ndarray) -> np.ndarray:
    """Per kernel name, whether it is the kernel autotuners clear the L2 cache with before each
    launch they time; a program may launch it too, so only a loop of them tells a benchmark
    (verify.autotuning_launches). Each distinct name decoded once."""
    return _matched_by(names, _CACHE_FLUSH_RULES)


def _matched_by(names: np.ndarray, rules: frozenset[str]) -> np.ndarray:
    """Per kernel name, whether one of `rules` decodes it; each distinct name decoded once."""
    codes, distinct = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
    flags = np.array([isinstance(n, str) and decode(n).rule in rules for n in distinct], dtype=bool)
    return flags[codes]


_COLUMNS = [f.name for f in fields(KernelInfo)]


def decode_frame(names: pd.Series, columns: Sequence[str] = tuple(_COLUMNS)) -> pd.DataFrame:
    """One row per name, `columns` of KernelInfo (all by default), index aligned with ``names``;
    each distinct name is decoded once. A missing name (a trace row without one) gets a row of None."""
    codes, uniques = pd.factorize(names, use_na_sentinel=False)
    return pd.DataFrame(decoded_columns(np.asarray(uniques, dtype=object), codes, list(columns)),
                        index=names.index, columns=list(columns), dtype=object)


def decoded_columns(distinct: np.ndarray, codes: np.ndarray, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """KernelInfo's `columns` (object arrays) for rows given as `codes` into the `distinct` names,
    each decoded once: a long trace has a million kernels and a few dozen names. A missing name
    gets None."""
    rows = [asdict(decode(name)) if isinstance(name, str) else dict.fromkeys(_COLUMNS) for name in distinct]
    return {column: np.array([row[column] for row in rows], dtype=object)[codes] for column in columns}
