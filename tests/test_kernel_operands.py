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


# CuTe MMA atoms (include/cute/arch/mma_sm80.hpp, mma_sm90_gmma.hpp) inside the CUTLASS template
# names nsys demangles, the rest of the template cut away
def _cute_kernel(atom: str) -> str:
    return f"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::TiledMMA<cute::MMA_Atom<{atom}>>>>(T1::Params)"


@pytest.mark.parametrize("name, rule, precision, a, b, out, scale_mode, layout", [
    # xmma: the math type (second token) says the precision, the first token A/B and C/D
    ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_execute_kernel__5x_cublas",
     "xmma", "fp16", "fp16", "fp16", "fp16", None, "TN"),
    ("sm80_xmma_gemm_s8s32_s8s32_s32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1_tensor16x8x32_execute_kernel__5x_cublas",
     "xmma", "int8", "int8", "int8", "int32", None, "TN"),
    # FP64 (DMMA): no precision gemmscope checks, and never guessed into one
    ("sm80_xmma_gemm_f64f64_f64f64_f64_nn_n_tilesize64x32x8_stage3_warpsize2x1x1_dmma_execute_kernel__5x_cublas",
     "xmma", "unknown", None, None, None, None, "NN"),
    # a first token of one type word says A/B or C/D, not which: neither is read; the math type still is
    ("sm90_xmma_gemm_bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas",
     "xmma", "bf16", None, None, None, None, "TN"),
    # a math token without a type word: unknown
    ("sm90_xmma_gemm_bf16bf16_mixed_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas",
     "xmma", "unknown", "bf16", "bf16", "bf16", None, "TN"),
    # cuBLAS before xmma: FP16 accumulate (h) and an s-accumulate MMA without operand words say no types
    ("turing_h1688gemm_256x128_ldg8_tn", "cublas-legacy", "unknown", None, None, None, None, "TN"),
    ("volta_s884gemm_128x128_ldg8_nn", "cublas-legacy", "unknown", None, None, None, None, "NN"),
    # CUTLASS 2: TF32 named as the math type or as A's type; FP8 A; FP64 and FP32 on tensor cores unknown
    ("cutlass_tensorop_s1688tf32gemm_256x128_16x3_tn_align4", "cutlass2x", "tf32", "fp32", "fp32", "fp32", None, "TN"),
    ("cutlass_tensorop_s1688gemm_tf32_128x128_32x3_tn_align4", "cutlass2x", "tf32", "tf32", "tf32", "fp32", None, "TN"),
    ("cutlass_tensorop_s16832gemm_e4m3_128x128_64x3_tn_align16", "cutlass2x", "fp8", "e4m3", "e4m3", "fp32", None, "TN"),
    ("cutlass_simt_dgemm_128x128_8x2_nn_align1", "cutlass2x", "unknown", None, None, None, None, "NN"),
    ("cutlass_tensorop_s1688gemm_64x64_16x3_tn_align4", "cutlass2x", "unknown", "fp32", "fp32", "fp32", None, "TN"),
    ("cutlass_simt_sgemm_128x128_8x2_nn_align1", "cutlass2x", "fp32", "fp32", "fp32", "fp32", None, "NN"),
    # CUTLASS 3: 1x128 blocks on both operands (examples/81_blackwell_gemm_blockwise), D's type
    ("cutlass3x_sm100_tensorop_gemm_1x128f32xe4m3_1x128f32xe4m3_f32_f16_f16_64x128x128_1x1x1_0_tnn_align16_1sm",
     "cutlass3x", "fp8-block", "e4m3", "e4m3", "fp16", "block-1d", "TN"),
    ("cutlass3x_sm100_tensorop_gemm_e4m3_e4m3_f32_void_e4m3_128x128x128_1x1x1_0_tnt_align16_1sm_stage6",
     "cutlass3x", "fp8", "e4m3", "e4m3", "e4m3", None, "TN"),
    # a scale type without a block shape is no block scaling
    ("cutlass3x_sm100_tensorop_gemm_f32xe4m3_f32xe4m3_f32_f16_f16_128x128x128_1x1x1_0_tnn_align16_1sm",
     "cutlass3x", "fp8", "e4m3", "e4m3", "fp16", None, "TN"),
    # MX scales on A, NVFP4 scales on B: no recipe makes it, so no scale mode and no precision
    ("cutlass3x_sm100_bstensorop_gemm_ue8m0xe4m3_ue4m3xe2m1_f32_f16_f16_128x128x256_1x1x1_0_tnn_align32_1sm",
     "cutlass3x", "unknown", "e4m3", "e2m1", "fp16", None, "TN"),
    # cut short after the five types (as torch.profiler cuts names), or right after the layout
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16", "cutlass3x", "bf16", "bf16", "bf16", "bf16", None, None),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_tnt", "cutlass3x", "bf16", "bf16", "bf16", "bf16", None, "TN"),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16", "cutlass3x", "unknown", None, None, None, None, None),
    # not the tensorop grammar: nothing read
    ("cutlass3x_sm90_simt_sgemm_f32_f32_f32_f32_f32_128x128x8_1x1x1_0_nnn_align1", "cutlass3x", "unknown", None, None, None, None, None),
    # CuTe atoms spell <D><A><B>[<C>]: A and B say the precision, FP8 never (its scaling is not in the atom)
    (_cute_kernel("cute::SM80_16x8x16_F32F16F16F32_TN"), "cutlass-template", "fp16", "fp16", "fp16", None, None, None),
    (_cute_kernel("cute::SM80_16x8x8_F32TF32TF32F32_TN"), "cutlass-template", "tf32", "tf32", "tf32", None, None, None),
    (_cute_kernel("cute::SM80_16x8x32_S32S8S8S32_TN"), "cutlass-template", "int8", "int8", "int8", None, None, None),
    (_cute_kernel("cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN"), "cutlass-template", "unknown", "e4m3", "e4m3", None, None, None),
    (_cute_kernel("cute::SM90::GMMA::MMA_64x128x32_F32E4M3E5M2_SS_TN"), "cutlass-template", "unknown", "e4m3", "e5m2", None, None, None),
])
def test_each_naming_scheme_reads_its_operands(name, rule, precision, a, b, out, scale_mode, layout):
    info = decode(name)
    assert (info.rule, info.role, info.precision, info.a_dtype, info.b_dtype, info.out_dtype, info.scale_mode,
            info.layout) == (rule, "gemm", precision, a, b, out, scale_mode, layout)
