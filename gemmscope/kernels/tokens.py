"""Names read by their tokens, for the rules whose families name kernels by words rather than by a
fixed grammar: Triton kernels (a @triton.jit function's name), CuTe DSL kernels (the mangled name of
a Python function or class), DeepSeek's kernels (a C++ function in a namespace). Each reader splits
the name once and looks at the words; none searches the name with a pattern that scans on from each
place, so each runs in time linear in the name.

A rule takes a TokenMatcher where it would take a compiled regex: both answer ``search(name)``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# The identifier a name starts with: Triton names a kernel after its @triton.jit function
# (fused_moe_kernel, _matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1), with no return type or
# namespace before it.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TokenMatcher:
    """A rule's matcher that reads a name's words: `test` says whether the rule takes the name."""

    test: Callable[[str], bool]

    def search(self, string: str) -> bool | None:
        return True if self.test(string) else None


def leading_identifier(name: str) -> str | None:
    """The identifier a name starts with, or None."""
    match = _IDENTIFIER.match(name.strip())
    return match.group() if match else None


def identifier_tokens(name: str) -> list[str] | None:
    """The "_"-separated words of the identifier a name starts with (empty words dropped), None
    when it starts with none. A demangled C++ name starts with its return type ("void") or a
    namespace, whose words are not a Triton function's."""
    identifier = leading_identifier(name)
    return None if identifier is None else [token for token in identifier.split("_") if token]


def _words(name: str) -> str | None:
    """The leading identifier lower-cased between underscores ("_fused_moe_kernel_"): a word w is
    in it as "_w_", a run of words as "_w1_w2_", each test one scan."""
    identifier = leading_identifier(name)
    return None if identifier is None else f"_{identifier.lower()}_"


# --- Triton kernels named after their function ------------------------------------------------------

def is_triton_gemm(name: str) -> bool:
    """A Triton GEMM by its function's name: a word starting "matmul" (the tutorials' matmul_kernel and
    matmul_kernel_persistent, vLLM's batch-invariant matmul_kernel_persistent, SGLang's
    _w8a8_block_fp8_matmul, FBGEMM's _kernel_matmul_fp8_row, triton_kernels' _matmul_ogs_* and
    _p_matmul_*), or vLLM's and SGLang's fused MoE kernels (fused_moe_kernel,
    fused_moe_kernel_gptq_awq), whose every launch is the GEMM of a layer's experts."""
    words = _words(name)
    if words is None or any(f"_{word}_" in words for word in _AROUND_A_GEMM):
        return False
    return "_matmul" in words or "_fused_moe_kernel_" in words


# Words of the kernels that work around a GEMM and are named after it: triton_kernels'
# _finalize_matmul (the reduction over experts after _matmul_ogs), the reorder and scatter steps of
# the MoE layers.
_AROUND_A_GEMM = ("finalize", "reduce", "scatter", "gather", "permute", "unpermute", "reorder")


def is_deepgemm_helper(name: str) -> bool:
    """A Triton kernel named after the DeepGEMM GEMM it prepares or finishes (SGLang's
    post_reorder_deepgemm_triton_kernel, deepgemm_compute_src2dst_triton_kernel): a word "deepgemm"
    in a plain function name and no word of its own that says GEMM. DeepGEMM's own kernels are C++
    templates (deep_gemm::sm90_fp8_gemm_1d2d_impl<...>), never one plain identifier."""
    words = _words(name)
    if words is None or "_deepgemm_" not in words:
        return False
    return not any(f"_{word}_" in words for word in ("gemm", "matmul", "mm", "bmm"))


# --- Inductor's kernels: triton_<category>_fused_<aten ops>_<n> ---------------------------------------

# The aten ops an Inductor GEMM template lowers (torch/_inductor/kernel/: mm.py, bmm.py, mm_plus_mm.py,
# mm_grouped.py): mm, addmm, _int_mm, _scaled_mm, mm_plus_mm, _grouped_mm and _scaled_grouped_mm all
# hold the word "mm"; bmm, baddbmm, addmm are words of their own.
_INDUCTOR_GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")


def is_inductor_gemm_template(name: str) -> bool:
    """triton_tem_fused_<ops>_<n> where the fused ops include a GEMM op."""
    words = _words(name)
    if words is None or not words.startswith("_triton_tem_fused_"):
        return False
    return any(f"_{op}_" in words for op in _INDUCTOR_GEMM_OPS)


# --- CuTe DSL: kernel_<prefix>_<mangled function and arguments>_<n> -----------------------------------
# CuTe DSL names a kernel f"kernel_{mangle_name(function, args)}_{n}" (DSL.mangle_name and the
# @cute.kernel launcher in python/CuTeDSL/cutlass/base_dsl/dsl.py, NVIDIA/cutlass@7107b05): the
# mangling prefix "cutlass", the function's name, then each argument's str() with punctuation
# dropped, all cut at 180 characters. A method's first argument is its object,
# "<module path><Class>_object_at_" once the address is dropped
# (kernel_cutlass_kernel_flashinferquantizationkernelsmxfp8_quantizeMXFP8QuantizeSwizzledKernel_object_at__...);
# a function's arguments follow its name directly (kernel_cutlass__scaled_gemm_mxfp8_kernel_tensorptrf8E4M3FN...).
# What the kernel does is in the callable's words, the function, module and class names before the
# arguments; a tensor argument spells its element type (tensorptrf8E4M3FNgmem...), but a TMA operand
# is a coordinate tensor that spells none.

_CUTE_DSL = re.compile(r"(?<![A-Za-z0-9])kernel_cutlass_")
# Where the arguments start: an object, a tensor or pointer, a tiled MMA or copy atom, a number.
# A tensor is "tensorptr<type>..." or, for a TMA coordinate tensor, "tensor<digits>..."; a pointer
# "ptr<type>..." (a module or function word such as tensorop_gemm is neither).
_CUTE_DSL_ARGUMENT = re.compile(r"_object_at_|_(?:tensorptr|tensor\d|ptr(?:[fiu]\d|bf16|tf32)|TiledMMA|TiledCopy|CopyAtom|\d)")
_CUTE_DSL_ROLES = (
    ("attention", re.compile(r"Attention|Fmha|fmha|flash_fwd|flash_bwd|Mla|mla_")),
    ("gemm", re.compile(r"Gemm|gemm|GEMM|Matmul|matmul")),
    ("other", re.compile(r"Norm|norm")),  # norms fused with a quantization stay norms, as TE's are
    ("quantize", re.compile(r"Quant|quant")),
)


def cute_dsl_callable(name: str) -> str | None:
    """The words of a CuTe DSL kernel's callable (function, module path and class), or None when
    the name is not a CuTe DSL kernel's."""
    match = _CUTE_DSL.search(name)
    if not match:
        return None
    rest = name[match.end():]
    arguments = _CUTE_DSL_ARGUMENT.search(rest)
    return rest[:arguments.start()] if arguments else rest


def cute_dsl_role(name: str) -> str | None:
    """What a CuTe DSL kernel does by its callable's words: attention, gemm, quantize or other
    (a norm fused with a quantization is a norm); None for names that are not CuTe DSL's."""
    callable_words = cute_dsl_callable(name)
    if callable_words is None:
        return None
    return next((role for role, words in _CUTE_DSL_ROLES if words.search(callable_words)), "other")


def cute_dsl(role: str) -> TokenMatcher:
    """The matcher of the CuTe DSL rule for `role`."""
    return TokenMatcher(lambda name: cute_dsl_role(name) == role)
