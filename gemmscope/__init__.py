"""gemmscope: is the precision Transformer Engine was asked for the precision that ran?

The library's face (gemmscope.api): `load` traces, `check` their GEMMs against a recipe,
`diagnose` where their GPU time went. Importing it loads no pandas: the calls do.
"""

from gemmscope.api import CheckResult, Traces, check, diagnose, load
from gemmscope.errors import InputError, State

__version__ = "0.1.0"

__all__ = ["CheckResult", "InputError", "State", "Traces", "check", "diagnose", "load", "__version__"]
