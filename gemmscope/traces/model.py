"""The trace model every reader fills: one DataFrame per kind of record, on nsys's clock and ids.

A reader (traces.nsys for Nsight Systems' SQLite exports, traces.kineto for torch.profiler's
JSON) returns a `Trace`; attribution (gemmscope.attribution) joins its frames into launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

# nsys packs process and thread ids into one 64-bit "global thread id": the process id above
# the low 24 bits, the thread id in them. A Kineto trace's ids are packed the same way.
ID_BITS = 24
TID_MASK = (1 << ID_BITS) - 1


def process_id(global_tid: pd.Series) -> pd.Series:
    """The process id packed into nsys's global thread (or process) id."""
    return (global_tid // (1 << ID_BITS)) & TID_MASK


def thread_id(global_tid: pd.Series) -> pd.Series:
    """The thread id packed into nsys's global thread id."""
    return global_tid & TID_MASK


def launch_key(frame: pd.DataFrame) -> pd.Index:
    """(process, correlation id) as one integer per row: CUPTI's correlation ids are 32-bit."""
    pid = (frame["global_pid"].fillna(0).astype("int64").to_numpy() >> ID_BITS) & TID_MASK
    return pd.Index((pid << 32) | frame["correlation_id"].fillna(0).astype("int64").to_numpy())


def object_column(values: np.ndarray, index: pd.Index) -> pd.Series:
    """`values` as a column of Python objects: pandas would check each of a long trace's million
    strings to make them its own string type."""
    return pd.Series(np.array(values, dtype=object), index=index, dtype=object, copy=False)



@dataclass
class Trace:
    """Everything gemmscope reads from one export, as DataFrames; times are ns on nsys's clock."""

    path: Path  # as given (.sqlite, .sqlite.xz, .nsys-rep, or a torch.profiler trace: .json, .json.gz)
    sqlite: Path | None  # the nsys export read (SQLite file, or Parquet/Arrow folder); None for a torch.profiler trace
    meta: dict
    kernels: pd.DataFrame  # in start order (ties as the trace holds them), indexed 0..n-1
    memops: pd.DataFrame
    api_calls: pd.DataFrame
    nvtx: pd.DataFrame
    threads: pd.DataFrame
    gpus: pd.DataFrame
    memory: pd.DataFrame

