"""Real CodonFM-5B runs (mbs 31 x seq 512), re-derived from their traces on a machine without GPU:
the H200 run shipped in the package, and an H100 run kept with the tests."""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from gemmscope.plan import gpu_profile, profile_run, run_marks
from gemmscope.report.documents import results_document
from gemmscope.report.profile import device_line, write_profile_reports
from gemmscope.traces.read import read_trace

from cli_runner import gemmscope
from fixture_paths import FIXTURES

# Dense peaks read off NVIDIA's H100 and H200 pages (figures "with sparsity", halved) and their
# memory bandwidths, written out here so the test does not read them from gemmscope's table.
DENSE_PEAK_TFLOPS = {"bf16": 1979 / 2, "fp8-delayed": 3958 / 2, "fp8-current": 3958 / 2, "fp8-block": 3958 / 2}
BANDWIDTH_TBPS = {"NVIDIA H200": 4.8, "NVIDIA H100 80GB HBM3": 3.35}
RAN = list(DENSE_PEAK_TFLOPS)  # the recipes that run on Hopper


@dataclass(frozen=True)
class Reference:
    """TE's own benchmark (benchmarks/gemm/benchmark_gemm.py, TE 2.20.2) on one GPU model, autocast
    mode: per-layer speedups over BF16 and BF16 ms per layer, to be matched within +-7 %."""
    run_dir: Path
    autocast_speedups: dict
    bf16_layer_ms: float


RUNS = {
    "h200": Reference(Path(profile_run.__file__).parent.parent / "examples" / "h200-codonfm-5b",
                      {"fp8-current": 1.61, "fp8-delayed": 1.72, "fp8-block": 1.42}, 29.6),
    "h100": Reference(FIXTURES / "runs" / "h100-codonfm-5b",
                      {"fp8-current": 1.50, "fp8-delayed": 1.65, "fp8-block": 1.40}, 28.6),
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def gpu(request) -> Reference:
    return RUNS[request.param]


@pytest.fixture(scope="module")
def run(gpu):
    return profile_run.load_run(gpu.run_dir)


@pytest.fixture(scope="module")
def recorded(gpu):
    return json.loads((gpu.run_dir / "results.json").read_text())


def test_trace_rederives_every_row_of_results_json(run, recorded):
    derived = {(g["op"], g["pass"], g["precision"], g["mode"]): g
               for g in results_document(run, None)["gemms"]}
    assert len(derived) == len(recorded["gemms"]) == 12 * 6 * 2
    for g in recorded["gemms"]:
        d = derived[(g["op"], g["pass"], g["precision"], g["mode"])]
        for key in ("status", "reason", "kernel", "verdict", "gemm_launches", "m", "k", "n", "count"):
            assert d[key] == g[key], (key, g)
        for key in ("kernel_ms", "overhead_ms", "e2e_ms", "tflops"):
            assert (d[key] is None and g[key] is None) or math.isclose(d[key], g[key], rel_tol=1e-9), (key, g)
    assert results_document(run, None)["speedups"] == recorded["speedups"]


def test_hopper_recipes_ran_at_the_requested_precision(run):
    ok = run.gemms[run.gemms["precision"].isin(["bf16", "fp8-delayed", "fp8-current", "fp8-block"])]
    assert (ok["status"] == "ok").all() and (ok["verdict"] == "OK").all()
    assert (ok["gemm_launches"] == ok["iters"]).all()  # one GEMM kernel per timed iteration
    kernel_precision = {"bf16": "bf16", "fp8-delayed": "fp8", "fp8-current": "fp8", "fp8-block": "fp8-block"}
    assert (ok["kernel_precision"] == ok["precision"].map(kernel_precision)).all()


def test_blackwell_recipes_unsupported_with_te_reason_and_never_summed(run):
    blackwell = run.gemms[run.gemms["precision"].isin(["mxfp8", "nvfp4"])]
    assert len(blackwell) == 48 and (blackwell["status"] == "unsupported").all()
    assert blackwell["reason"].str.contains("compute capability 10.0 or higher required").all()
    assert blackwell["e2e_ms"].isna().all() and blackwell["verdict"].isna().all()
    layer = run.per_layer()
    for mode in profile_run.MODES:
        for precision in ("mxfp8", "nvfp4"):
            assert math.isnan(layer.loc[(mode, precision), "e2e_ms"])
            assert run.speedups()[mode][precision] is None


def test_autocast_speedups_within_7_percent_of_te_benchmark(run, gpu):
    speedups = run.speedups()["autocast"]
    for recipe, te in gpu.autocast_speedups.items():
        assert abs(speedups[recipe] / te - 1) <= 0.07, (recipe, speedups[recipe], te)
    bf16 = run.per_layer().loc[("autocast", "bf16"), "e2e_ms"]
    assert abs(bf16 / gpu.bf16_layer_ms - 1) <= 0.07


def test_autocast_overhead_is_quantization_and_prequant_has_none(run):
    layer = run.per_layer()
    for recipe in ("fp8-delayed", "fp8-current", "fp8-block"):
        assert layer.loc[("autocast", recipe), "overhead_ms"] > 0.5
        assert layer.loc[("prequant", recipe), "overhead_ms"] == 0
    assert layer.loc[("autocast", "bf16"), "overhead_ms"] == 0


def test_run_is_on_the_gpu_it_claims(run, gpu):
    assert run.device["name"].startswith(f"NVIDIA {gpu.run_dir.name.split('-')[0].upper()}")
    assert run.device["sm"] == "sm90"


def test_reports_render(run, tmp_path):
    write_profile_reports(run, tmp_path, 40.0)
    markdown = (tmp_path / "report.md").read_text()
    assert "| autocast | fp8-delayed |" in markdown and "unsupported: Device compute capability" in markdown
    assert "| overhead ms | quant % | speedup | TFLOP/s | % peak | kernel TFLOP/s | kernel % peak | FLOP/B | speedup reason " \
           "| verdict |" in markdown
    assert "| mlp_down | 15872x16384x4096 | fp8-current |" in markdown and "| quantization " in markdown
    for recipe in ("MXFP8", "NVFP4"):  # TE's reason once per recipe, not once per GEMM
        assert markdown.count(f"required for {recipe} execution") == 1
    assert f"= {'H200 SXM' if 'H200' in run.device['name'] else 'H100 SXM'}: dense peaks" in markdown
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["device_figures"]["dense_peak_tflops"]["FP8"] == 3958 / 2
    assert {"speedup_reason", "kernel_tflops", "quantization_pct", "intensity", "ridge"} <= set(document["gemms"][0])
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _recorded_frame(recorded: dict) -> pd.DataFrame:
    """The measurements the run recorded in results.json, keyed by GEMM, recipe and mode."""
    return pd.DataFrame(recorded["gemms"]).set_index(["op", "pass", "precision", "mode"])


def _derived_frame(run) -> pd.DataFrame:
    return run.gemms.set_index(["op", "pass", "precision", "mode"])


def test_percent_of_peak_is_filled_for_every_recipe_that_ran(run):
    ran = run.gemms[run.gemms["precision"].isin(RAN)]
    assert len(ran) == 4 * 12 * 2 and ran["pct_of_peak"].notna().all() and ran["kernel_pct_of_peak"].notna().all()
    assert (ran["peak_tflops"] == ran["precision"].map(DENSE_PEAK_TFLOPS)).all()
    expected = 100 * ran["flops"] / (ran["e2e_ms"] * 1e9) / ran["precision"].map(DENSE_PEAK_TFLOPS)
    assert ((ran["pct_of_peak"] - expected).abs() < 1e-9).all()
    # Hopper has no FP4 tensor cores: NVFP4's peak is unknown there, never borrowed from another width
    assert run.gemms.loc[run.gemms["precision"] == "nvfp4", "peak_tflops"].isna().all()


def test_kernel_tflops_is_flops_over_the_recorded_kernel_time(run, recorded):
    measured = _recorded_frame(recorded)
    derived = _derived_frame(run).loc[measured.index]
    ran = measured["status"] == "ok"
    flops = 2 * measured["m"] * measured["k"] * measured["n"]
    kernel_tflops = flops / (measured["kernel_ms"] / 1e3) / 1e12
    assert ((derived.loc[ran, "kernel_tflops"] / kernel_tflops[ran] - 1).abs() < 1e-9).all()
    peak = measured.index.get_level_values("precision").map(DENSE_PEAK_TFLOPS).to_numpy()
    kernel_pct = 100 * kernel_tflops[ran] / peak[ran.to_numpy()]
    assert ((derived.loc[ran, "kernel_pct_of_peak"] - kernel_pct).abs() < 1e-9).all()
    assert derived.loc[~ran, "kernel_tflops"].isna().all()


def test_quantization_share_is_overhead_over_e2e(run, recorded):
    measured = _recorded_frame(recorded)
    derived = _derived_frame(run).loc[measured.index]
    ran = measured["status"] == "ok"
    share = 100 * measured["overhead_ms"] / measured["e2e_trace_ms"]
    assert ((derived.loc[ran, "quantization_pct"] - share[ran]).abs() < 1e-9).all()
    assert (derived.xs("prequant", level="mode")["quantization_pct"].dropna() == 0).all()  # TE's GEMM alone


def test_intensity_and_ridge_from_shapes_and_datasheet(run):
    ran = run.gemms[run.gemms["precision"].isin(RAN)]
    element = ran["precision"].map({"bf16": 2, "fp8-delayed": 1, "fp8-current": 1, "fp8-block": 1})
    moved = element * (ran["m"] * ran["k"] + ran["k"] * ran["n"]) + 2 * ran["m"] * ran["n"]
    assert ((ran["intensity"] - ran["flops"] / moved).abs() < 1e-6).all()
    ridge = ran["precision"].map(DENSE_PEAK_TFLOPS) / BANDWIDTH_TBPS[run.device["name"]]
    assert ((ran["ridge"] - ridge).abs() < 1e-9).all()
    # CodonFM's GEMMs (M = 31 x 512 tokens) do thousands of FLOP per byte: none is memory-bound
    assert (ran["intensity"] > 3 * ran["ridge"]).all()
    assert not ran["speedup_reason"].str.startswith("memory-bound").any()


def test_speedup_is_bf16_time_over_this_time_for_the_same_gemm_and_mode(run):
    g = run.gemms.set_index(["op", "pass", "mode", "precision"])
    bf16 = g.xs("bf16", level="precision")["e2e_ms"]
    for recipe in RAN:
        rows = g.xs(recipe, level="precision")
        assert ((rows["speedup"] - bf16.loc[rows.index] / rows["e2e_ms"]).abs() < 1e-12).all()


def test_mlp_down_fp8_current_speedup_is_held_back_by_quantization(run, recorded):
    measured = _recorded_frame(recorded).loc[("mlp_down", "fprop", "fp8-current", "autocast")]
    share = 100 * measured["overhead_ms"] / measured["e2e_trace_ms"]
    assert share > 20  # a fifth or more of the GEMM's time is TE quantizing its inputs
    row = _derived_frame(run).loc[("mlp_down", "fprop", "fp8-current", "autocast")]
    assert row["speedup_reason"] == f"quantization {share:.0f} % of e2e"
    # ... while its kernel alone is faster than BF16's by more than the 2x peak ratio
    bf16 = _derived_frame(run).loc[("mlp_down", "fprop", "bf16", "autocast")]
    assert bf16["kernel_ms"] / row["kernel_ms"] > 2


def test_every_row_that_ran_has_a_speedup_reason_and_rows_that_did_not_keep_te_reason(run):
    ran = run.gemms["status"] == "ok"
    assert run.gemms.loc[ran, "speedup_reason"].notna().all()
    assert run.gemms.loc[~ran, "speedup_reason"].isna().all() and run.gemms.loc[~ran, "reason"].notna().all()
    prequant = run.gemms[ran & (run.gemms["mode"] == "prequant")]
    assert not prequant["speedup_reason"].str.startswith("quantization").any()  # TE's GEMM alone
    fp8_block = run.gemms[ran & (run.gemms["precision"] == "fp8-block") & (run.gemms["mode"] == "prequant")]
    assert fp8_block["speedup_reason"].str.endswith(")").all()  # compared with the BF16 kernel of the same GEMM


def _measurements(run) -> pd.DataFrame:
    """A run's rows as measured, before the speed figures are added."""
    return run.gemms.loc[:, :"verdict"]


def test_unknown_gpu_is_named_unknown_and_gets_no_peak(run):
    g = profile_run.with_speed_figures(_measurements(run), "NVIDIA GH200 480GB")
    assert g["peak_tflops"].isna().all() and g["pct_of_peak"].isna().all() and g["ridge"].isna().all()
    prequant_fp8 = g[(g["mode"] == "prequant") & (g["precision"] == "fp8-current")]
    assert prequant_fp8["speedup_reason"].str.endswith("TFLOP/s (GPU not in the device table: no peak)").all()
    mlp_down = g[(g["op"] == "mlp_down") & (g["pass"] == "fprop") & (g["precision"] == "fp8-current")
                 & (g["mode"] == "autocast")]
    assert mlp_down["speedup_reason"].str.startswith("quantization").all()  # what the trace says still holds
    unknown = profile_run.ProfileRun(device={"name": "NVIDIA GH200 480GB", "sm": "sm90"}, plan=run.plan, gemms=g,
                                 memory=run.memory)
    assert device_line(unknown).startswith("NVIDIA GH200 480GB is not in gemmscope's device table")
    assert results_document(unknown, None)["device_figures"] is None


def test_fallback_and_memory_bound_rules(run):
    rows = _measurements(run).copy()
    fp8 = (rows["precision"] == "fp8-current") & (rows["mode"] == "prequant")
    fallback, decode = fp8 & (rows["op"] == "qkv"), fp8 & (rows["op"] == "mlp_up")
    rows.loc[fallback, ["verdict", "kernel_precision"]] = ["FALLBACK", "bf16"]
    rows.loc[decode, "m"] = 16  # one token per sequence: the weights dominate what moves
    rows["flops"] = 2 * rows["m"] * rows["k"] * rows["n"]
    g = profile_run.with_speed_figures(rows, run.device["name"])
    assert (g.loc[fallback, "speedup_reason"] == "kernel fell back to BF16").all()
    decode_rows = g[decode]
    assert decode_rows["speedup_reason"].str.match(r"memory-bound: intensity \d+ < ridge \d+ FLOP/B").all()
    assert (decode_rows["intensity"] < 32).all()


def test_idle_gaps_are_named_only_where_they_outweigh_quantization(run):
    idle = run.gemms[run.gemms["speedup_reason"].str.startswith("GPU idle", na=False)]
    assert (idle["idle_pct"] > idle["quantization_pct"]).all()
    assert (idle["speedup_reason"] == idle["idle_pct"].map(lambda v: f"GPU idle {v:.0f} % of e2e (launch gaps)")).all()


def test_run_without_trace_says_so(run, gpu):
    trace = read_trace(gpu.run_dir / "trace.sqlite.xz")
    marks = trace.nvtx.loc[trace.nvtx["kind"] == "mark", "name"].dropna()
    plan = next(n for n in marks if n.startswith(run_marks.PLAN_PREFIX))[len(run_marks.PLAN_PREFIX):]
    events = {"plan": json.loads(plan), "results": [n for n in marks if n.startswith(run_marks.RESULT_PREFIX)],
              "device": run.device}
    g = profile_run.analyze_events(events).gemms
    ran = g["status"] == "ok"
    assert g.loc[ran, "speedup_reason"].str.match(r"no trace: e2e at \d+ % of (BF16|FP8) peak").all()
    assert g.loc[ran, "pct_of_peak"].notna().all() and g.loc[ran, "kernel_tflops"].isna().all()


def test_memory_peak_is_never_below_the_entrys_baseline(run, gpu):
    """An entry that frees more than it then allocates peaks at 0 above the memory live when it
    started, never below; the other entries' peaks, each above its own baseline, stay as they were."""
    trace = read_trace(gpu.run_dir / "trace.sqlite.xz")
    names = trace.nvtx["name"].fillna("")
    bf16_starts = trace.nvtx.loc[names.str.startswith((run_marks.WARMUP_PREFIX, run_marks.RESULT_PREFIX))
                                 & names.str.contains("|precision=bf16|", regex=False)
                                 & names.str.contains("|mode=autocast|", regex=False), "start"]
    before = run.memory.set_index(["mode", "precision"])["peak_mib"]
    assert before[("autocast", "bf16")] > 0
    freed = int((before[("autocast", "bf16")] + 1) * 2**20)
    device_memory = trace.memory[trace.memory["mem_kind"] == 2].iloc[:1]
    free = device_memory.assign(start=bf16_starts.min(), bytes=freed, operation=1, delta_bytes=-freed)
    trace.memory = pd.concat([trace.memory, free], ignore_index=True)
    after = profile_run.analyze_run(trace).memory.set_index(["mode", "precision"])["peak_mib"]
    assert after[("autocast", "bf16")] == 0
    others = before.index != ("autocast", "bf16")
    pd.testing.assert_series_equal(after[others], before[others])


def test_label_round_trip_keeps_free_text_reason():
    fields = profile_run.parse_label("gemmscope.result|op=qkv|pass=fprop|precision=nvfp4|mode=autocast|m=1|k=2|n=3"
                                 "|iters=5|status=failed|reason=RuntimeError: a|b=c")
    assert fields["reason"] == "RuntimeError: a|b=c" and fields["m"] == 1 and fields["status"] == "failed"


@pytest.mark.skipif(gpu_profile.gpu_available(), reason="a GPU is here: profile would run for real")
def test_profile_without_gpu_shows_the_shipped_run():
    done = gemmscope("profile")
    assert done.returncode == 0, done.stderr
    assert "no CUDA GPU here" in done.stderr
    assert "codonfm-5b on NVIDIA H200" in done.stdout and "1.66x" in done.stdout
    assert "speedup reason" in done.stdout and "quantization 24 % of e2e" in done.stdout
    assert "NVIDIA H200 = H200 SXM: dense peaks" in done.stdout
