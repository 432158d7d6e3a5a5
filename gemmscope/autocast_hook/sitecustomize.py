"""Records every Transformer Engine autocast region as an NVTX range.

`gemmscope verify` puts this folder first on PYTHONPATH of the command it profiles, so Python
imports this file at start-up. Once `transformer_engine.pytorch.quantization` is imported, the
entry and exit of every `te.autocast` region push and pop an NVTX range named
``gemmscope.autocast(recipe=<RecipeClass>)`` (``recipe=disabled`` for ``enabled=False``), which
tells the verifier which recipe the run asked for when the user gives no ``--expect``.
The interpreter's own sitecustomize, if any, is still run afterwards.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TARGET = "transformer_engine.pytorch.quantization"
RANGE_PREFIX = "gemmscope.autocast(recipe="


def _patch(quantization_module) -> None:
    import torch

    manager = quantization_module.FP8GlobalStateManager
    original_enter = manager.autocast_enter.__func__
    original_exit = manager.autocast_exit.__func__

    def autocast_enter(cls, *args, **kwargs):
        original_enter(cls, *args, **kwargs)
        recipe = cls.get_fp8_recipe() if cls.is_fp8_enabled() else None
        name = type(recipe).__name__ if recipe is not None else "disabled"
        torch.cuda.nvtx.range_push(f"{RANGE_PREFIX}{name})")

    def autocast_exit(cls, *args, **kwargs):
        torch.cuda.nvtx.range_pop()
        original_exit(cls, *args, **kwargs)

    manager.autocast_enter = classmethod(autocast_enter)
    manager.autocast_exit = classmethod(autocast_exit)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # one patch per process, and no recursion into ourselves
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())

# Run the sitecustomize this one shadows, as Python would have.
_here = os.path.dirname(os.path.abspath(__file__))
_shadowed = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _shadowed is not None and _shadowed.loader is not None:
    _shadowed.loader.exec_module(importlib.util.module_from_spec(_shadowed))
