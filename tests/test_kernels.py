"""gemmscope.kernels: every kernel name measured on this project's H200, the naming facts behind the
rules, Blackwell, Ampere, Ada, CUTLASS-template, GEMV and Triton names from public sources
(docs/kernel-names.md), and what unknown names become."""

from dataclasses import asdict, fields

import pandas as pd
import pytest

from gemmscope.kernels import PRECISIONS, ROLES, RULES, KernelInfo, decode, decode_frame

# Every distinct kernel name of this project's H200 captures (cuBLAS 13, TE, torch), demangled as
# nsys exports them and cut at 250 characters.
H200_GEMMS = [  # (name, role, precision, layout)
    ("nvjet_sm90_hsh_192x128_64x5_1x2_h_bz_coopB_NNT", "gemm", "fp16", "NN"),
    ("nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT", "gemm", "fp8-rowwise", "TN"),
    ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_bias_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_Ablk128_Bvec128_TNN", "gemm", "fp8-block", "TN"),
    ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qqtst_128x64_128x8_1x2_h_bz_bias_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qqtst_192x128_128x5_1x2_h_bz_coopB_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qqtst_256x128_128x4_1x2_h_bz_coopA_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qqtst_64x192_128x6_2x1_v_bz_coopB_algo2_Avec128_Bvec128_TNT", "gemm", "fp8-block", "TN"),
    ("nvjet_sm90_qqtst_64x64_128x13_2x1_v_bz_bias_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qqtst_96x128_128x7_2x1_v_bz_bias_TNN", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qrtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qrtst_128x64_128x8_1x2_h_bz_algo2_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qrtst_64x48_128x15_2x4_h_bz_algo2_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qrtst_64x64_128x13_2x1_v_bz_algo2_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qrtst_64x96_128x10_2x1_v_bz_algo2_TNT", "gemm", "fp8", "TN"),
    ("nvjet_sm90_qrtst_96x128_128x7_1x2_h_bz_coopA_algo2_TNN", "gemm", "fp8", "TN"),
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", "gemm", "bf16", "NN"),
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "gemm", "bf16", "TN"),
    ("nvjet_sm90_tst_128x192_64x5_2x1_v_bz_coopB_NTN", "gemm", "bf16", "NT"),
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", "gemm", "bf16", "NT"),
    ("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_bias_TNT", "gemm", "bf16", "TN"),
    ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", "gemm", "bf16", "NN"),
    ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT", "gemm", "bf16", "TN"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm", "bf16", "NN"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "gemm", "bf16", "TN"),
    ("nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NTN", "gemm", "bf16", "NT"),
    ("nvjet_sm90_tst_64x128_64x8_2x1_v_bz_NTN", "gemm", "bf16", "NT"),
    ("nvjet_sm90_tst_64x64_64x13_1x2_h_bz_NTT", "gemm", "bf16", "NT"),
    ("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_NNT", "gemm", "bf16", "NN"),
    ("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_bias_TNT", "gemm", "bf16", "TN"),
    ("nvjet_sm90_tst_64x96_64x8_2x1_v_bz_NTT", "gemm", "bf16", "NT"),
    ("nvjet_sm90_tst_96x128_64x7_2x1_v_bz_bias_TNN", "gemm", "bf16", "TN"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "gemm", "fp32", "NN"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm", "tf32", "NN"),
    ("void cublasLt::epilogue::impl::globalKernelBgradAB_v1<(int)16, (int)16, __nv_bfloat16, __nv_bfloat16, float>(int, int, int, const T3 *, int, T4 *, long, long)", "gemm-tail", "bf16", None),
    ("void cublasLt::epilogue::impl::globalKernelBgradAB_v1<(int)8, (int)64, __nv_bfloat16, __nv_bfloat16, float>(int, int, int, const T3 *, int, T4 *, long, long)", "gemm-tail", "bf16", None),
    ("void cutlass::Kernel2<cutlass_80_tensorop_i16832gemm_s8_128x64_128x3_tn_align16>(T1::Params)", "gemm", "int8", "TN"),
]
H200_NON_GEMMS = [  # (name, role)
    ("cast_transpose_optimized_kernel(const __nv_bfloat16 *, const float *, __nv_fp8_e4m3 *, __nv_fp8_e4m3 *, const float *, float *, float *, unsigned long, unsigned long)", "quantize"),
    ("cast_transpose_optimized_kernel(const __nv_bfloat16 *, const float *, __nv_fp8_e5m2 *, __nv_fp8_e5m2 *, const float *, float *, float *, unsigned long, unsigned long)", "quantize"),
    ("transformer_engine::<unnamed>::compute_scale_from_amax_kernel(const float *, float *, float, bool, float, const float *)", "quantize"),
    ("transformer_engine::<unnamed>::zero_amax_kernel(float *, const float *)", "quantize"),
    ("transformer_engine::delayed_scaling_recipe::<unnamed>::amax_and_scale_update_impl::kernel_bulk(float *, transformer_engine::delayed_scaling_recipe::<unnamed>::AmaxParams, unsigned long, transformer_engine::delayed_scaling_recipe::<unnamed>::A", "quantize"),
    ("transpose_optimized_kernel(const __nv_fp8_e4m3 *, const float *, __nv_fp8_e4m3 *, unsigned long, unsigned long)", "quantize"),
    ("triton_per_fused_sum_2", "other"),
    ("triton_poi_fused_add_mul_rsub_tanh_0", "other"),
    ("triton_poi_fused_add_mul_tanh_0", "other"),
    ("triton_red_fused_sum_1", "other"),
    ("void <unnamed>::softmax_warp_backward<float, float, float, (int)10, (bool)1, (bool)0>(T2 *, const T1 *, const T1 *, int, int, int, const bool *)", "other"),
    ("void <unnamed>::softmax_warp_forward<float, float, float, (int)10, (bool)1, (bool)0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)", "other"),
    ("void at::native::<unnamed>::CatArrayBatchedCopy<at::native::<unnamed>::OpaqueType<(unsigned int)2>, unsigned int, (int)4, (int)64, (int)64>(T1 *, at::native::<unnamed>::CatArrInputTensorMetadata<T1, T2, T4, T5>, at::native::<unnamed>::TensorS", "other"),
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4, void at::native::templates::cuda::normal_and_transform<c10::BFloat16, float, at::CUDAGeneratorImpl *, void at::native::templates::cuda::normal_kernel<at::C", "other"),
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4, void at::native::templates::cuda::normal_and_transform<float, float, at::CUDAGeneratorImpl *, void at::native::templates::cuda::normal_kernel<at::CUDAGener", "other"),
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4, void at::native::templates::cuda::uniform_and_transform<c10::BFloat16, float, at::CUDAGeneratorImpl *, void at::native::templates::cuda::uniform_kernel<at:", "other"),
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<unsigned int, (int)4, void at::native::templates::cuda::random_from_to_kernel<at::CUDAGeneratorImpl *>(at::TensorIteratorBase &, unsigned long, long, T1)::[lambda() (inst", "other"),
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<unsigned int, (int)4, void at::native::templates::cuda::random_from_to_kernel<at::CUDAGeneratorImpl *>(at::TensorIteratorBase &, unsigned long, long, T1)::[lambda() (inst", "other"),
    ("void at::native::<unnamed>::embedding_backward_feature_kernel<c10::BFloat16, float, long>(const T3 *, const T1 *, T1 *, int, long, int)", "other"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)1>, at::native::<unnamed>::BinaryOpScalarFunctor<c10::BFloat16, (int)1, (int)1, (int)0>, std::multiplies<float>, float>(T1, T2, T3...)", "other"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)1>, at::native::<unnamed>::BinaryOpScalarFunctor<c10::BFloat16, (int)1, (int)1, (int)0>, std::plus<float>, float>(T1, T2, T3...)", "other"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::TernaryOpScalarFunctor<c10::BFloat16, (int)2, (int)2, (int)0>, at::native::LerpFunctor<float>, float>(T1, T2, T3..", "other"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::UnaryOpFunctor<c10::BFloat16, (int)2, (int)1, (int)1>, at::native::Sqrt<float>>(T1, T2, T3...)", "other"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)3>, at::native::<unnamed>::PointwiseOpScalarFunctor<c10::BFloat16, (int)3, (int)3, (int)0>, std::multiplies<float>, float>(T1, T2, T3...)", "other"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListScalarListMetadata<float, (int)1>, at::native::<unnamed>::BinaryOpScalarListFunctor<c10::BFloat16, (int)1, (int)1, (int)0>, std::divides<float>>(T1, T2, T3", "other"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListScalarListMetadata<float, (int)3>, at::native::<unnamed>::PointwiseOpScalarListFunctor<c10::BFloat16, (int)3, (int)3, (int)0>, std::divides<float>>(T1, T2,", "other"),
    ("void at::native::<unnamed>::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(T1 *, const T1 *, const T2 *, const T1 *, const T1 *, bool, int, int, long, long)", "other"),
    ("void at::native::<unnamed>::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long, long)", "other"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)::[lambda(int)", "other"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 4)]::operator ()()", "other"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()()", "other"),
    ("void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 12)]::operator ()()", "other"),
    ("void at::native::reduce_kernel<(int)128, (int)4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator ()(at::TensorIterator &)::[lambda(float, flo", "other"),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, (int)4, (int)4>>(T3)", "other"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)], std::array<c", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)3>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, (unsigned long)1>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<int>, std::array<char *, (unsigned long)1>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::float8_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", "quantize"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, void at::native::<unnamed>::pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase &, T2)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char *, (unsigned long)3>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::FillFunctor<c10::BFloat16>, std::array<char *, (unsigned long)1>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::float16_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", "other"),
    ("void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)", "other"),
    ("void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<(int)64, (int)128, (int)128, (int)8, (int)4, (int)4, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)8, cutlass::bflo", "attention"),
    ("void pytorch_flash::flash_bwd_dot_do_o_kernel<(bool)1, Flash_bwd_kernel_traits<(int)64, (int)128, (int)128, (int)8, (int)4, (int)4, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)8, cutlas", "attention"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<(int)64, (int)128, (int)128, (int)8, (int)4, (int)4, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)64, (int)128, (int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0", "attention"),
    ("void transformer_engine::<unnamed>::amax_kernel<(int)16, (bool)1, __nv_bfloat16>(const T3 *, float *, unsigned long, unsigned long, const float *)", "quantize"),
    ("void transformer_engine::<unnamed>::block_scaled_1d_cast_transpose_kernel<(bool)1, float, __nv_bfloat16, __nv_fp8_e4m3>(const T3 *, T4 *, T4 *, T2 *, T2 *, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned lo", "quantize"),
    ("void transformer_engine::<unnamed>::block_scaled_cast_transpose_kernel<(bool)1, float, __nv_bfloat16, __nv_fp8_e4m3>(const T3 *, T4 *, T4 *, T2 *, T2 *, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long,", "quantize"),
    ("void transformer_engine::normalization::ln_bwd_finalize_general_kernel<__nv_bfloat16, float, (unsigned int)4, (unsigned int)1, (unsigned int)4, (unsigned int)32>(transformer_engine::normalization::BackwardKernelParams)", "other"),
    ("void transformer_engine::normalization::ln_bwd_finalize_tuned_kernel<transformer_engine::normalization::Kernel_traits_finalize<(unsigned int)1024, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, (unsigned int)1024, (unsigned", "other"),
    ("void transformer_engine::normalization::ln_bwd_general_kernel<transformer_engine::normalization::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, (unsigned int)512, (unsigned int)1, (unsigned int)4, (unsigned in", "other"),
    ("void transformer_engine::normalization::ln_bwd_tuned_kernel<transformer_engine::normalization::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, (unsigned int)1024, (unsigned int)1, (unsigned int)4, (unsigned int", "other"),
    ("void transformer_engine::normalization::ln_fwd_general_kernel<transformer_engine::normalization::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, (unsigned int)512, (unsigned int)1, (unsigned int)4, (unsigned in", "other"),
    ("void transformer_engine::normalization::ln_fwd_tuned_kernel<transformer_engine::normalization::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, (unsigned int)1024, (unsigned int)1, (unsigned int)4, (unsigned int", "other"),
    ("void transformer_engine::unary_grad_kernel<(int)16, (bool)1, float, transformer_engine::Empty, &transformer_engine::dgelu<float, float>, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(const T7 *, const T6 *, T8 *, const T3 *, T3 *, T3 *, T4, un", "other"),
    ("void transformer_engine::unary_kernel<(int)16, (bool)1, float, transformer_engine::Empty, &transformer_engine::dispatch::fp8::detail::identity, __nv_bfloat16, __nv_fp8_e4m3>(const T6 *, const T3 *, T7 *, const T3 *, T3 *, T3 *, T4, unsigned l", "quantize"),
    ("void transformer_engine::unary_kernel<(int)16, (bool)1, float, transformer_engine::Empty, &transformer_engine::gelu<float, float>, __nv_bfloat16, __nv_bfloat16>(const T6 *, const T3 *, T7 *, const T3 *, T3 *, T3 *, T4, unsigned long, unsigned", "other"),
]


@pytest.mark.parametrize(("name", "role", "precision", "layout"), H200_GEMMS)
def test_h200_gemms(name, role, precision, layout):
    info = decode(name)
    assert (info.role, info.precision, info.layout) == (role, precision, layout)


@pytest.mark.parametrize(("name", "role"), H200_NON_GEMMS)
def test_h200_non_gemms(name, role):
    info = decode(name)
    assert info.role == role
    assert info.precision is None


def test_h200_names_cover_every_role():
    roles = {role for _, role, _, _ in H200_GEMMS} | {role for _, role in H200_NON_GEMMS}
    assert roles == set(ROLES)


# --- the naming facts measured on H200 -------------------------------------------------------------


def test_nvjet_type_codes():
    bf16 = decode("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT")
    assert (bf16.family, bf16.arch, bf16.precision) == ("nvjet", "sm90", "bf16")
    assert (bf16.a_dtype, bf16.b_dtype, bf16.out_dtype, bf16.scale_mode) == ("bf16", "bf16", "bf16", None)
    fp16 = decode("nvjet_sm90_hsh_192x128_64x5_1x2_h_bz_coopB_NNT")
    assert (fp16.precision, fp16.a_dtype, fp16.out_dtype, fp16.layout) == ("fp16", "fp16", "fp16", "NN")
    fp8 = decode("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_TNT")
    assert (fp8.precision, fp8.a_dtype, fp8.b_dtype, fp8.out_dtype) == ("fp8", "e4m3", "e4m3", "bf16")
    assert fp8.scale_mode == "tensor"
    grad = decode("nvjet_sm90_qrtst_64x64_128x13_2x1_v_bz_algo2_TNT")  # e5m2 gradient in TE's backward
    assert (grad.precision, grad.a_dtype, grad.b_dtype) == ("fp8", "e4m3", "e5m2")


def test_nvjet_variant_tokens_are_not_precision():
    plain = decode("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_TNT")
    for variant in ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_bias_TNT",
                    "nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT",
                    "nvjet_sm90_qqtst_256x128_128x4_1x2_h_bz_coopA_TNT"):
        info = decode(variant)
        assert (info.precision, info.scale_mode, info.layout) == (plain.precision, plain.scale_mode, plain.layout)


def test_nvjet_fp8_scaling_tokens():
    rowwise = decode("nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT")
    assert (rowwise.precision, rowwise.scale_mode) == ("fp8-rowwise", "rowwise")
    blocks_2d = decode("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_Ablk128_Bvec128_TNN")
    assert (blocks_2d.precision, blocks_2d.scale_mode, blocks_2d.layout) == ("fp8-block", "block-2d", "TN")
    blocks_1d = decode("nvjet_sm90_qqtst_64x192_128x6_2x1_v_bz_coopB_algo2_Avec128_Bvec128_TNT")
    assert (blocks_1d.precision, blocks_1d.scale_mode) == ("fp8-block", "block-1d")


def test_nvjet_layout_is_first_two_letters_of_the_last_token():
    assert decode("nvjet_sm90_tst_128x192_64x5_2x1_v_bz_coopB_NTN").layout == "NT"
    assert decode("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_NNT").layout == "NN"
    assert decode("nvjet_sm90_tst_96x128_64x7_2x1_v_bz_bias_TNN").layout == "TN"


def test_xmma_tf32_and_ffma_fp32():
    tf32 = decode("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas")
    assert (tf32.family, tf32.arch, tf32.role, tf32.precision, tf32.layout) == ("xmma", "sm90", "gemm", "tf32", "NN")
    assert (tf32.a_dtype, tf32.b_dtype, tf32.out_dtype) == ("fp32", "fp32", "fp32")
    fp32 = decode("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas")
    assert (fp32.arch, fp32.precision) == ("sm80", "fp32")


def test_cutlass_int8_from_torch_int_mm():
    info = decode("void cutlass::Kernel2<cutlass_80_tensorop_i16832gemm_s8_128x64_128x3_tn_align16>(T1::Params)")
    assert (info.family, info.arch, info.role, info.precision, info.layout) == ("cutlass", "sm80", "gemm", "int8", "TN")
    assert (info.a_dtype, info.b_dtype, info.out_dtype) == ("int8", "int8", "int32")


def test_cublaslt_tails():
    split_k = decode("cublasLt::splitKreduce_kernel")  # a name without template arguments says no type
    assert (split_k.family, split_k.role, split_k.precision) == ("cublaslt", "gemm-tail", "unknown")
    bgrad = decode("void cublasLt::epilogue::impl::globalKernelBgradAB_v1<(int)16, (int)16, __nv_bfloat16, __nv_bfloat16, float>(int, int, int, const T3 *, int, T4 *, long, long)")
    assert (bgrad.role, bgrad.precision, bgrad.out_dtype) == ("gemm-tail", "bf16", "bf16")


# --- Blackwell and other public names, verbatim from the sources in docs/kernel-names.md --------------


def test_nvfp4_on_sm103():
    # pytorch/pytorch#187095: torch._scaled_mm with NVFP4 operands on GB300.
    info = decode("nvjet_sm103_oohsh_128x128_256x7_2x2_2cta_v_bz_Avec16UE4M3_Bvec16UE4M3_TNT")
    assert (info.arch, info.role, info.precision) == ("sm103", "gemm", "nvfp4")
    assert (info.a_dtype, info.b_dtype, info.out_dtype) == ("e2m1", "e2m1", "fp16")
    assert (info.scale_mode, info.layout) == ("nv-ue4m3-16", "TN")


def test_mxfp8_and_bf16_on_sm100():
    # zaitrarrio/fastvideo-rs docs/perf/datacenter-profile.md, B200, names elided as published there.
    mx = decode("nvjet_sm100_qqtst_128x256_128x6_2x1_2cta_…_Avec32UE8M0_Bvec32UE8M0")
    assert (mx.arch, mx.precision, mx.a_dtype, mx.out_dtype, mx.scale_mode) == ("sm100", "mxfp8", "e4m3", "bf16", "mx-ue8m0-32")
    assert mx.layout is None  # the layout token was elided
    bf16 = decode("nvjet_sm100_tst_128x256_64x6_2x1_2cta")
    assert (bf16.arch, bf16.precision) == ("sm100", "bf16")


def test_nvjet_without_arch_token():
    # vllm-project/vllm#35467 (B200) and pytorch/ao torchao/prototype/fp8_sdpa_inference/outputs/.
    for name in ("nvjet_tst_192x144_64x6_2x2_2cta_v_bz_TNT", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_bias_TNN"):
        info = decode(name)
        assert (info.family, info.arch, info.precision, info.layout) == ("nvjet", None, "bf16", "TN")


def test_split_k_on_blackwell():
    # Dao-AILab/quack#157: cuBLAS's split-K on B200 runs an nvjet *_splitK_* GEMM, then this reduction.
    assert decode("cublasLt::splitKreduce_kernel").role == "gemm-tail"


@pytest.mark.parametrize("name", [
    "row_col_rht_gemm_device",  # TE benchmarks/linear/benchmark_linear.py profiles it on B200
    "swizzle_row_scaling_kernel",  # TE benchmarks/profile_rht_cast_swizzle_fusion.py
    "swizzle_col_scaling_kernel",
    "quantize_mxfp8_kernel",  # TE transformer_engine/common/cast/mxfp8/
    "quantize_transpose_nvfp4_kernel",  # TE transformer_engine/common/cast/nvfp4/
])
def test_te_blackwell_quantization_kernels(name):
    info = decode(name)
    assert (info.family, info.role, info.precision) == ("te", "quantize", None)


@pytest.mark.parametrize("name", [
    # FlashAttention-3 inside cutlass::device_kernel, as torch.profiler truncates it
    # (pytorch/ao torchao/prototype/fp8_sdpa_inference/outputs/fp8_sdpa_profiler.txt)
    "void cutlass::device_kernel<flash::enable_sm90_or_la...",
    "void cutlass::device_kernel<flash::FlashAttnFwdCombi...",
])
def test_flash_attention_3_is_attention_not_cutlass_gemm(name):
    info = decode(name)
    assert (info.family, info.role, info.precision) == ("flash", "attention", None)


def test_cudnn_sdpa_on_sm100():
    # NVIDIA/cudnn-frontend include/cudnn_frontend/experimental/sm100_sdpa_prefill_engine.h
    info = decode("cudnn_generated_oss_sdpa_sm100_flash_fprop_f16_knob_7_128x128x128_4x1x1_cga1x1x1_kernel0_0")
    assert (info.family, info.arch, info.role, info.precision) == ("cudnn", "sm100", "attention", None)


@pytest.mark.parametrize(("name", "precision", "a_dtype", "scale_mode", "layout"), [
    # NVIDIA/cutlass test/unit/gemm/device/sm100_blockscaled_sparse_tensorop_gemm/sm100_bssp_gemm_{mxf4,nvf4}_*.cu
    ("cutlass3x_sm100_bssptensorop_bsspgemm_ue8m0xe2m1_ue8m0xe2m1_f32_f16_f16_128x128x256_0_vs64_tnn_align64_o_1sm",
     "mxfp4", "e2m1", "mx-ue8m0-32", "TN"),
    ("cutlass3x_sm100_bssptensorop_bsspgemm_ue4m3xe2m1_ue4m3xe2m1_f32_f16_f16_128x128x256_0_vs32_tnn_align64_o_1sm",
     "nvfp4", "e2m1", "nv-ue4m3-16", "TN"),
    # NVIDIA/cutlass examples/81_blackwell_gemm_blockwise/README.md
    ("cutlass3x_sm100_tensorop_gemm_64x128f32xe4m3_1x128f32xe4m3_f32_f16_f16_64x128x128_1x1x1_0_nnn_align16_1sm",
     "fp8-block", "e4m3", "block-2d", "NN"),
    # NVIDIA/cutlass test/unit/gemm/device/sm100_tensorop_gemm/extra_tests/sm100_gemm_f8_f8_f32_void_f8_stage.cu
    ("cutlass3x_sm100_tensorop_gemm_e4m3_e4m3_f32_void_e4m3_128x128x128_1x1x1_0_tnt_align16_1sm_stage6",
     "fp8", "e4m3", None, "TN"),
    # NVIDIA/cutlass media/docs/cpp/profiler.md
    ("cutlass3x_sm90_tensorop_tf32gemm_f32_f32_f32_f32_f32_128x128x32_2x1x1_0_tnn_align4", "tf32", "fp32", None, "TN"),
    ("cutlass_simt_sgemm_128x128_8x2_nn_align1", "fp32", "fp32", None, "NN"),
    ("cutlass_tensorop_s16816gemm_f16_256x128_32x3_nn_align8", "fp16", "fp16", None, "NN"),
    # NVIDIA/cutlass examples/47_ampere_gemm_universal_streamk/
    ("cutlass_tensorop_h16816gemm_128x128_32x4_nn_align8", "fp16", "fp16", None, "NN"),
    # NVIDIA/cutlass#169: the cuBLAS copy of a CUTLASS kernel
    ("cutlass_70_tensorop_f16_s884gemm_f16_128x128_tn_align8", "fp16", "fp16", None, "TN"),
])
def test_cutlass_names(name, precision, a_dtype, scale_mode, layout):
    info = decode(name)
    assert (info.family, info.role) == ("cutlass", "gemm")
    assert (info.precision, info.a_dtype, info.scale_mode, info.layout) == (precision, a_dtype, scale_mode, layout)


def test_f32_operands_without_a_math_type_are_unknown():
    # NVIDIA/cutlass test/unit/gemm/device/sm100_tensorop_gemm/extra_tests/sm100_gemm_f32_f32_f32_void_f32_stage.cu:
    # f32 operands on tensor cores, but the name does not say whether as TF32 or emulated FP32.
    info = decode("cutlass3x_sm100_tensorop_gemm_f32_f32_f32_void_f32_128x128x32_1x1x1_0_tnt_align4_1sm")
    assert (info.role, info.precision) == ("gemm", "unknown")


def test_implicit_gemm_convolutions_are_not_gemms():
    # zaitrarrio/fastvideo-rs docs/perf/datacenter-profile.md (B200)
    info = decode("cutlass3x_sm100_tensorop_s256x256x16implicit_gemm_fprop_bf16")
    assert (info.family, info.role, info.precision) == ("cutlass", "other", None)


def test_inductor_template_gemm_has_unknown_precision():
    # cfregly/ai-performance-engineering code/docs/gb300-upstream-patches.md
    info = decode("triton_tem_fused_baddbmm")
    assert (info.family, info.role, info.precision) == ("triton", "gemm", "unknown")


@pytest.mark.parametrize("name", [
    # the candidates Inductor's max-autotune launches one by one: triton_<template name>
    # (torch/_inductor/select_algorithm.py; template names in torch/_inductor/kernel/mm.py, bmm.py,
    # mm_plus_mm.py, mm_grouped.py)
    "triton_mm", "triton_bmm", "triton_mm_plus_mm", "triton_mm_persistent_tma", "triton_mm_persistent",
    "triton_scaled_mm_device_tma_epilogue_scaling", "triton_scaled_mm_device_tma_main_loop_scaling",
    "triton_scaled_mm", "triton_grouped_mm", "triton_scaled_grouped_mm", "triton_blackwell_ws_persistent_device_tma",
    # and the templates the compiled program runs
    "triton_tem_fused_mm_0", "triton_tem_fused_addmm_1", "triton_tem_fused__scaled_mm_2", "triton_tem_fused_bmm_3",
])
def test_every_inductor_triton_gemm_is_a_gemm_of_unknown_precision(name):
    info = decode(name)
    assert (info.family, info.role, info.precision) == ("triton", "gemm", "unknown")


@pytest.mark.parametrize("name", ["triton_poi_fused_mm_0", "triton_red_fused_addmm_sum_1", "triton_mma_helper",
                                  "triton_tem_fused_flex_attention_0", "triton_per_fused_bmm_2"])
def test_inductor_kernels_that_only_name_a_gemm_are_not_gemms(name):
    assert decode(name).role != "gemm"



# --- names beyond Hopper's nvjet, verbatim from the public sources in docs/kernel-names.md -------------


@pytest.mark.parametrize(("name", "arch", "precision", "a_dtype", "b_dtype", "out_dtype"), [
    # NVIDIA/TransformerEngine#1391: "e4m3bf16 means tensor A/B in fp8, C/D in bf16" (H100, TE FP8)
    ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "sm90", "fp8", "e4m3", None, "bf16"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "sm90", "bf16", "bf16", "bf16", "bf16"),
    # forkni/StreamDiffusion docs/profiling/unet_ncu_roofline_2026-05-24.md: TensorRT FP8 on an RTX 4090 (Ada)
    ("sm89_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize64x64x64_stage4_warpsize2x2x1_tensor16x8x32_bias_f32_execute_kernel_trt",
     "sm89", "fp8", "e4m3", None, "e4m3"),
])
def test_xmma_first_token_is_ab_then_cd(name, arch, precision, a_dtype, b_dtype, out_dtype):
    info = decode(name)
    assert (info.family, info.arch, info.role, info.precision, info.layout) == ("xmma", arch, "gemm", precision, "TN")
    assert (info.a_dtype, info.b_dtype, info.out_dtype) == (a_dtype, b_dtype, out_dtype)


@pytest.mark.parametrize(("name", "arch", "precision", "out_dtype", "layout"), [
    # karpathy/nanochat#105 (RTX 3060, torch.profiler); pytorch/pytorch#181718 (RTX 4090)
    ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_nn", "sm80", "bf16", "bf16", "NN"),
    ("ampere_bf16_s1688gemm_bf16_128x128_ldg8_f2f_stages_32x1_nn", "sm80", "bf16", "bf16", "NN"),
    # NVIDIA/cutlass#1025
    ("ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_relu_f2f_stages_64x6_tn", "sm80", "fp16", "fp16", "TN"),
    # Nsight Systems in forums.developer.nvidia.com/t/232209 and discuss.pytorch.org/t/194741
    ("ampere_sgemm_64x64_tn", "sm80", "fp32", "fp32", "TN"),
    ("ampere_sgemm_32x32_sliced1x4_nn", "sm80", "fp32", "fp32", "NN"),
    # official-stockfish/nnue-pytorch#96
    ("volta_sgemm_32x128_tn", "sm70", "fp32", "fp32", "TN"),
])
def test_cublas_names_before_xmma(name, arch, precision, out_dtype, layout):
    info = decode(name)
    assert (info.family, info.arch, info.role, info.rule) == ("cublas", arch, "gemm", "cublas-legacy")
    assert (info.precision, info.a_dtype, info.b_dtype, info.out_dtype, info.layout) == (precision, precision, precision, out_dtype, layout)


def test_cublas_complex_gemm_is_a_gemm_of_unknown_precision():
    # NVIDIA/apex#666: single-precision complex GEMM, outside the precisions this tool reports
    info = decode("volta_cgemm_32x64_tn")
    assert (info.family, info.arch, info.role, info.precision, info.layout) == ("cublas", "sm70", "gemm", "unknown", "TN")


def test_cublas_name_cut_by_the_profiler_keeps_its_precision_but_not_its_layout():
    # pytorch/xla#6518: torch.profiler cuts long names
    info = decode("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_...")
    assert (info.precision, info.layout) == ("bf16", None)


@pytest.mark.parametrize("name", [
    # ryujaehun/pytorch-gpu-benchmark#6 (nvprof)
    "void cudnn::detail::implicit_convolve_sgemm<float, float, int=1024, int=5, int=5, int=3, int=3, int=3, int=1, bool=1, bool=0, bool=1>(int, int, int, float const *, int, float*, cudnn::detail::implicit_convolve_sgemm<float, float, int=1024, int=5, int=5, int=3, int=3, int=3, int=1, bool=1, bool=0, bool=1>*, kernel_conv_params, int, float, float, int, float, float, int, int)",
    "turing_fp16_s1688cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1",
    "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
    # NVIDIA/apex#666
    "volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1",
    # CodeGandee/llm-perf-opt reports/20251107-dsocr/nsys/per-stage/sam/nsys/summary_cuda_gpu_kern_sum.csv
    "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_128x128_32x3_nhwc_align8>(T1::Params)",
])
def test_cudnn_convolutions_are_not_gemms(name):
    info = decode(name)
    assert (info.family, info.role, info.precision) == ("cudnn", "other", None)


@pytest.mark.parametrize(("name", "arch", "precision", "layout"), [
    # pytorch/pytorch#181718: cuBLAS's CUTLASS copies on an RTX 4090, one with a fused ReLU epilogue
    ("cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8>", "sm80", "bf16", "NN"),
    ("cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_nn_align1>", "sm75", "bf16", "NN"),
    # NVIDIA/cutlass#1025, NVIDIA/cutlass#2286 (A30)
    ("cutlass_80_tensorop_f16_s16816gemm_relu_f16_128x128_32x4_tn_align8", "sm80", "fp16", "TN"),
    ("cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1", "sm75", "bf16", "NN"),
    # huggingface/blog#3408 (torch.profiler)
    ("cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8", "sm80", "bf16", "TN"),
    # CodeGandee/llm-perf-opt reports/20251107-dsocr/nsys/per-stage/{decode,sam}/nsys/summary_cuda_gpu_kern_sum.csv
    # (nsys on an RTX 5090: the name carries the architecture the kernel was built for)
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8>(T1::Params)", "sm80", "bf16", "TN"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>(T1::Params)", "sm80", "bf16", "TN"),
])
def test_cublas_cutlass2_copies(name, arch, precision, layout):
    info = decode(name)
    assert (info.family, info.arch, info.role, info.precision, info.layout) == ("cutlass", arch, "gemm", precision, layout)
    assert (info.a_dtype, info.b_dtype, info.out_dtype) == (precision, precision, precision)


# CodeGandee/llm-perf-opt reports/20251107-dsocr/nsys/per-stage/decode/nsys/summary_cuda_gpu_kern_sum.csv
# (nsys on an RTX 5090, DeepSeek-OCR decode)
_GEMVX_BF16 = "std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, (bool)0, (bool)1, (bool)1, (bool)0, (int)7, (bool)0, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)"
_GEMMK1_FP32 = "void gemmk1_kernel<int, float, (int)256, (int)5, (bool)1, (bool)0, (bool)0, (bool)0, cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<float>, float, (int)0>(cublasGemmk1Params<T2, T9, T10, T11, T12, biasType<T11::value_type, T12>::type>)"
_SPLITK_BF16 = "void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, (bool)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, (bool)1, (bool)0, (bool)0>(cublasLt::cublasSplitKParams<T6>, const T4 *, const T10 *, T9 *, T5 *, const T6 *, const T6 *, const T11 *, const T4 *, T11 *, void *, long, T6 *, int *, T6 *, T6 *, const T6 *, const T6 *, const T6 *, const T6 *, const T6 *)"


@pytest.mark.parametrize(("name", "role", "precision"), [
    (_GEMVX_BF16, "gemm", "bf16"),
    (_GEMMK1_FP32, "gemm", "fp32"),
    # official-stockfish/nnue-pytorch#96: torch.profiler cut the template arguments, so the type is lost
    ("void gemv2T_kernel_val<int, int, float, float, float...", "gemm", "unknown"),
    # vllm-project/vllm-omni#553: the reduction after a split GEMV, cut the same way
    ("void reduce_1Block_kernel<float, 128, 7, cublasGemvT...", "gemm-tail", "unknown"),
])
def test_cublas_gemv_kernels_are_the_layers_gemm(name, role, precision):
    info = decode(name)
    assert (info.family, info.role, info.precision) == ("cublas", role, precision)
    assert info.out_dtype == (None if precision == "unknown" else precision)


def test_split_k_reduction_with_template_arguments():
    info = decode(_SPLITK_BF16)
    assert (info.family, info.role, info.precision, info.out_dtype) == ("cublaslt", "gemm-tail", "bf16", "bf16")


# gujialiang123/MOEresearch results/4way_bench/2x2_nsys/nsys_evidence/AT_OFF_CG_OFF_top10_kernels.txt:
# nsys cuda_gpu_kern_sum of vLLM's MoE on H100, a CUTLASS 3 grouped GEMM with a BF16 GMMA atom.
_CUTLASS3_GROUPED_BF16 = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<long, long, long>>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90ArrayTmaGmmaWarpSpecialized<(int)12, cute::tuple<cute::C<(int)1>, cute::C<(int)1>, cute::C<(int)1>>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>, cute::tuple<cute::C<(int)128>, cute::C<(int)16>, cute::C<(int)64>>, cutlass::bfloat16_t, cute::tuple<long, cute::C<(int)1>, cute::C<(int)0>> *, cutlass::bfloat16_t, cute::tuple<long, cute::C<(int)1>, cute::C<(int)0>> *, cute::TiledMMA<cute::MMA_Atom<cute::SM90::GMMA::MMA_64x16x16_F32BF16BF16_SS<(cute::SM90::GMMA::Major)0, (cute::SM90::GMMA::Major)0, (cute::SM90::GMMA::ScaleIn)1, (cute::SM90::GMMA::ScaleIn)1>>, cute::Layout<cute::tuple<cute::C<(int)2>, cute::C<(int)1>, cute::C<(int)1>>, cute::tuple<cute::C<(int)1>, cute::C<(int)0>, cute::C<(int)0>>>, cute::tuple<cute::Underscore, cute::Underscore, cute::Underscore>>, cute::SM90_TMA_LOAD, cute::ComposedLayout<cute::Swizzle<(int)3, (int)4, (int)3>, cute::smem_ptr_flag_bits<(int)16>, cute::Layout<cute::tuple<cute::C<(int)8>, cute::C<(int)64>>, cute::tuple<cute::C<(int)64>, cute::C<(int)1>>>>, void, cute::identity, cute::SM90_TMA_LOAD, cute::ComposedLayout<cute::Swizzle<(int)3, (int)4, (int)3>, cute::smem_ptr_flag_bits<(int)16>, cute::Layout<cute::tuple<cute::C<(int)8>, cute::C<(int)64>>, cute::tuple<cute::C<(int)64>, cute::C<(int)1>>>>, void, cute::identity>, cutlass::epilogue::collective::CollectiveEpilogue<cutlass::epilogue::Sm90PtrArrayTmaWarpSpecialized<(int)1, (int)1, (int)8, (bool)0, (bool)0, (int)2>, cute::tuple<cute::C<(int)128>, cute::C<(int)16>, cute::C<(int)64>>, cute::tuple<cute::C<(int)128>, cute::C<(int)16>>, void, cute::tuple<long, cute::C<(int)1>, cute::C<(int)0>> *, cutlass::bfloat16_t, cute::tuple<long, cute::C<(int)1>, cute::C<(int)0>> *, cutlass::epilogue::fusion::FusionCallbacks<cutlass::epilogue::Sm90PtrArrayTmaWarpSpecialized<(int)1, (int)1, (int)8, (bool)0, (bool)0, (int)2>, cutlass::epilogue::fusion::LinearCombination<cutlass::bfloat16_t, float, void, float, (cutlass::FloatRoundStyle)2>, cute::tuple<cute::C<(int)128>, cute::C<(int)16>, cute::C<(int)64>>, cute::tuple<cute::C<(int)128>, cute::C<(int)16>>, >, cute::SM90_TMA_LOAD, cute::ComposedLayout<cute::Swizzle<(int)1, (int)4, (int)3>, cute::smem_ptr_flag_bits<(int)16>, cute::Layout<cute::tuple<cute::C<(int)8>, cute::C<(int)16>>, cute::tuple<cute::C<(int)16>, cute::C<(int)1>>>>, cute::SM75_U32x4_LDSM_N, cute::SM90_TMA_STORE, cute::ComposedLayout<cute::Swizzle<(int)1, (int)4, (int)3>, cute::smem_ptr_flag_bits<(int)16>, cute::Layout<cute::tuple<cute::C<(int)8>, cute::C<(int)16>>, cute::tuple<cute::C<(int)16>, cute::C<(int)1>>>>, cute::SM90_U32x4_STSM_N, cute::Copy_Atom<cute::SM90_U32x4_STSM_N, cutlass::half_t>, void>, void, void>>(T1::Params)"


def test_cutlass3_grouped_gemm_reads_its_mma_atom():
    info = decode(_CUTLASS3_GROUPED_BF16)
    assert (info.family, info.role, info.rule, info.precision) == ("cutlass", "gemm", "cutlass-grouped", "bf16")
    assert (info.a_dtype, info.b_dtype, info.out_dtype, info.layout) == ("bf16", "bf16", None, None)


def test_cutlass3_grouped_gemm_cut_before_its_atom_is_unknown():
    info = decode(_CUTLASS3_GROUPED_BF16[:250])
    assert (info.family, info.role, info.rule, info.precision) == ("cutlass", "gemm", "cutlass-grouped", "unknown")


def test_inductor_flex_attention_template_is_attention_not_a_gemm():
    # pytorch/pytorch#180278: Inductor's FlexAttention template kernel
    info = decode("triton_tem_fused_flex_attention_0")
    assert (info.family, info.role, info.precision) == ("triton", "attention", None)


@pytest.mark.parametrize(("name", "family"), [
    # Inductor's pointwise, reduction and persistent-reduction kernels (seen on H200)
    ("triton_poi_fused_add_mul_tanh_0", "triton"),
    ("triton_red_fused_sum_1", "triton"),
    ("triton_per_fused_sum_2", "triton"),
    # NVIDIA/Fuser#4873 (nsys cuda_gpu_kern_sum): an NCCL collective whose name carries a data type
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)", "nccl"),
    # CodeGandee/llm-perf-opt reports/20251107-dsocr/nsys/per-stage/decode/nsys/summary_cuda_gpu_kern_sum.csv
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char *, (unsigned long)3>>(int, T2, T3)", "torch"),
])
def test_kernels_that_are_not_gemms(name, family):
    info = decode(name)
    assert (info.family, info.role, info.precision) == (family, "other", None)

# --- names no rule knows ------------------------------------------------------------------------------


def test_unknown_kernel_is_other_of_unknown_family():
    info = decode("my_custom_kernel<float>(float *)")
    assert (info.family, info.role, info.precision, info.rule) == ("unknown", "other", None, "unknown")


@pytest.mark.parametrize("name", [
    "some_vendor_gemm_kernel",
    "sm90_xmma_gemm_something_new",
    "nvjet_sm100_zzz_128x128_64x4_1x1_v_bz_TNT",  # type letters no source defines
    "nvjet_sm100_qqtst_128x128_128x6_2x1_v_bz_Avec16UE4M3_Bvec16UE4M3_TNT",  # FP8 data with NVFP4 scales
    "nvjet_sm100_qqtst_128x128_128x6_2x1_v_bz_Avec32UE8M0_Bvec16UE4M3_TNT",  # two scale formats
    "nvjet_sm100_tst_128x128_64x6_2x1_v_bz_Avec32UE8M0_TNT",  # block scales on BF16
    "nvjet_sm100_oohsh_128x128_256x7_2x2_2cta_v_bz_TNT",  # FP4 without block scales
])
def test_gemm_the_name_cannot_place_is_unknown_never_bf16(name):
    info = decode(name)
    assert (info.role, info.precision) == ("gemm", "unknown")


# --- short names and demangled names --------------------------------------------------------------------


@pytest.mark.parametrize(("demangled", "short"), [
    ("void cutlass::Kernel2<cutlass_80_tensorop_i16832gemm_s8_128x64_128x3_tn_align16>(T1::Params)",
     "cutlass_80_tensorop_i16832gemm_s8_128x64_128x3_tn_align16"),
    ("void transformer_engine::<unnamed>::amax_kernel<(int)16, (bool)1, __nv_bfloat16>(const T3 *, float *, unsigned long, unsigned long, const float *)",
     "amax_kernel"),
    ("void transformer_engine::<unnamed>::block_scaled_1d_cast_transpose_kernel<(bool)1, float, __nv_bfloat16, __nv_fp8_e4m3>(const T3 *, T4 *, T4 *, T2 *, T2 *, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned lo",
     "block_scaled_1d_cast_transpose_kernel"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)64, (int)128, (int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0",
     "flash_fwd_kernel"),
    ("void <unnamed>::softmax_warp_forward<float, float, float, (int)10, (bool)1, (bool)0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)",
     "softmax_warp_forward"),
    ("void transformer_engine::delayed_scaling_recipe::<unnamed>::amax_and_scale_update_impl::kernel_bulk(float *, transformer_engine::delayed_scaling_recipe::<unnamed>::AmaxParams, unsigned long, transformer_engine::delayed_scaling_recipe::<unnamed>::A",
     "kernel_bulk"),
])
def test_short_and_demangled_names_agree(demangled, short):
    long_info, short_info = asdict(decode(demangled)), asdict(decode(short))
    del long_info["name"], short_info["name"]
    assert long_info == short_info


def test_name_is_kept_as_given():
    name = " nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"  # nsys exports can carry surrounding blanks
    info = decode(name)
    assert (info.name, info.precision) == (name, "bf16")


# --- the table and the frame ------------------------------------------------------------------------------


def test_rules_use_known_roles_and_unique_ids():
    assert {rule.role for rule in RULES} <= set(ROLES)
    assert len({rule.id for rule in RULES}) == len(RULES)


def test_gemm_precisions_are_known():
    names = [n for n, *_ in H200_GEMMS] + ["some_vendor_gemm_kernel", "cublasLt::splitKreduce_kernel"]
    assert {decode(n).precision for n in names} <= set(PRECISIONS)


def test_decode_frame_aligns_with_input_and_decodes_each_name_once():
    names = pd.Series(
        ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "amax_kernel", None,
         "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "triton_red_fused_sum_1"],
        index=[10, 3, 7, 42, 0],
    )
    decode.cache_clear()
    frame = decode_frame(names)
    assert decode.cache_info().misses == 3  # three distinct names, the missing one not decoded
    assert list(frame.columns) == [f.name for f in fields(KernelInfo)]
    assert list(frame.index) == [10, 3, 7, 42, 0]
    assert list(frame["role"]) == ["gemm", "quantize", None, "gemm", "other"]
    assert list(frame["precision"]) == ["bf16", None, None, "bf16", None]
    assert frame.loc[42].to_dict() == asdict(decode(names[42]))
    assert frame.loc[7].isna().all()


def test_decode_frame_of_no_names():
    frame = decode_frame(pd.Series([], dtype=object))
    assert frame.empty
    assert list(frame.columns) == [f.name for f in fields(KernelInfo)]
