"""Records, inside a profiled program, what Transformer Engine was asked to run.

`gemmscope verify` puts this folder first on PYTHONPATH of the command it profiles, so Python
imports this file at start-up in every process of the command (a launcher's too). It waits for
TE's modules to be imported, then patches them so that the trace holds (labels in
gemmscope_protocol.py beside this file):

- every ``te.autocast`` region, with its recipe (what the run asked for);
- every GEMM call of TE's Python (``general_gemm`` and the grouped entry points): the TE module
  or operation that made it, its name and place in the model, the pass and the operand types TE
  was handed, as a range on the thread that launches the kernels;
- every GEMM PyTorch runs outside TE (``F.linear``, ``matmul`` and its kin, ``torch._scaled_mm``),
  forward and backward, with the module and place that called it and what it was asked
  (operand types, float8 scaling), once torch is imported;
- the process's rank, once;
- where Megatron-Core's per-module recipe (``quant_recipe``) chose a module's precision, which of
  its configs asked and the matcher that chose it, in the ``te.autocast`` region that module enters;
- every optimizer step, numbered by training iteration (gemmscope_steps.py), and where
  ``verify --steps`` asks, the capture of those steps alone.

While torch.profiler records, each of these is also a ``record_function`` range, so that a PyTorch
profiler (Kineto) trace, which holds no NVTX, carries the same records.

Where gemmscope captures with torch.profiler instead of nsys (TORCH_TRACE_FOLDER set), the hook
starts the profiler as torch is imported and writes the trace when the process exits, if it used
CUDA (a launcher such as torchrun's writes none).

Modules are recognised by what they are, not by their class name: a subclass of a TE module
(Megatron-Core's TELayerNormColumnParallelLinear ...) is that TE module, and a subclass of a TE
recipe (Megatron-Core's TEDelayedScaling) is recorded as the TE recipe it derives from.

It never changes what TE computes, and never breaks the program: each entry point is patched on its
own (gemmscope_records.patch), and one a torch or TE release moved or changed is skipped, said once
on stderr and marked in the trace, whose check then names the records it lacks. The interpreter's
own sitecustomize, if any, is still run afterwards.

This file only installs the patches (gemmscope_install.py); what they record is written by its siblings:
gemmscope_te.py (TE's autocast and GEMM calls), gemmscope_megatron.py (Megatron-Core's per-module
recipe), gemmscope_torch_gemms.py (GEMMs outside TE),
gemmscope_modules.py (which module made a GEMM), gemmscope_records.py (writing records, per-thread
state) and gemmscope_torch_profiler.py (capturing with torch.profiler).
"""

import importlib.machinery
import importlib.util
import os
import sys

from gemmscope_install import install

install()

# Run the sitecustomize this one shadows, as Python would have.
_here = os.path.dirname(os.path.abspath(__file__))
_shadowed = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _shadowed is not None and _shadowed.loader is not None:
    _shadowed.loader.exec_module(importlib.util.module_from_spec(_shadowed))
