"""Installing gemmscope's hook in a Python process: at start-up (sitecustomize.py beside this file,
which `verify` puts first on PYTHONPATH) or into a running interpreter (`gemmscope.audit()`).
Each module is patched as it is imported, before any code of the program's can use it; one already
imported is patched at once, and what that cannot reach is said and marked (a TE module that took
general_gemm by name before the patch calls it unrecorded)."""

import importlib.abc
import importlib.util
import sys

from gemmscope_megatron import QUANT_CONFIG_MODULE, TE_EXTENSIONS_MODULE, patch_quant_config, patch_te_extensions
from gemmscope_records import guarded, unpatched
from gemmscope_steps import watch_steps
from gemmscope_te import GEMM_MODULE, QUANTIZATION_MODULE, patch_gemm, patch_quantization
from gemmscope_torch_gemms import patch_torch
from gemmscope_torch_profiler import start_profiler


def _patch_and_profile_torch(torch) -> None:
    patch_torch(torch)
    start_profiler(torch)  # first: the profiler records watch_steps' mark
    watch_steps(torch)


# What each module's import patches; emptied as they are.
_PATCHES = {"torch": _patch_and_profile_torch, QUANTIZATION_MODULE: patch_quantization, GEMM_MODULE: patch_gemm,
            QUANT_CONFIG_MODULE: patch_quant_config, TE_EXTENSIONS_MODULE: patch_te_extensions}


def _patched(module, patch) -> None:
    # each patch is guarded on its own (gemmscope_records.patch); this catches the rest
    guarded(f"{module.__name__} (all of it)", module, "every record the hook makes of it", lambda: patch(module))


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patched(module, self._patch)


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


def install() -> None:
    """The hook in this process: the modules already imported patched now (torch first), the rest
    as they are imported. Once per process."""
    for name in list(_PATCHES):
        module = sys.modules.get(name)
        if module is None:
            continue
        _patched(module, _PATCHES.pop(name))
        if name == GEMM_MODULE:  # TE's modules hold general_gemm by name: imported before, they call the original
            unpatched(f"{GEMM_MODULE}.general_gemm", f"transformer_engine {_version('transformer_engine')}",
                      "TE was imported before the hook: its modules hold the unpatched general_gemm",
                      "TE GEMM calls (module, pass, operand types); import gemmscope's hook before transformer_engine")
    if _PATCHES:
        sys.meta_path.insert(0, _Finder())


def _version(package: str) -> str:
    return str(getattr(sys.modules.get(package), "__version__", "?"))
