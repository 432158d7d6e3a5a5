"""numpy and pandas values as JSON-able Python values: for every JSON document and `to_dict()`."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def plain(value: Any) -> Any:
    """numpy/pandas scalars → JSON-able Python values (NaN → None), inside lists and dicts too."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def frame_records(frame: pd.DataFrame) -> list[dict]:
    """A DataFrame as JSON-able records."""
    return [{k: plain(v) for k, v in r.items()} for r in frame.to_dict("records")]
