"""The property of tests/test_fuzz_cli.py over nsys's Parquet export (`nsys export --type
parquetdir`), here the real te_linear_bf16 capture laid out as one: the fields the reader uses
given values of another Arrow type or beyond physics, files cut short, emptied or dropped, rows
twice. Whatever comes in: no traceback; the trace's own answer (PASS, exit 0) or one line on
stderr and exit 2 (or, where no kernel is left of a run whose CUDA calls were captured, that
answer, exit 1). GEMMSCOPE_FUZZ_EXAMPLES sets how many cases it tries, as there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_cli import NSYS_FIELDS, SETTINGS, SOURCE, checked_as_before_or_nothing_launched

from trace_mutation import KERNELS, parquet_export

pytest.importorskip("pyarrow")  # an optional dependency: the imports below only where it is installed
import pyarrow  # noqa: E402
import pyarrow.parquet  # noqa: E402

# A value planted in one row (or every row): the column takes the type it needs to hold it, as a
# hand-made or damaged file would (Arrow types a column as a whole).
VALUES = ["text", 0.5, 1e3, None, 2**63 - 1, -(2**63), -1, 0, 2**62, b"\x00\xff", "start+1"]
# Name ids and names get only values no nsys writes: another valid id is another name (a GEMM
# renamed is no GEMM, a right "no GEMM ran"), as in the SQLite property.
NAMES = {"demangledName", "shortName", "nameId", "textId", "value"}
NAME_VALUES = ["text", 0.5, None, b"\x00\xff", 2**63 - 1, -1]
STRUCTURE = [None, ("cut", KERNELS), ("cut", "StringIds"), ("cut", "NVTX_EVENTS"), ("empty", "META_DATA_EXPORT"),
             ("drop", "CUPTI_ACTIVITY_KIND_RUNTIME"), ("drop", "StringIds"), ("drop", "NVTX_EVENTS"),
             ("twice", KERNELS), ("twice", "CUPTI_ACTIVITY_KIND_RUNTIME"), ("garbage", "TARGET_INFO_GPU")]


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return parquet_export(SOURCE, tmp_path_factory.mktemp("parquet") / "t")


def _typed(values: list) -> pyarrow.Array:
    """`values` as the one Arrow column that holds them: text, bytes, fractions or integers."""
    kinds = {type(v) for v in values if v is not None}
    if str in kinds:
        return pyarrow.array([None if v is None else str(v) for v in values], pyarrow.string())
    if bytes in kinds:
        return pyarrow.array([None if v is None else v if isinstance(v, bytes) else str(v).encode() for v in values],
                             pyarrow.binary())
    if float in kinds:
        return pyarrow.array(values, pyarrow.float64())
    return pyarrow.array(values, pyarrow.int64())


def _plant(file: Path, column: str, value, row: int | None) -> None:
    if not file.is_file():
        return
    data = pyarrow.parquet.read_table(file)
    if column not in data.column_names:
        return
    values = data.column(column).to_pylist()
    if value == "start+1":  # a time moved: a record that ends before it starts, or overlaps
        base = data.column("start").to_pylist() if "start" in data.column_names else values
        value = [None if b is None else b + 1 for b in base]
    for at in range(len(values)) if row is None else [row % max(len(values), 1)] * bool(values):
        values[at] = value[at] if isinstance(value, list) else value
    at = data.schema.get_field_index(column)
    pyarrow.parquet.write_table(data.set_column(at, column, _typed(values)), file)


def _restructure(export: Path, how: str, table: str) -> None:
    file = export / f"{table}.parquet"
    if how == "drop":
        file.unlink()
    elif how == "cut":
        file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    elif how == "empty":
        file.write_bytes(b"")
    elif how == "garbage":
        file.write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    else:  # every row twice
        data = pyarrow.parquet.read_table(file)
        pyarrow.parquet.write_table(pyarrow.concat_tables([data, data]), file)


@SETTINGS
@given(changes=st.lists(st.tuples(st.sampled_from(NSYS_FIELDS), st.sampled_from(VALUES),
                                  st.one_of(st.none(), st.integers(0, 6))), min_size=1, max_size=3),
       structure=st.sampled_from(STRUCTURE))
def test_parquet_fields_of_any_type_or_size(export, tmp_path_factory, changes, structure):
    trace = Path(shutil.copytree(export, tmp_path_factory.mktemp("pq") / "t"))
    for (table, column), value, row in changes:
        if column in NAMES and value not in NAME_VALUES:
            value = NAME_VALUES[VALUES.index(value) % len(NAME_VALUES)]
        _plant(trace / f"{table}.parquet", column, value, row)
    if structure is not None:
        _restructure(trace, *structure)
    checked_as_before_or_nothing_launched(trace, _without_kernels)


def _without_kernels(trace: Path) -> bool:
    file = trace / f"{KERNELS}.parquet"
    return not file.is_file() or pyarrow.parquet.read_metadata(file).num_rows == 0
