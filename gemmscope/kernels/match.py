"""A kernel name matched against the table (rules.RULES): the first rule that matches says what the
kernel is; its architecture and whether it is grouped are read from the name apart."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import asdict, fields

import numpy as np
import pandas as pd

from gemmscope.kernels.cublas import CUBLAS_GENERATIONS, GENERATION
from gemmscope.kernels.model import NOT_A_GEMM, UNKNOWN_OPERANDS, KernelInfo
from gemmscope.kernels.rules import RULES

# sm<N>, CUTLASS 2's cutlass_<N>_ and the GPU generation of cuBLAS's older names: the architecture a
# kernel was built for, which a later GPU may run (cuBLAS runs ampere_* and cutlass_80_* kernels on an
# RTX 4090 in pytorch/pytorch#181718).
_ARCH = re.compile(r"(?<![A-Za-z0-9])sm_?(\d{2,3})[a-z]?(?![0-9])|\bcutlass_(\d\d)_|" + GENERATION)
_GEMM_ROLES = frozenset({"gemm", "gemm-tail"})


def _arch(name: str) -> str | None:
    match = _ARCH.search(name)
    if not match:
        return None
    return CUBLAS_GENERATIONS[match[3]] if match[3] else f"sm{match[1] or match[2]}"


# Names that say a GEMM is grouped or batched (a MoE layer's experts, a batched matmul): CUTLASS's
# grouped problem shapes, trtllm-gen's bmm_ and BatchedGemm kernels, DeepGEMM's GemmType other than
# Normal and its m_/k_grouped entry points, grouped-GEMM classes of CuTe DSL, Triton's matmul_ogs and
# fused_moe_kernel (vLLM's and SGLang's MoE experts), Inductor's bmm and grouped_mm templates.
_GROUPED = re.compile(
    r"GroupProblemShape|GemmGrouped|GroupedGemm|grouped_gemm|[mk]_grouped|(?<![A-Za-z])[bB]mm_|BatchedGemm"
    r"|GemmType\)[1-9]|GemmType::(?!Normal)[A-Z]|matmul_ogs|triton_(?:scaled_)?grouped_mm|triton_tem_fused_\w*bmm|triton_bmm"
    r"|_bmm_|Batched_GEMV|\bbmm\b|fused_moe_kernel")
_UNSPELLED = "the name does not spell the operand types"
# How much of a name the table reads: the longest kernel names met (CUTLASS 3's demangled templates)
# are a few thousand characters, and a longer one is read by its head, so that each distinct name
# of a trace costs a bounded time whatever its length (the rules' patterns run in time linear in
# what they read; some operand decoders scan on from each repeat of a token, quadratic in it).
DECODED_LENGTH = 1 << 14


@functools.cache
def decode(name: str) -> KernelInfo:
    """Classify one kernel name, short (nvjet_sm90_tst_...) or demangled (void ns::kernel<...>(...))."""
    text = name.strip()[:DECODED_LENGTH]
    rule = next(r for r in RULES if r.pattern.search(text))
    if rule.operands is not None:
        operands = rule.operands(text)
    elif rule.role in _GEMM_ROLES:
        operands = UNKNOWN_OPERANDS
    else:
        operands = NOT_A_GEMM
    gemm = rule.role in _GEMM_ROLES
    note = operands.note or rule.note
    if gemm and operands.precision == "unknown" and note is None:
        note = _UNSPELLED
    dtype_in_name = rule.dtype_in_name if operands.dtype_in_name is None else operands.dtype_in_name
    return KernelInfo(
        name=name,
        family=rule.family,
        arch=_arch(text),
        role=rule.role,
        precision=operands.precision,
        a_dtype=operands.a_dtype,
        b_dtype=operands.b_dtype,
        out_dtype=operands.out_dtype,
        scale_mode=operands.scale_mode,
        layout=operands.layout,
        rule=rule.id,
        grouped=rule.role == "gemm" and bool(_GROUPED.search(text)),
        note=note if (not gemm or operands.precision in {"unknown", "fp4"}) else None,
        dtype_in_name=dtype_in_name if gemm else None,
    )


# Rules whose kernels only an autotuner launches, each candidate on its own, never the program it tunes.
_AUTOTUNE_CANDIDATE_RULES = frozenset({"triton-autotune-gemm"})
# Rules whose kernels autotuners launch to clear the L2 cache before each launch they time.
_CACHE_FLUSH_RULES = frozenset({"torch-int-fill"})


def is_autotune_candidate(names: np.ndarray) -> np.ndarray:
    """Per kernel name, whether only an autotuner launches it (torch.compile's max-autotune
    benchmarking a GEMM template's candidates); each distinct name decoded once."""
    return _matched_by(names, _AUTOTUNE_CANDIDATE_RULES)


def is_cache_flush(names: np.ndarray) -> np.ndarray:
    """Per kernel name, whether it is the kernel autotuners clear the L2 cache with before each
    launch they time; a program may launch it too, so only a loop of them tells a benchmark
    (job.autotuning_launches). Each distinct name decoded once."""
    return _matched_by(names, _CACHE_FLUSH_RULES)


def _matched_by(names: np.ndarray, rules: frozenset[str]) -> np.ndarray:
    """Per kernel name, whether one of `rules` decodes it; each distinct name decoded once."""
    codes, distinct = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
    flags = np.array([isinstance(n, str) and decode(n).rule in rules for n in distinct], dtype=bool)
    return flags[codes]


_COLUMNS = [f.name for f in fields(KernelInfo)]


def decode_frame(names: pd.Series, columns: Sequence[str] = tuple(_COLUMNS)) -> pd.DataFrame:
    """One row per name, `columns` of KernelInfo (all by default), index aligned with ``names``;
    each distinct name is decoded once. A missing name (a trace row without one) gets a row of None."""
    codes, uniques = pd.factorize(names, use_na_sentinel=False)
    return pd.DataFrame(decoded_columns(np.asarray(uniques, dtype=object), codes, list(columns)),
                        index=names.index, columns=list(columns), dtype=object)


def decoded_columns(distinct: np.ndarray, codes: np.ndarray, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """KernelInfo's `columns` (object arrays) for rows given as `codes` into the `distinct` names,
    each decoded once: a long trace has a million kernels and a few dozen names. A missing name
    gets None."""
    rows = [asdict(decode(name)) if isinstance(name, str) else dict.fromkeys(_COLUMNS) for name in distinct]
    return {column: np.array([row[column] for row in rows], dtype=object)[codes] for column in columns}
