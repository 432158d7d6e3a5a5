"""The trace readers (traces.nsys) and attribution on real Nsight Systems exports.

CPU part: nsys 2023.4 captures of tests/fixtures/cpu/nvtx_edge_cases.c, checked against the
hand-written tests/fixtures/cpu/expected.json. GPU part: nsys 2025.3 captures from an H200
(tests/fixtures/gpu), checked against the `<name>.expected.json` each workload wrote from its own
structure.
"""

import fnmatch
import json
import shutil
import sqlite3
from collections import Counter

import pandas as pd
import pytest

from gemmscope.assembly.attribution import launches, launches_with_ranges
from gemmscope.common import scratch
from gemmscope.traces.read import read_trace

from fixture_paths import CPU, GPU

CPU_EXPECTED = json.loads(
    (CPU / "expected.json").read_text(encoding="utf-8")
)
KIND = {"push_pop": "push-pop", "start_end": "start-end"}
THREAD_NVTX_NAME = {t["role"]: t["nvtx_name"] for t in CPU_EXPECTED["threads"]}
THREAD_OS_NAME = {t["role"]: t["os_name"] for t in CPU_EXPECTED["threads"]}


def _null(value) -> bool:
    return value is None or (not isinstance(value, (list, str)) and pd.isna(value))


# --- CPU traces: nsys 2023.4 ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def edge(cpu_traces):
    return read_trace(cpu_traces / "nvtx_edge_cases.sqlite")


@pytest.fixture(scope="module")
def edge_ranges(edge):
    return edge.nvtx[edge.nvtx["kind"] != "mark"]


def _thread_name(trace, global_tid):
    names = trace.threads.set_index("global_tid")["name"]
    return names.get(global_tid)


def test_cpu_meta_versions(edge):
    assert edge.meta["nsys_version"].startswith("2023.4.")
    assert edge.meta["schema_version"].startswith("3.7.")
    assert edge.meta["gpus"] == []


def test_cpu_counts(edge, edge_ranges):
    counts = CPU_EXPECTED["counts"]
    assert len(edge_ranges) == counts["ranges"]
    assert (edge_ranges["kind"] == "push-pop").sum() == counts["push_pop"]
    assert (edge_ranges["kind"] == "start-end").sum() == counts["start_end"]
    assert edge_ranges["unclosed"].sum() == counts["unclosed"]
    assert (~edge_ranges["unclosed"]).sum() == counts["closed"]
    assert (edge.nvtx["kind"] == "mark").sum() == counts["marks"]
    # one process, and no row of another kind (domain creation, category, thread name) leaks in
    assert edge.nvtx["pid"].nunique() == 1
    assert set(edge.nvtx["kind"]) == {"push-pop", "start-end", "mark"}


@pytest.mark.parametrize("expected", CPU_EXPECTED["ranges"], ids=lambda r: r["name"])
def test_cpu_range(edge, edge_ranges, expected):
    rows = edge_ranges[edge_ranges["name"] == expected["name"]]
    assert len(rows) == 1, f"{expected['name']!r} found {len(rows)} times"
    row = rows.iloc[0]
    assert row["kind"] == KIND[expected["kind"]]
    if expected["domain"] is None:
        assert _null(row["domain"])
    else:
        assert row["domain"] == expected["domain"]
    assert bool(row["unclosed"]) is (not expected["closed"])

    thread = _thread_name(edge, row["global_tid"])
    if THREAD_NVTX_NAME[expected["thread"]] is not None:
        assert thread == THREAD_NVTX_NAME[expected["thread"]]
    else:  # named through the OS only: nsys 2023.4 records no name for it (SCHEMA-NOTES.md)
        assert thread in (None, THREAD_OS_NAME[expected["thread"]])
        assert row["global_tid"] not in set(
            edge.threads.loc[edge.threads["name"].isin(["main", "worker-a", "worker-b"]), "global_tid"]
        )

    cross = expected["end_thread"] is not None and expected["end_thread"] != expected["thread"]
    assert bool(row["ended_on_other_thread"]) is cross
    if cross:
        assert _thread_name(edge, row["end_global_tid"]) == THREAD_NVTX_NAME[expected["end_thread"]]
    if expected["busy_ms"] is not None:
        # the program spins busy_ms inside the range: a lower bound, give or take microseconds
        assert row["duration_ns"] >= expected["busy_ms"] * 1e6 - 50_000


def test_cpu_worker_ranges_each_on_their_own_thread(edge, edge_ranges):
    tids = {
        role: set(edge_ranges.loc[edge_ranges["name"].str.startswith(f"{role}:"), "global_tid"])
        for role in ("worker-a", "worker-b", "worker-c")
    }
    assert all(len(t) == 1 for t in tids.values())
    assert len(set.union(*tids.values())) == 3


def test_cpu_unclosed_ranges_end_at_session_end(edge_ranges):
    unclosed = edge_ranges[edge_ranges["unclosed"]]
    assert set(unclosed["name"]) == {r["name"] for r in CPU_EXPECTED["ranges"] if not r["closed"]}
    closed = edge_ranges[~edge_ranges["unclosed"]]
    # every unclosed range outlasts every closed one: nsys ends them at the end of the session
    assert unclosed["end"].min() > closed["end"].max()


@pytest.mark.parametrize("expected", CPU_EXPECTED["marks"], ids=lambda m: m["name"])
def test_cpu_mark(edge, expected):
    marks = edge.nvtx[(edge.nvtx["kind"] == "mark") & (edge.nvtx["name"] == expected["name"])]
    assert len(marks) == 1
    mark = marks.iloc[0]
    if expected["domain"] is None:
        assert _null(mark["domain"])
    else:
        assert mark["domain"] == expected["domain"]
    assert _thread_name(edge, mark["global_tid"]) == THREAD_NVTX_NAME[expected["thread"]]
    assert not mark["unclosed"]
    within = edge.nvtx[(edge.nvtx["name"] == expected["within"]) & (edge.nvtx["kind"] != "mark")].iloc[0]
    assert within["start"] <= mark["start"] <= within["end"]


@pytest.mark.parametrize("expected", CPU_EXPECTED["registered_strings"], ids=lambda s: s["text"])
def test_cpu_registered_string_resolved(edge_ranges, expected):
    rows = edge_ranges[edge_ranges["name"] == expected["text"]]
    assert len(rows) == 1
    if expected["domain"] is None:
        assert _null(rows.iloc[0]["domain"])
    else:
        assert rows.iloc[0]["domain"] == expected["domain"]


def test_cpu_every_event_has_a_name(edge):
    assert edge.nvtx["name"].notna().all()


def test_cpu_utf8_name_round_trips(edge):
    assert "utf8:gr\u00f6\u00dfe-\u00b5s" in set(edge.nvtx["name"])


def test_cpu_category_kept(edge_ranges):
    row = edge_ranges[edge_ranges["name"] == "attrs:color-category-payload"].iloc[0]
    assert row["category"] == 7


def test_cpu_trace_has_no_kernels(edge):
    assert edge.kernels.empty
    assert edge.gpus.empty
    assert launches(edge).empty


def test_nsys_rep_is_exported_then_read(cpu_traces, edge, tmp_path):
    rep = tmp_path / "nvtx_edge_cases.nsys-rep"
    shutil.copyfile(cpu_traces / "nvtx_edge_cases.nsys-rep", rep)
    trace = read_trace(rep)
    assert trace.path == rep
    # exported into the private scratch folder, never beside the report (its folder may be read-only)
    assert trace.sqlite.parent == scratch.folder() and trace.sqlite.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [rep.name]
    assert trace.meta["nsys_version"] == edge.meta["nsys_version"]
    columns = ["name", "kind", "domain", "unclosed", "ended_on_other_thread", "duration_ns"]
    pd.testing.assert_frame_equal(trace.nvtx[columns], edge.nvtx[columns])


def test_empty_capture(cpu_traces):
    trace = read_trace(cpu_traces / "empty_capture.sqlite")
    assert trace.meta["nsys_version"].startswith("2023.4.")
    assert trace.kernels.empty
    assert trace.nvtx.empty
    assert launches(trace).empty


# --- GPU traces: nsys 2025.3 on an H200 ----------------------------------------------------------

GPU_TRACES = sorted(
    p.name.removesuffix(".sqlite.xz")
    for p in GPU.glob("*.sqlite.xz")
)
# what each recipe's GEMMs run at (TE on Hopper: delayed and current scaling are per-tensor FP8)
RECIPE_PRECISION = {"bf16": "bf16", "fp8-delayed": "fp8", "fp8-current": "fp8", "fp8-block": "fp8-block"}


def gemms_of(launches_frame: pd.DataFrame) -> pd.DataFrame:
    return launches_frame[launches_frame["role"] == "gemm"].reset_index(drop=True)


def gemms_with_ranges(trace) -> pd.DataFrame:
    """The GEMM launches of `trace`, each with the names of the NVTX ranges around it (outermost
    first) as a list."""
    frame, ranges = launches_with_ranges(trace)
    gemms = frame[frame["role"] == "gemm"]
    return gemms.assign(ranges=ranges.lists(gemms.index.to_numpy())).reset_index(drop=True)


def by_module_pass(gemms: pd.DataFrame) -> Counter:
    return Counter(zip(gemms["te_module"], gemms["te_pass"]))


def test_gpu_fixture_list():
    assert len(GPU_TRACES) == 14


@pytest.mark.parametrize("name", GPU_TRACES)
def test_gpu_meta(gpu_trace, name):
    trace = gpu_trace(name)
    assert trace.meta["nsys_version"].startswith("2025.3.")
    assert trace.meta["schema_version"].startswith("3.20.")
    assert len(trace.meta["gpus"]) == 1
    gpu = trace.meta["gpus"][0]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["sm"] == "sm90"
    assert (gpu["cc_major"], gpu["cc_minor"]) == (9, 0)


@pytest.mark.parametrize("recipe", sorted(RECIPE_PRECISION))
def test_te_linear_gemms_per_pass(gpu_launches, gpu_expected, recipe):
    name = f"te_linear_{recipe}"
    gemms = gemms_of(gpu_launches(name))
    expected = gpu_expected(name)["gemms"]
    assert by_module_pass(gemms) == Counter({("_Linear", p): n for p, n in expected.items()})
    assert set(gemms["precision"]) == {RECIPE_PRECISION[recipe]}
    assert gemms["via_te"].all()


@pytest.mark.parametrize("recipe", ["bf16", "fp8-current"])
def test_te_layernorm_gemms_per_module_and_pass(gpu_launches, gpu_expected, recipe):
    name = f"te_layernorm_{recipe}"
    gemms = gemms_of(gpu_launches(name))
    expected = gpu_expected(name)["gemms_by_module"]
    assert by_module_pass(gemms) == Counter(
        {(module, p): n for module, passes in expected.items() for p, n in passes.items()}
    )
    assert set(gemms["precision"]) == {RECIPE_PRECISION[recipe]}


@pytest.mark.parametrize("name", ["train_mixed", "train_clean"])
def test_training_gemms_per_precision_module_and_pass(gpu_launches, gpu_expected, name):
    gemms = gemms_of(gpu_launches(name))
    expected = gpu_expected(name)
    outside = gemms["te_module"].isna() & ~gemms["via_te"]
    inside = gemms[~outside]

    want = Counter()
    for precision in ("fp8", "bf16"):
        for module, passes in expected[precision].items():
            if module == "outside_te":
                continue
            for p, n in passes.items():
                if n:
                    want[(precision, module, p)] = n
    got = Counter(zip(inside["precision"], inside["te_module"], inside["te_pass"]))
    assert got == want

    n_outside = sum(expected["bf16"]["outside_te"].values())
    assert outside.sum() == n_outside
    assert set(gemms.loc[outside, "precision"]) == ({"bf16"} if n_outside else set())


def test_nn_linear_in_fp8_autocast_gemms(gpu_launches, gpu_expected):
    gemms = gemms_of(gpu_launches("nn_linear_in_fp8_autocast"))
    expected = gpu_expected("nn_linear_in_fp8_autocast")
    te_gemms = gemms[gemms["via_te"]]
    assert by_module_pass(te_gemms) == Counter({("_Linear", p): n for p, n in expected["te_gemms"].items()})
    assert set(te_gemms["precision"]) == {"fp8"}
    torch_gemms = gemms[~gemms["via_te"]]
    assert len(torch_gemms) == sum(expected["torch_gemms"].values())
    assert torch_gemms["te_module"].isna().all()
    assert set(torch_gemms["precision"]) == {"bf16"}


@pytest.mark.parametrize("name", ["te_linear_fp8-current", "te_layernorm_bf16", "train_mixed"])
def test_backward_gemms_run_on_autograd_thread_and_keep_module(gpu_launches, name):
    gemms = gemms_of(gpu_launches(name))
    te = gemms[gemms["via_te"]]
    backward = te[te["te_pass"].isin(["dgrad", "wgrad"])]
    assert len(backward) > 0
    assert set(backward["thread"]) == {"pt_autograd_0"}
    assert backward["te_module"].notna().all()
    forward = te[te["te_pass"] == "fprop"]
    assert len(forward) == len(backward) // 2
    assert "pt_autograd_0" not in set(forward["thread"])


def test_te_linear_forward_ranges_outermost_first(gpu_trace):
    gemms = gemms_with_ranges(gpu_trace("te_linear_fp8-current"))
    forward = gemms[gemms["te_pass"] == "fprop"]
    # workloads.py: `step N` > te.Linear > TE's gemm range > nvte_cublas_gemm_v2 around the GEMM
    assert [r[0] for r in forward["ranges"]] == ["step 0", "step 1", "step 2"]
    assert all(r[-1] == "nvte_cublas_gemm_v2" for r in forward["ranges"])
    assert all("transformer_engine._Linear.forward.gemm" in r for r in forward["ranges"])
    backward = gemms[gemms["te_pass"] != "fprop"]
    assert all(r[-1] == "nvte_cublas_gemm_v2" for r in backward["ranges"])
    assert not any(name.startswith("step ") for r in backward["ranges"] for name in r)


@pytest.mark.parametrize(
    "without, with_",
    [("te_linear_fp8-current_no-te-nvtx", "te_linear_fp8-current"), ("train_mixed_no-te-nvtx", "train_mixed")],
)
def test_without_te_nvtx_same_gemms_but_no_module(gpu_launches, without, with_):
    bare = gemms_of(gpu_launches(without))
    full = gemms_of(gpu_launches(with_))
    assert bare["te_module"].isna().all()
    # without TE's ranges only the launching thread (no backward pass runs outside PyTorch's
    # autograd thread: fprop) and a 16-bit kernel's layout letters tell a pass, and they agree
    # with what TE's ranges say in the same run; what the autograd thread launched and nothing
    # tells (FP8 GEMMs: always TN on Hopper) is at least backward, and is a dgrad or wgrad there
    by_layout = bare["pass_source"] == "layout"
    by_thread = bare["pass_source"] == "thread"
    on_autograd = bare["thread"].str.startswith("pt_autograd_")
    assert bare["te_pass"].notna().all() and (by_layout | by_thread).all()
    assert set(bare.loc[by_layout, "precision"]) <= {"bf16", "fp16"}
    assert set(bare.loc[by_thread & ~on_autograd, "te_pass"]) == {"fprop"}
    backward = by_thread & on_autograd
    assert backward.sum() == {"te_linear_fp8-current_no-te-nvtx": 6, "train_mixed_no-te-nvtx": 24}[without]
    assert set(bare.loc[backward, "te_pass"]) == {"backward"}
    assert set(full.loc[backward, "te_pass"]) == {"dgrad", "wgrad"}
    told = by_layout | (by_thread & ~on_autograd)
    assert list(bare.loc[told, "te_pass"]) == list(full.loc[told, "te_pass"])
    assert (full.loc[~told, "te_pass"] != "fprop").all()  # every fprop is told by its thread
    assert list(bare["precision"]) == list(full["precision"])
    assert list(bare["via_te"]) == list(full["via_te"])
    assert full["te_module"].notna().sum() == full["via_te"].sum()


def test_torch_gemms_one_range_per_precision(gpu_trace, gpu_expected):
    gemms = gemms_with_ranges(gpu_trace("torch_gemms"))
    expected = gpu_expected("torch_gemms")["gemms_by_range"]
    assert len(gemms) == sum(expected.values())
    for range_name, n in expected.items():
        inside = gemms[gemms["ranges"].map(lambda r, name=range_name: name in r)]
        assert len(inside) == n, range_name
        assert set(inside["precision"]) == {range_name.removeprefix("torch.")}, range_name
        assert all(r[-1] == range_name for r in inside["ranges"])
    assert gemms["te_module"].isna().all()
    assert not gemms["via_te"].any()


@pytest.mark.parametrize("name", ["request_mxfp8", "request_nvfp4"])
def test_unsupported_recipe_runs_no_gemm(gpu_trace, gpu_launches, gpu_expected, name):
    assert gemms_of(gpu_launches(name)).empty
    error = gpu_expected(name)["error"]
    marks = gpu_trace(name).nvtx.query("kind == 'mark'")
    assert list(marks["name"]) == [f"error {error}"[:200]]


@pytest.mark.parametrize("name", GPU_TRACES)
def test_every_kernel_is_joined_to_its_launch(gpu_trace, gpu_launches, name):
    trace = gpu_trace(name)
    all_launches = gpu_launches(name)
    assert len(all_launches) == len(trace.kernels)
    assert all_launches["launch_start"].notna().all()
    assert (all_launches["launch_start"] <= all_launches["start"]).all()
    assert all_launches["thread"].notna().all()


@pytest.mark.parametrize("patterns", [["step *"], ["*gemm*"], ["step 1", "nvte_*"], ["no such range"]])
def test_matching_ranges_agree_with_each_launch_s_own_list(gpu_trace, patterns):
    # --allow (any range) and per-range rules (the innermost range that matches) are matched once
    # per distinct name and mapped back: the same answer as walking each launch's ranges
    frame, ranges = launches_with_ranges(gpu_trace("te_linear_fp8-current"))
    rows = frame.index.to_numpy()[::-1]  # any order, not only the frame's
    want = [next((name for name in reversed(names) if any(fnmatch.fnmatchcase(name, p) for p in patterns)), None)
            for names in ranges.lists(rows)]
    assert list(ranges.innermost_matching(patterns, rows)) == want
    assert list(ranges.any_matching(patterns, rows)) == [name is not None for name in want]
    if patterns == ["step *"]:
        assert sum(name is not None for name in want) > 0


def test_kernel_launched_by_a_call_not_named_launch_is_joined_to_it(gpu_trace, tmp_path):
    # Launch calls are read first by their name (cudaLaunchKernel, cuLaunchKernelEx, ...); a kernel
    # that none of them launched sends the reader to the other calls: the join is on correlation id,
    # so a launch API named otherwise (a future one) still finds its kernels.
    trace = gpu_trace("te_linear_fp8-current")
    renamed = tmp_path / "renamed.sqlite"
    shutil.copy(trace.sqlite, renamed)
    with sqlite3.connect(renamed) as db:
        assert db.execute("UPDATE StringIds SET value = replace(value, 'Launch', 'Start') "
                          "WHERE value LIKE '%Launch%'").rowcount > 0
    columns = ["correlation_id", "launch_start", "launch_end", "launch_global_tid"]
    before, after = launches(trace), launches(read_trace(renamed))
    assert before["launch_start"].notna().all()
    pd.testing.assert_frame_equal(after[columns], before[columns])
    assert after["launch_api"].str.contains("Start").all()
