"""The kernels of DeepSeek's own training stack as its published profile names them
(deepseek-ai/profile-data train.json: DeepSeek-V3 training on H800, EP64 and TP1, as its README says):
CUTLASS grouped GEMMs in the namespace dpsk::grouped_gemm::cuda, one struct per variant, and FP8
casts in the namespace cuda. The words of a variant say the recipe: DeepSeek-V3 trains in FP8 with
"fine-grained quantization ... on a 1x128 tile basis (i.e., per token per 128 channels)" for
activations and 128x128 blocks for weights (DeepSeek-V3 technical report, arXiv 2412.19437, section
3.3.2), which a variant spells ptp128c (per token, per 128 channels): fp8-block, as DeepGEMM's
kernels for the same recipe are."""

from __future__ import annotations

import re

from gemmscope.kernels.model import UNKNOWN_OPERANDS, Operands

# cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>,
# ...::m_grouped_fp8_ptp128c::GemmKernel, ...::fp8_dptp128c_acc::GemmKernel (train.json).
DPSK_GROUPED_GEMM = re.compile(r"\bdpsk::grouped_gemm::cuda::(\w+)::GemmKernel\b")
_PER_TOKEN_PER_CHANNELS = re.compile(r"d?ptp\d+c")


def dpsk_grouped_gemm_operands(name: str) -> Operands:
    match = DPSK_GROUPED_GEMM.search(name)
    if not match:
        return UNKNOWN_OPERANDS
    words = match[1].split("_")
    if "fp8" in words and any(_PER_TOKEN_PER_CHANNELS.fullmatch(word) for word in words):
        # FP32 scales per 1x128 tile of activations (and of gradients), 128x128 blocks of weights;
        # which operands a variant scales how (ptp128c, dptp128c) the name does not spell out
        return Operands("fp8-block")
    if "bf16" in words:
        return Operands("bf16", "bf16", "bf16")
    return Operands("unknown", note=f"a DeepSeek grouped GEMM variant ({match[1]}) whose recipe the name does not spell")


# The function's name after the namespace cuda:: (not at::cuda:: nor any other namespace's cuda::).
_DPSK_CUDA_FUNCTION = re.compile(r"(?<![\w:])cuda::([A-Za-z_]\w*)")


def _dpsk_cast_words(name: str) -> list[str] | None:
    match = _DPSK_CUDA_FUNCTION.search(name)
    if not match:
        return None
    words = match[1].split("_")
    return words if "cast" in words and {"fp8", "back", "token", "channel"} & set(words) else None


def is_dpsk_cast(name: str) -> bool:
    """DeepSeek's casts to and from FP8: cuda::per_token_cast_to_fp8_with_channels,
    cuda::per_channel_cast_and_transpose, cuda::swiglu_..._per_token_cast_to_fp8_with_channels_impl,
    cuda::cast_back_impl, cuda::per_token_cast_back_special_fmt_impl."""
    return _dpsk_cast_words(name) is not None


# DeepSeek's transposes of FP8 data, the bytes (unsigned char) its casts wrote, for the GEMMs of the
# backward: void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(unsigned char const*, ...),
# void cuda::batched_transpose<512, 128, 1, 1>(unsigned char const*, ...). Quantization work, as
# Transformer Engine's transposes of FP8 data are.
DPSK_FP8_TRANSPOSE = re.compile(
    r"(?<![\w:])(?:dpsk::grouped_gemm::cuda::utils::|cuda::batched_)transpose<[\d, ]*>\(unsigned char const ?\*")


def dpsk_quantize_operands(name: str) -> Operands:
    words = _dpsk_cast_words(name) or []
    if "back" in words:
        return Operands(None, note="dequantizes FP8 back to a wider type")
    # the FP8 format is a run-time argument (__nv_fp8_interpretation_t): E4M3 or E5M2
    block = "token" in words and "channels" in words  # per token, per group of channels: 1x128 tiles
    return Operands(None, out_dtype="fp8", scale_mode="block-1d" if block else None, note="quantizes to fp8")
