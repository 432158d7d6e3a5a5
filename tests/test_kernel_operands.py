"""How a GEMM name's operand types and scale tokens make its precision, at the cases the real
names in tests/test_kernels.py do not reach: mixed operands, scales no recipe pairs, a type code
of a length nvjet does not use, FP8 and FP4 without a scale token, int8."""

import pytest

from gemmscope.kernels import decode


@pytest.mark.parametrize("name, precision, a, b, scale_mode, layout", [
    # one letter per operand: A e4m3, B e5m2 (TE's backward), each operand kept in its place
    ("nvjet_sm90_qrtst_64x64_128x13_2x1_v_bz_algo2_TNT", "fp8", "e4m3", "e5m2", "tensor", "TN"),
    # no scale token: cuBLASLt scales FP8 and FP4 operands by one scalar each
    ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_TNT", "fp8", "e4m3", "e4m3", "tensor", "TN"),
    ("nvjet_sm100_ootst_128x128_256x7_2x2_v_bz_TNT", "unknown", "e2m1", "e2m1", "tensor", "TN"),
    # FP8 against BF16: no recipe runs it, and a name is never guessed into a precision
    ("nvjet_sm90_qttst_128x128_64x6_2x1_v_bz_TNT", "unknown", "e4m3", "bf16", None, "TN"),
    # MX scales on A, NVFP4 scales on B: conflicting, so no scale mode and no precision
    ("nvjet_sm100_qqtst_128x256_128x4_2x1_v_bz_Avec32UE8M0_Bvec16UE4M3_TNT", "unknown", "e4m3", "e4m3", None, "TN"),
    # a type code of four letters is none nvjet writes: unknown, its layout still read
    ("nvjet_sm90_qqts_128x128_64x6_2x1_v_bz_TNN", "unknown", None, None, None, "TN"),
    ("nvjet_", "unknown", None, None, None, None),
    # int8 operands with no scale: int8 (CUTLASS 3 naming)
    ("cutlass3x_sm90_tensorop_gemm_s8_s8_s32_s8_s8_128x128x64_1x1x1_0_tnt_align16", "int8", "int8", "int8", None, "TN"),
])
def test_operands_make_the_precision(name, precision, a, b, scale_mode, layout):
    info = decode(name)
    assert (info.role, info.precision, info.a_dtype, info.b_dtype, info.scale_mode, info.layout) == (
        "gemm", precision, a, b, scale_mode, layout)
