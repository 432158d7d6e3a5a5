"""The table: every kernel-name pattern gemmscope knows, in the order they are tried (package
docstring). The decoders of each family's operands live beside it (cublas, cutlass, serving)."""

from __future__ import annotations

import re

from gemmscope.kernels.cublas import (
    CUBLAS_LEGACY,
    GENERATION,
    cublas_legacy_operands,
    nvjet_operands,
    template_operands,
    xmma_operands,
)
from gemmscope.kernels.cutlass import (
    DEEPGEMM,
    VLLM_CUTLASS,
    cute_dsl_operands,
    cute_dsl_quantize_operands,
    cutlass2_operands,
    cutlass3_operands,
    cutlass_template_operands,
    deepgemm_operands,
    element_operands,
    vllm_cutlass_operands,
)
from gemmscope.kernels.deepseek import (
    DPSK_FP8_TRANSPOSE,
    DPSK_GROUPED_GEMM,
    dpsk_grouped_gemm_operands,
    dpsk_quantize_operands,
    is_dpsk_cast,
)
from gemmscope.kernels.model import DTYPE_ELSEWHERE, Rule
from gemmscope.kernels.serving import TRTLLM_GEN, quantize_operands, triton_gemm_operands, trtllm_gen_operands
from gemmscope.kernels.tokens import (
    TokenMatcher,
    cute_dsl,
    is_deepgemm_helper,
    is_inductor_gemm_template,
    is_triton_gemm,
)


# Literals that follow one another inside one word (a run of \w), as a regex a search tries only at a
# word's start: each literal is the first one found after the one before, found once (an atomic
# group: never tried again), so a search costs time linear in the name. `\w*A\w*B` cost a scan to
# the word's end from every place in it: a name with 16 K characters more took 110 s to decode.
def _in_one_word(*literals: str) -> str:
    return r"(?<!\w)" + "".join(rf"(?>\w*?{literal})" for literal in literals)


# The same for two patterns on one line, tried from a line's start only.
def _on_one_line(first: str, then: str) -> str:
    return rf"(?m:^)(?>.*?{first}).*?{then}"


# Transformer Engine kernels that cast, scale, transpose, Hadamard-transform or swizzle tensors for a
# quantized GEMM. Stems are the __global__ names in transformer_engine/common (cast/, transpose/,
# recipe/, swizzle/, hadamard_transform/, NVIDIA/TransformerEngine@d0067d0); they match both the
# demangled names and the short names nsys shows, anywhere in a word.
_TE_QUANTIZE_STEMS = (
    r"cast_transpose",  # cast_transpose_optimized_kernel, block_scaled_1d_cast_transpose_kernel (seen on H200)
    r"\btranspose_(?:optimized|general)_kernel",  # transposes of FP8 data (seen on H200)
    r"\btranspose_dbias_kernel",
    _in_one_word("quantize", "_kernel"),  # quantize_mxfp8_kernel, quantize_transpose_nvfp4_kernel, dequantize_kernel
    _in_one_word("cast_fp8", "_kernel"),
    r"_partial_cast_kernel",
    _in_one_word("amax", "_kernel"),  # amax_kernel, zero_amax_kernel, compute_scale_from_amax_kernel (seen on H200)
    _in_one_word("Amax", "Kernel"),  # HadamardAmaxTmaKernel, ZeroAmaxKernel
    r"\bHadamardTransformKernel",
    r"\bupdate_tensor_scale_inv_kernel",
    r"\bnvfp4_(?>\w*?_kernel)",
    _in_one_word("swizzle", "_kernel"),  # swizzle_row_scaling_kernel: scale factors into the GEMM's layout
    _on_one_line(r"\bdelayed_scaling_recipe::", r"\bkernel_bulk\b"),  # amax history and scale update (seen on H200)
    r"^kernel_bulk$",  # its short name
    _on_one_line(r"\btransformer_engine::unary_kernel<", r"\bidentity\b"),  # a plain cast to FP8 (seen on H200)
)


_QUANTIZE_STEMS = (
    r"\bper_token_group_quant", r"\bper_token_quant", r"\bper_tensor_quant", r"\b_?per_token_quant",
    r"scaled_fp8_quant", r"scaled_int8_quant", r"\bscaled_fp4_quant", _in_one_word("fp8_quant", "_kernel"),
    r"\b_?(?:static|dynamic)_quant_fp8", r"mxfp8_quantize", r"\bsegmented_max_reduction\b",
    r"\b_?per_token_group_quant_fp8",
)


# The table. Order matters: attention and quantization kernels that mention "gemm" or "cutlass"
# come before the GEMM rules, PyTorch's and Triton's kernels before the Transformer Engine stems that
# could match inside their names, and the catch-all comes last.
RULES: tuple[Rule, ...] = (
    # Flash attention: PyTorch's vendored FlashAttention-2 (pytorch_flash::flash_fwd_kernel, seen on
    # H200), Dao-AILab flash-attn, and FlashAttention-3 (cutlass::device_kernel<flash::...>, in the
    # profiler tables of pytorch/ao torchao/prototype/fp8_sdpa_inference/outputs/).
    Rule("flash-attention", re.compile(r"\bpytorch_flash::|\bflash_(?:fwd|bwd)_|\bflash::|\bflash_attn"), "flash", "attention"),
    # cuDNN SDPA engines: cudnn_generated_<...>_sdpa_sm<arch>_flash_{fprop,bprop}_<...>, e.g. in
    # NVIDIA/cudnn-frontend include/cudnn_frontend/experimental/sm100_sdpa_prefill_engine.h.
    Rule("cudnn-sdpa", re.compile(r"\bcudnn_generated_\w*sdpa"), "cudnn", "attention"),
    # Transformer Engine's own attention kernels (THD packing, context parallelism, sequence lengths)
    # live in these namespaces of transformer_engine/common/fused_attn/.
    Rule("te-attention", re.compile(r"\btransformer_engine::(?:fused_attn|context_parallel|flash_attention)::"), "te", "attention"),
    # FlashInfer's attention kernels (include/flashinfer/attention/prefill.cuh, decode.cuh, mla*.cuh,
    # cascade.cuh in flashinfer-ai/flashinfer): BatchPrefillWithPagedKVCacheKernel,
    # BatchDecodeWithPagedKVCacheKernel, Single*WithKVCacheKernel, BatchMLAPagedAttentionKernel, the
    # merge of partial states (MergeStatesKernel, PersistentVariableLengthMergeStatesKernel).
    Rule("flashinfer-attention", re.compile(
        r"\b(?:Batch|Single)(?:Prefill|Decode)With\w*Kernel|\bBatchMLAPaged\w*Attention\w*|\bflashinfer::mla::"
        r"|" + _in_one_word("MergeStates", "Kernel") + r"|\bBatch(?:Prefill|Decode)\w*Kernel(?:<|\b)"), "flashinfer", "attention"),
    # TRT-LLM's fused attention, also run by FlashInfer's trtllm-gen backend:
    # fmhaSm100fKernel_QkvE4m3OBfloat16H... (SemiAnalysisAI/InferenceX#863, B200).
    Rule("trtllm-fmha", re.compile(r"\bfmha\w*Kernel_|\bfmha_v2_"), "trtllm", "attention"),
    # CuTe DSL kernels, kernel_cutlass_<function or module+class>_<arguments>_<n> (tokens.py), all
    # placed here by the words of their callable, before any rule that could match inside their
    # arguments: attention classes (FA4's FlashAttentionForwardSm100, CUTLASS's
    # BlackwellFusedMultiHeadAttentionForward example); GEMM classes and functions
    # (kernel_cutlass_kernel_flashinfergemmkernelsdense_blockscaled_gemm_sm100Sm100BlockScaledPersistentDenseGemmKernel_object_at__...
    # in SGLang profiles on B200, quack's kernel_cutlass_kernel_quackgemm_default_epiGemmDefaultSm90_object_at__...,
    # kernel_cutlass__scaled_gemm_mxfp8_kernel_tensorptrf8E4M3FN...), their types read where the
    # arguments spell them; FlashInfer's quantize classes (MXFP8QuantizeSwizzledKernel,
    # NVFP4QuantizeSwizzledKernel, MXFP4QuantizeLinearKernel in flashinfer/quantization/kernels/) are
    # quantization; the rest (norms, FlashInfer's RMSNormKernel and RMSNormFP4QuantKernel among them)
    # other.
    Rule("cute-dsl-attention", cute_dsl("attention"), "cute-dsl", "attention"),
    Rule("cute-dsl-gemm", cute_dsl("gemm"), "cute-dsl", "gemm", cute_dsl_operands),
    Rule("cute-dsl-quantize", cute_dsl("quantize"), "cute-dsl", "quantize", cute_dsl_quantize_operands),
    Rule("cute-dsl", cute_dsl("other"), "cute-dsl", "other"),
    # DeepGEMM's DeepSeek sparse-attention indexer: sm90_fp8_mqa_logits, sm100_fp8_paged_mqa_logits
    # (deep_gemm/include/deep_gemm/impls/sm*_mqa_logits.cuh), attention scores, not a linear layer.
    Rule("deepgemm-mqa-logits", re.compile(r"\b(?:deep_gemm::)?sm\d+_\w*mqa_logits"), "deepgemm", "attention"),
    # Any other fused multi-head attention.
    Rule("attention", re.compile(r"fmha|sdpa", re.IGNORECASE), "unknown", "attention"),
    # TE's NVFP4 random Hadamard transform fused with the cast: a quantization kernel although it
    # runs a 16x16 GEMM. TE profiles it as "row_col_rht_gemm_device" on B200
    # (benchmarks/linear/benchmark_linear.py); the family is in hadamard_transform/.
    Rule("te-rht", re.compile(r"rht_gemm"), "te", "quantize"),
    # torch casts to float8 (at::native::float8_copy_kernel_cuda, seen on H200).
    Rule("torch-float8-copy", re.compile(r"\bfloat8_copy_kernel_cuda\b"), "torch", "quantize"),
    # torch zeroing an int32 tensor (at::native::FillFunctor<int>, seen on H200). Autotuners clear
    # the L2 cache with it before each launch they time: triton.testing.do_bench (the NVIDIA driver's
    # clear_cache: cache.zero_() of a 256 MB int32 buffer) and Inductor's benchmarker
    # (InductorBenchmarker.benchmark_gpu in torch/_inductor/runtime/benchmarking.py: an int32 buffer
    # of the L2's size, zeroed before every timed launch). A program may zero int tensors too
    # (is_cache_flush).
    Rule("torch-int-fill", re.compile(r"\bFillFunctor<int>"), "torch", "other"),
    # PyTorch's other kernels: elementwise, reductions, copies, optimizers, softmax (seen on H200).
    Rule("torch", re.compile(r"\bat::native::|\bat::cuda::|\bsoftmax_warp_(?:forward|backward)\b|\b(?:vectorized_|unrolled_)?elementwise_kernel\b"), "torch", "other"),
    # TorchInductor names a kernel triton_<category[:3]>_<fused name>_<n> (define_kernel in
    # torch/_inductor/codegen/triton.py): "tem" for a template, "poi", "red", "per" for pointwise and
    # reduction kernels (get_kernel_category_by_source_code in torch/_inductor/wrapper_benchmark.py), the
    # fused name listing the aten ops fused. A template over an mm op (mm, addmm, bmm, baddbmm,
    # _scaled_mm) is a GEMM whose precision is a template argument, not in its name: precision unknown
    # (triton_tem_fused_baddbmm next to nvjet in cfregly/ai-performance-engineering
    # code/docs/gb300-upstream-patches.md). FlexAttention is a template too
    # (triton_tem_fused_flex_attention_0 in pytorch/pytorch#180278). Other kernels are not GEMMs.
    Rule("triton-attention", re.compile(r"\btriton_tem_\w*flex_attention"), "triton", "attention"),
    Rule("triton-gemm", TokenMatcher(is_inductor_gemm_template), "triton", "gemm",
         note="an Inductor GEMM template takes its dtypes as arguments, not in its name; " + DTYPE_ELSEWHERE, dtype_in_name=False),
    # While it autotunes (max-autotune), Inductor launches each candidate of a GEMM template on its
    # own, named triton_<template name> (TritonTemplate.generate in torch/_inductor/select_algorithm.py:
    # kernel_name = f"triton_{self.name}"). The GEMM templates: "mm", "mm_persistent_tma",
    # "mm_persistent", "scaled_mm_device_tma_epilogue_scaling", "scaled_mm_device_tma_main_loop_scaling",
    # "blackwell_ws_persistent_device_tma" (torch/_inductor/kernel/mm.py; "scaled_mm",
    # "scaled_mm_device_tma" in older mm_scaled.py), "bmm" (kernel/bmm.py), "mm_plus_mm"
    # (kernel/mm_plus_mm.py), "grouped_mm" and "scaled_grouped_mm" (kernel/mm_grouped.py). The dtype
    # is a template argument: precision unknown. The compiled program runs the chosen one as
    # triton_tem_fused_* (above): these names are the autotuner's alone (is_autotune_candidate).
    Rule("triton-autotune-gemm", re.compile(
        r"\btriton_(?:b?mm|mm_plus_mm|mm_persistent(?:_tma)?|(?:scaled_)?grouped_mm|scaled_mm\w*"
        r"|blackwell_ws_persistent_device_tma\w*)(?![A-Za-z])"), "triton", "gemm",
         note="an Inductor GEMM template takes its dtypes as arguments, not in its name; " + DTYPE_ELSEWHERE, dtype_in_name=False),
    # An Inductor kernel whose fused ops include a quantization (triton_poi_fused_dynamic_per_token_scaled_fp8_quant_mul_silu_slice_1
    # in vLLM's ROCm profiles): quantization work.
    Rule("triton-quantize", re.compile(r"\btriton_(?:poi|red|per)_fused_\w*quant"), "triton", "quantize", quantize_operands),
    Rule("triton", re.compile(r"\btriton_"), "triton", "other"),  # inductor's fused kernels (seen on H200)
    Rule("nccl", re.compile(r"nccl", re.IGNORECASE), "nccl", "other"),
    Rule("te-quantize", re.compile("|".join(_TE_QUANTIZE_STEMS)), "te", "quantize"),
    # Quantization kernels of TRT-LLM / FlashInfer / vLLM / SGLang, decoded in serving.py.
    Rule("trtllm-quantize", re.compile(r"\bquantize_with_block_size<|cvt_(?:fp16|fp8|bf16)_to_fp4\b"), "trtllm", "quantize",
         quantize_operands),
    Rule("serving-quantize", re.compile("|".join(_QUANTIZE_STEMS)), "unknown", "quantize", quantize_operands),
    # DeepSeek's FP8 casts in the same profile: cuda::per_token_cast_to_fp8_with_channels<...>,
    # cuda::per_channel_cast_and_transpose<...>, the SwiGLU fused with one, and the casts back
    # (cuda::cast_back_impl<__nv_fp8x2_e4m3>): a word "cast" beside fp8, back, token or channel.
    Rule("dpsk-quantize", TokenMatcher(is_dpsk_cast), "deepseek", "quantize", dpsk_quantize_operands),
    Rule("dpsk-fp8-transpose", DPSK_FP8_TRANSPOSE, "deepseek", "quantize"),
    # cuBLASLt split-K reduction (seen on H200 as cublasLt::splitKreduce_kernel; after nvjet
    # *_splitK_* GEMMs on B200 in Dao-AILab/quack#157) and its bias-gradient epilogue
    # (cublasLt::epilogue::impl::globalKernelBgradAB_v1, seen on H200).
    Rule("cublaslt-splitk", re.compile(r"\bsplitKreduce_kernel\b"), "cublaslt", "gemm-tail", template_operands),
    Rule("cublaslt-epilogue", re.compile(r"\bcublasLt::epilogue::|\bglobalKernelBgrad"), "cublaslt", "gemm-tail", template_operands),
    # The reduction after a split cuBLAS GEMV: reduce_1Block_kernel<float, 128, 7, cublasGemvT... in
    # vllm-project/vllm-omni#553 (torch.profiler, name cut short there).
    Rule("cublas-gemv-splitk", re.compile(r"\breduce_1Block_kernel<[^>]*\bcublasGemv"), "cublas", "gemm-tail", template_operands),
    # Implicit-GEMM convolutions are convolutions, not linear layers: cuDNN's
    # sm90_xmma_fprop_implicit_gemm_* and CUTLASS's cutlass3x_sm100_tensorop_*implicit_gemm_fprop_*,
    # both in the B200/H100 profile of zaitrarrio/fastvideo-rs docs/perf/datacenter-profile.md.
    Rule("xmma-conv", re.compile(r"\bsm\d+_xmma_\w*implicit_gemm"), "xmma", "other"),
    Rule("cutlass-conv", re.compile(r"\bcutlass\w*implicit_gemm"), "cutlass", "other"),
    # cuDNN's own convolutions, which name a GEMM or a cuBLAS-like generation prefix:
    # cudnn::detail::implicit_convolve_sgemm and turing_fp16_s1688cudnn_fp16_* (nvprof in
    # ryujaehun/pytorch-gpu-benchmark#6), volta_fp16_s884cudnn_fp16_* (NVIDIA/apex#666), and its CUTLASS
    # copy cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_*> (nsys in
    # CodeGandee/llm-perf-opt reports/20251107-dsocr/nsys/per-stage/sam/).
    Rule("cudnn-conv", re.compile(r"\bimplicit_convolve_sgemm\b|" + GENERATION + r"\w*?cudnn|\bcutlass__5x_cudnn::"), "cudnn", "other"),
    # TensorRT-LLM-gen batched (MoE) and dense GEMMs, decoded in serving.py.
    Rule("trtllm-gen", TRTLLM_GEN, "trtllm-gen", "gemm", trtllm_gen_operands),
    # Older trtllm-gen cubins (BatchedGemmKernel_BatchN_E2m1E2m1Fp32_Bfloat16_Tile..., GemmGatedActKernel_E4m3_E4m3_Fp32_tile...
    # in TRT-LLM's trtllmGenKernels/*/cubin folders): GEMMs, their type order not read.
    Rule("trtllm-gen-legacy", re.compile(r"\b(?:Batched)?Gemm(?:GatedAct)?Kernel_(?:Batch[MN]_)?[A-Z][a-z0-9]+"), "trtllm-gen", "gemm",
         note="an older trtllm-gen kernel name, whose type order this module does not read"),
    # DeepGEMM, decoded in cutlass.py (its indexer logits are attention, above).
    Rule("deepgemm", DEEPGEMM, "deepgemm", "gemm", deepgemm_operands),
    Rule("deepgemm-other-gemm", re.compile(r"\bdeep_gemm::\w*gemm"), "deepgemm", "gemm",
         note="a DeepGEMM kernel whose template this module does not read"),
    # DeepGEMM's other kernels (layout transforms, logits cleaning): "gemm" is only in the namespace.
    Rule("deepgemm-aux", re.compile(r"\bdeep_gemm::"), "deepgemm", "other"),
    # Triton kernels named after the DeepGEMM GEMM they feed or finish: SGLang's MoE reorder and
    # gather kernels (post_reorder_deepgemm_triton_kernel, deepgemm_compute_src2dst_triton_kernel in
    # python/sglang/kernels/ops/moe/ep_moe_kernels.py) move tokens between experts; not GEMMs.
    Rule("deepgemm-helper", TokenMatcher(is_deepgemm_helper), "unknown", "other"),
    # DeepSeek's training stack in its published profile (deepseek-ai/profile-data train.json, H800):
    # CUTLASS grouped GEMMs named dpsk::grouped_gemm::cuda::<variant>::GemmKernel, decoded in
    # deepseek.py, and the layout helpers of the same namespace (utils::transpose, fill_tensormaps_kernel).
    Rule("dpsk-grouped-gemm", DPSK_GROUPED_GEMM, "deepseek", "gemm", dpsk_grouped_gemm_operands),
    Rule("dpsk-grouped-gemm-aux", re.compile(r"\bdpsk::grouped_gemm::"), "deepseek", "other"),
    # CUTLASS kernels as mangled symbols (torch.profiler and CUDA-graph traces keep some unmangled):
    # _ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversal... in SGLang's profiles of NVFP4 and FP8
    # models on B200; types read as in the demangled form.
    Rule("cutlass-mangled", re.compile(r"\b_ZN7cutlass(?:13device_kernel|6Kernel|7Kernel2)I\w*gemm"), "cutlass", "gemm",
         element_operands),
    # Triton GEMMs by their function's name, the identifier a name starts with: a word starting "matmul",
    # or vLLM's and SGLang's fused_moe_kernel (tokens.is_triton_gemm), decoded in serving.py: the tutorials'
    # matmul_kernel_persistent (also vLLM's batch-invariant GEMM), triton_kernels' _matmul_ogs_*,
    # SGLang's _w8a8_block_fp8_matmul and _mxfp8_block_scaled_matmul_kernel, FBGEMM's
    # _kernel_matmul_fp8_row. Most take their dtypes as arguments.
    Rule("triton-jit-gemm", TokenMatcher(is_triton_gemm), "triton", "gemm", triton_gemm_operands),
    # cuBLAS nvjet GEMMs; the type code and scale tokens are decoded in cublas.py (seen on H200; Blackwell
    # names in docs/kernel-names.md).
    Rule("nvjet", re.compile(r"\bnvjet_"), "nvjet", "gemm", nvjet_operands),
    # cuBLAS xmma GEMMs: sm90_xmma_gemm_f32f32_tf32f32_f32_* (TF32) and
    # sm80_xmma_gemm_f32f32_f32f32_f32_*_ffma_* (FP32 on FFMA units), seen on H200.
    Rule("xmma", re.compile(r"\bsm\d+_xmma_gemm_"), "xmma", "gemm", xmma_operands),
    # vLLM's CUTLASS scaled_mm kernels, named by vLLM's structs
    # (cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<cutlass::float_e4m3_t, ...>::GemmKernel>),
    # decoded in cutlass.py.
    Rule("vllm-cutlass", VLLM_CUTLASS, "cutlass", "gemm", vllm_cutlass_operands),
    # CUTLASS GEMMs named by template, decoded in cutlass.py. Grouped: CUTLASS 3's GroupProblemShape (an
    # nsys cuda_gpu_kern_sum of vLLM's MoE on H100 in gujialiang123/MOEresearch
    # results/4way_bench/2x2_nsys/nsys_evidence/AT_OFF_CG_OFF_top10_kernels.txt; TE's
    # NVTE_USE_CUTLASS_GROUPED_GEMM path, transformer_engine/common/gemm/cutlass_grouped_gemm.cuh) and
    # CUTLASS 2's GemmGrouped (include/cutlass/gemm/kernel/gemm_grouped.h).
    Rule("cutlass-grouped", re.compile(r"\bcutlass::gemm::GroupProblemShape<|\bcutlass::gemm::kernel::GemmGrouped<"), "cutlass", "gemm", cutlass_template_operands),
    # Callers may wrap the kernel in an architecture guard, as vLLM's vllm::enable_sm80_to_sm89<Kernel>
    # (csrc/quantization/cutlass_w8a8/scaled_mm_c2x.cuh), which then sits between the two.
    Rule("cutlass-template", re.compile(r"\bcutlass::(?:device_kernel|Kernel2?)<(?:[\w:]+<)?cutlass::gemm::kernel::"), "cutlass", "gemm", cutlass_template_operands),
    # CUTLASS 3.x naming (python/cutlass_library/gemm_operation.py in NVIDIA/cutlass); cuBLAS runs
    # such kernels too (cutlass3x_sm100_* for a TF32 matmul on GB300 in
    # cfregly/ai-performance-engineering code/docs/gb300-upstream-patches.md).
    Rule("cutlass3x", re.compile(r"\bcutlass3x_"), "cutlass", "gemm", cutlass3_operands),
    # CUTLASS 2.x naming, including cuBLAS's cutlass_80_tensorop_i16832gemm_s8_* (int8, seen on H200).
    Rule("cutlass2x", re.compile(r"\bcutlass(?:_\d\d)?_(?:tensorop|simt|wmma_tensorop|sptensorop)_\w*gemm"), "cutlass", "gemm", cutlass2_operands),
    # cuBLAS's GEMMs before xmma and nvjet, decoded in cublas.py: ampere_bf16_s16816gemm_bf16_* and
    # ampere_bf16_s1688gemm_bf16_* (RTX 3060 in karpathy/nanochat#105, RTX 4090 in pytorch/pytorch#181718),
    # ampere_fp16_s16816gemm_fp16_* (NVIDIA/cutlass#1025), ampere_sgemm_* (Nsight Systems in
    # forums.developer.nvidia.com/t/232209, discuss.pytorch.org/t/194741), volta_sgemm_*
    # (official-stockfish/nnue-pytorch#96), volta_cgemm_* (NVIDIA/apex#666).
    Rule("cublas-legacy", CUBLAS_LEGACY, "cublas", "gemm", cublas_legacy_operands),
    # cuBLAS's matrix-vector and small-GEMM kernels, which run a layer's GEMM when one side is a single
    # row or K is 1: a GEMM of the layer, its precision in its template arguments.
    # std::enable_if<...>::type internal::gemvx::kernel<int, int, __nv_bfloat16, ...> and
    # gemmk1_kernel<int, float, ...> in nsys on an RTX 5090 (CodeGandee/llm-perf-opt
    # reports/20251107-dsocr/nsys/per-stage/decode/), gemv2T_kernel_val<int, int, float, ... in
    # official-stockfish/nnue-pytorch#96; their template arguments include cuBLAS's GEMV parameter types.
    Rule("cublas-gemv", re.compile(r"\binternal::gemvx::kernel<|\bgemv2[NT]_kernel|\bgemmk1_kernel<|\bcublasGemv(?:TensorStridedBatched|ParamsEx)\b"), "cublas", "gemm", template_operands),
    # Everything else of Transformer Engine: normalization, activations, RoPE, MoE, userbuffers, the
    # grouped-GEMM argument setup (seen on H200: ln_*_kernel, unary_kernel, unary_grad_kernel).
    Rule("te-other", re.compile(r"\btransformer_engine::|\bsetup_grouped_gemm_kernel\b|\bkuserbuffers_"), "te", "other"),
    # A GEMM (or cuBLAS GEMV) that no rule above can place: role gemm, precision unknown.
    Rule("gemm-unplaced", re.compile(r"gemm|gemv", re.IGNORECASE), "unknown", "gemm", dtype_in_name=None),
    Rule("unknown", re.compile(r""), "unknown", "other"),
)
