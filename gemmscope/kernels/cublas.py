"""The operands of cuBLAS's kernels as their names spell them: nvjet (cuBLAS 12.8+), xmma, the older
<generation>_*gemm names, and the C++ templates of its GEMM tails, GEMVs and small GEMMs."""

from __future__ import annotations

import re

from gemmscope.kernels.model import DTYPE_WORDS, FP8_TYPES, UNKNOWN_OPERANDS, Operands, joined_scale_mode, precision_of

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


def nvjet_operands(name: str) -> Operands:
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
    scale_mode = joined_scale_mode({_NVJET_SCALE_TOKENS[t] for t in tokens[1:] if t in _NVJET_SCALE_TOKENS})
    if scale_mode is None and {a, b} <= FP8_TYPES | {"e2m1"}:
        scale_mode = "tensor"  # no scale token: cuBLASLt scales each narrow operand by one scalar (SCALAR_32F)
    precision = precision_of(a, b, scale_mode)
    return Operands(precision, a, b, out, None if scale_mode == "conflicting" else scale_mode, layout)


# --- xmma (cuBLAS, and TensorRT's copies): sm<arch>_xmma_gemm_<AB><CD>_<math><accumulate>_<type>_<layout>_...
# The first token is the type of A and B, then of C and D: "e4m3bf16 means tensor A/B in fp8, C/D in
# bf16" (NVIDIA/TransformerEngine#1391, on sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_...). TensorRT's
# sm89_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_... (FP8 out, forkni/StreamDiffusion
# docs/profiling/unet_ncu_roofline_2026-05-24.md) reads the same way, and so do TensorRT's INT8
# tactics, whose type words are i8 and i32: sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize... (A/B and
# C/D int8, the MMA taking int8 into an int32 accumulator) and sm80_xmma_gemm_i8f32_i8i32_f32_...
# (int8 in, fp32 out). The third token is not decoded.

_XMMA = re.compile(r"sm\d+_xmma_gemm_([a-z0-9]+)_([a-z0-9]+)_([a-z0-9]+)_([nt]{2})_")
_TYPE_WORD = re.compile(r"tf32|bf16|f16|f32|f64|e4m3|e5m2|s8|s32|i8|i32")
_XMMA_TYPE_WORDS = {**DTYPE_WORDS, "i8": "int8", "i32": "int32"}


def xmma_operands(name: str) -> Operands:
    match = _XMMA.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    storage = [_XMMA_TYPE_WORDS.get(w) for w in _TYPE_WORD.findall(match[1])]
    math = [_XMMA_TYPE_WORDS.get(w) for w in _TYPE_WORD.findall(match[2])]
    a, out = storage if len(storage) == 2 else (None, None)
    # One word names A and B. cuBLASLt pairs e4m3 with e5m2 in FP8 GEMMs, so for FP8 the word does
    # not say which format B has.
    b = None if a in FP8_TYPES else a
    math_type = math[0] if math else None
    # The math type is what the tensor cores (or, for f32, the FFMA units) compute in.
    if math_type in {"tf32", "fp32", "bf16", "fp16", "int8"}:
        precision = math_type
    elif math_type in FP8_TYPES:
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
CUBLAS_GENERATIONS = {"volta": "sm70", "turing": "sm75", "ampere": "sm80"}
GENERATION = r"(?<![A-Za-z0-9])(" + "|".join(CUBLAS_GENERATIONS) + ")_"
CUBLAS_LEGACY = re.compile(GENERATION + r"(?:(bf16|fp16)_)?([a-z])(\d*)gemm(?:_(bf16|fp16))?_\d+x\d+")
_CUBLAS_LAYOUT = re.compile(r"_([nt]{2})$")


def cublas_legacy_operands(name: str) -> Operands:
    match = CUBLAS_LEGACY.search(name)
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


# --- cuBLAS kernels named by C++ template: the cuBLASLt GEMM tails (split-K reduction, bias-gradient
# epilogue) and cuBLAS's GEMV and small-GEMM kernels.

_TEMPLATE_TYPES = {"__nv_bfloat16": "bf16", "__half": "fp16", "float": "fp32"}


def template_operands(name: str) -> Operands:
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
