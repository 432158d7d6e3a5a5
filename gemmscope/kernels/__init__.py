"""Everything gemmscope knows about CUDA kernel names, as one ordered table of rules.

A trace names each kernel; this package says what the kernel is: which library it comes from, what it
does (a GEMM, the tail of one, a quantization step, attention, anything else) and, for GEMMs, the
precision the name encodes. No other module matches kernel names.

``RULES`` (rules.py) is read top to bottom and the first rule whose pattern matches wins, so specific
shapes come before general ones. Each rule's comment says where the evidence for it comes from: "seen on
H200" means a name in a trace captured by this project on an H200 with cuBLAS 13; everything else
cites a public source (docs/kernel-names.md has the same table with links). A name is never guessed
into a precision: a GEMM whose name does not say is precision "unknown".

The package: model.py (what a name can say), rules.py (the table), tokens.py (the readers of names
made of words: Triton, Inductor, CuTe DSL), cublas.py, cutlass.py, serving.py and deepseek.py (how
each family's names spell their operands), match.py (a name matched against the table).
"""

from gemmscope.kernels.match import decode, decode_frame, decoded_columns, is_autotune_candidate, is_cache_flush
from gemmscope.kernels.model import (
    MIXED_PRECISIONS,
    PRECISIONS,
    ROLES,
    SCALE_MODES,
    TABLE_COLUMNS,
    KernelInfo,
    Operands,
    Rule,
)
from gemmscope.kernels.rules import RULES

__all__ = [
    "MIXED_PRECISIONS", "PRECISIONS", "ROLES", "RULES", "SCALE_MODES", "TABLE_COLUMNS", "KernelInfo", "Operands",
    "Rule", "decode", "decode_frame", "decoded_columns", "is_autotune_candidate", "is_cache_flush",
]
