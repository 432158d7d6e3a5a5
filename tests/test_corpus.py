"""Conformance on programs this project did not write: Transformer Engine's own FSDP example and
GroupedLinear benchmark, unmodified, plus a TransformerLayer stack under DDP and a te.ops model,
captured on H100 / 2×H200 (tests/fixtures/gpu/corpus/README.md says how).

Ground truth comes from outside the parser: GEMM counts derived here from each model's structure
(layers × GEMMs × iterations per pass), the per-rank counts each of our programs wrote from its
own structure, and the hook's per-GEMM records counted straight from the SQLite export.
"""

from collections import Counter

import pytest

from gemmscope.autocast_hook.gemmscope_protocol import GEMM_PREFIX, parse_record
from gemmscope.judging.judgement import judge
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS
from nsys_export import export

PASSES = ("fprop", "dgrad", "wgrad")

# TE's fsdp.py as run (commands.txt): --num-layers 2 --num-iters 3, the default TransformerLayer,
# whose GEMMs per pass are LayerNormLinear qkv, Linear proj and LayerNormMLP fc1 + fc2.
FSDP_LAYERS, FSDP_ITERS = 2, 3
TRANSFORMER_LAYER_GEMMS = {"_LayerNormLinear": 1, "_Linear": 1, "_LayerNormMLP": 2}
TRANSFORMER_LAYER_PATHS = ("self_attention.layernorm_qkv", "self_attention.proj", "layernorm_mlp")
# benchmark_grouped_linear.py --profile: one GroupedLinear of 8 GEMMs, one fwd + bwd step captured.
GROUPED_GEMMS = 8


@pytest.fixture(scope="module")
def corpus():
    cache: dict = {}

    def load(*names, expect=None):
        key = (names, expect)
        if key not in cache:
            cache[key] = judge([read_trace(CORPUS / f"{n}.sqlite.xz") for n in names], expect)
        return cache[key]

    return load


def hook_records(name: str) -> Counter:
    """(module, pass) of every GEMM call the hook recorded, read straight from the export."""
    db = export(name)
    labels = [row[0] for row in db.execute(
        "SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id")]
    records = [parse_record(GEMM_PREFIX, label) for label in labels if label]
    return Counter(("_" + r["module"], r["pass"]) for r in records if r is not None)


def counts(gemms) -> Counter:
    return Counter(zip(gemms["te_module"], gemms["te_pass"]))


def transformer_layer_counts(layers: int, steps: int) -> Counter:
    return Counter({(m, p): n * layers * steps for m, n in TRANSFORMER_LAYER_GEMMS.items() for p in PASSES})


@pytest.mark.parametrize("names, ranks", [
    (("fsdp_fp8_1gpu",), [0]),
    (("fsdp_fp8_2gpu",), [0, 1]),  # nsys over torchrun: both ranks in one trace
    (("fsdp_fp8_2gpu_rank0", "fsdp_fp8_2gpu_rank1"), [0, 1]),  # nsys inside each rank
])
def test_fsdp_fp8_every_gemm_in_its_module_layer_and_pass(corpus, names, ranks):
    result = corpus(*names)
    assert result.expected == "fp8-delayed"  # the recipe fsdp.py's --precision fp8 builds
    gemms = result.gemms
    assert sorted(gemms["rank"].unique()) == ranks
    for rank in ranks:
        mine = gemms[gemms["rank"] == rank]
        assert counts(mine) == transformer_layer_counts(FSDP_LAYERS, FSDP_ITERS)
        assert set(mine["layer"]) == {f"{i}.{p}" for i in range(FSDP_LAYERS) for p in TRANSFORMER_LAYER_PATHS}
    assert set(gemms["verdict"]) == {"OK"} and set(gemms["requested"]) == {"fp8"}
    assert not result.failed
    assert (result.rank_comparison["differing_ranks"].map(len) == 0).all()
    if len(ranks) > 1:
        assert len(result.rank_comparison) == FSDP_LAYERS * len(TRANSFORMER_LAYER_PATHS) * len(PASSES)


def test_fsdp_long_run_every_gemm_and_every_launch(corpus):
    # commands.txt: --num-layers 8 --num-iters 100, 63,697 kernels: the launch calls are found by
    # name (cudaLaunchKernel, cuLaunchKernel, cuLaunchKernelEx), so every kernel must meet its own
    result = corpus("fsdp_8x100_fp8_1gpu")
    assert result.expected == "fp8-delayed"
    gemms = result.gemms
    assert counts(gemms) == transformer_layer_counts(8, 100)
    assert len(gemms) == 12 * 8 * 100
    assert set(gemms["layer"]) == {f"{i}.{p}" for i in range(8) for p in TRANSFORMER_LAYER_PATHS}
    assert set(gemms["verdict"]) == {"OK"} and set(gemms["requested"]) == {"fp8"}
    assert counts(gemms) == hook_records("fsdp_8x100_fp8_1gpu")
    launched = result.job.kernels
    assert len(launched) == 63_697
    assert launched["launch_start"].notna().all() and (launched["launch_start"] <= launched["start"]).all()
    assert not result.failed


def test_fsdp_without_fp8_is_flagged_in_its_modules(corpus):
    result = corpus("fsdp_no-fp8_1gpu", expect="fp8-delayed")
    gemms = result.gemms
    assert counts(gemms) == transformer_layer_counts(FSDP_LAYERS, FSDP_ITERS)
    assert set(gemms["verdict"]) == {"FALLBACK"} and result.failed
    # TE was handed BF16 operands (autocast disabled): not a kernel that fell back
    assert set(gemms["cause"]) == {"requested-bf16"}
    assert set(gemms["precision"]) == {"bf16"}


@pytest.mark.parametrize("name, module, dgrad_layers", [
    # fsdp.py feeds the first layer an input without grad: a plain Linear then has no dgrad
    ("fsdp_linear_fp8_1gpu", "_Linear", FSDP_LAYERS - 1),
    # LayerNormLinear's dgrad feeds its own norm's weight gradient, so every layer runs it
    ("fsdp_layernormlinear_fp8_1gpu", "_LayerNormLinear", FSDP_LAYERS),
])
def test_fsdp_other_layer_types(corpus, name, module, dgrad_layers):
    result = corpus(name)
    per_pass = {"fprop": FSDP_LAYERS, "dgrad": dgrad_layers, "wgrad": FSDP_LAYERS}
    assert counts(result.gemms) == {(module, p): n * FSDP_ITERS for p, n in per_pass.items()}
    assert set(result.gemms["layer"]) == {str(i) for i in range(FSDP_LAYERS)}
    assert set(result.gemms["verdict"]) == {"OK"}


def test_fsdp_layernormmlp_crash_keeps_what_ran(corpus):
    """fsdp.py --layer-type layernormmlp hits a TE assertion mid-run (commands.txt, exit 1):
    what ran before it is attributed, and the hook recorded exactly those GEMMs."""
    result = corpus("fsdp_layernormmlp_fp8_1gpu")
    assert 0 < len(result.gemms) < FSDP_LAYERS * 2 * FSDP_ITERS * len(PASSES)
    assert counts(result.gemms) == hook_records("fsdp_layernormmlp_fp8_1gpu")
    assert set(result.gemms["te_module"]) == {"_LayerNormMLP"}


def test_fsdp_mxfp8_on_hopper_ran_no_gemm(corpus):
    result = corpus("fsdp_mxfp8_1gpu", expect="mxfp8")
    assert result.gemms.empty and result.failed


def test_grouped_linear_benchmark(corpus):
    result = corpus("grouped_linear_fp8-block", expect="fp8-block")
    assert counts(result.gemms) == {("_GroupedLinear", p): GROUPED_GEMMS for p in PASSES}
    # one record per grouped call, around the 8 kernels it launched
    assert hook_records("grouped_linear_fp8-block") == {("_GroupedLinear", p): 1 for p in PASSES}
    assert set(result.gemms["verdict"]) == {"OK"}


@pytest.mark.parametrize("name", ["te_stack_fp8-block_1gpu", "te_stack_fp8-block_2gpu"])
def test_transformer_layer_stack_flags_exactly_the_layer_outside_autocast_and_the_head(corpus, name):
    """With --expect (every GEMM should run the recipe): the layer outside autocast and the head
    are flagged. Without it, that layer's GEMMs asked for BF16 (coverage, not mismatches). The torch
    head: the 1-GPU capture, made again once the hook recorded GEMMs outside TE, says it asked for
    BF16 (coverage too: the run passes); the 2-GPU one predates that, so its head is checked against
    the run's recipe and still flagged (outside-te): an unrecorded GEMM never passes unseen."""
    import json

    expected = json.loads((CORPUS / f"{name}.expected.json").read_text())
    own = corpus(name)
    assert own.expected == expected["recipe"]
    asked_bf16 = own.gemms[own.gemms["requested"] == "bf16"]
    assert len(asked_bf16) and own.coverage.index.equals(asked_bf16.index)
    in_te = asked_bf16[asked_bf16["origin"] == "te"]
    assert len(in_te) and in_te["layer"].str.startswith(f"layers.{expected['outside_layer']}.").all()
    head = asked_bf16[asked_bf16["origin"] == "outside-te"]  # recorded by the hook, outside TE
    if name.endswith("_1gpu"):
        assert len(head) == 3 * 3 and set(head["layer"]) == {"head"}  # passes × steps
        assert own.mismatches.empty and not own.failed
    else:
        assert head.empty
        assert set(own.mismatches["cause"]) == {"outside-te"} and not own.mismatches["recorded"].any()
    result = corpus(name, expect=expected["recipe"])
    assert result.expected == expected["recipe"]
    gemms = result.gemms
    assert sorted(gemms["rank"].unique()) == list(range(expected["ranks"]))
    assert gemms["te_pass"].isin(PASSES).all()  # every GEMM, the torch head's too, has its pass
    outside = f"layers.{expected['outside_layer']}."
    for rank in range(expected["ranks"]):
        mine = gemms[gemms["rank"] == rank]
        fp8 = mine[mine["verdict"] == "OK"]
        flagged = mine[mine["verdict"] == "FALLBACK"]
        assert counts(fp8) == {(m, p): n for m, per in expected["fp8"].items() for p, n in per.items()}
        in_te = flagged[flagged["origin"] == "te"]
        assert counts(in_te) == {(m, p): n for m, per in expected["bf16"].items() if m != "outside_te"
                                 for p, n in per.items()}
        assert in_te["layer"].str.startswith(outside).all() and set(in_te["cause"]) == {"requested-bf16"}
        head = flagged[flagged["origin"] == "outside-te"]
        assert Counter(head["te_pass"]) == expected["bf16"]["outside_te"]
        # the head asked for BF16 where the hook recorded it (the 1-GPU capture), else unrecorded
        assert set(head["cause"]) == {"requested-bf16" if name.endswith("_1gpu") else "outside-te"}
        assert not fp8["layer"].str.startswith(outside).any()
    # grouped: a row per layer × module × pass × kernel, not a row per launch
    flagged_groups = result.groups[result.groups["verdict"] == "FALLBACK"]
    assert flagged_groups["launches"].sum() == (gemms["verdict"] == "FALLBACK").sum()
    assert len(flagged_groups) < (gemms["verdict"] == "FALLBACK").sum()


def test_te_ops_sequential(corpus):
    import json

    expected = json.loads((CORPUS / "te_ops_sequential_fp8-current.expected.json").read_text())
    result = corpus("te_ops_sequential_fp8-current")
    gemms = result.gemms
    assert Counter(gemms["te_pass"]) == {p: expected["gemms_per_pass"] for p in PASSES}
    assert gemms["te_module"].notna().all()
    # te.ops.Sequential(LayerNorm, Linear, GELU, Linear) × 2: the Linear ops sit at 1, 3, 5, 7, and
    # a fused forward operation and the basic ops it fuses share their op's place
    linears = ["1", "3", "5", "7"]
    assert Counter(zip(gemms["layer"], gemms["te_pass"])) == {
        (layer, p): expected["gemms_per_pass"] // len(linears) for layer in linears for p in PASSES}
    assert set(gemms["verdict"]) == {"OK"}


@pytest.mark.parametrize("name", [
    "fsdp_fp8_1gpu", "fsdp_no-fp8_1gpu", "fsdp_linear_fp8_1gpu", "fsdp_layernormlinear_fp8_1gpu",
    "fsdp_fp8_2gpu", "fsdp_fp8_2gpu_rank0", "te_stack_fp8-block_1gpu", "te_ops_sequential_fp8-current",
])
def test_every_recorded_gemm_call_is_one_attributed_kernel(corpus, name):
    """Non-grouped TE GEMM calls launch one kernel each: the kernels attributed to each module
    and pass are exactly the TE GEMM calls the hook recorded."""
    gemms = corpus(name).gemms
    assert counts(gemms[gemms["recorded"] & gemms["via_te"]]) == hook_records(name)


# TE's benchmarks/gemm/benchmark_gemm.py --profile (defaults: 10 warm-up and 100 timed iterations,
# CUDA-event timing with one leading GEMM) pushes one NVTX range per recipe around its runs: 111
# GEMMs each, on the one 4096³ shape. On Hopper its MXFP8 case raises inside its range (the autocast
# run dies there; the pre-quantized run catches it and goes on, as it does for FP8 block scaling).
BENCH_GEMMS_PER_RECIPE = 10 + 1 + 100
BENCH_MAP = (("BF16_*", "bf16"), ("FP8Current_*", "fp8-current"), ("FP8Delayed_*", "fp8-delayed"),
             ("FP8Block_*", "fp8-block"), ("MXFP8_*", "mxfp8"))
SHAPE = "4096x4096x4096"


def bench(name: str, expect_map=BENCH_MAP):
    return judge([read_trace(CORPUS / f"{name}.sqlite.xz")], None, (), expect_map)


def range_verdicts(result) -> dict:
    ranges = result.ranges_checked
    return {(r.pattern, r.range if isinstance(r.range, str) else None): (r.gemms, r.verdict)
            for r in ranges.itertuples()}


@pytest.mark.parametrize("name", ["gemm_bench_4096", "gemm_bench_4096_hook"])
def test_gemm_benchmark_is_checked_range_by_range(name):
    """A trace made by another tool (no TE ranges, no hook: TE's documented command), and the
    same program run as gemmscope verify runs it: each recipe's range against its own recipe."""
    result = bench(name, BENCH_MAP[:4])
    assert range_verdicts(result) == {
        (pattern, pattern.replace("*", SHAPE)): (BENCH_GEMMS_PER_RECIPE, "OK") for pattern, _ in BENCH_MAP[:4]}
    assert not result.failed
    assert result.expected is None and result.gemms["expect_range"].notna().all()
    by_range = result.gemms.groupby("expect_range")["precision"].agg(set).to_dict()
    assert by_range == {f"BF16_{SHAPE}": {"bf16"}, f"FP8Current_{SHAPE}": {"fp8"},
                        f"FP8Delayed_{SHAPE}": {"fp8"}, f"FP8Block_{SHAPE}": {"fp8-block"}}
    # the benchmark runs forward passes only (linear(x), torch.matmul): every GEMM is an fprop,
    # told by the thread that launched it where the hook did not record it (a bare matmul's NN
    # layout letters would have said dgrad)
    assert set(result.gemms["te_pass"]) == {"fprop"}
    assert set(result.gemms.loc[~result.gemms["recorded"], "pass_source"]) == {"thread"}
    if name.endswith("hook"):  # the hook names TE's module; the BF16 case is a bare torch.matmul
        te = result.gemms[result.gemms["expect_range"] != f"BF16_{SHAPE}"]
        assert set(te["te_module"]) == {"_Linear"} and set(te["te_pass"]) == {"fprop"}


def test_gemm_benchmark_recipe_that_raised_is_no_gemm_not_a_pass():
    result = bench("gemm_bench_4096_all")
    verdicts = range_verdicts(result)
    assert verdicts[("MXFP8_*", f"MXFP8_{SHAPE}")] == (0, "NO GEMM")
    assert sum(v == (BENCH_GEMMS_PER_RECIPE, "OK") for v in verdicts.values()) == 4
    assert result.failed and len(result.mismatches) == 0


def test_gemm_benchmark_prequantized_recipes_that_failed_are_reported():
    result = bench("gemm_bench_4096_prequant")
    assert range_verdicts(result) == {
        ("BF16_*", f"BF16_{SHAPE}"): (BENCH_GEMMS_PER_RECIPE, "OK"),
        ("FP8Current_*", f"FP8Current_{SHAPE}"): (BENCH_GEMMS_PER_RECIPE, "OK"),
        ("FP8Delayed_*", None): (0, "NOT FOUND"),  # the benchmark has no pre-quantized delayed case
        ("FP8Block_*", f"FP8Block_{SHAPE}"): (0, "NO GEMM"),
        ("MXFP8_*", f"MXFP8_{SHAPE}"): (0, "NO GEMM"),
    }
    assert result.failed


def test_gemm_benchmark_range_mapped_to_the_wrong_recipe_is_flagged():
    result = bench("gemm_bench_4096", (("BF16_*", "bf16"), ("FP8Block_*", "fp8-current")))
    verdicts = range_verdicts(result)
    assert verdicts[("FP8Block_*", f"FP8Block_{SHAPE}")] == (BENCH_GEMMS_PER_RECIPE, "FALLBACK")
    assert verdicts[("BF16_*", f"BF16_{SHAPE}")] == (BENCH_GEMMS_PER_RECIPE, "OK")
    assert len(result.mismatches) == BENCH_GEMMS_PER_RECIPE and result.failed
    # GEMMs outside every mapped range have no recipe to meet: listed, not judged
    unmapped = result.gemms[result.gemms["expect_range"].isna()]
    assert len(unmapped) == 2 * BENCH_GEMMS_PER_RECIPE and unmapped["verdict"].isna().all()


def test_innermost_mapped_range_decides():
    """TE's C library pushes nvte_cublas_gemm_v2 inside the benchmark's range: a pattern matching
    it is the innermost, and wins over the recipe's range."""
    result = bench("gemm_bench_4096", (("FP8Current_*", "fp8-current"), ("nvte_cublas_gemm*", "bf16")))
    te = result.gemms[result.job.ranges.any_matching(["nvte_cublas_gemm_v2"], result.gemms["kernel_row"].to_numpy())]
    assert len(te) == 3 * BENCH_GEMMS_PER_RECIPE
    assert set(te["expect_range"]) == {"nvte_cublas_gemm_v2"} and set(te["expected"]) == {"bf16"}
    verdicts = range_verdicts(result)
    assert verdicts[("FP8Current_*", f"FP8Current_{SHAPE}")] == (0, "NESTED")
    ranges = result.ranges_checked.set_index("range")
    assert ranges.loc[f"FP8Current_{SHAPE}", "nested"] == BENCH_GEMMS_PER_RECIPE
    assert ranges.loc["nvte_cublas_gemm_v2", "gemms"] == 3 * BENCH_GEMMS_PER_RECIPE
    assert result.failed  # the FP8 GEMMs are not bf16
