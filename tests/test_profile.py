"""The committed CodonFM-5B run on an H200, re-derived from its trace on a machine without GPU."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from gemmscope import profile, reports

EXAMPLE = Path(profile.__file__).parent / "examples" / "h200-codonfm-5b"
# TE's own benchmark (benchmarks/gemm/benchmark_gemm.py, TE 2.20.2) on an H200, autocast mode,
# per-layer speedups over BF16 — the reference, to be matched within ±7 %.
TE_H200_AUTOCAST = {"fp8-current": 1.61, "fp8-delayed": 1.72, "fp8-block": 1.42}
TE_H200_BF16_LAYER_MS = 29.6


@pytest.fixture(scope="module")
def run():
    return profile.load_run(EXAMPLE)


@pytest.fixture(scope="module")
def recorded():
    return json.loads((EXAMPLE / "results.json").read_text())


def test_trace_rederives_every_row_of_results_json(run, recorded):
    derived = {(g["op"], g["pass"], g["precision"], g["mode"]): g
               for g in reports.results_document(run, None)["gemms"]}
    assert len(derived) == len(recorded["gemms"]) == 12 * 6 * 2
    for g in recorded["gemms"]:
        d = derived[(g["op"], g["pass"], g["precision"], g["mode"])]
        for key in ("status", "reason", "kernel", "verdict", "gemm_launches", "m", "k", "n", "count"):
            assert d[key] == g[key], (key, g)
        for key in ("kernel_ms", "overhead_ms", "e2e_ms", "tflops"):
            assert (d[key] is None and g[key] is None) or math.isclose(d[key], g[key], rel_tol=1e-9), (key, g)
    assert reports.results_document(run, None)["speedups"] == recorded["speedups"]


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
    for mode in profile.MODES:
        for precision in ("mxfp8", "nvfp4"):
            assert math.isnan(layer.loc[(mode, precision), "e2e_ms"])
            assert run.speedups()[mode][precision] is None


def test_autocast_speedups_within_7_percent_of_te_benchmark(run):
    speedups = run.speedups()["autocast"]
    for recipe, te in TE_H200_AUTOCAST.items():
        assert abs(speedups[recipe] / te - 1) <= 0.07, (recipe, speedups[recipe], te)
    bf16 = run.per_layer().loc[("autocast", "bf16"), "e2e_ms"]
    assert abs(bf16 / TE_H200_BF16_LAYER_MS - 1) <= 0.07


def test_autocast_overhead_is_quantization_and_prequant_has_none(run):
    layer = run.per_layer()
    for recipe in ("fp8-delayed", "fp8-current", "fp8-block"):
        assert layer.loc[("autocast", recipe), "overhead_ms"] > 0.5
        assert layer.loc[("prequant", recipe), "overhead_ms"] == 0
    assert layer.loc[("autocast", "bf16"), "overhead_ms"] == 0


def test_run_was_fast_enough(recorded):
    assert recorded["wall_s"] <= 75  # the bound on an H200: 1.5 x TE's benchmark


def test_reports_render(run, tmp_path):
    reports.write_profile_reports(run, tmp_path, 40.0)
    markdown = (tmp_path / "report.md").read_text()
    assert "| autocast | fp8-delayed |" in markdown and "unsupported: Device compute capability" in markdown
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_label_round_trip_keeps_free_text_reason():
    fields = profile.parse_label("gemmscope.result|op=qkv|pass=fprop|precision=nvfp4|mode=autocast|m=1|k=2|n=3"
                                 "|iters=5|status=failed|reason=RuntimeError: a|b=c")
    assert fields["reason"] == "RuntimeError: a|b=c" and fields["m"] == 1 and fields["status"] == "failed"


@pytest.mark.skipif(profile.gpu_available(), reason="a GPU is here: profile would run for real")
def test_profile_without_gpu_shows_the_shipped_run():
    done = subprocess.run([sys.executable, "-c", "from gemmscope.cli import main; main()", "profile"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "no CUDA GPU here" in done.stderr
    assert "codonfm-5b on NVIDIA H200" in done.stdout and "1.66x" in done.stdout
