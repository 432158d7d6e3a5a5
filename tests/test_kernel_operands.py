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
    # SIMT: FP32 on the CUDA cores ("s" accumulator, no instruction shape), as cuBLAS runs it on sm100
    ("cutlass3x_sm90_simt_sgemm_f32_f32_f32_f32_f32_128x128x8_1x1x1_0_nnn_align1", "cutlass3x", "fp32", "fp32", "fp32", "fp32", None, "NN"),
    # the core token of CUTLASS 3.x before v4.0: accumulator letter, instruction shape, math type
    ("cutlass3x_sm100_tensorop_s128x64x8tf32gemm_f32_f32_f32_f32_f32_128x64x32_0_tnn_align4_2sm",
     "cutlass3x", "tf32", "fp32", "fp32", "fp32", None, "TN"),
    ("cutlass3x_sm90_tensorop_s64x128x32gemm_e4m3_e4m3_f32_bf16_bf16_64x128x128_1x1x1_0_tnt_align16",
     "cutlass3x", "fp8", "e4m3", "e4m3", "bf16", None, "TN"),
    # an instruction shape whose core names no math type over f32 operands: the math type is open
    ("cutlass3x_sm90_tensorop_s64x128x8gemm_f32_f32_f32_f32_f32_128x128x32_1x1x1_0_tnn_align4",
     "cutlass3x", "unknown", "fp32", "fp32", "fp32", None, "TN"),
    # CuTe atoms spell <D><A><B>[<C>]: A and B say the precision, FP8 never (its scaling is not in the atom)
    (_cute_kernel("cute::SM80_16x8x16_F32F16F16F32_TN"), "cutlass-template", "fp16", "fp16", "fp16", None, None, None),
    (_cute_kernel("cute::SM80_16x8x8_F32TF32TF32F32_TN"), "cutlass-template", "tf32", "tf32", "tf32", None, None, None),
    (_cute_kernel("cute::SM80_16x8x32_S32S8S8S32_TN"), "cutlass-template", "int8", "int8", "int8", None, None, None),
    (_cute_kernel("cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN"), "cutlass-template", "unknown", "e4m3", "e4m3", None, None, None),
    (_cute_kernel("cute::SM90::GMMA::MMA_64x128x32_F32E4M3E5M2_SS_TN"), "cutlass-template", "unknown", "e4m3", "e5m2", None, None, None),
    # TensorRT's INT8 xmma tactics: i8 operands, an int8 MMA into int32; int8 or fp32 out
    ("sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize64x64x64_stage4_warpsize2x2x1_tensor16x8x32_by_fusion_tactic",
     "xmma", "int8", "int8", "int8", "int8", None, "TN"),
    ("sm80_xmma_gemm_i8f32_i8i32_f32_tn_n_tilesize128x128x64", "xmma", "int8", "int8", "int8", "fp32", None, "TN"),
    # vLLM's CUTLASS structs: ElementAB, ElementD, the epilogue; FP8 scaled per tensor or per token at run time
    ("void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<cutlass::float_e4m3_t, cutlass::half_t, "
     "vllm::c3x::ScaledEpilogueBias, cute::tuple<cute::C<64>>>::GemmKernel>(int)", "vllm-cutlass", "unknown", "e4m3", "e4m3", "fp16",
     None, None),
    ("void cutlass::device_kernel<vllm::cutlass_3x_gemm<signed char, cutlass::bfloat16_t, vllm::c3x::ScaledEpilogue>::GemmKernel>(int)",
     "vllm-cutlass", "int8", "int8", "int8", "bf16", None, None),
    ("void cutlass::device_kernel<vllm::cutlass_3x_gemm_fp8_blockwise<cutlass::float_e4m3_t, cutlass::bfloat16_t>::GemmKernel>(int)",
     "vllm-cutlass", "fp8-block", "e4m3", "e4m3", "bf16", "block-2d", None),
    # triton_kernels' <Y>x<X>x<W>: BF16 activations against MXFP4 weights, weight-only; FP8 ones say no recipe
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu", "triton-jit-gemm", "bf16×mxfp4", "bf16", "e2m1", "bf16", None, None),
    ("_p_matmul_NNT_fp16xfp16xfp16_128x128x64x1", "triton-jit-gemm", "fp16", "fp16", "fp16", "fp16", None, None),
    ("_matmul_ogs_NNT_bf16xfp8e4nvxmxfp4_16x256x128x1", "triton-jit-gemm", "unknown", "e4m3", "e2m1", "bf16", None, None),
    # DeepSeek's grouped GEMMs: fp8 per token per 128 channels, the block recipe
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel>(int)",
     "dpsk-grouped-gemm", "fp8-block", None, None, None, None, None),
    # CuTe DSL arguments spell narrow types: E4M3 data with E8M0 scales is MXFP8
    ("kernel_cutlass__scaled_gemm_mxfp8_kernel_tensorptrf8E4M3FNgmemalign16o153615361_tensorptrf8E4M3FNgmemalign16o512153615361"
     "_tensorptrf8E8M0FNUgmemalign4o48481_tensorptrf8E8M0FNUgmemalign4o5_0", "cute-dsl-gemm", "mxfp8", None, None, None,
     "mx-ue8m0-32", None),
])
def test_each_naming_scheme_reads_its_operands(name, rule, precision, a, b, out, scale_mode, layout):
    info = decode(name)
    assert (info.rule, info.role, info.precision, info.a_dtype, info.b_dtype, info.out_dtype, info.scale_mode,
            info.layout) == (rule, "gemm", precision, a, b, out, scale_mode, layout)


@pytest.mark.parametrize("name, dtype_in_name", [
    ("triton_tem_fused_addmm_relu_3", False),  # an Inductor template: the dtype is a template argument
    ("matmul_kernel_persistent", False),
    ("fused_moe_kernel", False),
    ("kernel_cutlass_kernel_quackgemm_default_epiGemmDefaultSm90_object_at__TiledMMA_ThrLayoutVMNK11110000_0", False),
    ("_w8a8_block_fp8_matmul", True),  # the recipe is in the words
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", True),
    ("nvjet_sm90_qqts_128x128_64x6_2x1_v_bz_TNN", True),  # unread, but the scheme spells the types
    ("my_custom_gemm_kernel", None),  # no rule knows the scheme
    ("cast_transpose_kernel", None),  # not a GEMM
])
def test_dtype_in_name_says_where_the_precision_must_come_from(name, dtype_in_name):
    info = decode(name)
    assert info.dtype_in_name is dtype_in_name
    if dtype_in_name is False:
        assert info.precision == "unknown" and "elsewhere" in info.note


@pytest.mark.parametrize("name, out_dtype, scale_mode", [
    ("kernel_cutlass_kernel_flashinferquantizationkernelsnvfp4_quantizeNVFP4QuantizeSwizzledKernel_object_at__tensorptrbf16gme",
     "e2m1", "nv-ue4m3-16"),
    ("kernel_cutlass_kernel_flashinferquantizationkernelsmxfp8_quantizeMXFP8QuantizeLinearKernel_object_at__0", "e4m3", "mx-ue8m0-32"),
    ("void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 const*, int)", "fp8",
     "block-1d"),
])
def test_quantize_kernels_of_2026_say_their_target(name, out_dtype, scale_mode):
    info = decode(name)
    assert (info.role, info.out_dtype, info.scale_mode) == ("quantize", out_dtype, scale_mode)
