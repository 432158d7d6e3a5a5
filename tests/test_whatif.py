"""`gemmscope whatif` on committed real GPU traces: the groups against the module trees the corpus
programs wrote (*.expected.json, not gemmscope's output), the emitted changes applied with the
corpus programs' own parsers and torchao's filter protocol, the command without a GPU, and the
advice from a measured-results table."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import gemmscope as gs
from gemmscope.whatif import advice, answer, changes, measure, megatron_recipe
from gemmscope.whatif.groups import group_gemms

from fixture_paths import CORPUS, GPU, STEPS
from schema_check import assert_valid

TESTS = Path(__file__).parent
FIRST_LAST = CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"
MEGATRON_10 = STEPS / "megatron_gpt_10steps.sqlite.xz"
HF_ACCELERATE = STEPS / "hf_llama_accelerate-fp8_10steps.sqlite.xz"


def _expected(trace: Path) -> dict:
    data = json.loads(trace.with_name(trace.name.replace(".sqlite.xz", ".expected.json")).read_text())
    return data


def _groups(trace: Path):
    return group_gemms(gs.check(trace).judgement)


def _program(name: str):
    spec = importlib.util.spec_from_file_location(name, CORPUS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def first_last():
    return _groups(FIRST_LAST)


@pytest.fixture(scope="module")
def all_fp8():
    """Megatron's layers all in FP8, its output layer BF16: no module pattern ran at two precisions,
    so every prediction is the measured ratio."""
    return _groups(MEGATRON_10)


@pytest.mark.parametrize("trace", [FIRST_LAST, MEGATRON_10])
def test_megatron_groups_fold_layers_of_one_precision(trace):
    """Per module pattern and FP8-or-not, the layer numbers the module tree says: one group each."""
    tree = _expected(trace)
    want: dict[tuple[str, bool], set[int]] = {}
    for module in tree["te_modules"]:
        pattern = re.sub(r"(?<![^.])\d+(?![^.])", "*", module["path"])
        want.setdefault((pattern, module["fp8"]), set()).add(module["layer"])
    run = _groups(trace)
    got = {}
    for row in run.groups.itertuples():
        if row.name == tree["output_layer"]["path"]:
            continue
        numbers = {int(re.search(r"layers\.(\d+)\.", p).group(1)) for p in row.layers}
        got[(row.pattern, bool(row.low_precision))] = numbers
    assert got == want
    mixed = {pattern for pattern, _ in want if (pattern, not _) in want}
    for row in run.groups.itertuples():
        if row.pattern in mixed:  # spelled with the numbers, not *
            assert row.name == row.pattern.replace("*", "{" + ",".join(map(str, sorted(got[(row.pattern,
                                                                                               row.low_precision)]))) + "}")
        elif row.name != "output_layer":
            assert "*" in row.name
    output = run.groups.set_index("name").loc[tree["output_layer"]["path"]]
    assert not output["low_precision"] and output["module_class"] == tree["output_layer"]["class"]
    assert run.framework == "megatron-core"
    # per step: each module's forward once per step, over the steps after the first
    steps = int(tree["steps"])
    assert run.steps == steps - 1
    layers = run.groups[run.groups["name"] != "output_layer"]
    assert (layers["calls_per_step"] == layers["modules"]).all()
    assert (layers["gemms_per_step"] == 3 * layers["modules"]).all()


def test_the_first_last_trace_splits_every_layer_pattern_in_two(first_last):
    names = set(first_last.groups["name"])
    assert "decoder.layers.{1,2}.mlp.linear_fc1" in names and "decoder.layers.{0,3}.mlp.linear_fc1" in names
    bf16 = first_last.groups[~first_last.groups["low_precision"]]
    assert (bf16["quant_ms"] == 0).all()  # no quantization belongs to a BF16 GEMM
    low = first_last.groups[first_last.groups["low_precision"]]
    assert (low["quant_ms"] > 0).all()


def test_quantization_per_step_is_at_most_what_the_steps_ran(first_last):
    v = gs.check(FIRST_LAST).judgement
    total_ms = v.job.kernels.loc[v.job.kernels["role"] == "quantize", "duration_ns"].sum() / 1e6
    assert 0 < first_last.groups["quant_ms"].sum() * first_last.steps <= total_ms


@pytest.mark.parametrize("name", ["torchao_tensorwise", "torchao_rowwise"])
def test_torchao_groups_follow_the_converted_linears(name):
    trace = CORPUS / f"{name}.sqlite.xz"
    tree = _expected(trace)
    run = _groups(trace)
    assert run.framework == "torchao"
    got = {row.name: (row.module_class, bool(row.low_precision)) for row in run.groups.itertuples()}
    assert got == {linear["path"]: (linear["class"], linear["float8"]) for linear in tree["linears"]}
    assert set(run.groups.loc[run.groups["low_precision"], "now_recipe"]) == {
        "fp8-rowwise" if "rowwise" in name else "fp8-tensorwise"}
    # the head's backward node records no shape: its forward's shape stands for it
    assert measure.plan(run)["unmeasurable"].isna().all()


def test_accelerate_te_groups_count_every_linear():
    tree = _expected(HF_ACCELERATE)
    run = _groups(HF_ACCELERATE)
    assert run.framework == "hf-accelerate-te"
    assert run.groups["modules"].sum() == int(tree["linears"])
    assert run.groups["gemms_per_step"].sum() == int(tree["gemms_per_step"])
    assert run.groups["low_precision"].all()
    assert run.recipes == ["fp8-delayed"]


def _results(run, factor, quant_share: float | None = None) -> pd.DataFrame:
    """A measured-results table as measure.read_measurement returns it: per planned shape and
    recipe, a time (`factor(row, recipe)` × a 500 TFLOP/s forward+backward), or unsupported. A
    low-precision recipe's time is split between GEMMs and quantization as the group's is in the run
    (a runner that quantizes as the program does), or with `quant_share` of it quantization."""
    run_share = (run.groups["quant_ms"] / run.groups["now_ms"]).set_axis(run.groups["group"])
    quant_share = run_share if quant_share is None else run_share * 0 + quant_share
    rows = []
    for p in measure.plan(run).itertuples():
        for recipe in p.recipes:
            base = 6 * p.tokens * p.in_features * p.out_features / 500e12 * 1e3
            f = factor(p, recipe)
            share = 0.0 if recipe == "bf16" else quant_share[p.group]
            rows.append({"group": p.group, "m": p.tokens, "k": p.in_features, "n": p.out_features, "recipe": recipe,
                         "kind": p.kind, "status": "ok" if f else "unsupported",
                         "reason": None if f else "MXFP8 needs compute capability 10.0", "e2e_ms": None,
                         "e2e_iqr_ms": None, "gemm_ms": base * f * (1 - share) if f else None,
                         "quant_ms": base * f * share if f else None, "kernel": None, "kernel_precision": None})
    return pd.DataFrame(rows)


def _slow_small_fp8(p, recipe):
    """FP8 is slower than BF16 for the 1024x1024 projections, faster for the others."""
    return {"bf16": 1.0, "fp8-current": 1.4 if p.out_features == p.in_features else 0.6}.get(recipe)


def test_advice_keeps_slow_fp8_in_bf16_and_moves_what_gains(all_fp8):
    slow_projections = lambda p, recipe: {"bf16": 1.0,  # noqa: E731
                                          "fp8-current": 1.4 if p.in_features == p.out_features else 0.6}.get(recipe)
    advised = advice.advise(all_fp8, _results(all_fp8, slow_projections), {"name": "NVIDIA H200"})
    groups = advised.groups.set_index("name")
    proj = groups.loc["decoder.layers.*.self_attention.linear_proj"]
    assert proj["action"] == "move" and proj["target"] == "bf16"  # BF16 is 1/1.4 of FP8's time
    assert proj["target_ms"] == pytest.approx(proj["now_ms"] / 1.4)
    assert proj["text"].startswith("move decoder.layers.*.self_attention.linear_proj to BF16 (1.4×, ")
    fc1 = groups.loc["decoder.layers.*.mlp.linear_fc1"]
    assert fc1["action"] == "keep" and fc1["speedup"] == pytest.approx(0.6)
    assert fc1["text"].startswith("keep decoder.layers.*.mlp.linear_fc1 in FP8 (BF16 0.6× here, ")
    assert f"{fc1['stake_ms']:.2f} ms per step lost" in fc1["text"]
    head = groups.loc["output_layer"]
    assert head["action"] == "move" and head["target_ms"] == pytest.approx(head["now_ms"] * 0.6)
    # ordered by time at stake; MXFP8 unsupported on this GPU: no figure, never zero
    assert advised.recommendations["stake_ms"].is_monotonic_decreasing
    mx = advised.per_recipe[advised.per_recipe["recipe"] == "mxfp8"]
    assert mx["predicted_ms"].isna().all() and (mx["status"] == "unsupported").all()
    assert advised.per_recipe["source"].isna().all()  # no pattern ran at two precisions
    assert advised.other_gpu is None  # the trace ran on an H200 too


def test_advice_takes_a_recipe_the_run_itself_ran_from_the_run(first_last):
    """Megatron's layers 0 and 3 in BF16, 1 and 2 in FP8, the same shapes: each group's time at the
    other precision is the other group's time in the run per GEMM, whatever the runner measured."""
    advised = advice.advise(first_last, _results(first_last, _slow_small_fp8), {"name": "NVIDIA H100 80GB HBM3"})
    groups = advised.groups.set_index("name")
    for pattern in ("self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2"):
        bf16, fp8 = groups.loc[f"decoder.layers.{{0,3}}.{pattern}"], groups.loc[f"decoder.layers.{{1,2}}.{pattern}"]
        assert bf16["target_ms"] == pytest.approx(fp8["now_ms"] * bf16["gemms_per_step"] / fp8["gemms_per_step"])
        assert fp8["target_ms"] == pytest.approx(bf16["now_ms"] * fp8["gemms_per_step"] / bf16["gemms_per_step"])
        assert bf16["target_source"] == f"decoder.layers.{{1,2}}.{pattern}"
    proj = groups.loc["decoder.layers.{0,3}.self_attention.linear_proj"]
    assert proj["action"] == "keep" and proj["text"].startswith(
        "keep decoder.layers.{0,3}.self_attention.linear_proj in BF16 (FP8 0.56× in this run, ")
    # a recipe the run did not run, and the output layer, which has no sibling: the measured ratio
    per_recipe = advised.per_recipe.set_index(["group", "recipe"])
    assert pd.isna(per_recipe.loc[(proj["group"], "fp8-block"), "source"])
    head = groups.loc["output_layer"]
    assert pd.isna(head["target_source"]) and head["target_ms"] == pytest.approx(head["now_ms"] * 0.6)


def test_advice_on_another_gpu_says_so(first_last):
    advised = advice.advise(first_last, _results(first_last, _slow_small_fp8), {"name": "NVIDIA H200"})
    assert advised.other_gpu and "NVIDIA H200" in advised.other_gpu and "this GPU's" in advised.other_gpu
    assert "those taken from the run's own groups are the trace's" in advised.other_gpu


def test_megatron_change_parses_with_megatron_gpt_and_keeps_whole_layers(all_fp8):
    # every FP8 GEMM slower: every layer goes BF16
    slow = lambda p, recipe: {"bf16": 1.0, "fp8-current": 1.5}.get(recipe)  # noqa: E731
    written = changes.write_changes(all_fp8, advice.advise(all_fp8, _results(all_fp8, slow), {}))
    args = written.files[changes.MEGATRON_ARGS].split()
    parsed = _program("megatron_gpt").parse_args(args)
    assert parsed.first_last_bf16 and parsed.num_layers_at_start_in_bf16 + parsed.num_layers_at_end_in_bf16 == 4
    groups = all_fp8.groups
    low = groups["low_precision"]
    assert written.predicted_ms == pytest.approx(groups.loc[~low, "now_ms"].sum() + groups.loc[low, "now_ms"].sum() / 1.5)
    # every FP8 GEMM faster: no layer BF16, and the output layer has no switch
    fast = lambda p, recipe: {"bf16": 1.0, "fp8-current": 0.5}.get(recipe)  # noqa: E731
    written = changes.write_changes(all_fp8, advice.advise(all_fp8, _results(all_fp8, fast), {}))
    parsed = _program("megatron_gpt").parse_args(written.files[changes.MEGATRON_ARGS].split("#")[0].split())
    assert not parsed.first_last_bf16
    assert "Megatron's output layer: no switch moves it to low precision: it stays BF16" in written.notes
    # the layers go FP8 as written; the output layer, which no switch moves, stays BF16
    layers = groups["name"] != "output_layer"
    assert written.predicted_ms == pytest.approx(groups.loc[low, "now_ms"].sum() + groups.loc[
        ~low & layers, "now_ms"].sum() * 0.5 + groups.loc[~layers, "now_ms"].sum())


def test_megatron_change_finer_than_layers_is_a_per_module_recipe(all_fp8):
    """Every layer's linear_proj slower in FP8, its other modules faster: no layer switch says it, so
    whatif writes Megatron's per-module recipe file naming exactly the four linear_proj, passed as the
    corpus program's own parser takes it (the run had no layer in BF16: no switch beside it)."""
    written = changes.write_changes(all_fp8, advice.advise(all_fp8, _results(all_fp8, _slow_small_fp8), {}))
    args = written.files[changes.MEGATRON_ARGS].split()
    parsed = _program("megatron_gpt").parse_args(args)
    assert not parsed.first_last_bf16 and parsed.te_precision_config_file == megatron_recipe.MEGATRON_RECIPE_YAML
    import yaml

    loaded = yaml.safe_load(written.files[megatron_recipe.MEGATRON_RECIPE_YAML])
    patterns = [matcher["pattern"] for matcher in loaded["matchers"].values()]
    assert patterns == [f"decoder.layers.{n}.self_attention.linear_proj" for n in range(4)]
    assert changes.TE_DEBUG_YAML not in written.files and not any("debug API" in n for n in written.notes)


def test_the_per_module_prediction_scales_gemms_and_quantization_apart(all_fp8):
    """A runner whose FP8 time is 15 % quantization where the run's linear_proj spent 54 % of it
    there: the four linear_proj the per-module file moves to BF16 take their GEMM time now times the
    runner's BF16 / FP8 GEMM ratio (its BF16 has no quantization), never their whole time now times
    the ratio of totals; every other module stays as it ran."""
    runner_share = 0.15
    written = changes.write_changes(all_fp8, advice.advise(all_fp8, _results(all_fp8, _slow_small_fp8, runner_share),
                                                          {}))
    groups = all_fp8.groups.set_index("name")
    proj = groups.loc["decoder.layers.*.self_attention.linear_proj"]
    assert proj["quant_ms"] / proj["now_ms"] > runner_share + 0.3  # the run's split is not the runner's
    bf16_ms = proj["gemm_ms"] / (1.4 * (1 - runner_share))  # BF16 GEMM 1, FP8 GEMM 1.4 × 0.85 of the base
    others = groups.drop(index=proj.name)["now_ms"].sum()
    assert written.predicted_ms == pytest.approx(others + bf16_ms)
    assert written.predicted_ms - others != pytest.approx(proj["now_ms"] / 1.4, rel=0.2)  # one ratio for both


def test_torchao_filter_file_returns_the_advised_booleans(tmp_path):
    run = _groups(CORPUS / "torchao_tensorwise.sqlite.xz")
    # fc3 (4096x4096) slower in float8, the others faster; the head (BF16) gains
    factor = lambda p, recipe: {"bf16": 1.0, "fp8-rowwise": None,  # noqa: E731
                                "fp8-tensorwise": 1.3 if p.out_features == p.in_features else 0.7}.get(recipe, None)
    written = changes.write_changes(run, advice.advise(run, _results(run, factor), {}))
    path = tmp_path / changes.MODULE_FILTER
    path.write_text(written.files[changes.MODULE_FILTER])
    spec = importlib.util.spec_from_file_location("module_filter", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    import torch

    linear = torch.nn.Linear(4, 4)
    assert {fqn: loaded.module_filter_fn(linear, fqn) for fqn in ("fc1", "fc2", "fc3", "head", "act1")} == {
        "fc1": True, "fc2": True, "fc3": False, "head": True, "act1": False}
    # the corpus program loads it as written
    assert _program("torchao_mlp").module_filter(str(path))(linear, "fc3") is False


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemmscope", "whatif", *args], capture_output=True, text=True,
                          timeout=300, cwd=TESTS.parent)


def test_without_a_gpu_lists_the_groups_and_the_command(tmp_path):
    # --no-redact: the command as given (by default its paths pass the redaction, the user's name with them)
    done = _cli(str(FIRST_LAST), "--out", str(tmp_path / "out"), "--no-redact")
    assert done.returncode == 0, done.stderr
    command = f"gemmscope whatif {FIRST_LAST} --out {tmp_path / 'out'}"
    assert done.stderr.splitlines() == [f"gemmscope: no CUDA GPU here: nothing measured; on a GPU machine run: {command}",
                                        f"gemmscope: wrote whatif.html, whatif.json into {tmp_path / 'out'}"]
    assert "NOT MEASURED" in done.stdout and "decoder.layers.{0,3}.mlp.linear_fc1" in done.stdout
    document = json.loads((tmp_path / "out" / "whatif.json").read_text())
    assert_valid(document, "whatif")
    assert document["state"] == "not-measured" and document["command"] == command
    assert len(document["groups"]) == 9 and len(document["shapes"]) == 9
    assert "NOT MEASURED" in (tmp_path / "out" / "whatif.html").read_text()


def test_json_output_validates_and_bad_input_exits_2(tmp_path):
    done = _cli(str(CORPUS / "torchao_rowwise.sqlite.xz"), "--format", "json")
    assert done.returncode == 0
    assert_valid(json.loads(done.stdout), "whatif")
    missing = _cli(str(tmp_path / "none.sqlite"))
    assert missing.returncode == 2 and missing.stderr.startswith("gemmscope: error:")
    assert not missing.stdout


def test_a_profile_run_is_no_whatif_measurement():
    with pytest.raises(gs.InputError, match="not a gemmscope whatif measurement"):
        measure.read_measurement(Path(gs.__file__).parent / "examples" / "h200-codonfm-5b")


def test_measured_report_json_validates(first_last):
    from gemmscope.report import render
    from gemmscope.whatif import report

    advised = advice.advise(first_last, _results(first_last, _slow_small_fp8), {"name": "NVIDIA H100 80GB HBM3"})
    written = changes.write_changes(first_last, advised)
    whole = report.advice_report(first_last, advised, written, None)
    document = json.loads(render(whole, "json"))
    assert_valid(document, "whatif")
    top = advised.recommendations["text"].head(3).tolist()
    text = render(whole, "table")
    first_screen = " ".join(" ".join(text.splitlines()[:12]).split())  # the terminal wraps at 100 columns
    assert max(map(len, text.splitlines())) <= 100 and not [line for line in text.splitlines() if line != line.rstrip()]
    assert all(" ".join(line.split()) in first_screen for line in top)
    page = render(whole, "html")
    assert all(line.replace("&", "&amp;") in page for line in advised.recommendations["text"])
    assert [r["text"] for r in document["recommendations"]] == advised.recommendations["text"].tolist()


def test_shapes_shared_by_groups_are_timed_once(first_last):
    planned = measure.plan(first_last)
    entries = measure.spec(planned, first_last, iters=30, warmup=5)["entries"]
    # qkv, proj, fc1, fc2 each in a BF16 and an FP8 group, and the output layer: five modules to time
    assert len(entries) == 5
    assert sorted(g for entry in entries for g in entry["group"].split("+")) == sorted(first_last.groups["group"])
    assert {(e["kind"], e["m"], e["k"], e["n"]) for e in entries} == {
        ("te-layernorm-linear", 1024, 1024, 3072), ("te-linear", 1024, 1024, 1024),
        ("te-layernorm-linear", 1024, 1024, 4096), ("te-linear", 1024, 4096, 1024), ("te-linear", 1024, 1024, 32768)}


FP8_GEMM = "nvjet_sm90_qqtst_128x64_128x8_1x2_h_bz_TNT"
QUANTIZE = "transformer_engine::<unnamed>::compute_scale_from_amax_kernel(const float *, float *, float, bool, float, const float *)"


def test_a_measurement_export_is_read_and_advised(first_last, gpu_sqlite, tmp_path):
    """The runner's protocol in an export with nsys's schema (tests/nsys_export.py): per shared
    shape, a BF16 range of 3 GEMM kernels per iteration, an FP8 range of 3 GEMM and 2 quantize
    kernels, MXFP8 unsupported. The reader splits the shared ranges per group and counts kernel
    time per iteration; the advice scales a group's time now by FP8 / BF16 where the run did not
    itself run its pattern at the other precision."""
    from gemmscope.plan.run_marks import PLAN_PREFIX, RESULT_PREFIX
    from gemmscope.plan.workload import Entry

    from nsys_export import BF16_GEMM, MARK, START_END, HandBuiltExport

    spec = measure.spec(measure.plan(first_last), first_last, iters=2, warmup=0)
    folder = tmp_path / "measurement"
    folder.mkdir()
    export = HandBuiltExport(folder / "trace.sqlite", gpu_sqlite("te_linear_bf16"))
    pid = 4242
    export.thread(pid, pid, "python")
    export.thread(pid, pid + 1, "pt_autograd_0")
    export.nvtx(MARK, pid, pid, 1_000, None, PLAN_PREFIX + json.dumps({"whatif": spec["plan"]}))
    clock = 10_000
    # per recipe: (kernels per iteration, ns each): FP8's GEMMs half BF16's time, plus quantization
    kernels = {"bf16": [(BF16_GEMM, 4_000)] * 3, "fp8-current": [(FP8_GEMM, 2_000)] * 3 + [(QUANTIZE, 1_000)] * 2}
    for item in spec["entries"]:
        for recipe in ("bf16", "fp8-current", "mxfp8"):
            entry = Entry(item["group"], "fwd+bwd", item["m"], item["k"], item["n"], recipe, item["kind"], 2)
            if recipe == "mxfp8":
                export.nvtx(MARK, pid, pid, clock, None, entry.label(RESULT_PREFIX)
                            + "|status=unsupported|reason=MXFP8 needs compute capability 10.0 (sm100)")
                clock += 1_000
                continue
            start = clock
            for _ in range(entry.iters):  # the backward's kernels from the autograd thread, as torch launches them
                for i, (name, ns) in enumerate(kernels[recipe]):
                    export.launch(pid, pid + (i % 2), clock, clock + 100, kernel=name, kernel_ns=ns)
                    clock += ns + 500
            export.nvtx(START_END, pid, pid, start - 10, clock, entry.label("gemmscope.gemm|"))
            export.nvtx(MARK, pid, pid, clock + 10, None, entry.label(RESULT_PREFIX)
                        + "|status=ok|e2e_ms=0.02|e2e_iqr_ms=0.001|e2e_mean_ms=0.02")
            clock += 10_000
    export.close()
    results, device = measure.read_measurement(folder)
    assert device["name"] == "NVIDIA H200"  # the export's GPU
    ok = results[results["status"] == "ok"]
    assert len(results) == 9 * 3 and len(ok) == 9 * 2  # every group its own rows
    assert set(ok.loc[ok["recipe"] == "bf16", "gemm_ms"]) == {0.012}  # 3 x 4 us per iteration
    fp8 = ok[ok["recipe"] == "fp8-current"]
    assert set(fp8["gemm_ms"]) == {0.006} and set(fp8["quant_ms"]) == {0.002}
    assert set(fp8["kernel_precision"]) == {"fp8"}
    advised = advice.advise(first_last, results, device)
    assert advised.other_gpu is not None  # the trace ran on an H100
    groups = advised.groups.set_index("group")
    by_name = first_last.groups.set_index("name")
    head = by_name.loc["output_layer"]  # no other group of its pattern: the measured ratio
    assert groups.loc[head["group"], "target_ms"] == pytest.approx(head["now_ms"] * 8 / 12)
    # FP8 layers whose pattern the run also ran in BF16: that group's own time in the run
    fp8_fc2, bf16_fc2 = by_name.loc["decoder.layers.{1,2}.mlp.linear_fc2"], by_name.loc["decoder.layers.{0,3}.mlp.linear_fc2"]
    assert groups.loc[fp8_fc2["group"], "target_ms"] == pytest.approx(bf16_fc2["now_ms"])
    verdicts = advised.per_recipe.set_index("recipe")[["kernel_precision", "kernel_verdict"]].dropna()
    assert set(map(tuple, verdicts.loc["fp8-current"].to_numpy())) == {("fp8", "OK")}
    assert set(map(tuple, verdicts.loc["bf16"].to_numpy())) == {("bf16", "OK")}
    unsupported = advised.per_recipe[advised.per_recipe["recipe"] == "mxfp8"]
    assert unsupported["predicted_ms"].isna().all()
    assert set(unsupported["reason"]) == {"MXFP8 needs compute capability 10.0 (sm100)"}


def test_the_claim_benchmark_applies_the_written_change_as_the_program_takes_it(all_fp8, tmp_path):
    """benchmarks/whatif_claim.py passes whatif's files to the corpus programs unmodified: here
    Megatron's arguments, parsed by megatron_gpt.py's own parser, no change at all, and none it can
    pass where only a te.autocast region is written."""
    spec = importlib.util.spec_from_file_location("whatif_claim", TESTS.parent / "benchmarks" / "whatif_claim.py")
    claim = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = claim  # dataclasses look their module up there
    spec.loader.exec_module(claim)
    megatron = claim.PROGRAMS["megatron_gpt"]
    for factor, bf16_layers in ((1.5, 4), (0.5, 0)):
        slow_or_fast = lambda p, recipe, f=factor: {"bf16": 1.0, "fp8-current": f}.get(recipe)  # noqa: E731
        written = changes.write_changes(all_fp8, advice.advise(all_fp8, _results(all_fp8, slow_or_fast), {}))
        folder = tmp_path / str(factor)
        folder.mkdir()
        for name, text in written.files.items():
            (folder / name).write_text(text)
        parsed = _program("megatron_gpt").parse_args(claim.applied(folder, megatron))
        assert parsed.first_last_bf16 is (bf16_layers > 0)
        if bf16_layers:
            assert parsed.num_layers_at_start_in_bf16 + parsed.num_layers_at_end_in_bf16 == bf16_layers
    assert claim.applied(tmp_path, megatron) == ["--first-last-layers-bf16"]  # nothing written: the run as it was
    region_only = tmp_path / "region"  # a te.autocast region alone: the program's code must take it, nothing to pass
    region_only.mkdir()
    (region_only / changes.TE_AUTOCAST).write_text("")
    assert claim.applied(region_only, claim.PROGRAMS["hf_accelerate_te"]) is None


def test_moe_grouped_gemms_are_said_unmeasurable_and_the_router_has_no_switch():
    """Megatron MoE (TE GroupedLinear experts, 4 GEMMs a pass): the trace holds each grouped
    call's summed FLOPs, not its members' shapes, so the experts cannot be built and are said so,
    never timed as zero; the routers (Megatron's own GEMM) have no precision switch."""
    trace = CORPUS / "megatron_moe_fp8-block.sqlite.xz"
    tree = _expected(trace)
    run = _groups(trace)
    planned = measure.plan(run)
    grouped = {m["path"] for m in tree["te_modules"] if m["te_class"] == "GroupedLinear"}
    experts = run.groups[run.groups["layers"].map(lambda paths: bool(set(paths) & grouped))]
    assert set().union(*experts["layers"]) == grouped
    reasons = planned.set_index("group").loc[experts["group"], "unmeasurable"]
    assert reasons.str.startswith("a grouped GEMM").all()
    routers = {r["path"] for r in tree["routers"]}
    router_group = run.groups[run.groups["layers"].map(lambda paths: set(paths) == routers)]
    assert len(router_group) == 1 and not router_group["low_precision"].iat[0]
    fast = lambda p, recipe: {"bf16": 1.0, "fp8-block": 0.7}.get(recipe)  # noqa: E731
    advised = advice.advise(run, _results(run, fast), {})
    unmeasured = advised.groups.set_index("group").loc[experts["group"]]
    assert (unmeasured["action"] == "unmeasured").all() and unmeasured["target_ms"].isna().all()
    assert unmeasured["text"].str.contains("a grouped GEMM").all()
    written = changes.write_changes(run, advised)
    router_name = router_group["name"].iat[0]
    assert any(note.startswith(f"{router_name} (Megatron's, not a TE module): no switch") for note in written.notes)
    # nothing the change reaches moves (the experts unmeasured, attention faster in FP8): every module
    # as it ran, the experts at their time in the trace, never a time of zero
    assert written.files == {changes.MEGATRON_ARGS: "# no layer in BF16: leave out --first-last-layers-bf16\n"}
    assert written.predicted_ms == pytest.approx(run.groups["now_ms"].sum())


MEASURED_H200 = GPU / "whatif" / "megatron_first-last-bf16_h200"


def _runner_times(folder: Path, scratch: Path) -> dict[tuple[str, str, str], float]:
    """The runner's own CUDA-event time per iteration (e2e_ms of its result marks, read with SQL from
    the export), per (kind, shape, recipe): a clock apart from the kernel times whatif advises from."""
    import lzma
    import sqlite3

    export = scratch / "measurement.sqlite"
    export.write_bytes(lzma.decompress((folder / "trace.sqlite.xz").read_bytes()))
    with sqlite3.connect(export) as db:
        names = [row[0] for row in db.execute(
            "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
            "WHERE coalesce(e.text, s.value) LIKE 'gemmscope.result|%'")]
    times = {}
    for name in names:
        fields = dict(part.split("=", 1) for part in name.split("|")[1:])
        if fields["status"] == "ok":
            times[(fields["mode"], f"{fields['m']}x{fields['k']}x{fields['n']}", fields["precision"])] = float(
                fields["e2e_ms"])
    return times


def test_measured_on_hopper_keeps_slow_fp8_in_bf16_and_says_what_hopper_cannot_run(tmp_path):
    """The committed measurement (an H200 timing each module shape of the Megatron-Core first/last
    BF16 run, forward and backward, at every recipe): every group kept in BF16 is one whose FP8 the
    runner's own CUDA-event clock also found slower for its shape, with the ratio said; MXFP8 and
    NVFP4, which need compute capability 10.0, are said unsupported, never timed."""
    done = subprocess.run([sys.executable, "-m", "gemmscope", "whatif", str(FIRST_LAST), "--measured",
                           str(MEASURED_H200), "--format", "json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["state"] == "measured" and "H200" in report["device"]["name"]
    clock = _runner_times(MEASURED_H200, tmp_path)
    shapes = {g["name"]: g for g in report["groups"]}
    kept = [r for r in report["recommendations"] if r["action"] == "keep"]
    assert "decoder.layers.{0,3}.self_attention.linear_proj" in {r["name"] for r in kept}
    sources = {(r["group"], r["recipe"]): r["source"] for r in report["per_recipe"]}
    for rec in kept:  # the BF16 layers' FP8 time: the FP8 layers' own in the run, not the runner's ratio
        sibling = shapes[rec["name"].replace("{0,3}", "{1,2}")]
        assert sources[(rec["group"], rec["target"])] == sibling["name"]
        assert rec["target_ms"] == pytest.approx(sibling["now_ms"] * shapes[rec["name"]]["gemms_per_step"]
                                                 / sibling["gemms_per_step"])
        assert re.search(r"FP8 0\.\d\d× in this run", rec["text"]), rec["text"]
        assert rec["speedup"] < 1
    for (kind, shape, recipe), ms in clock.items():
        if recipe.startswith("fp8"):
            assert ms > clock[(kind, shape, "bf16")], (kind, shape, recipe)
    unsupported = {r["recipe"] for r in report["per_recipe"] if r["status"] == "unsupported"}
    assert unsupported == {"mxfp8", "nvfp4"}
    assert not any(r["predicted_ms"] for r in report["per_recipe"] if r["recipe"] in unsupported)


def test_whatif_is_a_library_call_as_the_command_is(tmp_path):
    """gemmscope.whatif.answer gives the report the command prints, and the files it writes."""
    from gemmscope.report import render
    from gemmscope.whatif import answer

    found = answer.answer([FIRST_LAST], measured=MEASURED_H200, out=tmp_path / "out")
    done = _cli(str(FIRST_LAST), "--measured", str(MEASURED_H200), "--format", "json", "--no-redact")
    assert json.loads(render(found.report, "json")) == json.loads(done.stdout)
    assert {"whatif.json", "whatif.html", "megatron_args.txt"} <= set(found.files) and found.out == tmp_path / "out"
    assert not (tmp_path / "out").exists()  # the caller writes them; nothing was measured here
    with pytest.raises(answer.NothingToGroup):
        answer.answer([GPU / "request_mxfp8.sqlite.xz"])


def test_the_te_debug_file_names_the_layers_as_the_debug_api_names_them(torch_cpu, tmp_path):
    """The debug-API file's pattern matches exactly the modules it names, under the names
    nvdlfw_inspect's own infer_and_assign_layer_names gives them: a Hugging Face tree (layers by
    index), one of them with a quote and a newline in its name."""
    import nvdlfw_inspect.api as debug_api
    import yaml
    from nvdlfw_inspect.logging import initialize_logger

    nn = torch_cpu.nn

    def layer() -> object:
        block = nn.Module()
        block.mlp = nn.Module()
        block.mlp.linear_fc1, block.mlp.down_proj = nn.Linear(2, 2), nn.Linear(2, 2)
        return block

    root = nn.Module()
    root.model = nn.Module()
    root.model.layers = nn.ModuleList([layer() for _ in range(3)])
    root.lm_head = nn.Linear(2, 2)
    root.add_module("it's\n: #", nn.Linear(2, 2))  # a name from a trace may hold YAML's syntax
    paths = ["model.layers.1.mlp.down_proj", "lm_head", "it's\n: #"]
    initialize_logger(str(tmp_path))
    debug_api.infer_and_assign_layer_names(root)
    config = yaml.safe_load(changes.te_debug_yaml(paths))  # as nvdlfw_inspect's config manager loads it
    pattern = config["gemmscope_whatif_bf16"]["layers"]["layer_name_regex_pattern"]
    named = {path: module.name for path, module in root.named_modules() if path and hasattr(module, "name")}
    assert {path for path, name in named.items() if re.fullmatch(pattern, name)} == set(paths)


CLAIM = GPU / "whatif" / "claim_h200"


def _predicted_as_run(document: dict, after) -> float:
    """whatif's GEMM + quantization ms per step for the run as the after-run ran it: per group of
    the run before, its figure at the recipe its modules ran at after."""
    ran_at = {path: recipe for layers, recipe in zip(after.groups["layers"], after.groups["now_recipe"])
              for path in layers}
    figures = {(row["group"], row["recipe"]): row["predicted_ms"] for row in document["per_recipe"]}
    total = 0.0
    for group in document["groups"]:
        (recipe,) = {ran_at[path] for path in group["layers"]}  # a group's modules change together
        total += figures[(group["group"], recipe)]
    return total


@pytest.mark.parametrize("program", ["torchao_mlp", "megatron_gpt", "megatron_gpt_4096", "hf_accelerate",
                                     "hf_accelerate_te"])
def test_the_prediction_holds_against_the_run_with_the_change_applied(program, tmp_path):
    """On real H200 runs of the corpus programs (fixtures/gpu/whatif/README.md): whatif, from the
    run as it was and its measurement, predicts the GEMM + quantization time per step of the
    run with the change applied within 10 % of what that run itself took; and the change it
    writes today is the one that run applied (Megatron's arguments as given, torchao's filter
    naming exactly the modules that ran float8 after it). On accelerate's TE backend the run
    applied the TE debug-API file an earlier whatif wrote, which named exactly the modules that ran
    in high precision after it; its host work made the step slower than the GEMM time it saved, and
    today's whatif writes no such file for that run. The small Megatron GPT's run applied whole-layer
    switches an earlier whatif wrote; today's writes Megatron's per-module file instead
    (test_whatif_megatron.py), its figures checked here against what that run ran."""
    found = answer.answer([CLAIM / f"{program}_before.sqlite.xz"], measured=CLAIM / f"{program}_measurement",
                          out=tmp_path)
    document = found.report.document
    after = _groups(CLAIM / f"{program}_after.sqlite.xz")
    measured = after.groups["now_ms"].sum()
    assert _predicted_as_run(document, after) == pytest.approx(measured, rel=0.10)
    every = {path for layers in after.groups["layers"] for path in layers}
    ran_low = {path for layers, low in zip(after.groups["layers"], after.groups["low_precision"]) if low
               for path in layers}
    if program == "hf_accelerate_te":
        applied = (CLAIM / f"{program}_applied.yaml").read_text()
        pattern = re.search(r"layer_name_regex_pattern: '(.*)'", applied).group(1)
        assert {path for path in every if re.fullmatch(pattern, f"model.{path}")} == every - ran_low
        # the file saved GEMM time and cost the step more in host work, this step's GPU idling most of it:
        # whatif no longer writes it for such a run, and says why
        before = _groups(CLAIM / f"{program}_before.sqlite.xz")
        saved = before.groups["now_ms"].sum() - measured
        assert saved > 0 and after.step_ms - before.step_ms > 10 * saved and before.busy_ms < before.step_ms / 2
        assert changes.TE_DEBUG_YAML not in found.files and changes.TE_AUTOCAST in found.files
        assert any(f"{changes.TE_DEBUG_YAML} not written" in line for line in document["changes"]["lines"])
        return
    if program == "megatron_gpt":
        # the after-run applied the whole-layer switches an earlier whatif wrote (every layer BF16, to
        # move groups of layers 1 and 2); today's writes Megatron's per-module file moving only those
        # groups beside the run's own switches, whose run is to come
        assert (CLAIM / f"{program}_applied.txt").read_text().split()[2::2] == ["4", "0"]
        assert shlex.split(found.files[changes.MEGATRON_ARGS], comments=True) == [
            "--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "1", "--num-layers-at-end-in-bf16", "1",
            megatron_recipe.PRECISION_FLAG, megatron_recipe.MEGATRON_RECIPE_YAML]
        return
    assert document["changes"]["predicted_ms"] == pytest.approx(measured, rel=0.10)
    if program == "megatron_gpt_4096":  # its BF16 first and last layers gain in FP8, named with the gain
        moves = [r for r in document["recommendations"] if r["action"] == "move" and r["target"] != "bf16"]
        assert {r["name"] for r in moves} >= {f"decoder.layers.{{0,3}}.{m}" for m in (
            "mlp.linear_fc1", "mlp.linear_fc2", "self_attention.linear_qkv", "self_attention.linear_proj")}
        assert all(r["speedup"] > 1.3 and f"{r['stake_ms']:.2f} ms per step)" in r["text"] for r in moves)
    if program.startswith("megatron_gpt"):
        written = shlex.split(found.files[changes.MEGATRON_ARGS], comments=True)
        assert written == (CLAIM / f"{program}_applied.txt").read_text().split()
        return
    namespace: dict = {}
    exec(found.files[changes.MODULE_FILTER], namespace)  # the file as the program loads it
    assert {path for path in every if namespace["module_filter_fn"](None, path)} == ran_low
