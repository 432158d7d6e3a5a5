"""All of gemmscope's knowledge of CUDA kernel names: one ordered table of rules.

A kernel name (short, or demangled C++) → family, arch, role, precision of a GEMM, operand and
output types, scale mode and layout where the name encodes them. The first rule that matches
wins. A name no rule knows keeps its raw name with role "other" and family "unknown"; a GEMM
whose types the name does not spell gets precision "unknown" — never a guess.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, fields

import pandas as pd

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp8-rowwise", "fp8-block", "mxfp8", "nvfp4",
              "mxfp4", "int8", "unknown")
ROLES = ("gemm", "gemm-tail", "quantize", "attention", "other")


@dataclass(frozen=True)
class KernelInfo:
    name: str
    family: str
    arch: str | None
    role: str
    precision: str | None
    a_dtype: str | None = None
    b_dtype: str | None = None
    out_dtype: str | None = None
    scale_mode: str | None = None
    layout: str | None = None
    rule: str = ""


# nvjet (cuBLAS 12.8+/13) spells operand and output types with one letter each, before its
# tile sizes: nvjet_sm90_<A><B><C><compute><D>_… ; 16-bit kernels abbreviate A=B=C to one
# letter (`tst` = bf16·bf16 → fp32 accumulate → bf16, seen on H200 with cuBLAS 13).
_NVJET_TYPE = {"t": "bf16", "h": "fp16", "s": "fp32", "q": "e4m3", "r": "e5m2", "o": "e2m1"}
_FP8 = {"e4m3", "e5m2"}


def _nvjet(m: re.Match) -> dict:
    code, rest = m["types"], m["rest"]
    letters = [_NVJET_TYPE.get(c) for c in code]
    if len(code) == 3:  # A=B=C, compute, D
        a = b = letters[0]
        out = letters[2]
    elif len(code) == 5:  # A, B, C, compute, D
        a, b, out = letters[0], letters[1], letters[4]
    else:
        a = b = out = None
    tokens = rest.split("_")
    layout = tokens[-1][:2] if re.fullmatch(r"[NT]{3}", tokens[-1]) else None
    scale = None
    if a in _FP8 or b in _FP8:
        # Scale-factor tokens: Ablk128/Avec128 = 2D 128x128 blocks / 1D 1x128 vectors (Hopper FP8
        # block scaling); Avec32UE8M0 = MX 32-element blocks with E8M0 scales; `ovscale` = outer
        # vector (per-row / per-column) scales.
        if re.search(r"A(?:blk|vec)128_B(?:blk|vec)128", rest):
            scale = "block-2d-1d" if "Ablk128" in rest or "Bblk128" in rest else "block-1d-1d"
            precision = "fp8-block"
        elif re.search(r"Avec32UE8M0", rest):
            scale, precision = "mx-ue8m0-32", "mxfp8"
        elif "ovscale" in tokens:
            scale, precision = "rowwise", "fp8-rowwise"
        else:
            scale, precision = "tensor", "fp8"
    elif a == "e2m1" or b == "e2m1":
        if re.search(r"Avec16UE4M3", rest):
            scale, precision = "nv-ue4m3-16", "nvfp4"
        elif re.search(r"Avec32UE8M0", rest):
            scale, precision = "mx-ue8m0-32", "mxfp4"
        else:
            precision = "unknown"
    elif a in ("bf16", "fp16", "fp32") and a == b:
        precision = a
    else:
        precision = "unknown"
    return dict(precision=precision, a_dtype=a, b_dtype=b, out_dtype=out, scale_mode=scale, layout=layout)


# cuBLAS xmma/cutlass names spell types as <A><B>_<C><accum>: f32f32_tf32f32, bf16bf16_bf16f32 …
_XMMA_TYPES = {"tf32": "tf32", "bf16": "bf16", "f16": "fp16", "f32": "fp32", "e4m3": "e4m3", "e5m2": "e5m2",
               "s8": "int8", "i8": "int8"}


def _xmma(m: re.Match) -> dict:
    ab, cd = m["ab"], m["cd"]
    compute = re.findall(r"tf32|bf16|f16|f32|e4m3|e5m2|s8|i8", cd)
    operands = re.findall(r"tf32|bf16|f16|f32|e4m3|e5m2|s8|i8", ab)
    a = _XMMA_TYPES.get(operands[0]) if operands else None
    b = _XMMA_TYPES.get(operands[1]) if len(operands) > 1 else a
    # f32 operands multiplied on tensor cores as tf32 say so in the compute part; "ffma" = plain FP32.
    if compute and compute[0] == "tf32":
        precision = "tf32"
    elif a in _FP8:
        precision = "fp8"
    elif a in ("bf16", "fp16", "int8"):
        precision = a
    elif a == "fp32":
        precision = "fp32" if "ffma" in m.string else "unknown"
    else:
        precision = "unknown"
    layout = m["layout"].upper() if m["layout"] else None
    return dict(precision=precision, a_dtype=a, b_dtype=b, out_dtype=None, layout=layout)


def _cutlass_tensorop(m: re.Match) -> dict:
    # cutlass_80_tensorop_<kind><mma shape>gemm[_<types>]_…: i…gemm_s8 = int8, s…gemm_bf16 / _f16 …
    kind, types = m["kind"], m["types"] or ""
    if kind == "i":
        return dict(precision="int8", a_dtype="int8", b_dtype="int8")
    if "bf16" in types:
        return dict(precision="bf16", a_dtype="bf16", b_dtype="bf16")
    if "f16" in types:
        return dict(precision="fp16", a_dtype="fp16", b_dtype="fp16")
    if "tf32" in types or kind == "s" and not types:
        return dict(precision="tf32" if "tf32" in types else "unknown")
    return dict(precision="unknown")


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: re.Pattern
    family: str
    role: str
    precision: str | None = None  # fixed precision, when the rule implies one
    decode: object = None  # fn(match) -> dict of decoded fields
    arch: str | None = None


def _r(rule_id, pattern, family, role, precision=None, decode=None, arch=None) -> Rule:
    return Rule(rule_id, re.compile(pattern), family, role, precision, decode, arch)


RULES: tuple[Rule, ...] = (
    # --- overhead that looks like a GEMM ------------------------------------------------------
    # TE's random-Hadamard-transform quantization on Blackwell ("rht_gemm_device"): a
    # quantization step of NVFP4, not a GEMM of the model (TE's common/hadamard_transform).
    _r("te-rht", r"rht_gemm", "te", "quantize"),
    # --- GEMMs --------------------------------------------------------------------------------
    # nvjet (cuBLAS 12.8+/13): seen on H200 — tst bf16, hsh fp16, qqtst/qrtst fp8 (q e4m3,
    # r e5m2), *_ovscale_* rowwise, *_Ablk128_Bvec128_* / *_Avec128_Bvec128_* block scaled.
    # Blackwell, public traces: nvjet_sm100_qq*_Avec32UE8M0_Bvec32UE8M0_* MXFP8,
    # nvjet_sm100_oo*_Avec16UE4M3_* NVFP4.
    _r("nvjet", r"nvjet_(?P<arch>sm\d+a?)_(?P<types>[a-z]{3,5})_(?P<rest>\S*)", "nvjet", "gemm", decode=_nvjet),
    # cuBLAS xmma: sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_… (TF32, seen on H200),
    # sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_…_ffma_… (FP32 on CUDA cores, seen on H200).
    _r("xmma", r"(?P<arch>sm\d+a?)_xmma_gemm_(?P<ab>[a-z0-9]+)_(?P<cd>[a-z0-9]+)_[a-z0-9]+_(?P<layout>[nt]{2})?",
       "xmma", "gemm", decode=_xmma),
    # cutlass 2.x tensor-op kernels inside cuBLAS/torch: cutlass_80_tensorop_i16832gemm_s8_…
    # (torch._int_mm, seen on H200).
    _r("cutlass-tensorop", r"cutlass_(?P<arch>\d+)_tensorop_(?P<kind>[a-z])\d+gemm_?(?P<types>[a-z0-9]*)",
       "cutlass", "gemm", decode=_cutlass_tensorop),
    # --- GEMM tails: split-K reduction and bias-gradient epilogues run after a cuBLASLt GEMM --
    _r("cublaslt-splitk", r"splitKreduce_kernel", "cublaslt", "gemm-tail", "unknown"),
    _r("cublaslt-bgrad", r"cublasLt::epilogue::impl::globalKernelBgrad", "cublaslt", "gemm-tail", "unknown"),
    # --- attention -----------------------------------------------------------------------------
    _r("flash", r"flash_(?:fwd|bwd)", "flash", "attention"),
    _r("cudnn-sdpa", r"cudnn\S*(?:sdpa|fmha|flash)|fmha|fused_attn", "cudnn", "attention"),
    # --- quantization (TE and torch casts, amax, scales, transposes, swizzles) ---------------------
    _r("te-quantize", r"cast_transpose|(?<![a-z])transpose_optimized_kernel|amax_kernel|"
       r"compute_scale_from_amax|delayed_scaling_recipe\S*kernel_bulk|(?<![a-z])kernel_bulk|block_scaled_\S*cast|"
       r"quantize|swizzle_\S*scal|mxfp8\S*cast|nvfp4\S*cast|hadamard", "te", "quantize"),
    _r("torch-fp8-cast", r"float8_copy_kernel|fp8_copy", "torch", "quantize"),
    # --- everything else we can name --------------------------------------------------------------
    _r("te-other", r"transformer_engine::", "te", "other"),
    _r("triton", r"^triton_", "triton", "other"),
    _r("nccl", r"nccl", "nccl", "other"),
    _r("torch-other", r"at::native::|at::cuda::", "torch", "other"),
)


@functools.lru_cache(maxsize=None)
def decode(name: str) -> KernelInfo:
    """What a kernel name says about itself (first matching rule of RULES)."""
    for rule in RULES:
        m = rule.pattern.search(name)
        if not m:
            continue
        found = dict(precision=rule.precision)
        if rule.decode is not None:
            found.update(rule.decode(m))
        arch = m.groupdict().get("arch")
        if arch and arch.isdigit():
            arch = f"sm{arch}"
        return KernelInfo(name=name, family=rule.family, arch=arch, role=rule.role, rule=rule.id, **found)
    return KernelInfo(name=name, family="unknown", arch=None, role="other", precision=None, rule="none")


def decode_frame(names: pd.Series) -> pd.DataFrame:
    """decode() of each name, one row per input row (index kept); each distinct name once."""
    columns = [f.name for f in fields(KernelInfo)]
    distinct = {n: asdict(decode(n)) for n in names.dropna().unique()}
    empty = dict.fromkeys(columns)
    return pd.DataFrame([distinct.get(n, empty) if isinstance(n, str) else empty for n in names],
                        index=names.index, columns=columns)
