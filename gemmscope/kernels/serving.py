"""The operands of the inference stacks' kernels as their names spell them: TensorRT-LLM-gen's
cubins, the Triton GEMMs of vLLM, SGLang and triton_kernels, and the quantization kernels outside
Transformer Engine (TensorRT-LLM, FlashInfer, vLLM, SGLang)."""

from __future__ import annotations

import re

from gemmscope.kernels.model import Operands, joined_precision

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
TRTLLM_GEN = re.compile(
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


def trtllm_gen_operands(name: str) -> Operands:
    match = TRTLLM_GEN.search(name)
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
    precision = joined_precision(pa, pb)
    scale_mode = mode_a if mode_a == mode_b else None
    layout = next((t for t in rest.split("_") if t in {"TN", "NT", "NN", "TT"}), None)
    note = None if precision != "unknown" else f"operand types {match['a']} x {match['b']} pair to no precision gemmscope reports"
    return Operands(precision, _TRTLLM_GEN_DTYPES.get(match["a"]), _TRTLLM_GEN_DTYPES.get(match["b"]),
                    _TRTLLM_GEN_DTYPES.get(match["d"]), scale_mode if precision != "unknown" else None, layout, note)


# --- Triton GEMMs by their @triton.jit function names:
# - _mxfp8_block_scaled_matmul_kernel: MXFP8 (SGLang python/sglang/srt/layers/quantization/fp8_utils.py,
#   adapted from triton-lang/triton python/tutorials/10-block-scaled-matmul.py);
# - _w8a8_block_fp8_matmul (vLLM, SGLang: FP8 with per-block scales, DeepSeek's recipe): fp8-block;
# - block_scaled_matmul_kernel (the tutorial): MXFP8, MXFP4 or NVFP4 by its arguments: unknown;
# - triton_kernels' MoE matmul _matmul_ogs_<layout>_<types>_<tile>... / _p_matmul_ogs_ (triton-lang/triton
#   python/triton_kernels/triton_kernels/matmul_ogs.py), e.g. _matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu
#   for gpt-oss: BF16 activations against MXFP4 weights, which no precision gemmscope reports names.

_TRITON_GEMMS = (
    (re.compile(r"\b_?mxfp8_block_scaled_matmul"), Operands("mxfp8", "e4m3", "e4m3", None, "mx-ue8m0-32")),
    (re.compile(r"\b_?w8a8_block_fp8_matmul"), Operands("fp8-block", "e4m3", "e4m3", None, "block-2d")),
)


def triton_gemm_operands(name: str) -> Operands:
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


def quantize_operands(name: str) -> Operands:
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
