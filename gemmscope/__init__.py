"""gemmscope: is the precision Transformer Engine was asked for the precision that ran?

The library's face (gemmscope.api): `Analysis` of traces under one set of `Options` (what every
trace command of the CLI stands on), `load` traces, `check` their GEMMs against a recipe,
`diagnose` where their GPU time went, `compare` two runs, `capture` a command's run; report,
bundle and scrub in gemmscope.api. Importing it loads no pandas: the calls do.
"""

from gemmscope.api import Analysis, CheckResult, Comparison, Options, Traces, check, compare, diagnose, load
from gemmscope.capturing import Captured, CaptureWindow, capture
from gemmscope.errors import InputError, State

__version__ = "0.1.0"

__all__ = ["Analysis", "CaptureWindow", "Captured", "CheckResult", "Comparison", "InputError", "Options", "State",
           "Traces", "capture", "check", "compare", "diagnose", "load", "__version__"]
