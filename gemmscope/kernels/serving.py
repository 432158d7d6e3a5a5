"""The operands of the inference stacks' kernels as their names spell them: TensorRT-LLM-gen's
cubins, the Triton GEMMs of vLLM, SGLang and triton_kernels, and the quantization kernels outside
Transformer Engine (TensorRT-LLM, FlashInfer, vLLM, SGLang)."""

from __future__ import annotations

import re

from gemmscope.kernels.model import DTYPE_ELSEWHERE, Operands, joined_precision
from gemmscope.kernels.tokens import identifier_tokens

# --- TensorRT-LLM-gen (TRT-LLM's and FlashInfer's Blackwell GEMM and MoE cubins):
# {bmm|gemm|gemmGatedAct}_<D>_<A><B>_<accumulate>[_A|bA<block>_B|bB<block>_C|bC<block>][tok<type>]_t<tile>..._sm100[af]
# e.g. bmm_MxE4m3_MxE2m1MxE4m3_Fp32_bA32_bB32_bC32_t128x8x512u2_... (kernel list of
# NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/trtllmGenKernels/batchedGemm/trtllmGen_bmm_export/KernelMetaInfo.h).
# The type words are trtllm::gen::Dtype's (dtypeToString in trtllm/gen/DtypeDecl.h of the same folder):
# E2m1 is NVFP4 (a block format whose scales are E4m3, one per 16 elements: dtypeGetBlockSfType,
# dtypeNumEltsPerSf), MxE2m1 / MxE4m3 the MX formats (UE8m0 scales per 32). E4m3 operands are scaled
# per tensor unless the name carries dsFp8, DeepSeek's FP8 block scaling (128x128 weight blocks,
# 1x128 activation blocks: QuantMode "dsFp8" next to "perTensorFp8" in TRT-LLM's and FlashInfer's MoE
# tests). bmm_* kernels are batched: one GEMM per expert of a MoE layer. A weight-only kernel widens its
# narrow operand before the MMA and says so after the types, _cast<type>_:
# bmm_Bfloat16_MxInt4Bfloat16_castBfloat16_Fp32_Ab32_... (Kimi-K2's W4A16 MoE, the MxInt4 kernels of
# sgl-project/sglang#16892 and vllm-project/vllm#32437) and bmm_Bfloat16_MxE2m1Bfloat16_castBfloat16_...
# (MXFP4 weights, BF16 activations): bf16×int4 and bf16×mxfp4, activations first.

_TRTLLM_GEN_TYPE = r"(?:Mx)?(?:E2m1|E4m3|E5m2|E2m3|E3m2|Int4)|Bfloat16|Fp16|Fp32|Int8|UInt8"
TRTLLM_GEN = re.compile(
    r"(?<![A-Za-z0-9])(?P<kind>[bB]mm|[gG]emm(?:GatedAct)?)_(?P<d>" + _TRTLLM_GEN_TYPE + r")_"
    r"(?P<a>" + _TRTLLM_GEN_TYPE + r")(?P<b>" + _TRTLLM_GEN_TYPE + r")(?:_cast(?P<cast>" + _TRTLLM_GEN_TYPE + r"))?"
    r"_(?P<acc>Fp32|Fp16|Int32)(?P<rest>\w*)")
_TRTLLM_GEN_DTYPES = {"E2m1": "e2m1", "MxE2m1": "e2m1", "E4m3": "e4m3", "MxE4m3": "e4m3", "E5m2": "e5m2",
                      "Bfloat16": "bf16", "Fp16": "fp16", "Fp32": "fp32", "Int8": "int8", "MxInt4": "int4",
                      "Int4": "int4"}


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
    if word == "MxInt4":
        # int4 weights with UE8M0 scales per 32, only ever against 16-bit activations (W4A16)
        return ("int4", "mx-ue8m0-32") if block in (None, "32") else ("unknown", None)
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


# --- Triton GEMMs by their @triton.jit function names (tokens.is_triton_gemm), read word by word:
# - triton_kernels' MoE matmul (triton-lang/triton python/triton_kernels/triton_kernels/, matmul_ogs.py
#   and matmul_details/_common.py): make_matmul_repr names each specialization
#   f"{base}{_acc}_{layouts}_{Y}x{X}x{W}_{BLOCK_M}x{BLOCK_N}x{BLOCK_K}x{SPLIT_K}", base _matmul_ogs or
#   _p_matmul_ogs (later _matmul, _p_matmul), each type the pointer's Triton type with u8 (packed
#   E2M1 with UE8M0 scales per 32) written mxfp4: _matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu
#   is gpt-oss's MoE, BF16 activations X against MXFP4 weights W: bf16×mxfp4;
# - names that spell a recipe in words: mxfp8 (SGLang's _mxfp8_block_scaled_matmul_kernel in
#   python/sglang/srt/layers/quantization/fp8_utils.py, from triton-lang/triton
#   python/tutorials/10-block-scaled-matmul.py), fp8 with block (vLLM's and SGLang's
#   _w8a8_block_fp8_matmul: DeepSeek's 1x128 / 128x128 recipe), fp8 with row (FBGEMM's
#   _kernel_matmul_fp8_row in fbgemm_gpu/experimental/gemm/triton_gemm/fp8_gemm.py: one scale per
#   row of A and of B), bf16 or fp16 beside mxfp4 (weight-only: BF16 activations, MXFP4 weights);
# - every other Triton GEMM (matmul_kernel_persistent, fused_moe_kernel, block_scaled_matmul_kernel)
#   takes its dtypes as arguments: precision unknown, from elsewhere (model.DTYPE_ELSEWHERE).

_TRITON_KERNELS_TYPE = r"(bf16|fp16|fp32|mxfp4|fp8e4nv|fp8e5|fp8e4b15|i8|i32)"
_TRITON_KERNELS_TYPES = re.compile("x".join([_TRITON_KERNELS_TYPE] * 3))
_TRITON_KERNELS_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "mxfp4": "e2m1", "fp8e4nv": "e4m3",
                          "fp8e5": "e5m2", "i8": "int8", "i32": "int32"}


def _triton_kernels_operands(tokens: list[str]) -> Operands | None:
    """triton_kernels' [_p]_matmul[_ogs][_acc]_<layouts>_<Y>x<X>x<W>_<blocks>: X the activations, W
    the weights (None: the name is not of that shape)."""
    start = tokens.index("matmul") + 1
    rest = [t for t in tokens[start:start + 4] if t not in {"ogs", "acc"}]
    if len(rest) < 2 or not re.fullmatch(r"[NT]{3}", rest[0]):
        return None
    types = _TRITON_KERNELS_TYPES.fullmatch(rest[1])
    if not types:
        return None
    y, x, w = types.groups()
    a, b, out = (_TRITON_KERNELS_DTYPES.get(t) for t in (x, w, y))
    if x in {"bf16", "fp16"} and w in {x, "mxfp4"}:
        # the scale mode says how both operands are scaled: MX weights beside unscaled activations is none
        return Operands(joined_precision(x, w), a, b, out)
    return Operands("unknown", a, b, out, note=f"Triton MoE matmul of {x} activations against {w} weights: "
                                                "their scaling (flex per tensor, MX) is not in the name")


def triton_gemm_operands(name: str) -> Operands:
    tokens = identifier_tokens(name) or []
    words = {t.lower() for t in tokens}
    if "matmul" in tokens:  # triton_kernels' names: the word is "matmul" itself
        kernels = _triton_kernels_operands(tokens)
        if kernels is not None:
            return kernels
    for activations in ("bf16", "fp16"):
        if {activations, "mxfp4"} <= words:  # a 16-bit activation word beside MXFP4 weights: weight-only
            return Operands(f"{activations}×mxfp4", activations, "e2m1")
    if "mxfp8" in words:
        return Operands("mxfp8", "e4m3", "e4m3", None, "mx-ue8m0-32")
    if "fp8" in words and "block" in words:
        return Operands("fp8-block", "e4m3", "e4m3", None, "block-2d" if "w8a8" in words else None)
    if "fp8" in words and words & {"row", "rowwise"}:
        return Operands("fp8-rowwise", "e4m3", "e4m3", None, "rowwise")
    if words & {"fp8", "int8", "fp4", "mxfp4", "nvfp4", "w8a8", "w4a16", "scaled"}:
        return Operands("unknown", note="a Triton GEMM whose name says it is quantized, not the recipe; "
                                        + DTYPE_ELSEWHERE, dtype_in_name=False)
    return Operands("unknown", note="a Triton GEMM takes its dtypes as arguments, not in its name; " + DTYPE_ELSEWHERE,
                    dtype_in_name=False)


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
