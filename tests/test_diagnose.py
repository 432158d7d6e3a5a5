"""Breakdown, findings and compare on real GPU traces (tests/fixtures/gpu/corpus), each figure
checked against sums computed here straight from the SQLite export."""

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from gemmscope.diagnosing import diagnosis, findings, steps
from gemmscope.diagnosing.compare_runs import compare
from gemmscope.judging.judgement import judge
from gemmscope.kernels import decode
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS
from nsys_export import export


def gpu_activity(db) -> list[tuple[int, int, str]]:
    """(start, end, kernel name or memop kind) of every kernel, memset and memcpy."""
    rows = list(db.execute("SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN StringIds s ON s.id = k.demangledName"))
    rows += [(s, e, "memset") for s, e in db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET")]
    rows += [(s, e, "memcpy") for s, e in db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY")]
    return rows


def union_length(intervals) -> int:
    """Plain sweep, as a person would write it."""
    total, current_start, current_end = 0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + (current_end - current_start if current_end is not None else 0)


@pytest.fixture(scope="module")
def checked():
    cache = {}

    def load(name):
        if name not in cache:
            cache[name] = judge([read_trace(CORPUS / f"{name}.sqlite.xz")])
        return cache[name]

    return load


def test_busy_ns_is_the_union_of_intervals():
    rng = np.random.default_rng(7)
    start = rng.integers(0, 10_000, 500)
    end = start + rng.integers(0, 300, 500)
    assert diagnosis.busy_ns(start, end) == union_length(zip(start.tolist(), end.tolist()))
    assert diagnosis.busy_ns(np.array([], dtype="int64"), np.array([], dtype="int64")) == 0


@pytest.mark.parametrize("name", ["fsdp_small_fp8_1gpu", "fsdp_small_bf16_1gpu"])
def test_breakdown_against_the_export(checked, name):
    activity = gpu_activity(export(name))
    window = max(e for _, e, _ in activity) - min(s for s, _, _ in activity)
    busy = union_length((s, e) for s, e, _ in activity)
    quantize = sum(e - s for s, e, n in activity if n not in ("memset", "memcpy") and decode(n).role == "quantize")
    gemm = sum(e - s for s, e, n in activity if n not in ("memset", "memcpy") and decode(n).role == "gemm")
    row = diagnosis.breakdown(checked(name)).iloc[0]
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (window, busy, window - busy)
    assert row["quantize_ns"] == quantize and row["gemm_ns"] + row["gemm-fallback_ns"] == gemm
    categories = sum(row[f"{c}_ns"] for c in diagnosis.CATEGORIES)
    assert categories - row["overlap_ns"] == busy
    assert row["kernel_launches"] == sum(n not in ("memset", "memcpy") for _, _, n in activity)


def test_small_model_fp8_top_finding_is_an_idle_gpu_with_the_amdahl_bound(checked):
    """TE's FSDP example, hidden 256: FP8 ran 2.80 s per iteration against BF16's 1.96 s."""
    activity = gpu_activity(export("fsdp_small_fp8_1gpu"))
    window = max(e for _, e, _ in activity) - min(s for s, _, _ in activity)
    gemm = sum(e - s for s, e, n in activity if n not in ("memset", "memcpy") and decode(n).role == "gemm")
    result = checked("fsdp_small_fp8_1gpu")
    found = diagnosis.diagnose(result).findings
    top = found[0]
    assert top["code"] == "gpu-idle"
    assert top["figures"]["idle_ns"] / top["figures"]["window_ns"] > 0.99
    share = gemm / window
    assert top["figures"]["gemm_share"] == pytest.approx(share)
    assert top["figures"]["amdahl"]["s=2"] == pytest.approx(1 / ((1 - share) + share / 2))
    assert "idle 99.5 %" in top["statement"] and "at most 1.000×" in top["statement"]
    codes = [f["code"] for f in found]
    assert {"gemm-share", "quantize-overhead", "small-gemm"} <= set(codes)


def test_compare_small_model_bf16_against_fp8_adds_up(checked):
    base, new = checked("fsdp_small_bf16_1gpu"), checked("fsdp_small_fp8_1gpu")
    comparison = compare(base, new)
    totals = {k: v["difference"] for k, v in comparison["totals"].items()}
    windows = []
    for name in ("fsdp_small_bf16_1gpu", "fsdp_small_fp8_1gpu"):
        activity = gpu_activity(export(name))
        windows.append(max(e for _, e, _ in activity) - min(s for s, _, _ in activity))
    assert totals["window_ns"] == windows[1] - windows[0]
    assert totals["window_ns"] == totals["busy_ns"] + totals["idle_ns"]
    assert totals["busy_ns"] == sum(totals[f"{c}_ns"] for c in diagnosis.CATEGORIES) - totals["overlap_ns"]
    # where FP8's extra time went: quantization kernels, more launches, and an idle GPU
    assert totals["quantize_ns"] > 0 and totals["kernel_launches"] > 0
    assert totals["idle_ns"] > 0.99 * totals["window_ns"]
    modules = comparison["by_module"]
    assert modules["difference"].sum() == totals["busy_ns"] + totals["overlap_ns"]
    assert "kernel launches" in comparison["statement"]
    assert len(comparison["kernels_changed"]) > 0  # BF16 nvjet_*_tst_* became FP8 *_qqtst_* / *_qrtst_*


def test_large_fp8_training_top_finding_is_healthy_gemms(checked):
    """Large TransformerLayers in FP8 block scaling, steps in NVTX ranges: the window is cut to
    the steps after the first, and nothing invents a problem."""
    result = checked("te_stack_large_fp8-block_1gpu")
    found = diagnosis.diagnose(result)
    assert found.step_range is not None and len(found.steps) == 8
    assert found.breakdown["idle_share"].iloc[0] < 0.2
    top = found.findings[0]
    assert top["code"] == "gemms-healthy"
    assert top["figures"]["share_of_peak"] > findings.HEALTHY_SHARE_OF_PEAK
    assert not {"gpu-idle", "fallback"} & {f["code"] for f in found.findings}


def test_step_range_pattern_and_no_steps(checked):
    result = checked("te_stack_large_fp8-block_1gpu")
    assert len(steps.find_steps(result, "step *")) == 8
    assert steps.find_steps(result, "no such range").empty
    whole = diagnosis.diagnose(result, "no such range")
    assert whole.step_range is None
    assert whole.breakdown["window_ns"].iloc[0] > diagnosis.diagnose(result).breakdown["window_ns"].iloc[0]


def test_fallback_finding_names_where(checked):
    """The 2-GPU stack's capture predates the hook's records of GEMMs outside TE: its torch head is
    an unrecorded GEMM (outside-te) beside the layer that asked for BF16; the 1-GPU one, made
    again since, has the head asking for BF16 by its path."""
    result = judge([read_trace(CORPUS / "te_stack_fp8-block_2gpu.sqlite.xz")], "fp8-block")
    found = {f["code"]: f for f in diagnosis.diagnose(result).findings}
    fallback = found["fallback"]
    t = int(result.mismatches["duration_ns"].sum())
    assert fallback["figures"]["fallback_ns"] == t
    assert set(fallback["figures"]["by_cause_ns"]) == {"requested-bf16", "outside-te"}
    assert all(c["layer"] is None or c["layer"].startswith("layers.2.") for c in fallback["concerns"])
    result = judge([read_trace(CORPUS / "te_stack_fp8-block_1gpu.sqlite.xz")], "fp8-block")
    fallback = next(f for f in diagnosis.diagnose(result).findings if f["code"] == "fallback")
    assert set(fallback["figures"]["by_cause_ns"]) == {"requested-bf16"}
    assert {c["layer"] == "head" or c["layer"].startswith("layers.2.") for c in fallback["concerns"]} == {True}


def test_a_gpu_missing_from_the_device_table_is_named_not_guessed():
    result = judge([read_trace(CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz")])
    for trace in result.job.traces:  # the same capture, as if made on a GPU gemmscope has no figures for
        trace.meta["gpus"] = [dict(g, name="NVIDIA GH200 480GB") for g in trace.meta["gpus"]]
    codes = {f["code"]: f for f in diagnosis.diagnose(result).findings}
    assert "NVIDIA GH200 480GB" in codes["unknown-device"]["statement"]
    assert "gemms-healthy" not in codes and "small-gemm" not in codes


def test_step_ranges_found_in_a_cpu_capture(cpu_traces):
    """The step finder on a real nsys capture made on this CPU machine (NVTX only, no GPU)."""
    import pandas as pd

    from gemmscope.assembly.attribution import EnclosingRanges
    from gemmscope.assembly.job import Job
    from gemmscope.judging.judgement import Judgement

    trace = read_trace(cpu_traces / "nvtx_edge_cases.sqlite")
    nothing = pd.DataFrame()
    job = Job(traces=[trace], kernels=nothing, ranges=EnclosingRanges.empty(), memops=nothing, gemms=nothing,
              tails_ns=0, autotuning=nothing, offsets=np.zeros(1, dtype="int64"))
    result = Judgement(expected=None, gemms=nothing, job=job)
    outer = steps.find_steps(result, "worker-*:outer")
    assert sorted(outer["name"]) == ["worker-a:outer", "worker-b:outer", "worker-c:outer"]
    assert (outer["end"] > outer["start"]).all()
    assert steps.find_steps(result).empty  # no range is named like a step there


def test_compare_labels_a_gemm_as_every_table_does(gpu_trace):
    """GEMMs TE launched (its C library's range) whose module nothing names are "(TE, module
    unknown)" in compare's per-module table, as in the GEMM tables, never "(outside TE)" there."""
    result = judge([gpu_trace("train_mixed_no-te-nvtx")])
    comparison = compare(result, result)
    gemm_rows = comparison["by_module"][comparison["by_module"]["category"].isin(["gemm", "gemm-fallback"])]
    assert set(gemm_rows["module"]) == set(result.gemms["module"]) == {"(TE, module unknown)", "(outside TE)"}
    te_time = result.gemms.loc[result.gemms["module"] == "(TE, module unknown)", "duration_ns"].sum()
    assert gemm_rows.loc[gemm_rows["module"] == "(TE, module unknown)", "base"].sum() == te_time


def test_compare_of_a_trace_with_itself_says_nothing_changed(checked):
    result = checked("fsdp_small_bf16_1gpu")
    statement = compare(result, result)["statement"]
    assert statement == ("NEW's GPU time is BASE's: the same window, busy and idle time, categories and kernel "
                         "launches")
    moved = compare(checked("fsdp_small_bf16_1gpu"), checked("fsdp_small_fp8_1gpu"))["statement"]
    assert "(;" not in moved and "overlap" in moved


def _renamed_steps(gpu_sqlite, tmp_path, name: str, new_stem: str) -> Path:
    """A real capture whose `step N` ranges (tests/fixtures/gpu/workloads.py) are named as another
    program names its loop's body (`tp_step_N`): the same ranges, another name."""
    copy = tmp_path / f"{name}-{new_stem}.sqlite"
    copy.write_bytes(gpu_sqlite(name).read_bytes())
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE StringIds SET value = ? || substr(value, 6) WHERE value GLOB 'step [0-9]*'", (new_stem,))
        db.execute("UPDATE NVTX_EVENTS SET text = ? || substr(text, 6) WHERE text GLOB 'step [0-9]*'", (new_stem,))
    return copy


@pytest.mark.parametrize("stem", ["tp_step_", "ops_step_", "compiled_step_", "moe_step_", "iteration-"])
def test_steps_of_any_name_are_found_and_named(gpu_sqlite, tmp_path, stem):
    result = judge([read_trace(_renamed_steps(gpu_sqlite, tmp_path, "te_linear_fp8-current", stem))])
    found = diagnosis.diagnose(result)
    assert found.step_range == f"{stem}[0-9]*"
    assert sorted(found.steps["name"]) == [f"{stem}0", f"{stem}1", f"{stem}2"]
    assert len(found.step_times) == 2  # the steps after the first


def test_numbered_ranges_that_are_not_loop_bodies_are_not_steps(checked):
    """TE's C library's ranges (nvte_cublas_gemm_v2: one number) and a trace without a loop's
    ranges: no steps, and the breakdown says so and how to name them."""
    from gemmscope.report.frames import breakdown_title

    result = checked("fsdp_small_bf16_1gpu")
    assert steps.default_step_pattern(result) is None
    found = diagnosis.diagnose(result)
    assert found.step_range is None
    assert breakdown_title(found) == ("Where the GPU time went (the whole trace: no steps found, name them "
                                              "with --step-range)")
