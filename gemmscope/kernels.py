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
    "int8", "unknown",
)
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


@dataclass(frozen=True)
class Operands:
    """What a name says about a kernel's arithmetic (nothing, for kernels that are not GEMMs)."""

    precision: str | None
    a_dtype: str | None = None
    b_dtype: str | None = None
    out_dtype: str | None = None
    scale_mode: str | None = None
    layout: str | None = None


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
    # Any other fused multi-head attention.
    Rule("attention", re.compile(r"fmha|sdpa", re.IGNORECASE), "unknown", "attention"),
    # TE's NVFP4 random Hadamard transform fused with the cast: a quantization kernel although it
    # runs a 16x16 GEMM. TE profiles it as "row_col_rht_gemm_device" on B200
    # (benchmarks/linear/benchmark_linear.py); the family is in hadamard_transform/.
    Rule("te-rht", re.compile(r"rht_gemm"), "te", "quantize"),
    # torch casts to float8 (at::native::float8_copy_kernel_cuda, seen on H200).
    Rule("torch-float8-copy", re.compile(r"\bfloat8_copy_kernel_cuda\b"), "torch", "quantize"),
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
    Rule("triton-gemm", re.compile(r"\btriton_tem_fused_\w*mm"), "triton", "gemm"),
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
        r"|blackwell_ws_persistent_device_tma\w*)(?![A-Za-z])"), "triton", "gemm"),
    Rule("triton", re.compile(r"\btriton_"), "triton", "other"),  # inductor's fused kernels (seen on H200)
    Rule("nccl", re.compile(r"nccl", re.IGNORECASE), "nccl", "other"),
    Rule("te-quantize", re.compile("|".join(_TE_QUANTIZE_STEMS)), "te", "quantize"),
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
    Rule("cutlass-grouped", re.compile(r"\bcutlass::gemm::GroupProblemShape<|\bcutlass::gemm::kernel::GemmGrouped<"), "cutlass", "gemm", _cute_atom_operands),
    # Callers may wrap the kernel in an architecture guard, as vLLM's vllm::enable_sm80_to_sm89<Kernel>
    # (csrc/quantization/cutlass_w8a8/scaled_mm_c2x.cuh), which then sits between the two.
    Rule("cutlass-template", re.compile(r"\bcutlass::(?:device_kernel|Kernel2?)<(?:[\w:]+<)?cutlass::gemm::kernel::"), "cutlass", "gemm", _cute_atom_operands),
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
    )


# Rules whose kernels only an autotuner launches, each candidate on its own, never the program it tunes.
_AUTOTUNE_CANDIDATE_RULES = frozenset({"triton-autotune-gemm"})


def is_autotune_candidate(names: np.ndarray) -> np.ndarray:
    """Per kernel name, whether only an autotuner launches it (torch.compile's max-autotune
    benchmarking a GEMM template's candidates); each distinct name decoded once."""
    codes, distinct = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
    flags = np.array([isinstance(n, str) and decode(n).rule in _AUTOTUNE_CANDIDATE_RULES for n in distinct], dtype=bool)
    return flags[codes]


_COLUMNS = [f.name for f in fields(KernelInfo)]


def decode_frame(names: pd.Series) -> pd.DataFrame:
    """One row per name, columns = KernelInfo fields, index aligned with ``names``; each distinct
    name is decoded once. A missing name (a trace row without one) gets a row of None."""
    codes, uniques = pd.factorize(names, use_na_sentinel=False)
    return pd.DataFrame(decoded_columns(np.asarray(uniques, dtype=object), codes, _COLUMNS), index=names.index,
                        dtype=object)


def decoded_columns(distinct: np.ndarray, codes: np.ndarray, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """KernelInfo's `columns` (object arrays) for rows given as `codes` into the `distinct` names,
    each decoded once: a long trace has a million kernels and a few dozen names. A missing name
    gets None."""
    rows = [asdict(decode(name)) if isinstance(name, str) else dict.fromkeys(_COLUMNS) for name in distinct]
    return {column: np.array([row[column] for row in rows], dtype=object)[codes] for column in columns}
