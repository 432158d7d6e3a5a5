"""Which NVTX ranges enclose a launch, and each launch's rank, at the edges of the rules.

The traces here are hand-built (tests/nsys_export.py: nsys 2025.3's own schema, rows written by
the test), since a real capture cannot place a range exactly at a launch's start or end, and a
CPU capture holds no kernel. A launch is its CUDA launch call's interval [t0, t1]: a range
encloses it when it starts at or before t0 and ends at or after t1 (docs/how-it-works.md: How
GEMMs are attributed). Push/pop ranges count on the launching thread only, each NVTX domain's stack on its
own; start/end ranges count on every thread of their process and never in another process.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from gemmscope.assembly.attribution import EnclosingRanges, attribute, launches_with_ranges
from gemmscope.autocast_hook.gemmscope_protocol import (
    AUTOCAST_PREFIX,
    GEMM_PREFIX,
    PROCESS_PREFIX,
    TORCH_GEMM_PREFIX,
    format_record,
)
from gemmscope.judging.judgement import judge, recorded_recipes
from gemmscope.report.documents import summary_document
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS, GPU, KINETO
from nsys_export import BF16_GEMM, DOMAIN_CREATE, MARK, PUSH_POP, SPLIT_K_REDUCE, START_END, HandBuiltExport

MAIN, OTHER = 1000, 2000  # two processes
T0, T1 = 1000, 1100  # each case's launch call


def _push(trace, start, end, name, pid=MAIN, tid=MAIN, domain=0):
    trace.nvtx(PUSH_POP, pid, tid, start, end, name, domain)


def _start(trace, start, end, name, pid=MAIN, tid=MAIN):
    trace.nvtx(START_END, pid, tid, start, end, name)


# Each case: the ranges it adds around a launch of MAIN's main thread at [T0, T1], and the names
# that enclose it, outermost first.
CASES = {
    "push-pop starts at the launch's start": (lambda t: _push(t, T0, T1 + 50, "R"), ["R"]),
    "push-pop ends at the launch's end": (lambda t: _push(t, T0 - 50, T1, "R"), ["R"]),
    "push-pop equal to the launch": (lambda t: _push(t, T0, T1, "R"), ["R"]),
    "push-pop ends during the launch": (lambda t: _push(t, T0 - 50, T1 - 1, "R"), []),
    "push-pop starts during the launch": (lambda t: _push(t, T0 + 1, T1 + 50, "R"), []),
    "push-pop ends just before the launch": (lambda t: _push(t, T0 - 50, T0 - 1, "R"), []),
    "inner push-pop ends during the launch, outer open": (
        lambda t: (_push(t, T0 - 100, T1 + 100, "outer"), _push(t, T0 - 50, T1 - 1, "inner")),
        ["outer"]),
    "inner push-pop ends before the launch, outer open": (
        lambda t: (_push(t, T0 - 100, T1 + 100, "outer"), _push(t, T0 - 50, T0 - 10, "inner")),
        ["outer"]),
    "three nested push-pop, an earlier sibling closed": (
        lambda t: (_push(t, T0 - 300, T1 + 300, "a"), _push(t, T0 - 280, T0 - 250, "sibling"),
                      _push(t, T0 - 200, T1 + 200, "b"), _push(t, T0 - 100, T1 + 100, "c")),
        ["a", "b", "c"]),
    "push-pop sibling ends where the next one starts": (
        # the first is closed when the second opens: a sibling, not its parent
        lambda t: (_push(t, T0 - 100, T0 - 50, "first"), _push(t, T0 - 50, T1 + 50, "second")),
        ["second"]),
    "push-pop on another thread of the process": (
        lambda t: _push(t, T0 - 50, T1 + 50, "R", tid=MAIN + 1), []),
    "push-pop on a thread of another process": (
        lambda t: _push(t, T0 - 50, T1 + 50, "R", pid=OTHER, tid=OTHER), []),
    "domains interleave: one closed before the launch, one open": (
        # as one stack, "y" would nest in "x" and "x" would be reported open around the launch
        lambda t: (_push(t, T0 - 100, T0 - 10, "x", domain=1), _push(t, T0 - 50, T1 + 100, "y", domain=2)),
        ["y"]),
    "three domains open": (
        lambda t: (_push(t, T0 - 100, T1 + 100, "x", domain=1), _push(t, T0 - 50, T1 + 50, "y", domain=2),
                      _push(t, T0 - 20, T1 + 20, "z")),
        ["x", "y", "z"]),
    "start-end equal to the launch": (lambda t: _start(t, T0, T1, "S"), ["S"]),
    "start-end ends during the launch": (lambda t: _start(t, T0 - 50, T1 - 1, "S"), []),
    "start-end starts during the launch": (lambda t: _start(t, T0 + 1, T1 + 50, "S"), []),
    "start-end ends just before the launch": (lambda t: _start(t, T0 - 50, T0 - 1, "S"), []),
    "start-end started on another thread of the process": (
        lambda t: _start(t, T0 - 50, T1 + 50, "S", tid=MAIN + 1), ["S"]),
    "start-end of another process": (
        lambda t: _start(t, T0 - 50, T1 + 50, "S", pid=OTHER, tid=OTHER), []),
    "start-end ranges overlap, not nested, around a push-pop": (
        lambda t: (_start(t, T0 - 100, T1 + 10, "s1"), _push(t, T0 - 70, T1 + 5, "p"),
                      _start(t, T0 - 50, T1 + 200, "s2")),
        ["s1", "p", "s2"]),
    "push-pop never closed": (lambda t: _push(t, T0 - 50, None, "R"), ["R"]),
    "push-pop pushed at the same time, the inner closed before the launch": (
        # pushed in one nanosecond, the longer is the outer: the closed inner one is not its parent
        lambda t: (_push(t, T0 - 50, T1 + 100, "outer"), _push(t, T0 - 50, T0 - 10, "inner")),
        ["outer"]),
    "push-pop pushed at the same time, both open": (
        lambda t: (_push(t, T0 - 50, T1 + 100, "outer"), _push(t, T0 - 50, T1 + 50, "inner")),
        ["outer", "inner"]),
    "push-pop first on a thread that launches nothing": (
        # that thread's stack is passed over, not the ones after it
        lambda t: (_push(t, T0 - 300, T0 - 200, "idle", tid=MAIN + 1), _push(t, T0 - 50, T1 + 50, "R")),
        ["R"]),
}


@pytest.fixture(scope="module")
def schema(gpu_sqlite):
    return gpu_sqlite("te_linear_bf16")


@pytest.mark.parametrize("case", CASES)
def test_enclosing_ranges_at_the_edges(schema, tmp_path, case):
    # one trace per case: no case's ranges can reach another's launch
    add, enclosing = CASES[case]
    trace = HandBuiltExport(tmp_path / "edge.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    trace.thread(MAIN, MAIN + 1, "worker")
    trace.thread(OTHER, OTHER, "python")
    for domain, name in ((1, "domain x"), (2, "domain y")):
        trace.nvtx(DOMAIN_CREATE, MAIN, MAIN, 0, None, name, domain)
    add(trace)
    trace.launch(MAIN, MAIN, T0, T1)
    frame, ranges = launches_with_ranges(read_trace(trace.close()))
    assert frame["launch_start"].tolist() == [T0] and frame["role"].tolist() == ["gemm"]
    assert ranges.lists([0]) == [enclosing]
    assert len(ranges.launch) == len(ranges.name) == len(enclosing)  # one pair per range around it


def test_kernel_without_its_launch_call_is_placed_by_its_own_start(schema, tmp_path):
    # no call, so no thread: only its process's start/end ranges can enclose it, by the kernel's time
    trace = HandBuiltExport(tmp_path / "uncalled.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    _start(trace, T1, T1 + 100, "S")  # the kernel runs at [T1 + 10, T1 + 1010]
    _start(trace, T0, T1 + 5, "before the kernel")
    _push(trace, T0, T1 + 2000, "P")
    trace.launch(MAIN, MAIN, T0, T1, call=False)
    frame, ranges = launches_with_ranges(read_trace(trace.close()))
    assert frame["launch_start"].isna().all() and frame["start"].tolist() == [T1 + 10]
    assert ranges.lists([0]) == [["S"]]


def test_start_end_range_that_ends_at_a_callless_kernel_s_start_holds_it(schema, tmp_path):
    # such a kernel is placed at the instant it starts: a range ending then still holds it
    trace = HandBuiltExport(tmp_path / "uncalled.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    _start(trace, T0, T1 + 10, "S")  # the kernel runs at [T1 + 10, T1 + 1010]
    trace.launch(MAIN, MAIN, T0, T1, call=False)
    _, ranges = launches_with_ranges(read_trace(trace.close()))
    assert ranges.lists([0]) == [["S"]]



# --- the launches frame and the ranges around each launch ------------------------------------

def test_a_launch_call_repeated_in_the_trace_is_one_launch_at_the_outer_call(schema, tmp_path):
    # a call nested in another under the same correlation id (a runtime call around the driver
    # call) launched one kernel: one row, placed by the outer call
    trace = HandBuiltExport(tmp_path / "nested.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    correlation = trace.launch(MAIN, MAIN, T0, T1)
    trace.call(MAIN, MAIN, T0 - 20, T1 + 5, correlation=correlation)
    trace.launch(MAIN, MAIN, 5000, 5100)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    assert frame["launch_start"].tolist() == [T0 - 20, 5000]
    assert frame["launch_end"].tolist() == [T1 + 5, 5100]


def test_launches_come_in_start_order_ties_in_the_trace_s_row_order(schema, tmp_path):
    # row positions are what EnclosingRanges and the verdicts point at: 0..n-1 in start order,
    # kernels that start together in the order the trace holds them
    trace = HandBuiltExport(tmp_path / "order.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    trace.thread(MAIN, MAIN + 1, "worker")
    for start in (4000, 3000, 2000, 1000):  # kernels inserted latest first, two at each time
        for tid in (MAIN, MAIN + 1):
            trace.launch(MAIN, tid, start, start + 100)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    assert frame.index.equals(pd.RangeIndex(8))
    assert frame["launch_start"].tolist() == [1000, 1000, 2000, 2000, 3000, 3000, 4000, 4000]
    assert frame["correlation_id"].tolist() == [7, 8, 5, 6, 3, 4, 1, 2]


def test_a_range_pushed_without_a_message_has_no_name(schema, tmp_path):
    trace = HandBuiltExport(tmp_path / "unnamed.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    _push(trace, T0 - 100, T1 + 100, "R")
    _push(trace, T0 - 50, T1 + 50, None)
    trace.launch(MAIN, MAIN, T0, T1)
    _, ranges = launches_with_ranges(read_trace(trace.close()))
    assert ranges.lists([0]) == [["R", None]]


def test_a_failed_hook_record_leaves_module_name_and_pass_to_te_s_range(schema, tmp_path):
    # the hook writes an error record when it cannot read a GEMM call; TE's per-GEMM range around
    # it (here the trace's first NVTX row, with no module-level range) still says what ran
    trace = HandBuiltExport(tmp_path / "failed.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    _push(trace, T0 - 100, T1 + 100, "transformer_engine._Linear.forward.qkv.gemm")
    _push(trace, T0 - 50, T1 + 50, format_record(GEMM_PREFIX, {"entry": "general_gemm", "error": "ValueError"}))
    trace.launch(MAIN, MAIN, T0, T1)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    row = frame.iloc[0]
    assert (row["te_module"], row["te_name"], row["layer"], row["te_pass"], row["pass_source"]) == (
        "_Linear", "qkv", "qkv", "fprop", "te-range")
    assert row["recorded"] and row["via_te"]


def test_attribute_says_why_a_trace_has_no_kernel(schema, tmp_path):
    calls_only = HandBuiltExport(tmp_path / "calls.sqlite", schema)
    calls_only.thread(MAIN, MAIN, "python")
    calls_only.call(MAIN, MAIN, T0, T1)
    loaded = attribute(read_trace(calls_only.close()))
    assert (loaded.no_kernels, loaded.cuda_traced, loaded.path) == (True, True, tmp_path / "calls.sqlite")
    assert loaded.error == f"{tmp_path / 'calls.sqlite'} ran no GPU kernel: its CUDA calls were captured, and none launched one"
    assert loaded.launches is None

    nothing = HandBuiltExport(tmp_path / "nothing.sqlite", schema)
    nothing.thread(MAIN, MAIN, "python")
    loaded = attribute(read_trace(nothing.close()))
    assert (loaded.no_kernels, loaded.cuda_traced) == (True, False)
    assert loaded.error.endswith("nothing.sqlite holds no GPU kernels: was it captured with --trace=cuda, on a GPU?")

    cpu_only = KINETO / "cpu_train.json.gz"
    loaded = attribute(read_trace(cpu_only))
    assert loaded.no_kernels and "CPU-only torch.profiler trace" in loaded.error


def test_attribute_keeps_the_launches_and_lets_the_trace_s_own_kernel_rows_go(schema, tmp_path):
    loaded = attribute(read_trace(_one_process(tmp_path / "two.sqlite", schema)))
    assert loaded.error is None and not loaded.no_kernels and len(loaded.launches) == 2
    assert loaded.trace.kernels.empty and loaded.trace.api_calls.empty
    assert {"correlation_id", "start", "name"} <= set(loaded.trace.kernels.columns)
    assert {"correlation_id", "start", "global_tid"} <= set(loaded.trace.api_calls.columns)


# Each case: the one range at the trace's first NVTX row (row 0), around the launch, and what
# it makes of the launch: (te_module, te_pass, pass_source, recorded, via_te, gemm_m).
FIRST_ROW = {
    "the hook's record": (
        format_record(GEMM_PREFIX, {"entry": "general_gemm", "module": "_Linear", "owner": "?", "layer": "proj",
                                    "pass": "dgrad", "a": "bf16", "b": "bf16", "m": 8, "n": 16, "k": 32,
                                    "flops": 8192}),
        ("_Linear", "dgrad", "hook", True, True, 8)),
    "TE's C GEMM call": ("nvte_cublas_gemm_v2", (None, "fprop", "thread", False, True, None)),
    "TE's module range": ("LayerNormMLP forward", ("_LayerNormMLP", "fprop", "te-order", False, False, None)),
}


@pytest.mark.parametrize("case", FIRST_ROW)
def test_a_range_at_the_trace_s_first_nvtx_row_counts(schema, tmp_path, case):
    label, want = FIRST_ROW[case]
    trace = HandBuiltExport(tmp_path / "first.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    _push(trace, T0 - 50, T1 + 50, label)
    trace.launch(MAIN, MAIN, T0, T1)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    row = frame.iloc[0]
    got = (row["te_module"], row["te_pass"], row["pass_source"], row["recorded"], row["via_te"], row["gemm_m"])
    assert tuple(None if pd.isna(v) else v for v in got) == want


BF16_TN = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"
BF16_NT = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NTT"
FP8_TN = "nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_TNT"


def test_a_gemm_without_its_launch_call_has_no_pass_from_a_thread(schema, tmp_path):
    # with its call missing, so is the thread that launched it: it is neither fprop for running
    # off the autograd thread nor backward for running on it; a 16-bit kernel's layout letters
    # still say its pass, an FP8 one's nothing
    trace = HandBuiltExport(tmp_path / "callless.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    trace.launch(MAIN, MAIN, 1000, 1100, call=False)  # BF16, NN
    trace.launch(MAIN, MAIN, 5000, 5100, FP8_TN, call=False)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    assert frame["thread"].isna().all()
    assert frame["te_pass"].tolist() == ["dgrad", None] and frame["pass_source"].tolist() == ["layout", None]


def test_a_backward_node_s_gemms_take_dgrad_or_wgrad_from_16_bit_layouts_only(schema, tmp_path):
    # the hook's range around a backward node outside TE says "backward"; inside it a BF16 NN
    # kernel is the dgrad and a BF16 NT one the wgrad, while a TN one (no pass of a backward
    # node) and an FP8 one (always TN on Hopper) stay backward
    trace = HandBuiltExport(tmp_path / "node.sqlite", schema)
    autograd = MAIN + 1
    trace.thread(MAIN, autograd, "pt_autograd_0")
    _push(trace, 900, 9000, format_record(TORCH_GEMM_PREFIX, {"op": "MmBackward0", "module": "head", "layer": "head",
                                                              "pass": "backward", "a": "bf16", "b": "bf16"}),
          tid=autograd)
    for start, kernel in ((1000, BF16_GEMM), (3000, BF16_NT), (5000, BF16_TN), (7000, FP8_TN)):
        trace.launch(MAIN, autograd, start, start + 100, kernel)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    assert frame["te_pass"].tolist() == ["dgrad", "wgrad", "backward", "backward"]
    assert frame["pass_source"].tolist() == ["layout", "layout", "hook", "hook"]
    assert frame["te_module"].tolist() == ["head"] * 4


def _ranges(launch: list[int], name: list[int], names: list) -> EnclosingRanges:
    return EnclosingRanges(np.array(launch, dtype="int64"), np.array(name, dtype="int64"), np.array(names, dtype=object))


def test_enclosing_ranges_pairs_of_several_launches():
    # launches 0 and 2 have two ranges each, launch 1 none; pairs outermost first
    ranges = _ranges([0, 0, 2, 2], [0, 1, 2, 1], ["a", "b", "c"])
    which, names = ranges.around(np.array([2, 1, 0]))
    assert which.tolist() == [0, 0, 2, 2] and names.tolist() == ["c", "b", "a", "b"]
    assert ranges.lists([2, 1, 0]) == [["c", "b"], [], ["a", "b"]]
    which, names = ranges.around(np.array([1]))
    assert which.tolist() == [] and names.tolist() == []
    ranges = _ranges([0, 0, 1, 2, 2, 2], [0, 1, 2, 3, 4, 5], list("abcdef"))  # two, one and three ranges
    which, names = ranges.around(np.array([2, 1, 0]))
    assert which.tolist() == [0, 0, 0, 1, 2, 2] and names.tolist() == ["d", "e", "f", "c", "a", "b"]


def test_enclosing_ranges_of_several_frames_stacked():
    parts = [_ranges([0, 1], [0, 1], ["a", "b"]), _ranges([0], [0], ["b"]), _ranges([1, 1], [1, 0], ["c", "d"])]
    stacked = EnclosingRanges.concat(parts, [0, 2, 3])
    assert stacked.lists([0, 1, 2, 3, 4]) == [["a"], ["b"], ["b"], [], ["d", "c"]]
    assert stacked.names.tolist() == ["a", "b", "c", "d"]
    empty = EnclosingRanges.concat([], [])
    assert empty.lists([0]) == [[]] and len(empty.launch) == len(empty.name) == len(empty.names) == 0
    assert empty.innermost_matching(["*"], np.array([0, 1])).tolist() == [None, None]


def test_enclosing_ranges_matched_for_no_launch():
    ranges = _ranges([0, 1], [0, 1], ["a", "b"])
    assert ranges.innermost_matching(["a"], []).tolist() == []
    assert ranges.any_matching(["a"], []).tolist() == []
    assert ranges.any_matching(["b"], [1, 0]).tolist() == [True, False]


# --- ranks ------------------------------------------------------------------------------------

def _rank_mark(trace, pid, rank):
    trace.nvtx(MARK, pid, pid, 10, None, f"{PROCESS_PREFIX}rank={rank}|local_rank={rank}|world_size=2")


def _one_process(path, schema, rank_mark=None, tail_ns=0):
    """One process launching two BF16 GEMMs (and a split-K reduction of `tail_ns`), marked with
    its rank by the hook when `rank_mark` is given."""
    trace = HandBuiltExport(path, schema)
    trace.thread(MAIN, MAIN, "python")
    if rank_mark is not None:
        _rank_mark(trace, MAIN, rank_mark)
    trace.launch(MAIN, MAIN, 1000, 1100)
    trace.launch(MAIN, MAIN, 5000, 5100)
    if tail_ns:
        trace.launch(MAIN, MAIN, 9000, 9100, SPLIT_K_REDUCE, kernel_ns=tail_ns)
    return trace.close()


def _ranks(result) -> dict:
    return {name: sorted(set(part["rank"].tolist())) for name, part in result.job.kernels.groupby("trace", observed=True)}


def test_rank_marks_belong_to_their_own_process(schema, tmp_path):
    trace = HandBuiltExport(tmp_path / "two.sqlite", schema)
    for pid, rank in ((MAIN, 1), (OTHER, 0)):
        trace.thread(pid, pid, "python")
        _rank_mark(trace, pid, rank)
        trace.launch(pid, pid, pid * 10, pid * 10 + 100)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    assert dict(zip(frame["pid"], frame["rank"])) == {MAIN: 1, OTHER: 0}


def test_a_process_marked_twice_has_its_later_mark_s_rank(schema, tmp_path):
    trace = HandBuiltExport(tmp_path / "twice.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    _rank_mark(trace, MAIN, 3)
    trace.nvtx(MARK, MAIN, MAIN, 20, None, f"{PROCESS_PREFIX}rank=5|local_rank=1|world_size=8")
    trace.launch(MAIN, MAIN, T0, T1)
    frame, _ = launches_with_ranges(read_trace(trace.close()))
    assert frame["rank"].tolist() == [5]


def test_process_without_a_mark_has_no_rank_from_another_s(schema, tmp_path):
    # nor from the file's name: it names one rank, and the trace holds two processes
    trace = HandBuiltExport(tmp_path / "two_rank4.sqlite", schema)
    for pid in (MAIN, OTHER):
        trace.thread(pid, pid, "python")
        trace.launch(pid, pid, pid * 10, pid * 10 + 100)
    _rank_mark(trace, OTHER, 1)
    result = judge(read_trace(trace.close()), "bf16")
    ranks = result.job.kernels.set_index("pid")["rank"]
    assert ranks[OTHER] == 1 and ranks.isna()[MAIN]


def test_rank_from_a_per_rank_file_s_name(schema, tmp_path):
    # nsys -o 'job_rank%q{RANK}': no hook mark, so the name says the rank
    paths = [_one_process(tmp_path / f"job_rank{rank}.sqlite", schema) for rank in (3, 5)]
    assert _ranks(judge([read_trace(p) for p in paths], "bf16")) == {"job_rank3.sqlite": [3], "job_rank5.sqlite": [5]}
    alone = judge(read_trace(paths[1]), "bf16")
    assert alone.job.kernels["rank"].tolist() == [5, 5] and alone.job.kernels["rank"].dtype == "Int64"


def test_rank_mark_wins_over_the_file_s_name(schema, tmp_path):
    path = _one_process(tmp_path / "rank7.sqlite", schema, rank_mark=2)
    assert judge(read_trace(path), "bf16").job.kernels["rank"].tolist() == [2, 2]


def test_rank_from_place_when_names_say_none(schema, tmp_path):
    first = _one_process(tmp_path / "b.sqlite", schema)
    second = shutil.copy(first, tmp_path / "a.sqlite")
    assert _ranks(judge([read_trace(first), read_trace(second)], "bf16")) == {"b.sqlite": [0], "a.sqlite": [1]}
    alone = judge(read_trace(first), "bf16")
    assert alone.job.kernels["rank"].isna().all()  # one file, nothing says its rank


# --- --expect-map and --allow where no range encloses a GEMM --------------------------------

AMAX = "void transformer_engine::delayed_scaling_recipe::kernel_bulk<(int)128>(...)"  # a quantize kernel


def _trace_without_ranges_around_gemms(path, schema, case):
    trace = HandBuiltExport(path, schema)
    trace.thread(MAIN, MAIN, "python")
    if case == "a rank mark, no range":
        _rank_mark(trace, MAIN, 0)
    if case == "no GEMM, a range around another kernel":
        _push(trace, T0 - 50, T1 + 50, "BF16_4096")
        trace.launch(MAIN, MAIN, T0, T1, AMAX)
    else:
        trace.launch(MAIN, MAIN, T0, T1)
    return trace.close()


@pytest.mark.parametrize("case", ["no NVTX at all", "a rank mark, no range", "no GEMM, a range around another kernel"])
def test_expect_map_where_no_range_holds_a_gemm(schema, tmp_path, case):
    # the mapped range is not found (or holds no GEMM): a failure, never a pass nor a crash
    path = _trace_without_ranges_around_gemms(tmp_path / "t.sqlite", schema, case)
    result = judge(read_trace(path), expect_map=[("BF16_*", "bf16")])
    assert result.gemms["expect_range"].isna().all()
    verdict = "NO GEMM" if case.startswith("no GEMM") else "NOT FOUND"
    assert result.ranges_checked["verdict"].tolist() == [verdict] and result.failed


def test_allow_matches_only_ranges_around_the_gemm(schema, tmp_path):
    # the GEMM is the trace's first kernel; the range --allow names holds only a later, other kernel
    trace = HandBuiltExport(tmp_path / "t.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    trace.launch(MAIN, MAIN, T0, T1)
    _push(trace, 4000, 6000, "optimizer")
    trace.launch(MAIN, MAIN, 5000, 5100, AMAX)
    result = judge(read_trace(trace.close()), "fp8-current", allow=("optimizer",))
    assert result.gemms["verdict"].tolist() == ["FALLBACK"] and not result.gemms["allowed"].any() and result.failed


def test_a_recipe_class_gemmscope_does_not_know_is_recorded_by_name_and_checks_nothing(schema, tmp_path):
    # a te.autocast with a program's own recipe class: named as recorded, no recipe to check against
    trace = HandBuiltExport(tmp_path / "t.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    _push(trace, T0 - 100, T1 + 100, f"{AUTOCAST_PREFIX}MyScaling)")
    _push(trace, T0 - 50, T1 + 50, f"{AUTOCAST_PREFIX}Float8CurrentScaling)")
    trace.launch(MAIN, MAIN, T0, T1)
    traces = [read_trace(trace.close())]
    assert recorded_recipes(traces) == ["MyScaling", "fp8-current"]
    result = judge(traces)
    assert result.expected is None and not result.checked and not result.failed


MXFP8_GEMM = "nvjet_sm100_qqtst_128x256_128x6_2x1_v_bz_Avec32UE8M0_Bvec32UE8M0_TNT"


@pytest.mark.parametrize("cc_major, verdict", [(10, "EXPECTED-SUBSTITUTION"), (9, "FALLBACK")])
def test_fp8_block_run_as_mxfp8_is_by_design_only_on_blackwell(schema, tmp_path, cc_major, verdict):
    # TE runs FP8 block scaling as MXFP8 on sm100+: the trace's GPU decides the verdict
    trace = HandBuiltExport(tmp_path / "t.sqlite", schema)
    trace.thread(MAIN, MAIN, "python")
    trace.launch(MAIN, MAIN, T0, T1, MXFP8_GEMM)
    trace.conn.execute("UPDATE TARGET_INFO_GPU SET computeMajor = ?, computeMinor = 0", (cc_major,))
    result = judge(read_trace(trace.close()), "fp8-block")
    assert result.gemms["precision"].tolist() == ["mxfp8"] and result.gemms["verdict"].tolist() == [verdict]


# --- GEMM tails -------------------------------------------------------------------------------

def test_gemm_tail_time_is_the_split_k_kernels_time(schema, tmp_path):
    result = judge(read_trace(_one_process(tmp_path / "t.sqlite", schema, tail_ns=777)), "bf16")
    assert result.job.tails_ns == 777
    assert len(result.gemms) == 2 and (result.gemms["duration_ns"] == 1000).all()  # tails are not GEMMs
    document = summary_document(result)
    assert document["gemm_tail_time_ns"] == 777 and document["gemm_time_ns"] == 2000


def test_trace_without_any_nvtx_event_is_attributed(schema, tmp_path):
    # a program that pushes no range (or a capture without -t nvtx): no range, no record, no rank
    frame, ranges = launches_with_ranges(read_trace(_one_process(tmp_path / "plain.sqlite", schema)))
    assert len(frame) == 2 and ranges.lists([0, 1]) == [[], []]
    assert not frame["recorded"].any() and frame["gemm_m"].isna().all() and frame["rank"].isna().all()
    assert (frame["te_pass"] == "fprop").all() and (frame["pass_source"] == "thread").all()


def test_passes_no_per_gemm_range_names_follow_te_s_order():
    """te_layernorm_fp8-current (H100, TE's ranges on, no GEMM records of the hook):
    LayerNormMLP pushes only module-level ranges, so its GEMMs' passes come from TE's order
    inside them ("te-order": fprop in its forward range, dgrad and wgrad in its backward one);
    LayerNormLinear's from TE's per-GEMM ranges. As many of each as the model runs."""
    frame, _ = launches_with_ranges(read_trace(GPU / "te_layernorm_fp8-current.sqlite.xz"))
    gemms = frame[frame["role"] == "gemm"]
    expected = json.loads((GPU / "te_layernorm_fp8-current.expected.json").read_text())["gemms_by_module"]
    source = {"_LayerNormMLP": "te-order", "_LayerNormLinear": "te-range"}
    assert Counter(zip(gemms["te_module"], gemms["te_pass"], gemms["pass_source"])) == {
        (module, p, source[module]): n for module, passes in expected.items() for p, n in passes.items()}


def test_pass_sources_of_a_mixed_run_read_here():
    """train_mixed (H100, TE's ranges on, no GEMM records of the hook): which rule tells each
    GEMM's pass. TE's per-GEMM ranges for Linear and LayerNormLinear; TE's order inside
    LayerNormMLP's module ranges, except for its 16-bit backward GEMMs, whose layout letters
    say it first; for the torch LM head outside TE, the launching thread (fprop on the main
    thread) and the layout letters (dgrad, wgrad on autograd's). As many as the model runs."""
    frame, _ = launches_with_ranges(read_trace(GPU / "train_mixed.sqlite.xz"))
    gemms = frame[frame["role"] == "gemm"]
    expected = json.loads((GPU / "train_mixed.expected.json").read_text())

    def source(module: str, p: str, precision: str) -> str:
        if module == "outside_te":
            return "thread" if p == "fprop" else "layout"
        if module == "_LayerNormMLP":
            return "layout" if p != "fprop" and precision == "bf16" else "te-order"
        return "te-range"

    want: Counter = Counter()
    for precision in ("fp8", "bf16"):
        for module, passes in expected[precision].items():
            for p, n in passes.items():
                label = "-" if module == "outside_te" else module
                want[(label, p, source(module, p, precision), precision)] += n
    assert Counter(zip(gemms["te_module"].fillna("-"), gemms["te_pass"], gemms["pass_source"],
                       gemms["precision"])) == want


def test_deferred_wgrad_gemms_are_wgrad_by_te_s_module_range_read_here():
    """deferred_wgrad (H100, ours): TE modules built with delay_wgrad_compute=True run their wgrad
    GEMMs in backward_dw(), on the main thread, inside TE's `_<Class>_wgrad` range. As verify
    runs it, the hook's records give every GEMM's module and pass, as many as the model runs
    (its expected.json). With TE's ranges but no hook, that range alone says wgrad: by thread
    alone they would read as fprop. Backward ranges of LayerNormMLP and GroupedLinear then hold
    only their dgrad GEMMs, fewer than TE's order needs: at least backward, from the thread."""
    expected = json.loads((CORPUS / "deferred_wgrad_fp8-block.expected.json").read_text())["calls"]
    frame, _ = launches_with_ranges(read_trace(CORPUS / "deferred_wgrad_fp8-block.sqlite.xz"))
    gemms = frame[frame["role"] == "gemm"]
    assert Counter(zip(gemms["te_module"], gemms["te_pass"], gemms["pass_source"])) == {
        (module, p, "hook"): n for module, passes in expected.items() for p, n in passes.items()}
    main_thread = set(gemms.loc[gemms["te_pass"] == "fprop", "thread"])
    assert len(main_thread) == 1 and set(gemms.loc[gemms["te_pass"] == "wgrad", "thread"]) == main_thread
    # each call's shape (M, N, K) and FLOPs as the hook read TE's operands, against the model's
    # linears (out_features, in_features): fprop (T, out, in), dgrad (T, in, out), wgrad (out, in, T);
    # a grouped call's shape is not its members' (NA), its FLOPs are their sum
    tokens, hidden, ffn = 512, 1024, 4096
    linears = {"_LayerNormMLP": [(ffn, hidden), (hidden, ffn)], "_Linear": [(hidden, hidden)]}
    shapes = {(module, p, shape) for module, pairs in linears.items() for out, inner in pairs
              for p, shape in (("fprop", (tokens, out, inner)), ("dgrad", (tokens, inner, out)),
                               ("wgrad", (out, inner, tokens)))}
    single = gemms[gemms["te_module"] != "_GroupedLinear"]
    assert set(zip(single["te_module"], single["te_pass"], zip(single["gemm_m"], single["gemm_n"], single["gemm_k"]))) == shapes
    flops = {"_LayerNormMLP": 2 * tokens * hidden * ffn, "_Linear": 2 * tokens * hidden * hidden,
             "_GroupedLinear": 2 * tokens * hidden * hidden}
    assert (gemms["call_flops"] == gemms["te_module"].map(flops)).all()
    assert gemms.loc[gemms["te_module"] == "_GroupedLinear", ["gemm_m", "gemm_n", "gemm_k"]].isna().all().all()

    frame, _ = launches_with_ranges(read_trace(CORPUS / "deferred_wgrad_fp8-block_te-ranges.sqlite.xz"))
    gemms = frame[frame["role"] == "gemm"]
    assert not frame["recorded"].any()
    want = Counter({("_Linear", p, "te-range"): n for p, n in expected["_Linear"].items()})
    for module in ("_LayerNormMLP", "_GroupedLinear"):
        passes = expected[module]
        want.update({(module, "fprop", "te-order"): passes["fprop"], (module, "wgrad", "te-order"): passes["wgrad"],
                     (module, "backward", "thread"): passes["dgrad"]})
    assert Counter(zip(gemms["te_module"], gemms["te_pass"], gemms["pass_source"])) == want
    assert set(gemms.loc[gemms["te_pass"] == "wgrad", "thread"]) == main_thread


def test_te_names_are_the_hook_s_where_it_recorded_the_call():
    """te_stack_fp8-block_1gpu (H100, as verify runs it): the name of each TE GEMM's module is
    the one TE gave the module (TransformerLayer names them Layer_N.<path>), which the hook
    recorded; TE's own per-GEMM ranges say only qkv or proj. Three passes, three steps each."""
    frame, _ = launches_with_ranges(read_trace(CORPUS / "te_stack_fp8-block_1gpu.sqlite.xz"))
    gemms = frame[frame["role"] == "gemm"]
    te = gemms[gemms["te_module"].str.startswith("_").fillna(False)]
    names = {"_LayerNormLinear": "self_attention.layernorm_linear_qkv", "_Linear": "self_attention.proj",
             "_LayerNormMLP": "layernorm_mlp"}
    gemms_per_call = {"_LayerNormLinear": 1, "_Linear": 1, "_LayerNormMLP": 2}
    assert Counter(zip(te["te_module"], te["te_name"])) == {
        (module, f"Layer_{layer}.{name}"): 3 * 3 * gemms_per_call[module]
        for module, name in names.items() for layer in range(1, 5)}


def test_the_torch_head_s_backward_gemms_in_te_stack_read_here():
    """te_stack_fp8-block_1gpu (H100, as verify runs it): the torch.nn.Linear head's GEMMs,
    3 steps: fprop from the hook's record of F.linear; dgrad and wgrad from the layout letters
    inside the hook's range around its backward node."""
    frame, _ = launches_with_ranges(read_trace(CORPUS / "te_stack_fp8-block_1gpu.sqlite.xz"))
    head = frame[(frame["role"] == "gemm") & (frame["layer"] == "head")]
    assert Counter(zip(head["te_pass"], head["pass_source"], head["precision"])) == {
        ("fprop", "hook", "bf16"): 3, ("dgrad", "layout", "bf16"): 3, ("wgrad", "layout", "bf16"): 3}


def test_first_matching_pattern_tries_a_pattern_on_the_names_its_literal_prefix_starts():
    """Each pattern is tried only on names that start with its text up to the first wildcard
    (`*`, `?`, `[`): what fnmatchcase says of every name, repeated names and missing ones included."""
    import fnmatch

    from gemmscope.assembly.attribution import first_matching_pattern

    names = np.array(["step_3", "step_", "ste", "step_3", "tp_step_1", "a[b]", "ab", "x?y", "xzy", None, 7.0,
                      "step_3x"], dtype=object)
    patterns = ["step_[0-9]", "*step_?", "a[b]", "x?y", "step_3x", "step_*"]
    want = [next((i for i, p in enumerate(patterns) if isinstance(n, str) and fnmatch.fnmatchcase(n, p)), -1)
            for n in names]
    assert first_matching_pattern(names, patterns).tolist() == want == [0, 5, -1, 0, 1, -1, 2, 3, 3, -1, -1, 4]
