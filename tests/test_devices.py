"""The device table: lookups by the names CUDA gives GPUs, unknown GPUs, ridge points."""

import math

import pytest

from gemmscope import devices, kernels
from gemmscope.errors import InputError


@pytest.mark.parametrize("cuda_name, part", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # the name nsys recorded for the H100 fixture run
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),  # the shipped example run
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA B300 SXM6 AC", "B300"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA GB300", "GB300"),
])
def test_cuda_names_find_their_part(cuda_name, part):
    assert devices.lookup(cuda_name).part == part


@pytest.mark.parametrize("cuda_name", [
    "NVIDIA GH200 480GB",  # contains "H200" but is another part (its own memory and clocks)
    "NVIDIA H800",
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",  # a slice of an H100, not an H100
    "NVIDIA A100-SXM4-80GB",
    "unknown",
])
def test_a_gpu_not_in_the_table_is_unknown_never_a_neighbour(cuda_name):
    assert devices.lookup(cuda_name) is None
    assert devices.peak_tflops(cuda_name, "fp8") is None
    assert devices.memory_bandwidth_tbps(cuda_name) is None
    assert devices.ridge_point(cuda_name, "fp8") is None


def test_peaks_are_dense_and_every_fp8_flavour_shares_the_fp8_peak():
    h100 = "NVIDIA H100 80GB HBM3"
    assert devices.peak_tflops(h100, "bf16") == devices.peak_tflops(h100, "fp16") == 1979 / 2
    for precision in ("fp8", "fp8-rowwise", "fp8-block", "mxfp8"):
        assert devices.peak_tflops(h100, precision) == 3958 / 2
    assert devices.peak_tflops(h100, "nvfp4") is None  # Hopper has no FP4 tensor cores
    assert devices.peak_tflops("NVIDIA B200", "nvfp4") == devices.peak_tflops("NVIDIA B200", "mxfp4") == 9000
    assert devices.peak_tflops(h100, "fp32") is None  # CUDA cores, no tensor-core peak
    assert devices.peak_tflops("NVIDIA B300 SXM6 AC", "int8") is None  # NVIDIA's pages disagree


def test_ridge_point_is_peak_over_bandwidth():
    assert devices.memory_bandwidth_tbps("NVIDIA H200") == 4.8
    assert math.isclose(devices.ridge_point("NVIDIA H200", "fp8"), 1979e12 / 4.8e12)
    assert math.isclose(devices.ridge_point("NVIDIA H200", "bf16"), 989.5e12 / 4.8e12)
    # the same compute with less bandwidth turns memory-bound at a higher intensity
    assert devices.ridge_point("NVIDIA H100 80GB HBM3", "fp8") > devices.ridge_point("NVIDIA H200", "fp8")
    assert math.isclose(devices.ridge_point("NVIDIA GB200", "nvfp4"), 10000 / 8.0)


def test_every_kernel_precision_has_a_class_and_operand_size():
    for precision in kernels.PRECISIONS:
        devices.peak_label(precision)  # no error
    assert devices.operand_bytes("fp8-block") == 1 and devices.operand_bytes("nvfp4") == 0.5
    assert devices.operand_bytes("bf16") == 2 and devices.peak_label("fp8-block") == "FP8"


def test_unknown_precision_is_one_clear_error():
    with pytest.raises(InputError, match="unknown precision 'fp7'"):
        devices.peak_tflops("NVIDIA H200", "fp7")


def test_every_row_cites_an_nvidia_page():
    for device in devices.DEVICES:
        assert device.sources and all(s.startswith("https://") and "nvidia.com" in s for s in device.sources)
        assert device.note and device.bandwidth_tbps > 0
