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

This file only installs the patches; what they record is written by its siblings:
gemmscope_te.py (TE's autocast and GEMM calls), gemmscope_torch_gemms.py (GEMMs outside TE),
gemmscope_modules.py (which module made a GEMM), gemmscope_records.py (writing records, per-thread
state) and gemmscope_torch_profiler.py (capturing with torch.profiler).
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

from gemmscope_records import guarded
from gemmscope_steps import watch_steps
from gemmscope_te import GEMM_MODULE, QUANTIZATION_MODULE, patch_gemm, patch_quantization
from gemmscope_torch_gemms import patch_torch
from gemmscope_torch_profiler import start_profiler


def _patch_and_profile_torch(torch) -> None:
    patch_torch(torch)
    start_profiler(torch)  # first: the profiler records watch_steps' mark
    watch_steps(torch)


# Each module is patched as it is imported, before any code of the program's can use it.
_PATCHES = {"torch": _patch_and_profile_torch, QUANTIZATION_MODULE: patch_quantization, GEMM_MODULE: patch_gemm}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        # each patch is guarded on its own (gemmscope_records.patch); this catches the rest
        guarded(f"{module.__name__} (all of it)", module, "every record the hook makes of it",
                lambda: self._patch(module))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = _PATCHES.pop(fullname, None)
        if patch is None:
            return None
        sys.meta_path.remove(self)  # no recursion into ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            if _PATCHES:
                sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


sys.meta_path.insert(0, _Finder())

# Run the sitecustomize this one shadows, as Python would have.
_here = os.path.dirname(os.path.abspath(__file__))
_shadowed = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _shadowed is not None and _shadowed.loader is not None:
    _shadowed.loader.exec_module(importlib.util.module_from_spec(_shadowed))
