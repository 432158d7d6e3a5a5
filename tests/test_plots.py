"""Plots (gemmscope/report/plots.py) on real data. What each figure draws is checked against figures
computed here from outside gemmscope: the example run's own results.json, and SQLite exports
read straight (kernels joined to the launch calls and to the hook's NVTX records). Pixels are
not compared: the PNGs are checked to be PNGs, written where they belong and embedded in the
HTML report."""

import base64
import json
import re
from collections import defaultdict

import pandas as pd
import pytest
from click.testing import CliRunner

from gemmscope.autocast_hook.gemmscope_protocol import GEMM_PREFIX, parse_record
from gemmscope.cli import EXAMPLE_RUN, EXAMPLE_TRACE, main
from gemmscope.diagnosing import diagnosis
from gemmscope.judging.judgement import judge
from gemmscope.kernels import decode
from gemmscope.plan import profile_run
from gemmscope.report import plots
from gemmscope.report.profile import write_profile_reports
from gemmscope.traces.read import read_trace

from cli_runner import assert_one_line_error, gemmscope
from fixture_paths import CORPUS
from nsys_export import export

# 4 TransformerLayers in FP8 block scaling, 8 training steps in NVTX ranges "step N", the hook's
# shape records on every GEMM call.
LARGE = "te_stack_large_fp8-block_1gpu"
PNG = b"\x89PNG\r\n\x1a\n"
DENSE_PEAK_TFLOPS = {"bf16": 989.5, "fp8": 1979.0}  # H100 / H200 SXM, the datasheets' sparse figures halved


def nvtx_label(alias: str) -> str:
    return f"COALESCE({alias}.text, (SELECT value FROM StringIds WHERE id = {alias}.textId))"


def hook_gemms(name: str) -> dict[tuple, list[int]]:
    """Per (layer, pass, M, N, K) of the hook's records: [FLOPs, kernel ns, launches] of the GEMM
    kernels launched inside each record's range on its thread."""
    rows = export(name).execute(
        f"SELECT {nvtx_label('n')}, (SELECT value FROM StringIds WHERE id = k.demangledName), k.end - k.start "
        "FROM NVTX_EVENTS n JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid "
        "AND r.start BETWEEN n.start AND n.end JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        f"WHERE {nvtx_label('n')} LIKE 'gemmscope.te_gemm|%'")
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    for label, kernel, ns in rows:
        if decode(kernel).role == "gemm":
            record = parse_record(GEMM_PREFIX, label)
            figures = out[(record["layer"], record["pass"], int(record["m"]), int(record["n"]), int(record["k"]))]
            figures[0] += int(record["flops"])
            figures[1] += ns
            figures[2] += 1
    return out


def per_step_launches(name: str) -> list[tuple[str, int, int]]:
    """Per NVTX range "step N", in time order: its name, the kernels whose launch call lies inside
    it, and the time of the GEMM kernels among them."""
    db = export(name)
    steps = db.execute(f"SELECT {nvtx_label('n')} AS label, start, end FROM NVTX_EVENTS n "
                       "WHERE label LIKE 'step %' ORDER BY start").fetchall()
    kernels = db.execute("SELECT r.start, (SELECT value FROM StringIds WHERE id = k.demangledName), k.end - k.start "
                         "FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                         "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId").fetchall()
    return [(label, sum(start <= t <= end for t, _, _ in kernels),
             sum(ns for t, n, ns in kernels if start <= t <= end and decode(n).role == "gemm"))
            for label, start, end in steps]


def group_key(frame: pd.DataFrame) -> list[tuple]:
    return [(layer, pass_, int(m), int(n), int(k)) for layer, pass_, m, n, k
            in zip(frame["layer"], frame["pass"], frame["gemm_m"], frame["gemm_n"], frame["gemm_k"])]


@pytest.fixture(scope="module")
def checked():
    cache = {}

    def load(name, expect=None):
        if (name, expect) not in cache:
            cache[name, expect] = judge([read_trace(CORPUS / f"{name}.sqlite.xz")], expect)
        return cache[name, expect]

    return load


@pytest.fixture(scope="module")
def run():
    return profile_run.load_run(EXAMPLE_RUN)


@pytest.fixture(scope="module")
def recorded() -> pd.DataFrame:
    """What the example run recorded in its results.json, keyed by mode, op, pass and recipe."""
    gemms = json.loads((EXAMPLE_RUN / "results.json").read_text())["gemms"]
    return pd.DataFrame(gemms).set_index(["mode", "op", "pass", "precision"])


# --- a profile run ----------------------------------------------------------------------------------

def test_profile_writes_every_plot_into_the_run_directory(run, tmp_path):
    write_profile_reports(run, tmp_path, None)
    written = {p.name for p in tmp_path.glob("*.png")}
    assert written == {"report.png", "speedup-vs-bf16.png", "gemm-tflops.png"}
    assert all((tmp_path / name).read_bytes().startswith(PNG) for name in written)
    assert [p.filename for p in plots.profile_plots(run)][0] == "report.png"  # the per-layer plot, as before


def test_speedup_per_gemm_is_bf16_time_over_the_recipes(run, recorded):
    plot = plots.profile_speedup_plot(run)
    drawn = plot.data[plot.data["speedup"].notna()].set_index(["mode", "op", "pass", "precision"])["speedup"]
    ok = recorded[recorded["status"] == "ok"]
    bf16 = ok.xs("bf16", level="precision")["e2e_ms"]
    expected = {key: bf16[key[:3]] / e2e for key, e2e in ok["e2e_ms"].items() if key[3] != "bf16"}
    assert len(expected) == 3 * 12 * 2  # fp8-delayed, fp8-current, fp8-block × 12 GEMMs × 2 modes
    assert set(drawn.index) == set(expected)
    assert all(drawn[key] == pytest.approx(value) for key, value in expected.items())
    assert plot.notes == ("not run: mxfp8, nvfp4 (unsupported)",)
    # nothing flagged in this run, as its results.json says
    assert not plot.data["flagged"].any()
    assert recorded["verdict"].dropna().eq("OK").all()


def test_kernel_tflops_per_gemm_and_recipe_against_the_peak(run, recorded):
    plot = plots.profile_tflops_plot(run)
    drawn = plot.data[plot.data["kernel_tflops"].notna()].set_index(["mode", "op", "pass", "precision"])
    ran = recorded[recorded["status"] == "ok"]
    assert len(drawn) == len(ran) == 4 * 12 * 2  # one marker per GEMM × recipe that ran, per mode
    flops = 2 * ran["m"] * ran["k"] * ran["n"]
    expected = flops / (ran["kernel_ms"] * 1e9)
    assert ((drawn["kernel_tflops"] - expected.reindex(drawn.index)).abs() < 1e-6).all()
    precision = drawn.index.get_level_values("precision").map(lambda r: "bf16" if r == "bf16" else "fp8")
    assert (drawn["peak_tflops"] == precision.map(DENSE_PEAK_TFLOPS)).all()  # the peak lines drawn
    flagged = ran["verdict"] == "FALLBACK"
    assert int(drawn["flagged"].sum()) == int(flagged.sum()) == 0
    assert plot.notes == ("not run: mxfp8, nvfp4 (unsupported)",)


# --- traces: time per step ----------------------------------------------------------------------------

def test_time_per_step_adds_up_to_the_breakdown_and_matches_the_export(checked):
    found = diagnosis.diagnose(checked(LARGE))
    steps = found.step_times
    exported = per_step_launches(LARGE)
    assert [name for name, _, _ in exported] == [f"step {i}" for i in range(8)]
    assert list(steps["name"]) == [f"step {i}" for i in range(1, 8)]  # the first (warm-up) left out
    # each step holds the kernels launched inside its NVTX range, and their GEMM time
    assert list(steps["kernel_launches"]) == [launches for _, launches, _ in exported[1:]]
    gemm_ns = steps["gemm_ns"] + steps["gemm-fallback_ns"]
    assert list(gemm_ns) == [ns for _, _, ns in exported[1:]]
    columns = [c for c in diagnosis.STEP_COLUMNS if c.endswith("_ns") or c == "kernel_launches"]
    assert (steps[columns].sum() == found.breakdown[columns].iloc[0]).all()
    plot = plots.steps_plot(found)
    assert plot.data is steps and plot.png.startswith(PNG)


def test_time_per_step_of_two_ranks_adds_up_per_rank(checked):
    """Two ranks in one trace, cut by a range each rank pushes three times (--step-range)."""
    found = diagnosis.diagnose(checked("te_stack_fp8-block_2gpu"), "gemmscope.autocast(recipe=Float8BlockScaling)")
    steps = found.step_times
    assert sorted(steps["rank"].astype(str)) == ["0", "0", "1", "1"] and set(steps["step"]) == {1, 2}
    columns = [c for c in diagnosis.STEP_COLUMNS if c.endswith("_ns") or c == "kernel_launches"]
    per_rank = steps.groupby(steps["rank"].astype(str))[columns].sum()
    assert (per_rank.to_numpy() == found.breakdown.set_index(found.breakdown["rank"].astype(str))
            .loc[per_rank.index, columns].to_numpy()).all()
    assert (steps["window_ns"] == steps["busy_ns"] + steps["idle_ns"]).all()


def test_no_steps_no_step_plot(checked):
    found = diagnosis.diagnose(checked("fsdp_small_fp8_1gpu"))
    assert found.step_times.empty and plots.steps_plot(found) is None


# --- traces: GEMM TFLOP/s -------------------------------------------------------------------------

def test_gemm_tflops_are_the_hook_records_over_their_kernels(checked):
    result = checked(LARGE)
    plot = plots.trace_tflops_plot(result)
    drawn = plot.data[plot.data["tflops"].notna()]
    truth = hook_gemms(LARGE)
    assert len(drawn) == len(plot.data) == len(truth) == 51  # one marker per GEMM, every one recorded
    mine = dict(zip(group_key(drawn), zip(drawn["flops"], drawn["time_ns"], drawn["launches"])))
    assert mine == {key: tuple(figures) for key, figures in truth.items()}
    assert (drawn["tflops"] == drawn["flops"] / drawn["time_ns"] / 1e3).all()
    assert (drawn["peak_tflops"] == DENSE_PEAK_TFLOPS["fp8"]).all()  # H100: one FP8 peak line
    assert not drawn["flagged"].any() and plot.notes == ()


def test_flagged_markers_are_the_fallback_gemms(checked):
    """BF16 training checked against FP8: every GEMM fell back, and each one is ringed."""
    name = "fsdp_large_bf16_1gpu"
    result = checked(name, "fp8-delayed")
    plot = plots.trace_tflops_plot(result)
    drawn = plot.data[plot.data["tflops"].notna()]
    fallback = result.mismatches.assign(**{"pass": result.mismatches["te_pass"]})
    flagged_groups = set(group_key(fallback.drop_duplicates(["layer", "pass", "gemm_m", "gemm_n", "gemm_k"])))
    assert set(group_key(drawn[drawn["flagged"]])) == flagged_groups == set(hook_gemms(name))
    assert int(drawn["flagged"].sum()) == len(flagged_groups) == 24
    assert (drawn["peak_tflops"] == DENSE_PEAK_TFLOPS["bf16"]).all()


def test_unknown_flops_are_said_not_drawn_as_zeros():
    """The shipped example: a block outside autocast and a torch head fall back, and no hook
    recorded a GEMM shape (the trace was made without it)."""
    result = judge([read_trace(EXAMPLE_TRACE)])
    plot = plots.trace_tflops_plot(result)
    assert plot.data["tflops"].isna().all() and plot.data["flops"].isna().all()
    fallback = result.mismatches
    flagged = len(fallback.drop_duplicates(["layer", "module", "te_pass", "precision"]))
    assert int(plot.data["flagged"].sum()) == flagged == 12
    (note,) = plot.notes
    assert note.startswith("GEMM TFLOP/s unknown: gemmscope's hook recorded no GEMM shape")
    assert f"({len(plot.data)} GEMMs, {flagged} flagged FALLBACK)" in note
    assert plot.png.startswith(PNG)


# --- where the plots go ---------------------------------------------------------------------------

def test_html_report_embeds_the_trace_plots(tmp_path, checked):
    page = tmp_path / "large.html"
    done = CliRunner().invoke(main, ["report", str(CORPUS / f"{LARGE}.sqlite.xz"), "-o", str(page)],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    text = page.read_text()
    images = re.findall(r'<figure><img alt="([^"]*)" src="data:image/png;base64,([^"]*)">', text)
    # in the order of the report's sections: the GEMMs, then where the GPU time went
    assert [alt for alt, _ in images] == ["GEMM TFLOP/s against the GPU&#x27;s dense peak",
                                          "Where the GPU time went, per rank", "GPU time per training step"]
    assert all(base64.b64decode(data).startswith(PNG) for _, data in images)
    assert "(steps: NVTX ranges matching step [0-9]*, after the first)" in text  # the window the times are of


def test_html_caption_says_what_was_not_drawn(tmp_path):
    page = tmp_path / "example.html"
    done = CliRunner().invoke(main, ["report", str(EXAMPLE_TRACE), "-o", str(page)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "GEMM TFLOP/s unknown: gemmscope&#x27;s hook recorded no GEMM shape" in page.read_text()


def test_plots_option_writes_the_trace_pngs(tmp_path):
    out = tmp_path / "plots" / "large"
    done = gemmscope("analyze", CORPUS / f"{LARGE}.sqlite.xz", "--quiet", "--plots", out)
    assert done.returncode == 0, done.stderr
    names = ["gpu-time-per-rank.png", "time-per-step.png", "gemm-tflops.png"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    assert all((out / name).read_bytes().startswith(PNG) for name in names)
    assert f"gemmscope: wrote plots into {out}: {', '.join(names)}" in done.stderr
    again = gemmscope("verify", "--trace", EXAMPLE_TRACE, "--quiet", "--plots", tmp_path / "example")
    assert again.returncode == 1  # the example's fallbacks
    assert sorted(p.name for p in (tmp_path / "example").iterdir()) == ["gemm-tflops.png", "gpu-time-per-rank.png"]


def test_plots_option_bad_folder_is_one_line_exit_2(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert_one_line_error(gemmscope("analyze", EXAMPLE_TRACE, "--plots", a_file))
    assert_one_line_error(gemmscope("analyze", EXAMPLE_TRACE, "--plots", a_file / "below"))
