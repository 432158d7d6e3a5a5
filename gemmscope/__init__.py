"""gemmscope: is the precision Transformer Engine was asked for the precision that ran?

The library's face (gemmscope.api): `Analysis` of traces under one set of `Options` (what every
trace command of the CLI stands on), `load` traces, `check` their GEMMs against a recipe,
`diagnose` where their GPU time went, `compare` two runs, `capture` a command's run; report,
bundle and scrub in gemmscope.api. Beside the check, one call per product: `gemm_shapes` (the
GEMMs a model runs), `profile_model` (each through TE on this GPU), `decode_kernels` (what kernel
names say) and `what_if` (each group of a run's GEMMs at another precision). Importing it loads none of them (nor pandas): the first use
of a name does, so that `python -m gemmscope` starts, and answers Ctrl-C, at once.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from gemmscope.errors import InputError, State

if TYPE_CHECKING:
    from gemmscope.api import (
        Analysis,
        CheckResult,
        Comparison,
        Options,
        Traces,
        audit,
        check,
        compare,
        decode_kernels,
        diagnose,
        follow,
        gemm_shapes,
        load,
        profile_model,
        timeline,
        what_if,
    )
    from gemmscope.running.capturing import Captured, CaptureWindow, capture

__version__ = "0.1.0"

# Each public name beside the errors' -> the module it is imported from on first use.
_PUBLIC = {name: "gemmscope.api" for name in
           ("Analysis", "CheckResult", "Comparison", "Options", "Traces", "audit", "check", "compare", "decode_kernels",
            "diagnose", "follow", "gemm_shapes", "load", "profile_model", "timeline", "what_if")}
_PUBLIC |= {name: "gemmscope.running.capturing" for name in ("CaptureWindow", "Captured", "capture")}

__all__ = ["Analysis", "CaptureWindow", "Captured", "CheckResult", "Comparison", "InputError", "Options", "State",
           "Traces", "audit", "capture", "check", "compare", "decode_kernels", "diagnose", "follow", "gemm_shapes", "load",
           "profile_model", "timeline", "what_if", "__version__"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'gemmscope' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[name]), name)
    globals()[name] = value  # once
    return value
