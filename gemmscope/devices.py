"""What the GPU can do at best: dense tensor-core peaks per precision and memory bandwidth, with
the NVIDIA page each figure was read from.

Every peak is DENSE (no 2:4 structured sparsity). NVIDIA's product pages and datasheets quote
tensor-core figures "with sparsity", twice the dense rate, unless a figure is footnoted otherwise
("sparse | dense", "without sparsity"): those were halved here, and each row's `note` says which
figures it read and how. Rack and 8-GPU board figures are divided by their GPU count.

A GPU is looked up by the name CUDA gives it (as nsys records it, e.g. "NVIDIA H100 80GB HBM3"),
which must match one row's `name_pattern` whole: a GPU not in the table, a MIG slice or a part
whose figures were not confirmed from NVIDIA is unknown (None), never approximated by a
neighbour. A figure NVIDIA's own pages disagree on is left out (None).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gemmscope.errors import InputError
from gemmscope.kernels import PRECISIONS

# Each kernel precision (kernels.PRECISIONS) → the datasheet row its peak is quoted under, and the
# bytes one operand element takes in memory (TF32 operands are stored as FP32; block scales of
# FP8-block, MXFP8 and NVFP4 are left out). FP32 GEMMs run on CUDA cores: no tensor-core peak.
_PRECISION_CLASS: Mapping[str, tuple[str | None, float | None]] = {
    "fp32": (None, 4),
    "tf32": ("TF32", 4),
    "bf16": ("BF16", 2),
    "fp16": ("BF16", 2),  # datasheets give FP16 and BF16 one figure
    "fp8": ("FP8", 1),
    "fp8-rowwise": ("FP8", 1),
    "fp8-block": ("FP8", 1),
    "mxfp8": ("FP8", 1),
    "nvfp4": ("FP4", 0.5),
    "mxfp4": ("FP4", 0.5),
    "int8": ("INT8", 1),
    "fp4": ("FP4", 0.5),
    # MXFP4 against MXFP8 runs at the FP8 rate (tcgen05 kind::mxf8f6f4); its operands differ in size
    "mxfp4×mxfp8": ("FP8", None),
    "mxfp8×mxfp4": ("FP8", None),
    # Weight-only GEMMs widen the narrow weights to the activations' 16-bit type before the MMA
    # (triton_kernels' matmul_ogs, trtllm-gen's castBfloat16 kernels, CUTLASS's mixed input):
    # the 16-bit rate; their operands differ in size
    "bf16×mxfp4": ("BF16", None),
    "fp16×mxfp4": ("BF16", None),
    "bf16×int4": ("BF16", None),
    "fp16×int4": ("BF16", None),
    "unknown": (None, None),
}

_H100_PAGE = "https://www.nvidia.com/en-us/data-center/h100/"
_H100_DATASHEET = "https://resources.nvidia.com/en-us-gpu-resources/h100-datasheet-24306"
_H200_PAGE = "https://www.nvidia.com/en-us/data-center/h200/"
_HGX_PAGE = "https://www.nvidia.com/en-us/data-center/hgx/"
_DGX_B200_PAGE = "https://www.nvidia.com/en-us/data-center/dgx-b200/"
_BLACKWELL_ULTRA_DATASHEET = "https://resources.nvidia.com/en-us-blackwell-architecture/blackwell-ultra-datasheet"
_GB200_PAGE = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
_GB300_PAGE = "https://www.nvidia.com/en-us/data-center/gb300-nvl72/"


@dataclass(frozen=True)
class Device:
    """One GPU part: its dense tensor-core peaks (TFLOP/s, TOP/s for INT8) per datasheet row,
    its memory bandwidth, and where they come from."""

    part: str
    name_pattern: str  # matches the whole CUDA device name, case aside
    peak_tflops: Mapping[str, float]  # "TF32", "BF16", "FP8", "FP4", "INT8"
    bandwidth_tbps: float
    sources: tuple[str, ...]
    note: str


DEVICES: tuple[Device, ...] = (
    Device("H100 SXM", r"(NVIDIA )?H100( SXM5?)?( 80GB)?( HBM3)?",
           {"TF32": 494.5, "BF16": 989.5, "FP8": 1979.0, "INT8": 1979.0}, 3.35, (_H100_PAGE,),
           "H100 SXM column: TF32 989, BF16 1,979, FP8 3,958 TFLOPS, INT8 3,958 TOPS, all with "
           "sparsity, halved; 3.35 TB/s."),
    Device("H100 PCIe", r"(NVIDIA )?H100 PCIe",
           {"TF32": 378.0, "BF16": 756.5, "FP8": 1513.0, "INT8": 1513.0}, 2.0, (_H100_DATASHEET,),
           "H100 PCIe column of the H100 datasheet (2022 edition; the product page now lists SXM "
           "and NVL): TF32 756, BF16 1,513, FP8 3,026 TFLOPS, INT8 3,026 TOPS, with sparsity, halved; 2 TB/s."),
    Device("H100 NVL", r"(NVIDIA )?H100 NVL",
           {"TF32": 417.5, "BF16": 835.5, "FP8": 1670.5, "INT8": 1670.5}, 3.9, (_H100_PAGE,),
           "H100 NVL column (per GPU): TF32 835, BF16 1,671, FP8 3,341 TFLOPS, INT8 3,341 TOPS, "
           "with sparsity, halved; 3.9 TB/s."),
    Device("H200 SXM", r"(NVIDIA )?H200( SXM)?( 141GB)?( HBM3e)?",
           {"TF32": 494.5, "BF16": 989.5, "FP8": 1979.0, "INT8": 1979.0}, 4.8, (_H200_PAGE,),
           "H200 SXM column: TF32 989, BF16 1,979, FP8 3,958 TFLOPS, INT8 3,958 TOPS, with "
           "sparsity, halved; 4.8 TB/s."),
    Device("H200 NVL", r"(NVIDIA )?H200 NVL",
           {"TF32": 417.5, "BF16": 835.5, "FP8": 1670.5, "INT8": 1670.5}, 4.8, (_H200_PAGE,),
           "H200 NVL column: TF32 835, BF16 1,671, FP8 3,341 TFLOPS, INT8 3,341 TOPS, with "
           "sparsity, halved; 4.8 TB/s."),
    Device("B200", r"(NVIDIA )?B200",
           {"TF32": 1125.0, "BF16": 2250.0, "FP8": 4500.0, "FP4": 9000.0, "INT8": 4500.0}, 8.0,
           (_HGX_PAGE, _DGX_B200_PAGE),
           "HGX B200 column (8 GPUs): FP4 144 | 72 PFLOPS (sparse | dense, dense used); FP8/FP6 72, "
           "FP16/BF16 36, TF32 18 PFLOPS, INT8 72 POPS, with sparsity, halved; each / 8. Bandwidth: "
           "DGX B200, 64 TB/s for 8 GPUs."),
    Device("B300", r"(NVIDIA )?B300( SXM6)?( AC)?",
           {"TF32": 1125.0, "BF16": 2250.0, "FP8": 4500.0, "FP4": 13500.0}, 7.7,
           (_HGX_PAGE, _BLACKWELL_ULTRA_DATASHEET),
           "HGX B300 column (8 GPUs): FP4 144 | 108 PFLOPS (sparse | dense, dense used); FP8/FP6 72, "
           "FP16/BF16 36, TF32 18 PFLOPS with sparsity, halved; each / 8. INT8 left out: the HGX page "
           "and the Blackwell Ultra datasheet disagree. Bandwidth: the datasheet's HGX B300 GPU, 7.7 TB/s."),
    Device("GB200", r"(NVIDIA )?GB200",
           {"TF32": 1250.0, "BF16": 2500.0, "FP8": 5000.0, "FP4": 10000.0, "INT8": 5000.0}, 8.0,
           (_GB200_PAGE,),
           "GB200 NVL72 (72 GPUs): FP4 1,440 | 720 PFLOPS (sparse | dense, dense used); FP8/FP6 720, "
           "FP16/BF16 360, TF32 180 PFLOPS, INT8 720 POPS, with sparsity, halved; each / 72. "
           "576 TB/s HBM3e / 72."),
    Device("GB300", r"(NVIDIA )?GB300",
           {"TF32": 1250.0, "BF16": 2500.0, "FP8": 5000.0, "FP4": 15000.0, "INT8": 24000.0 / 144}, 8.0,
           (_GB300_PAGE,),
           "GB300 NVL72 (72 GPUs): FP4 1,440 | 1,080 PFLOPS (the second footnoted without sparsity, "
           "used); FP8/FP6 720, FP16/BF16 360, TF32 180 PFLOPS, INT8 24 POPS, with sparsity, halved; "
           "each / 72. Up to 576 TB/s HBM3e / 72."),
)


def _precision_class(precision: str) -> tuple[str | None, float | None]:
    if precision not in _PRECISION_CLASS:
        raise InputError(f"unknown precision {precision!r}: choose from {', '.join(PRECISIONS)}")
    return _PRECISION_CLASS[precision]


def lookup(device_name: str) -> Device | None:
    """The table's row for a CUDA device name, or None for a GPU the table does not know."""
    return next((d for d in DEVICES if re.fullmatch(d.name_pattern, device_name.strip(), re.IGNORECASE)), None)


def peak_label(precision: str) -> str | None:
    """The datasheet row a kernel precision's peak is quoted under ("FP8" for fp8-block), None
    for a precision without a tensor-core peak."""
    return _precision_class(precision)[0]


def operand_bytes(precision: str) -> float | None:
    """Bytes of one operand element at a kernel precision (block scales left out)."""
    return _precision_class(precision)[1]


def peak_tflops(device_name: str, precision: str) -> float | None:
    """Dense tensor-core peak (TFLOP/s) of a kernel precision on a GPU; None when the GPU is not
    in the table or has no confirmed figure for that precision."""
    device, label = lookup(device_name), peak_label(precision)
    return device.peak_tflops.get(label) if device is not None and label is not None else None


def memory_bandwidth_tbps(device_name: str) -> float | None:
    """Peak memory bandwidth (TB/s) of a GPU; None when the GPU is not in the table."""
    device = lookup(device_name)
    return device.bandwidth_tbps if device is not None else None


def ridge_point(device_name: str, precision: str) -> float | None:
    """FLOP per byte at which a GEMM at this precision stops being memory-bound on this GPU:
    dense peak FLOP/s over memory bandwidth in B/s (both in units of 10^12, which cancel)."""
    peak, bandwidth = peak_tflops(device_name, precision), memory_bandwidth_tbps(device_name)
    return peak / bandwidth if peak is not None and bandwidth is not None else None
