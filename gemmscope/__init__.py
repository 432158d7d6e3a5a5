"""gemmscope: is the precision Transformer Engine was asked for the precision that ran?"""

__version__ = "0.1.0"
