"""Each row of kernels.RULES: names it must take, and near misses it must leave to another row.

A pattern that grows too wide takes a near miss; one that narrows loses a name it must take
(e.g. Inductor's GEMM templates over mm, addmm and _scaled_mm, not only over bmm). Every row has
a case here: a row added to the table without one fails `test_every_rule_has_a_case`. Near misses
say which row must take them instead.
"""

import pytest

from gemmscope.kernels import RULES, decode

# rule id -> (names it takes, [(near miss, the rule that takes it), ...])
CASES = {
    "flash-attention": (
        ["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, "
         "cutlass::bfloat16_t>>(pytorch_flash::Flash_fwd_params)",
         "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "void cutlass::device_kernel<flash::FlashAttnFwdSm90<int>>(int)"],
        [("xflash_fwd_kernel", "unknown")]),
    "cudnn-sdpa": (
        ["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0"],
        [("cudnn_generated_fort_native_conv_sm90_kernel", "unknown")]),
    "te-attention": (
        ["void transformer_engine::fused_attn::cu_seqlens_to_offsets<int>(int)",
         "void transformer_engine::context_parallel::thd_read_half_tensor_kernel(int)"],
        [("void transformer_engine::fused_attention_helper(int)", "te-other")]),
    "flashinfer-attention": (
        ["void flashinfer::BatchPrefillWithPagedKVCacheKernel<int>(int)", "BatchDecodeWithPagedKVCacheKernel",
         "void flashinfer::PersistentVariableLengthMergeStatesKernel<int>(int)"],
        [("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<int>(int)", "unknown")]),
    "trtllm-fmha": (
        ["fmhaSm100fKernel_QkvE4m3OBfloat16HQk576HV512HVPerCta256PagedKvDenseP64MultiCtasKvVarSeqQ8Kv128StaticSwapsAbForGen"],
        [("fmhaSm100f_summary", "attention")]),
    "cute-dsl-attention": (
        ["kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor_0"],
        [("kernel_cutlass_kernel___main__PersistentDenseGemmKernel_object_at__TiledMMA_0", "cute-dsl-gemm")]),
    "cute-dsl-gemm": (
        ["kernel_cutlass_kernel_flashinfergemmkernelsdense_blockscaled_gemm_sm100Sm100BlockScaledPersistentDenseGemmKernel_object_at__TiledMMA_0",
         "kernel_cutlass_kernel_quackgemm_default_epiGemmDefaultSm90_object_at__TiledMMA_ThrLayoutVMNK11110000_0",
         "kernel_cutlass__scaled_gemm_mxfp8_kernel_tensorptrf8E4M3FNgmemalign16o153615361_0"],
        # a GEMM word among the arguments is no GEMM: only the callable's words count
        [("kernel_cutlass_kernel___main__ElementwiseAddKernel_object_at__0", "cute-dsl"),
         ("kernel_cutlass_kernel___main__CopyKernel_object_at__tensorptrf32gmemGemmLike_0", "cute-dsl")]),
    "cute-dsl-quantize": (
        ["kernel_cutlass_kernel_flashinferquantizationkernelsmxfp8_quantizeMXFP8QuantizeSwizzledKernel_object_at__tensorptrbf16gme",
         "kernel_cutlass_kernel_flashinferquantizationkernelsnvfp4_quantizeNVFP4QuantizeLinearKernel_object_at__0"],
        # a norm fused with a quantization stays a norm, as Transformer Engine's are
        [("kernel_cutlass_kernel_flashinfercute_dslrmsnorm_fp4quantRMSNormFP4QuantKernel_object_at__0", "cute-dsl")]),
    "cute-dsl": (
        ["kernel_cutlass_kernel_flashinfernormkernelsrmsnormRMSNormKernel_object_at__tensorptrbf16gmemalign128o281628161_0",
         "kernel_cutlass_device_kernel_tensorptrbf16gmemalign16o4816512div85121_0"],
        [("cutlass_kernel_flashinfernormkernelsrmsnormRMSNormKernel", "unknown")]),
    "deepgemm-mqa-logits": (
        ["void deep_gemm::sm100_fp8_paged_mqa_logits<(unsigned int)64>(int)"],
        [("void deep_gemm::sm100_fp8_mqa_prep<int>(int)", "deepgemm-aux")]),
    "attention": (
        ["fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "my_SDPA_kernel"],
        [("fmh_kernel", "unknown")]),
    "te-rht": (
        ["void row_col_rht_gemm_device<int>(int)"],
        [("void row_col_rht_device<int>(int)", "unknown")]),
    "torch-float8-copy": (
        ["void at::native::vectorized_elementwise_kernel<(int)4, at::native::float8_copy_kernel_cuda("
         "at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)"],
        [("void at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda("
          "at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)",
          "torch")]),
    "torch-int-fill": (
        ["void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<int>, "
         "std::array<char *, (unsigned long)1>>(int, T2, T3)",
         # torch.profiler's spelling of the same kernel (tests/fixtures/gpu/kineto/te_stack_fp8-block_1gpu.rank0.json.gz)
         "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >"
         "(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)"],
        [("void at::native::vectorized_elementwise_kernel<(int)8, at::native::FillFunctor<c10::BFloat16>, "
          "std::array<char *, (unsigned long)1>>(int, T2, T3)", "torch"),
         ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<unsigned int>, "
          "std::array<char *, (unsigned long)1>>(int, T2, T3)", "torch"),
         ("void at::native::vectorized_elementwise_kernel<(int)2, at::native::FillFunctor<long>, "
          "std::array<char *, (unsigned long)1>>(int, T2, T3)", "torch")]),
    "torch": (
        ["void at::native::reduce_kernel<(int)512, (int)1>(T3)", "void at::cuda::detail::cub::kernel()",
         "softmax_warp_backward", "elementwise_kernel", "unrolled_elementwise_kernel"],
        [("softmax_warp_forwards", "unknown"), ("my_elementwise_kernel", "unknown")]),
    "triton-attention": (
        ["triton_tem_fused_flex_attention_0", "triton_tem_fused_flex_attention_backward_1"],
        [("triton_per_fused_flex_attention_0", "triton")]),
    "triton-gemm": (
        ["triton_tem_fused_mm_0", "triton_tem_fused_addmm_relu_3", "triton_tem_fused__scaled_mm_1",
         "triton_tem_fused_bmm_4", "triton_tem_fused_baddbmm_2"],
        [("triton_poi_fused_mm_0", "triton"), ("triton_tem_fused_cat_0", "triton")]),
    "triton-autotune-gemm": (
        ["triton_mm", "triton_bmm", "triton_mm_persistent_tma", "triton_mm_plus_mm", "triton_grouped_mm",
         "triton_scaled_grouped_mm", "triton_scaled_mm_device_tma_epilogue_scaling",
         "triton_blackwell_ws_persistent_device_tma"],
        [("triton_mmx_fused_add_0", "triton"), ("triton_poi_fused_mm_0", "triton"), ("triton_bmmx", "triton")]),
    "triton-quantize": (
        ["triton_poi_fused_dynamic_per_token_scaled_fp8_quant_mul_silu_slice_1"],
        [("triton_poi_fused_mul_silu_slice_1", "triton")]),
    "triton": (
        ["triton_poi_fused_add_0", "triton_red_fused_sum_1", "triton_per_fused_native_layer_norm_2"],
        [("my_triton_poi_fused_add_0", "unknown")]),
    "nccl": (
        ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
         "ncclKernel_AllGather_RING_LL_Sum_int8_t"],
        [("nclDevKernel_AllReduce", "unknown")]),
    "te-quantize": (
        ["void transformer_engine::cast_transpose_optimized_kernel<(int)8, float>(int)",
         "void transformer_engine::transpose_optimized_kernel<(int)8>(int)",
         "void transformer_engine::transpose_dbias_kernel_notaligned<int>(int)",
         "void transformer_engine::quantize_mxfp8_kernel<int>(int)",
         "void transformer_engine::cast_fp8_1D_kernel<int>(int)",
         "void transformer_engine::fp8_block_scaling_partial_cast_kernel(int)",
         "void transformer_engine::amax_kernel<(int)4, float>(int)", "HadamardAmaxTmaKernel",
         "HadamardTransformKernel", "update_tensor_scale_inv_kernel", "nvfp4_transpose_kernel",
         "void transformer_engine::swizzle_row_scaling_kernel<int>(int)",
         "void transformer_engine::delayed_scaling_recipe::<unnamed>::kernel_bulk(float *)", "kernel_bulk",
         "void transformer_engine::unary_kernel<(int)8, (int)1, transformer_engine::Empty, "
         "&transformer_engine::identity<float>, float, __nv_fp8_e4m3>(int)"],
        [("void transformer_engine::rmsnorm_fwd_kernel<int>(int)", "te-other"), ("kernel_bulk_copy", "unknown"),
         ("void transformer_engine::unary_kernel<(int)8, (int)1, transformer_engine::Empty, "
          "&transformer_engine::gelu<float>, float, __nv_bfloat16>(int)", "te-other")]),
    "trtllm-quantize": (
        ["void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)0, __nv_bfloat16, 16, false>(int)",
         "void vllm::cvt_fp16_to_fp4<__nv_bfloat16, false>(int, int, int, int, __nv_bfloat16 const*)"],
        [("void tensorrt_llm::kernels::quantize_with_block_size_helper(int)", "unknown")]),
    "serving-quantize": (
        ["void per_token_group_quant_8bit_kernel<c10::BFloat16, c10::Float8_e4m3fn, true, true, float>(int)",
         "void vllm::dynamic_per_token_scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>(int)",
         "_per_token_group_quant_fp8", "void vllm::segmented_max_reduction<c10::BFloat16, c10::Float8_e4m3fn>(int)"],
        [("per_token_group_dequant_kernel", "unknown")]),
    "dpsk-quantize": (
        ["void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 const*, int)",
         "void cuda::per_channel_cast_and_transpose<256, 128, false, false, false, false, false>(void const*)",
         "void cuda::cast_back_impl<__nv_fp8x2_e4m3>(void const*, void*, float const*, int, int, int, int)"],
        # a cast without an FP8 word, another namespace's cuda::, a cast of another library
        [("void cuda::cast_impl<float>(void const*)", "unknown"), ("void vendor::cuda::per_token_cast_to_fp8(int)", "unknown"),
         ("void cudax::per_token_cast_to_fp8(int)", "unknown")]),
    "dpsk-fp8-transpose": (
        ["void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(unsigned char const*, unsigned char*, int, int, int, int)",
         "void cuda::batched_transpose<512, 128, 1, 1>(unsigned char const*, unsigned char*, int, int, int)"],
        # a transpose of wider data is layout work
        [("void cuda::batched_transpose<512, 128, 1, 1>(__nv_bfloat16 const*, __nv_bfloat16*, int, int, int)", "unknown")]),
    "cublaslt-splitk": (
        ["void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, __nv_bfloat16>(int)"],
        [("void cublasLt::splitKreduce_kernel2<int>(int)", "unknown")]),
    "cublaslt-epilogue": (
        ["void cublasLt::epilogue::impl::globalKernelBgradAB_v1<int>(int)", "globalKernelBgrad"],
        [("void cublasLt::prologue::impl::kernel(int)", "unknown")]),
    "cublas-gemv-splitk": (
        ["void reduce_1Block_kernel<float, 128, 7, cublasGemvTensorStridedBatched<float>>(float *)"],
        [("void reduce_1Block_kernel<float, 128, 7>(float *)", "unknown")]),
    "xmma-conv": (
        ["sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1"],
        [("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "xmma")]),
    "cutlass-conv": (
        ["cutlass3x_sm100_tensorop_s64x128x16implicit_gemm_fprop_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_align8"],
        [("cutlass3x_sm100_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x1x1_0_tnt_align8", "cutlass3x")]),
    "cudnn-conv": (
        ["void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int)",
         "turing_fp16_s1688cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1",
         "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_128x128_32x3_nhwc_align8>(int)"],
        [("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "cublas-legacy")]),
    "trtllm-gen": (
        ["bmm_E4m3_E4m3E4m3_Fp32_t128x8x512_s5_et128x8_m128x8x32_c1x1x1_rM_TN_transOut_sm100f",
         "gemm_Bfloat16_E2m1E2m1_Fp32_t128x128x256u2_s4_et128x128_m128x128x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
         "Bmm_Bfloat16_MxE2m1MxE4m3_Fp32_bA32_bB32_t128x8x512_s3_dynB_sm100f"],
        [("gemm_kernel", "gemm-unplaced"), ("bmm_E4m3_E4m3_Fp32_t128x8x512", "unknown")]),
    "trtllm-gen-legacy": (
        ["BatchedGemmKernel_BatchN_E2m1E2m1Fp32_Bfloat16_Tile128x8x512_EpiTile128x8_Mma128x8x64_Cluster1x1x1_sm100a",
         "GemmGatedActKernel_E4m3_E4m3_Fp32_tile128x8x256_epilogueTile128x8_mma128x8x32_cluster1x1x1_sm100a"],
        [("GemmKernel_", "gemm-unplaced")]),
    "deepgemm": (
        ["void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 5120u, 17408u, 1u>(int)",
         "void deep_gemm::fp8_gemm_kernel_swapAB<34816u, 5120u, 128u, 16u>(int)", "sm100_bf16_gemm_impl<int>"],
        [("void deep_gemm::sm100_fp8_transpose<int>(int)", "deepgemm-aux")]),
    "deepgemm-other-gemm": (
        ["void deep_gemm::sm100_bmn_bnk_mn_gemm_impl<(unsigned int)0>(int)"],
        [("void deep_gemm::smxx_clean_logits<int>(int)", "deepgemm-aux")]),
    "deepgemm-aux": (
        ["void deep_gemm::smxx_clean_logits<int>(int)", "void deep_gemm::transpose_fp32<int>(int)"],
        [("void deep_gemmx::transpose_fp32(int)", "gemm-unplaced")]),
    "deepgemm-helper": (
        ["post_reorder_deepgemm_triton_kernel", "deepgemm_compute_src2dst_triton_kernel", "moe_ep_deepgemm_preprocess"],
        # a GEMM of its own, a C++ name
        [("deepgemm_grouped_gemm_kernel", "gemm-unplaced"), ("void post_reorder_deepgemm<int>(int)", "gemm-unplaced")]),
    "dpsk-grouped-gemm": (
        ["void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel::Params)",
         "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(int)"],
        [("dpsk::grouped_gemm::cuda::utils::fill_tensormaps_kernel(CUtensorMap_st, CUtensorMap_st*, void*, int, long)",
          "dpsk-grouped-gemm-aux")]),
    "dpsk-grouped-gemm-aux": (
        ["void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(float const*, float*)",
         "dpsk::grouped_gemm::cuda::utils::fill_tensormaps_kernel(CUtensorMap_st, CUtensorMap_st*, void*, int, long)"],
        [("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*)", "unknown")]),
    "cutlass-mangled": (
        ["_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEE"],
        [("_ZN7cutlass13device_kernelINS_9reduction6kernel12ReduceSplitKE", "unknown")]),
    "triton-jit-gemm": (
        ["_mxfp8_block_scaled_matmul_kernel", "_w8a8_block_fp8_matmul", "_p_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1",
         "matmul_kernel_persistent", "fused_moe_kernel", "fused_moe_kernel_gptq_awq", "_kernel_matmul_fp8_row",
         "_matmul_bf16_mxfp4_kernel"],
        # the kernels around a GEMM named after it, a word inside another, a name that is not one identifier
        [("_matmul_ogs_finalize", "unknown"), ("_finalize_matmul", "unknown"), ("bmatmul_kernel", "unknown"),
         ("void ns::matmul_kernel<int>(int)", "unknown"), ("fused_moe_align_kernel", "unknown")]),
    "nvjet": (
        ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"],
        [("nvjetx_sm90_tst_128x128_64x6_2x1_v_bz_NNT", "unknown")]),
    "xmma": (
        ["sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"],
        [("sm90_xmma_gemv_f32f32_tf32f32_f32_tn_n_kernel", "gemm-unplaced")]),
    "vllm-cutlass": (
        ["void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<cutlass::float_e4m3_t, cutlass::bfloat16_t, "
         "vllm::c3x::ScaledEpilogue, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >>::GemmKernel>(int)",
         "void cutlass::device_kernel<vllm::cutlass_3x_gemm<signed char, cutlass::bfloat16_t, vllm::c3x::ScaledEpilogue>::GemmKernel>(int)"],
        # vLLM's architecture guard around CUTLASS's own kernel is CUTLASS's template, read as such
        [("void cutlass::device_kernel<vllm::enable_sm90_or_later<cutlass::gemm::kernel::GemmUniversal<int>>>(int)", "cutlass-template")]),
    "cutlass-grouped": (
        ["void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<"
         "cute::tuple<int, int, int>>, int>>(T1::Params)",
         "void cutlass::Kernel<cutlass::gemm::kernel::GemmGrouped<int>>(T1::Params)"],
        [("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, int>>"
          "(T1::Params)", "cutlass-template")]),
    "cutlass-template": (
        ["void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<int>>(T1::Params)",
         "void cutlass::Kernel2<vllm::enable_sm80_to_sm89<cutlass::gemm::kernel::GemmUniversal<int>>>(T1::Params)"],
        [("void cutlass::Kernel<cutlass::reduction::kernel::ReduceSplitK<cutlass::MatrixShape<4, 64>>>(T1::Params)",
          "unknown")]),
    "cutlass3x": (
        ["cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_128x128x64_1x1x1_0_tnn_align8_warpspecialized"],
        [("cutlass3_sm90_tensorop_gemm_f16_f16_f32_f16_f16_128x128x64_1x1x1_0_tnn_align8", "gemm-unplaced")]),
    "cutlass2x": (
        ["cutlass_80_tensorop_i16832gemm_s8_256x128_64x3_tn_align16",
         "cutlass_tensorop_bf16_s16816gemm_bf16_128x128_32x3_tn_align8", "cutlass_simt_sgemm_128x128_8x2_nn_align1"],
        [("cutlass_80_tensorop_bf16_s16816fprop_optimized_bf16_128x128_32x3_nhwc_align8", "unknown")]),
    "cublas-legacy": (
        ["ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_nn", "ampere_sgemm_64x64_tn", "volta_sgemm_128x64_nn",
         "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn"],
        [("hopper_sgemm_64x64_tn", "gemm-unplaced"), ("myampere_sgemm_64x64_tn", "gemm-unplaced")]),
    "cublas-gemv": (
        ["void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(float)",
         "void gemmk1_kernel<int, float, 256, 5, false, false, false, false>(int)",
         "std::enable_if<(bool)1, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, float>(int)"],
        [("void gemv3T_kernel_val<int, int, float>(float)", "gemm-unplaced")]),
    "te-other": (
        ["void transformer_engine::normalization::ln_fwd_tuned_kernel<int>(int)", "setup_grouped_gemm_kernel",
         "void kuserbuffers_pushrecv(int)"],
        [("void te::ln_fwd_kernel(int)", "unknown")]),
    "gemm-unplaced": (
        ["my_custom_gemm_kernel", "Batched_GEMV"],
        [("gem_kernel", "unknown")]),
    "unknown": (
        ["void foo::bar_kernel(int)", ""],
        [("foo_gemm", "gemm-unplaced")]),
}


def test_every_rule_has_a_case():
    assert list(CASES) == [rule.id for rule in RULES]


@pytest.mark.parametrize("rule", CASES)
def test_rule_takes_its_names_and_leaves_near_misses(rule):
    names, near_misses = CASES[rule]
    assert [decode(name).rule for name in names] == [rule] * len(names)
    assert near_misses, "a near miss per rule"
    assert {near: decode(near).rule for near, _ in near_misses} == dict(near_misses)
