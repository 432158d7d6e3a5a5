"""A trace's distinct range names searched all at once (traces.model.NameText, starting_with), and
redacted all at once (Redactor.texts): the same answers as a test per name, on the names of a real
capture of torch's emit_nvtx and on names made to catch the joined text out. A long trace's kernel
names coded (traces.model.text_codes) and redacted column by column (Redactor.values) by Python's
hashing: the same answers as pandas' own. Text the readers and the job make per row stays Python
strings, not pandas' Arrow-backed text, which would make a string per row again wherever it is read
as an array."""

import sqlite3
from contextlib import closing

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemmscope.assembly import te_ranges
from gemmscope.assembly.job import assemble
from gemmscope.autocast_hook.gemmscope_protocol import STEP_PREFIX
from gemmscope.redaction.policy import Redactor
from gemmscope.traces.model import NameText, starting_with, text_codes
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS

# Names a join could get wrong: empty, holding the separator (before or after a prefix), a prefix
# alone, non-ASCII (a digit that is not 0-9, a letter that lowers to two characters).
AWKWARD = ["", "x\x00step_1", "step_\x00", "step_", "gemmscope.", "²", "step_٣", "İ", "\x00nvte_x", "nvte_cublas_gemm_v2"]


@pytest.fixture(scope="module")
def range_names() -> np.ndarray:
    """The distinct range names of TE's GroupedLinear benchmark under emit_nvtx (a name per operator call)."""
    names = read_trace(CORPUS / "grouped_linear_fp8-block.sqlite.xz").range_names
    assert len(names) > 100 and any(n.startswith("aten::") for n in names)
    return names


@pytest.mark.parametrize("prefixes", [te_ranges.PREFIXES, te_ranges.HOOK_PREFIXES, STEP_PREFIX, "aten::", "step_", ""])
@pytest.mark.parametrize("awkward", [False, True])
def test_names_starting_with_are_those_a_test_per_name_finds(range_names, prefixes, awkward):
    names = np.array([*range_names, *(AWKWARD if awkward else [])], dtype=object)
    expected = [i for i, name in enumerate(names) if name.startswith(prefixes)]
    assert starting_with(names, prefixes).tolist() == expected
    assert NameText(names).starting_with(prefixes).tolist() == expected


def test_missing_names_and_other_values_match_nothing(range_names):
    names = np.array([None, *range_names[:50], np.nan, "step_7", 3, None], dtype=object)
    expected = [i for i, name in enumerate(names) if isinstance(name, str) and name.startswith(("aten::", "step_"))]
    assert starting_with(names, ("aten::", "step_")).tolist() == expected and len(expected) > 1


@pytest.mark.parametrize("awkward", [False, True])
def test_names_ending_in_a_digit_are_those_str_isdigit_says(range_names, awkward):
    names = np.array([*range_names, *(AWKWARD if awkward else [])], dtype=object)
    found = NameText(names).ending_in_digit()
    assert found.tolist() == [name[-1:].isdigit() for name in names] and found.any()


def test_range_names_redacted_at_once_as_one_by_one(range_names):
    """A trace's names, with secrets planted in some (one where a letter lowers to two characters,
    moving every later place in the lowered text), redacted and counted as a call per name does."""
    names = [*range_names, "İİ token=abcdef123456", "aten::mm alice@example.org", "İ", "hf_" + "a" * 34]
    one_by_one = Redactor()
    expected = [one_by_one(name) for name in names]
    at_once = Redactor()
    assert at_once.texts(names) == expected and at_once.counts == one_by_one.counts
    changed = at_once.changes(names)  # remembered now: no search
    assert changed == {n: r for n, r in zip(names, expected) if n != r} and len(changed) == 3


@pytest.fixture(scope="module")
def kernel_names() -> np.ndarray:
    """The kernel name of every launch of a real capture (TE's layer stack, FP8 block scaling):
    demangled template names of up to a thousand characters, each repeated, in launch order."""
    names = read_trace(CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz").kernels["name"].to_numpy(dtype=object)
    assert len(names) > 10_000 and max(map(len, names)) > 500
    return names


def _as_pandas_codes(values: np.ndarray) -> tuple[list[int], list]:
    codes, distinct = pd.factorize(values, use_na_sentinel=False)
    return codes.tolist(), [None if pd.isna(v) else v for v in distinct]


def test_kernel_names_are_coded_as_pandas_codes_them(kernel_names):
    # missing values among them: pandas codes every one alike, as text_codes' None
    names = np.concatenate([kernel_names, np.array([None, np.nan, pd.NA, kernel_names[0], None], dtype=object)])
    codes, distinct = text_codes(names)
    assert (codes.tolist(), distinct.tolist()) == _as_pandas_codes(names)
    assert distinct.dtype == object and codes.dtype == np.intp


@given(st.lists(st.sampled_from(["a", "b", "", "İ", "x" * 300, None, float("nan")]), max_size=40))
def test_any_texts_and_missing_values_are_coded_as_pandas_codes_them(cells):
    values = np.array(cells, dtype=object) if cells else np.array([], dtype=object)
    codes, distinct = text_codes(values)
    assert (codes.tolist(), distinct.tolist()) == _as_pandas_codes(values)


def test_a_column_of_kernel_names_is_redacted_as_each_cell_is(kernel_names):
    secret = "void my_kernel</home/alice/project/ops.cu>"  # a home folder's path: redacted
    cells = np.concatenate([kernel_names, np.array([None, secret], dtype=object)])
    column = pd.Series(cells, dtype=object)
    redactor = Redactor()
    redacted = redactor.values(column)
    assert redacted.tolist() == [None if c is None else Redactor()(c) for c in cells]
    assert "alice" not in redacted.iloc[-1]


def test_range_kinds_and_the_launches_trace_names_are_python_strings():
    """A range's kind (as the export's event type says it) and each launch's trace name, as Python
    strings: diagnosis, attribution and the step search read them as arrays."""
    trace = read_trace(CORPUS.parent / "steps" / "fsdp_2gpu_steps5-7.sqlite.xz")  # marks, push-pop and start-end
    with closing(sqlite3.connect(trace.sqlite)) as db:
        expected = dict(db.execute("SELECT CASE eventType WHEN 34 THEN 'mark' WHEN 59 THEN 'push-pop' ELSE 'start-end' "
                                   "END, COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60) GROUP BY 1"))
    kinds = trace.nvtx["kind"]
    assert kinds.dtype == object and kinds.value_counts().to_dict() == expected and len(expected) == 3
    launches = assemble(trace).kernels["trace"]
    assert launches.cat.categories.dtype == object and set(launches) == {trace.path.name}
    kineto = read_trace(CORPUS.parent / "steps" / "fsdp_400iters_steps200-202_torch.rank0.json.gz")
    assert kineto.nvtx["kind"].dtype == object and set(kineto.nvtx["kind"]) == {"push-pop", "mark"}
