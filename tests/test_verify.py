"""verify: a verdict per GEMM launch of the real H200 traces, against what each workload asked for
(tests/fixtures/gpu/*.expected.json and workloads.py / train_small_te.py)."""

import dataclasses
import lzma
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from gemmscope.errors import InputError
from gemmscope.judging.judgement import judge, verdict
from gemmscope.judging.recipes import RECIPES
from gemmscope.report.documents import summary_document
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS, GPU
from trace_mutation import altered_sqlite, same_session_as

H200_SM = 90


def verdicts(result) -> Counter:
    return Counter(result.gemms["verdict"])


# --- verdict() ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "precision, recipe, sm, want",
    [
        ("fp8", "fp8-current", 90, "OK"),
        ("fp8", "fp8-delayed", 90, "OK"),
        ("bf16", "bf16", 90, "OK"),
        ("fp8-block", "fp8-block", 90, "OK"),
        ("mxfp8", "mxfp8", 100, "OK"),
        ("nvfp4", "nvfp4", 100, "OK"),
        ("bf16", "fp8-current", 90, "FALLBACK"),
        ("fp32", "fp8-delayed", 90, "FALLBACK"),
        ("fp8", "bf16", 90, "FALLBACK"),
        ("fp8", "fp8-block", 90, "FALLBACK"),
        ("bf16", "mxfp8", 100, "FALLBACK"),
        # TE runs FP8 block scaling as MXFP8 on Blackwell (sm100+) by design, not on Hopper
        ("mxfp8", "fp8-block", 100, "EXPECTED-SUBSTITUTION"),
        ("mxfp8", "fp8-block", 120, "EXPECTED-SUBSTITUTION"),
        ("mxfp8", "fp8-block", 90, "FALLBACK"),
        ("mxfp8", "fp8-block", None, "FALLBACK"),
        ("mxfp8", "fp8-current", 100, "FALLBACK"),
        ("unknown", "fp8-current", 90, "UNKNOWN"),
        (None, "bf16", 90, "UNKNOWN"),
    ],
)
def test_verdict(precision, recipe, sm, want):
    assert verdict(precision, recipe, sm) == want


def test_every_recipe_has_a_verdict_rule():
    for recipe in RECIPES:
        assert verdict("unknown", recipe, H200_SM) == "UNKNOWN"


# --- judge() on real traces ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checked(gpu_trace):
    """judge() of a GPU fixture, computed once per (name, expect, allow)."""
    cache: dict = {}

    def run(name, expect=None, allow=()):
        key = (name, expect, tuple(allow))
        if key not in cache:
            cache[key] = judge(gpu_trace(name), expect, tuple(allow))
        return cache[key]

    return run


def test_nn_linear_in_fp8_autocast_falls_back(checked, gpu_expected):
    expected = gpu_expected("nn_linear_in_fp8_autocast")
    result = checked("nn_linear_in_fp8_autocast", "fp8-current")
    n_te = sum(expected["te_gemms"].values())
    n_torch = sum(expected["torch_gemms"].values())
    assert verdicts(result) == {"OK": n_te, "FALLBACK": n_torch}
    fallback = result.gemms[result.gemms["verdict"] == "FALLBACK"]
    assert set(fallback["precision"]) == {"bf16"}
    assert set(fallback["origin"]) == {"outside-te"}
    assert fallback["te_module"].isna().all()
    ok = result.gemms[result.gemms["verdict"] == "OK"]
    assert set(ok["origin"]) == {"te"}
    assert Counter(zip(ok["te_module"], ok["te_pass"])) == {("_Linear", p): n for p, n in expected["te_gemms"].items()}
    assert len(result.mismatches) == n_torch
    assert result.failed


def _train_mixed_counts(expected):
    fp8 = sum(n for passes in expected["fp8"].values() for n in passes.values())
    bf16_te = sum(n for module, passes in expected["bf16"].items() if module != "outside_te" for n in passes.values())
    bf16_outside = sum(expected["bf16"]["outside_te"].values())
    return fp8, bf16_te, bf16_outside


def test_train_mixed_takes_recipe_from_recorded_autocast(checked, gpu_expected):
    expected = gpu_expected("train_mixed")
    fp8, bf16_te, bf16_outside = _train_mixed_counts(expected)
    assert (fp8, bf16_te, bf16_outside) == (36, 36, 9)  # the counts the brief of this check states

    result = checked("train_mixed")  # no --expect: the autocast hook's ranges tell the recipe
    assert result.expected == expected["recipe"] == "fp8-current"
    assert verdicts(result) == {"OK": fp8, "FALLBACK": bf16_te + bf16_outside}
    assert result.failed

    fallback = result.gemms[result.gemms["verdict"] == "FALLBACK"]
    inside = fallback[fallback["origin"] == "te"]
    outside = fallback[fallback["origin"] == "outside-te"]
    assert len(inside) == bf16_te and len(outside) == bf16_outside
    assert inside["te_module"].notna().all() and inside["te_pass"].notna().all()
    assert Counter(zip(inside["te_module"], inside["te_pass"])) == {
        (module, p): n
        for module, passes in expected["bf16"].items() if module != "outside_te"
        for p, n in passes.items()
    }
    assert outside["te_module"].isna().all()
    assert set(fallback["precision"]) == {"bf16"}

    ok = result.gemms[result.gemms["verdict"] == "OK"]
    assert Counter(zip(ok["te_module"], ok["te_pass"])) == {
        (module, p): n for module, passes in expected["fp8"].items() for p, n in passes.items()
    }


def test_train_mixed_same_verdicts_without_te_nvtx(checked):
    full = checked("train_mixed")
    bare = checked("train_mixed_no-te-nvtx")
    assert bare.expected == full.expected == "fp8-current"
    assert list(bare.gemms["verdict"]) == list(full.gemms["verdict"])
    assert list(bare.gemms["origin"]) == list(full.gemms["origin"])
    assert bare.gemms["te_module"].isna().all()
    assert bare.failed


def test_train_mixed_summary_per_module_and_pass(checked, gpu_expected):
    expected = gpu_expected("train_mixed")
    summary = checked("train_mixed").summary.set_index(["module", "pass"])
    for module in ("_LayerNormLinear", "_Linear", "_LayerNormMLP"):
        for p in ("fprop", "dgrad", "wgrad"):
            row = summary.loc[(module, p)]
            assert row["ok"] == expected["fp8"][module][p]
            assert row["fallback"] == expected["bf16"][module][p]
            assert row["gemms"] == expected["fp8"][module][p] + expected["bf16"][module][p]
            assert 0 < row["expected_time_share"] < 1
    # the torch LM head: its passes from the BF16 kernels' layout letters
    for p, n in expected["bf16"]["outside_te"].items():
        head = summary.loc[("(outside TE)", p)]
        assert head["fallback"] == head["gemms"] == n
        assert head["expected_time_share"] == 0


def test_train_clean_all_ok(checked, gpu_expected):
    expected = gpu_expected("train_clean")
    result = checked("train_clean")
    n = sum(n for passes in expected["fp8"].values() for n in passes.values())
    assert result.expected == "fp8-current"
    assert verdicts(result) == {"OK": n}
    assert (result.gemms["origin"] == "te").all()
    assert result.mismatches.empty
    assert not result.failed


@pytest.mark.parametrize(
    "allow, n_allowed",
    [
        # TE modules by name: LayerNormMLP's BF16 GEMMs of block 1 (2 GEMMs x 3 passes x 3 steps)
        (("_LayerNormMLP",), 18),
        # an NVTX range: block 1's forward GEMMs run inside `te.autocast(enabled=False)`, which the
        # hook records; its backward GEMMs run later on autograd's thread, outside that range
        (("*recipe=disabled*",), 12),
        # the run's FP8 autocast range holds every forward GEMM on the main thread: the BF16 ones
        # are block 1's (12) and the LM head's (3); backward GEMMs run outside it
        (("gemmscope.autocast(recipe=Float8CurrentScaling)",), 15),
        (("_LayerNormMLP", "_LayerNormLinear", "_Linear"), 36),
        # the module label of GEMMs outside TE: the plain nn.Linear LM head (3 passes x 3 steps)
        (("(outside TE)",), 9),
    ],
)
def test_allow_patterns(checked, allow, n_allowed):
    result = checked("train_mixed", allow=allow)
    assert len(result.allowed) == n_allowed
    assert len(result.mismatches) == 45 - n_allowed
    assert (result.allowed["verdict"] == "FALLBACK").all()
    # allowed GEMMs keep their verdict; OK ones are never marked allowed
    assert verdicts(result) == {"OK": 36, "FALLBACK": 45}
    assert not result.gemms.loc[result.gemms["verdict"] == "OK", "allowed"].any()
    assert result.failed


def test_allow_every_fallback_passes_the_check(checked):
    result = checked("nn_linear_in_fp8_autocast", "fp8-current", allow=("nvjet_sm90_tst_*",))
    assert len(result.allowed) == 9
    assert result.mismatches.empty
    assert not result.failed


def test_allow_is_case_sensitive_and_whole_name(checked):
    assert len(checked("train_mixed", allow=("_layernormmlp",)).allowed) == 0
    assert len(checked("train_mixed", allow=("LayerNormMLP",)).allowed) == 0


def _launched(expected: dict) -> int:
    passes = [expected["gemms"]] if "gemms" in expected else expected["gemms_by_module"].values()
    return sum(n for p in passes for n in p.values())


@pytest.mark.parametrize(
    "name",
    ["te_linear_fp8-delayed", "te_linear_fp8-current", "te_linear_fp8-block", "te_linear_bf16",
     "te_layernorm_bf16", "te_layernorm_fp8-current"],
)
def test_te_modules_match_their_recipe(checked, gpu_expected, name):
    expected = gpu_expected(name)
    result = checked(name, expected["recipe"])
    assert verdicts(result) == {"OK": _launched(expected)}
    assert not result.failed


def test_te_linear_bf16_when_fp8_expected(checked):
    result = checked("te_linear_bf16", "fp8-current")
    assert verdicts(result) == {"FALLBACK": 9}
    assert set(result.gemms["origin"]) == {"te"}
    assert result.failed


@pytest.mark.parametrize("expect", ["fp8-current", "mxfp8"])
def test_fp8_block_is_neither_per_tensor_fp8_nor_mxfp8_on_hopper(checked, expect):
    result = checked("te_linear_fp8-block", expect)
    assert verdicts(result) == {"FALLBACK": 9}


def test_no_recipe_recorded_means_no_verdict(checked):
    result = checked("te_linear_fp8-current")  # workloads.py runs no autocast hook
    assert result.expected is None
    assert "verdict" not in result.gemms
    assert len(result.gemms) == 9
    assert result.mismatches.empty
    assert not result.failed


@pytest.mark.parametrize("name, recipe", [("request_mxfp8", "mxfp8"), ("request_nvfp4", "nvfp4")])
def test_requested_recipe_that_ran_no_gemm_fails(checked, name, recipe):
    result = checked(name, recipe)
    assert result.gemms.empty
    assert result.failed
    doc = summary_document(result)
    assert doc["gemm_launches"] == 0
    assert "no GEMM kernel ran" in doc["note"]
    assert recipe in doc["note"]


def test_unknown_recipe_is_input_error(gpu_trace):
    with pytest.raises(InputError) as raised:
        judge(gpu_trace("te_linear_fp8-current"), "fp9")
    assert str(raised.value) == f"unknown recipe 'fp9': choose from {', '.join(RECIPES)}"
    assert "fp8-block, mxfp8" in str(raised.value)


def test_trace_without_kernels_is_input_error(cpu_traces):
    with pytest.raises(InputError, match="no GPU kernels"):
        judge(read_trace(cpu_traces / "empty_capture.sqlite"), "fp8-current")


def test_gemm_tail_time_is_its_kernels_time_and_not_gemm_time(checked, gpu_sqlite):
    # the run's cuBLASLt tails (split-K reductions, bias-gradient epilogues), summed in SQL
    with sqlite3.connect(gpu_sqlite("train_mixed")) as db:
        count, tail_ns = db.execute(
            "SELECT count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
            "ON s.id = k.demangledName WHERE s.value LIKE '%cublasLt::splitKreduce%' "
            "OR s.value LIKE '%cublasLt::epilogue::%'").fetchone()
        kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert count == 9 and tail_ns > 0
    result = checked("train_mixed")
    assert result.job.tails_ns == tail_ns == summary_document(result)["gemm_tail_time_ns"]
    tails = result.job.kernels["role"] == "gemm-tail"
    assert tails.sum() == count and len(result.job.kernels) == kernels
    assert not result.gemms["kernel_row"].isin(result.job.kernels.index[tails]).any()


def _without_the_hooks_rank_marks(gpu_path: Path, tmp_path: Path, one_gpu: bool = False) -> Path:
    """A real capture of two processes (TE's FSDP example under torchrun on 2 GPUs) as a plain
    `nsys profile torchrun ...` would leave it: the hook's per-process rank marks taken out; with
    `one_gpu`, as if both processes had shared GPU 0."""
    copy = tmp_path / "two_processes_without_the_hook.sqlite"
    copy.write_bytes(lzma.decompress(gpu_path.read_bytes()))
    with sqlite3.connect(copy) as db:
        db.execute("DELETE FROM NVTX_EVENTS WHERE rowid IN (SELECT e.rowid FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                   "ON s.id = e.textId WHERE coalesce(e.text, s.value) LIKE 'gemmscope.process|%')")
        if one_gpu:
            db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 0")
    return copy


def test_several_processes_without_the_hook_are_ranked_by_their_gpu(tmp_path):
    from gemmscope.diagnosing import diagnosis

    original = CORPUS / "fsdp_fp8_2gpu.sqlite.xz"
    hooked = judge([read_trace(original)]).gemms
    plain = judge([read_trace(_without_the_hooks_rank_marks(original, tmp_path))]).gemms
    assert plain["rank"].notna().all() and list(plain["rank"]) == list(hooked["rank"])
    assert plain["rank"].value_counts().to_dict() == {0: 72, 1: 72}
    # processes sharing one GPU: no rank can be named, and the two stay two timelines, by process
    shared = judge([read_trace(_without_the_hooks_rank_marks(original, tmp_path, one_gpu=True))])
    assert shared.gemms["rank"].isna().all()
    labels = sorted(diagnosis.diagnose(shared).breakdown["rank"].astype(str))
    pids = sorted(str(p) for p in (shared.gemms["global_pid"] // (1 << 24) & 0xFFFFFF).unique())
    assert labels == [f"process {pid}" for pid in pids] and len(labels) == 2


def _as_if_compiled_with_max_autotune(gpu_sqlite, tmp_path: Path) -> Path:
    """A real capture (torch GEMMs of four precisions on one thread, workloads.py) with its
    kernels renamed as Inductor names them: the FP32 and FP16 GEMMs and the INT8 one as
    candidates max-autotune benchmarks (triton_mm, triton_bmm, triton_mm_persistent_tma), the
    second FP8 one as the compiled program's template (triton_tem_fused_mm_0)."""
    copy = tmp_path / "torch_gemms_autotuned.sqlite"
    copy.write_bytes(gpu_sqlite("torch_gemms").read_bytes())
    renames = {"sm80_xmma_gemm_f32f32_f32f32_f32_nn_n%": "triton_mm", "nvjet_sm90_hsh_%": "triton_bmm",
               "nvjet_sm90_qqtst_128x128_128x6_1x1%": "triton_tem_fused_mm_0",
               "void cutlass::Kernel2<cutlass_80_tensorop_i16832%": "triton_mm_persistent_tma"}
    with sqlite3.connect(copy) as db:
        for pattern, name in renames.items():
            db.execute("UPDATE StringIds SET value = ? WHERE value LIKE ? AND id IN "
                       "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)", (name, pattern))
    return copy


def test_autotuning_candidates_are_left_out_of_the_check(gpu_sqlite, tmp_path):
    """The candidates only max-autotune launches are left out of the check and reported apart; the
    cuBLAS GEMMs launched between them, with no benchmark loop around them (no cache flush before
    each), are the program's, and judged."""
    result = judge([read_trace(_as_if_compiled_with_max_autotune(gpu_sqlite, tmp_path))], "fp8-current")
    autotuned = Counter(result.job.autotuning["name"].str[:30])
    assert autotuned == {"triton_mm": 3, "triton_bmm": 3, "triton_mm_persistent_tma": 3}
    assert Counter(result.gemms["name"].str[:30]) == {
        "nvjet_sm90_qqtst_128x128_128x6": 3, "triton_tem_fused_mm_0": 3, "sm90_xmma_gemm_f32f32_tf32f32_": 3,
        "nvjet_sm90_tst_192x128_64x5_1x": 3}
    assert summary_document(result)["autotuning_gemm_launches"] == 9
    assert set(result.gemms["verdict"]) == {"OK", "UNKNOWN", "FALLBACK"}  # the TF32 and BF16 cuBLAS GEMMs


# --- summarize() and compare_ranks() called here, on checked real traces ---------------------------
# (the per-module and per-rank tables are asserted through the CLI elsewhere; these run them in
# the test itself, with the expected values counted from the rows or the model, not by the code)

SUMMARY_COLUMNS = ["module", "pass", "gemms", "gemm_time_ns"]
VERDICT_COUNT_COLUMNS = ["expected_time_share", "ok", "fallback", "expected-substitution", "unknown", "allowed"]


def _first_seen(pairs) -> list:
    return list(dict.fromkeys(pairs))


def test_summarize_per_module_and_pass(checked, gpu_expected):
    """train_mixed against its recipe: a row per (module, pass) in the order the GEMMs ran, the
    launches, their kernel time, the share of it at the expected precision, the verdict counts."""
    from gemmscope.judging.judgement import summarize

    expected = gpu_expected("train_mixed")
    gemms = checked("train_mixed", allow=("(outside TE)",)).gemms
    summary = summarize(gemms, "fp8-current")
    assert list(summary.columns) == SUMMARY_COLUMNS + VERDICT_COUNT_COLUMNS
    rows = list(zip(gemms["module"], gemms["te_pass"]))
    assert list(zip(summary["module"], summary["pass"])) == _first_seen(rows)
    for _, row in summary.iterrows():
        mine = [i for i, key in enumerate(rows) if key == (row["module"], row["pass"])]
        durations = [int(gemms["duration_ns"].iloc[i]) for i in mine]
        verdict_of = [gemms["verdict"].iloc[i] for i in mine]
        ok_time = sum(d for d, v in zip(durations, verdict_of) if v == "OK")
        assert row["gemms"] == len(mine) and row["gemm_time_ns"] == sum(durations)
        assert row["expected_time_share"] == pytest.approx(ok_time / sum(durations))
        assert (row["ok"], row["fallback"]) == (verdict_of.count("OK"), verdict_of.count("FALLBACK"))
        assert row["expected-substitution"] == row["unknown"] == 0
        assert row["allowed"] == sum(bool(gemms["allowed"].iloc[i]) for i in mine)
    module = summary.set_index(["module", "pass"])
    for name in ("_LayerNormLinear", "_Linear", "_LayerNormMLP"):
        for p in ("fprop", "dgrad", "wgrad"):
            assert module.loc[(name, p), "ok"] == expected["fp8"][name][p]
            assert module.loc[(name, p), "fallback"] == expected["bf16"][name][p]
    head = summary[summary["module"] == "(outside TE)"]
    assert head["allowed"].tolist() == head["gemms"].tolist() == list(expected["bf16"]["outside_te"].values())


def test_summarize_expected_substitutions_count_as_expected_time(checked):
    """An expected substitution is another precision by design (FP8 block scaling run as MXFP8 on
    sm100, torchao's row-wise rescaled GEMM; marked here on real rows): its time is expected time,
    its verdict counted apart; without a recipe only launches and time."""
    from gemmscope.judging.judgement import summarize

    gemms = checked("train_mixed").gemms.copy()
    substituted = gemms.index[gemms["verdict"] == "FALLBACK"][:5]
    gemms.loc[substituted, "verdict"] = "EXPECTED-SUBSTITUTION"
    unknown = gemms.index[gemms["verdict"] == "OK"][:2]
    gemms.loc[unknown, "verdict"] = "UNKNOWN"
    summary = summarize(gemms, "fp8-current")
    assert summary["expected-substitution"].sum() == 5 and summary["unknown"].sum() == 2
    ok_or_substituted = gemms["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"])
    assert (summary["expected_time_share"] * summary["gemm_time_ns"]).sum() == pytest.approx(
        gemms.loc[ok_or_substituted, "duration_ns"].sum())
    without = summarize(gemms, None)
    assert list(without.columns) == SUMMARY_COLUMNS and without["gemms"].sum() == len(gemms)


def test_summarize_a_gemm_without_a_pass_and_no_gemm():
    from gemmscope.judging.judgement import summarize

    result = judge([read_trace(CORPUS / "fsdp_fp8_2gpu_plain.sqlite.xz")], "fp8-delayed")
    gemms = result.gemms.copy()
    gemms.loc[gemms.index[:3], "te_pass"] = None
    summary = summarize(gemms, "fp8-delayed").set_index(["module", "pass"])
    assert summary.loc[("(TE, module unknown)", "?"), "gemms"] == 3
    assert summary["gemms"].sum() == len(gemms) == 144
    empty = summarize(gemms.iloc[:0], "fp8-delayed")
    assert empty.empty and list(empty.columns) == SUMMARY_COLUMNS


RANK_COLUMNS = ["layer", "module", "pass", "ranks", "kernels", "differing_ranks"]


@pytest.mark.parametrize("name", ["te_stack_fp8-block_2gpu", "fsdp_fp8_2gpu_plain"])
def test_compare_ranks_per_layer_module_and_pass(name):
    """Two ranks that ran the same model: per (layer, module, pass), in the order first run, both
    ranks and the kernels they ran, no rank differing. A plain capture names no layer: its rows
    are kept (NaN is a key too)."""
    from gemmscope.judging.judgement import compare_ranks

    gemms = judge([read_trace(CORPUS / f"{name}.sqlite.xz")], None).gemms
    compared = compare_ranks(gemms)
    assert list(compared.columns) == RANK_COLUMNS
    def named(value) -> str:
        return value if isinstance(value, str) else "-"

    keys = [tuple(map(named, key)) for key in zip(gemms["layer"], gemms["module"], gemms["te_pass"])]
    assert [tuple(map(named, key)) for key in zip(compared["layer"], compared["module"], compared["pass"])] == (
        _first_seen(keys))
    for _, row in compared.iterrows():
        key = (named(row["layer"]), row["module"], row["pass"])
        names = {gemms["name"].iloc[i] for i, k in enumerate(keys) if k == key}
        assert row["kernels"] == " + ".join(sorted(names))
        assert row["ranks"] == 2 and row["differing_ranks"] == []


def test_compare_ranks_names_the_rank_that_ran_other_kernels():
    from gemmscope.judging.judgement import compare_ranks

    gemms = judge([read_trace(CORPUS / "fsdp_fp8_2gpu_plain.sqlite.xz")], None).gemms.copy()
    rank1_fprop = gemms.index[(gemms["rank"] == 1) & (gemms["te_pass"] == "fprop")]
    gemms.loc[rank1_fprop[:1], "name"] = "zz_other_kernel"  # sorts after the common set: rank 0's stays common
    compared = compare_ranks(gemms).set_index("pass")
    assert compared.loc["fprop", "differing_ranks"] == [1]
    assert "zz_other_kernel" not in compared.loc["fprop", "kernels"]
    assert compared.loc["backward", "differing_ranks"] == []
    alone = compare_ranks(gemms[gemms["rank"] == 0])
    assert alone.empty and list(alone.columns) == RANK_COLUMNS


def test_causes_without_the_hook_say_no_record_inside_te_and_outside_te_outside():
    """TE's GEMM benchmark captured as its docstring says (neither TE's ranges nor the hook),
    checked against FP8 current scaling: per range 111 GEMMs (README of the corpus). The current
    and delayed te.Linear GEMMs ran per-tensor FP8 (OK); the torch.matmul ones are outside TE,
    and the block-scaled te.Linear ones ran another kernel with nothing recorded of what they
    were asked: their cause says so."""
    result = judge([read_trace(CORPUS / "gemm_bench_4096.sqlite.xz")], "fp8-current")
    gemms = result.gemms
    assert Counter(zip(gemms["verdict"], gemms["cause"].fillna("-"))) == {
        ("OK", "-"): 2 * 111, ("FALLBACK", "outside-te"): 111, ("FALLBACK", "no-record"): 111}
    assert set(gemms.loc[gemms["cause"] == "no-record", "origin"]) == {"te"}


# --- the small rules judge() is made of, called here so that a change to one fails here ----------

def test_parse_expect_map_keeps_the_order_given_and_splits_at_the_last_equals_sign():
    from gemmscope.judging.judgement import parse_expect_map

    assert parse_expect_map(["FP8Block_*=fp8-block", "BF16_*=bf16", "step=1*=fp8-current"]) == (
        ("FP8Block_*", "fp8-block"), ("BF16_*", "bf16"), ("step=1*", "fp8-current"))
    assert parse_expect_map([]) == ()


@pytest.mark.parametrize("item, message", [
    ("FP8Block_*", "--expect-map 'FP8Block_*': give PATTERN=RECIPE, e.g. 'FP8Block_*=fp8-block'"),
    ("=bf16", "--expect-map '=bf16': give PATTERN=RECIPE, e.g. 'FP8Block_*=fp8-block'"),
    ("BF16_*=fp9", "--expect-map 'BF16_*=fp9': unknown recipe 'fp9': choose from " + ", ".join(RECIPES)),
    ("BF16_*=", "--expect-map 'BF16_*=': unknown recipe '': choose from " + ", ".join(RECIPES)),
])
def test_parse_expect_map_refuses_an_item_without_pattern_or_known_recipe(item, message):
    from gemmscope.judging.judgement import parse_expect_map

    with pytest.raises(InputError) as raised:
        parse_expect_map(["BF16_*=bf16", item])
    assert str(raised.value) == message


def test_layer_numbers_are_the_first_numbered_member_of_a_module_path():
    import pandas as pd

    from gemmscope.assembly.job import layer_numbers

    paths = pd.Series(["decoder.layers.3.mlp.linear_fc1", "model.layers.12.self_attn.q_proj", "3.self_attention.proj",
                       "layers.7", "fc2.10.5", "h.1x.2", "block7.proj", "lm_head", None], index=range(10, 19))
    numbers = layer_numbers(paths)
    assert numbers.dtype == "Int64" and list(numbers.index) == list(range(10, 19))
    assert numbers.tolist() == [3, 12, 3, 7, 10, 2, pd.NA, pd.NA, pd.NA]


def test_module_labels_name_what_te_launched_without_a_module_apart_from_what_it_did_not():
    import numpy as np
    import pandas as pd

    from gemmscope.assembly.job import module_labels

    te_module = pd.Series(["_Linear", None, None, "_LayerNormMLP"], index=[4, 5, 6, 7], dtype=object)
    labels = module_labels(te_module, np.array([True, True, False, False]))
    assert labels.to_dict() == {4: "_Linear", 5: "(TE, module unknown)", 6: "(outside TE)", 7: "_LayerNormMLP"}


def test_first_pattern_is_the_position_of_the_first_matching_pattern_per_name():
    import pandas as pd

    from gemmscope.judging.judgement import first_pattern

    names = pd.Series(["BF16_4096", "FP8Block_4096", "fp8block_1", "other", None], index=[9, 8, 7, 6, 5], dtype=object)
    position = first_pattern(names, ["FP8*", "BF16_*", "*_4096", "o*"])
    assert position.dtype == "Int64" and list(position.index) == [9, 8, 7, 6, 5]
    # case-sensitive; a name two patterns match takes the first; None and a name none matches: NA
    assert position.tolist() == [1, 0, pd.NA, 3, pd.NA]


def test_sm_is_the_compute_capability_of_the_first_gpu_that_has_one(gpu_trace):
    from dataclasses import replace

    from gemmscope.traces.model import gpu_sm

    h200 = gpu_trace("te_linear_bf16")
    assert gpu_sm([h200]) == H200_SM

    def with_gpus(*capabilities):
        gpus = [{"id": i, "name": "GPU", "cc_major": major, "cc_minor": minor}
                for i, (major, minor) in enumerate(capabilities)]
        return replace(h200, meta=h200.meta | {"gpus": gpus})

    assert gpu_sm([with_gpus()]) is None
    assert gpu_sm([with_gpus((None, None)), with_gpus((10, 3), (9, 0))]) == 103
    assert gpu_sm([with_gpus((12, 1)), h200]) == 121


def test_autotuning_is_told_by_benchmark_loops_per_thread(gpu_sqlite, tmp_path):
    """On each thread, in launch order, a GEMM's split-K reduction counted with it: the GEMMs a
    benchmark loop times (a cache flush before each) are the autotuner's, and so are its untimed
    launches (one before the loop; do_bench's between its estimate and its timed launches). The
    program's own launch of the same kernel just before or after a loop, a GEMM another thread
    launched meanwhile, and a GEMM next to an int tensor the program zeroes are the program's. A
    candidate only the autotuner launches is its own without a loop. Kernels whose launch call the
    trace missed are ordered by their own start, apart from every thread."""
    from gemmscope.assembly.attribution import launches
    from gemmscope.assembly.job import autotuning_launches

    from nsys_export import BF16_GEMM, SPLIT_K_REDUCE, HandBuiltExport

    flush = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<int>, " \
            "std::array<char *, (unsigned long)1>>(int, T2, T3)"
    split_k_gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_splitK_TNT"
    main, worker = 1000, 1001
    program = (None, main, "triton_poi_fused_add_0")
    # (label of a GEMM, None for any other kernel; thread; kernel), launched in this order
    timeline = [
        ("program's GEMM before the loop", main, BF16_GEMM), ("untimed launch", main, BF16_GEMM),
        (None, main, flush), (None, main, flush), ("timed 1", main, BF16_GEMM),
        ("other thread's GEMM", worker, BF16_GEMM),
        (None, main, flush), ("timed 2", main, BF16_GEMM), (None, main, flush), ("timed 3", main, BF16_GEMM),
        ("untimed between 1", main, BF16_GEMM), ("untimed between 2", main, BF16_GEMM),
        (None, main, flush), ("timed 4", main, BF16_GEMM), (None, main, flush), ("timed 5", main, BF16_GEMM),
        (None, main, flush), ("timed 6", main, BF16_GEMM), ("program's GEMM after the loop", main, BF16_GEMM),
        program, program, program, program,
        (None, main, flush), ("GEMM between int tensors the program zeroed", main, BF16_GEMM), (None, main, flush),
        program, program, program, program,
        ("split-K untimed launch", main, split_k_gemm), (None, main, SPLIT_K_REDUCE),
        (None, main, flush), (None, main, flush), ("split-K timed 1", main, split_k_gemm), (None, main, SPLIT_K_REDUCE),
        (None, main, flush), ("split-K timed 2", main, split_k_gemm), (None, main, SPLIT_K_REDUCE),
        (None, main, flush), ("split-K timed 3", main, split_k_gemm), (None, main, SPLIT_K_REDUCE),
        program, ("candidate", main, "triton_mm"), ("GEMM after the candidate", main, BF16_GEMM),
    ]
    uncalled = [(None, flush), ("uncalled timed 1", BF16_GEMM), (None, flush), ("uncalled timed 2", BF16_GEMM),
                (None, flush), ("uncalled timed 3", split_k_gemm)]
    trace = HandBuiltExport(tmp_path / "autotune.sqlite", gpu_sqlite("te_linear_bf16"))
    trace.thread(main, main, "python")
    trace.thread(main, worker, "worker")
    for at, (_, tid, name) in enumerate(timeline):
        trace.launch(main, tid, 1000 * (at + 1), 1000 * (at + 1) + 50, kernel=name, kernel_ns=100)
    for at, (_, name) in enumerate(uncalled):
        trace.launch(main, main, 100_000 + 1000 * at, 100_000 + 1000 * at + 50, kernel=name, kernel_ns=100, call=False)
    frame = launches(read_trace(trace.close()))
    labels = [label for label, *_ in timeline] + [label for label, _ in uncalled]  # the launches in start order
    assert frame["name"].tolist() == [name for *_, name in timeline] + [name for _, name in uncalled]
    assert [label for label, role in zip(labels, frame["role"]) if role == "gemm"] == [
        label for label in labels if label is not None]
    tuned = [label for label, is_tuning in zip(labels, autotuning_launches(frame)) if is_tuning and label]
    assert tuned == ["untimed launch", "timed 1", "timed 2", "timed 3", "untimed between 1", "untimed between 2",
                     "timed 4", "timed 5", "timed 6", "split-K untimed launch", "split-K timed 1", "split-K timed 2",
                     "split-K timed 3", "candidate", "uncalled timed 1", "uncalled timed 2", "uncalled timed 3"]


def test_runtime_autotuning_of_pointwise_kernels_takes_no_gemm(gpu_xz, gpu_expected):
    """A compiled torchao FP8 model without max-autotune: Triton's autotuner times configs of
    Inductor's pointwise kernels while the program runs (benchmark loops between its GEMMs), and
    every GEMM stays the program's: one per Linear layer and pass, each step (expected.json)."""
    from gemmscope.assembly.job import autotuning_launches

    name = "corpus/torchao_tensorwise_compiled"
    expected = gpu_expected(name)
    result = judge([read_trace(gpu_xz(name))])
    timed = result.job.kernels[autotuning_launches(result.job.kernels)]
    assert len(timed) > 0 and timed["name"].str.startswith("triton_poi_").any()
    assert len(result.job.autotuning) == 0
    assert len(result.gemms) == expected["steps"] * len(expected["linears"]) * len(expected["passes"])


GROUP_KEYS = ["layer", "module", "pass", "kernel", "precision"]
GROUP_FIGURES = ["launches", "ranks", "time_ns"]


@pytest.mark.parametrize("name, expect, checked_keys, ranks", [
    # one process without the hook's rank mark: no rank named
    ("train_mixed", None, ["expected", "requested", "verdict", "cause", "allowed"], 0),
    ("gemm_bench_4096", "fp8-current", ["expected", "requested", "verdict", "cause", "allowed"], 0),
    ("fsdp_fp8_2gpu_plain", None, ["requested"], 2),  # both ranks ran every GEMM
    ("megatron_gpt_fp8-delayed", None, ["expected", "requested", "verdict", "cause", "allowed"], 1),
])
def test_group_per_layer_module_pass_and_kernel(name, expect, checked_keys, ranks, gpu_xz):
    """One row per layer x module x pass x kernel (and what it was checked against, where it
    was), in the order the GEMMs ran, a GEMM without a layer kept: its launches, how many ranks
    ran it and its kernel time, counted here from the rows."""
    import pandas as pd

    from gemmscope.judging.judgement import group

    path = CORPUS / f"{name}.sqlite.xz" if (CORPUS / f"{name}.sqlite.xz").exists() else gpu_xz(name)
    gemms = judge([read_trace(path)], expect).gemms
    groups = group(gemms)
    assert list(groups.columns) == GROUP_KEYS + checked_keys + GROUP_FIGURES

    def named(value) -> object:
        return "-" if value is None or (not isinstance(value, str) and pd.isna(value)) else value

    columns = ["layer", "module", "te_pass", "name", "precision", *checked_keys]
    keys = [tuple(map(named, key)) for key in zip(*(gemms[c] for c in columns))]
    assert [tuple(map(named, key)) for key in zip(*(groups[c] for c in GROUP_KEYS + checked_keys))] == (
        _first_seen(keys))
    assert groups["launches"].sum() == len(gemms) and groups["time_ns"].sum() == gemms["duration_ns"].sum()
    for position, key in enumerate(_first_seen(keys)):
        mine = [i for i, k in enumerate(keys) if k == key]
        row = groups.iloc[position]
        assert row["launches"] == len(mine)
        assert row["ranks"] == len({gemms["rank"].iloc[i] for i in mine if pd.notna(gemms["rank"].iloc[i])})
        assert row["time_ns"] == sum(int(gemms["duration_ns"].iloc[i]) for i in mine)
    assert (groups["ranks"] == ranks).all()
    if name == "train_mixed":  # no GEMM there has a layer: each still has its row
        assert groups["layer"].isna().all()
    if name == "megatron_gpt_fp8-delayed":  # module paths: each linear of each layer apart
        assert groups["layer"].nunique() > 2
    empty = group(gemms.iloc[0:0])
    assert empty.empty and list(empty.columns) == GROUP_KEYS + checked_keys + GROUP_FIGURES


def test_expected_recipes_are_the_mapped_ones_in_the_order_given_then_the_run_s():
    """What a report says was asked ("nothing ran at …", "GEMMs ran at …"): each recipe once, the
    --expect-map ones first, in the order given, then --expect's."""
    trace = read_trace(CORPUS / "gemm_bench_4096.sqlite.xz")
    mapped = (("FP8Block_*", "fp8-block"), ("BF16_*", "bf16"), ("FP8Current_*", "fp8-current"))
    assert judge([trace], "fp8-current", expect_map=mapped).expected_recipes == ["fp8-block", "bf16", "fp8-current"]
    assert judge([trace], "fp8-delayed", expect_map=mapped[:2]).expected_recipes == [
        "fp8-block", "bf16", "fp8-delayed"]
    assert judge([trace], None, expect_map=mapped[1:2]).expected_recipes == ["bf16"]


# --- judge() itself: what it reports besides the verdicts -----------------------------------------

def test_check_lists_traces_it_could_not_read_and_processes_that_launched_nothing(gpu_trace):
    """Traces loaded elsewhere (workers) are checked with the others: one whose process ran
    CUDA and launched no kernel is listed apart and fails nothing; one that could not be read,
    or holds no kernel because CUDA was not traced, is unreadable and fails the check; each
    named with the rank its file name gives. With no trace usable, the first one's reason is the
    error: NoGpuKernels where none holds a kernel (cuda_traced only if every one traced CUDA)."""
    from gemmscope.assembly.attribution import LoadedTrace, attribute
    from gemmscope.errors import NoGpuKernels

    launched_nothing = LoadedTrace(Path("run/rank3.sqlite"), error="rank3.sqlite ran no GPU kernel", no_kernels=True,
                                   cuda_traced=True)
    cuda_not_traced = LoadedTrace(Path("run/trace_rank_2.sqlite"), error="trace_rank_2.sqlite holds no GPU kernels",
                                  no_kernels=True)
    damaged = LoadedTrace(Path("run/rank-5.sqlite"), error="rank-5.sqlite: not an Nsight Systems export")
    bf16 = gpu_trace("te_linear_bf16")
    result = judge([attribute(bf16), launched_nothing, cuda_not_traced, damaged], "bf16")
    assert result.job.without_kernels == [{"trace": "rank3.sqlite", "rank": 3}]
    assert result.job.unreadable == [
        {"trace": "trace_rank_2.sqlite", "rank": 2, "error": "trace_rank_2.sqlite holds no GPU kernels"},
        {"trace": "rank-5.sqlite", "rank": 5, "error": "rank-5.sqlite: not an Nsight Systems export"}]
    assert len(result.gemms) == len(judge(bf16, "bf16").gemms) > 0 and result.failed
    assert not judge([attribute(bf16), launched_nothing], "bf16").failed

    with pytest.raises(NoGpuKernels) as raised:
        judge([launched_nothing, dataclasses.replace(launched_nothing, error="another one")])
    assert str(raised.value) == "rank3.sqlite ran no GPU kernel" and raised.value.cuda_traced is True
    with pytest.raises(NoGpuKernels) as raised:
        judge([cuda_not_traced, launched_nothing])
    assert str(raised.value) == "trace_rank_2.sqlite holds no GPU kernels" and raised.value.cuda_traced is False
    with pytest.raises(InputError) as raised:
        judge([damaged, launched_nothing])
    assert type(raised.value) is InputError and str(raised.value) == "rank-5.sqlite: not an Nsight Systems export"
    with pytest.raises(InputError) as raised:
        judge([])
    assert str(raised.value) == "no trace to check"


def test_check_of_several_traces_keeps_each_one_s_ranges_and_memory_operations(tmp_path):
    """Three traces checked together: each GEMM keeps the NVTX ranges it had when its trace was
    checked alone, and each memcpy/memset its trace's name and its process's rank (the hook's
    mark in the FSDP ranks; the third file, without one, ranked by its place: a real trace given
    the ranks' session start, as a third process of their job)."""
    third = altered_sqlite(GPU / "te_linear_bf16.sqlite.xz",
                           tmp_path / "te_linear_bf16.sqlite", same_session_as(CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz"))
    paths = [CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz", third]
    together = judge([read_trace(p) for p in paths])
    for rank, path in enumerate(paths):
        alone = judge([read_trace(path)])
        mine = together.gemms[together.gemms["trace"] == path.name]
        assert len(mine) == len(alone.gemms) and set(mine["rank"]) == {rank}
        assert together.job.ranges.lists(mine["kernel_row"].to_numpy()) == alone.job.ranges.lists(
            alone.gemms["kernel_row"].to_numpy())
        memops = together.job.memops[together.job.memops["trace"] == path.name]
        assert len(memops) == len(alone.job.memops) > 0 and memops["rank"].tolist() == [rank] * len(memops)
    assert together.job.memops["rank"].dtype == "Int64" and len(together.job.memops) == sum(
        (together.job.memops["trace"] == p.name).sum() for p in paths)


def test_outside_every_mapped_range_a_gemm_is_checked_against_expect_and_is_no_coverage():
    """--expect-map with --expect: a GEMM in a mapped range against that range's recipe, one
    outside every mapped range against --expect; under --expect nothing is coverage, even when
    --expect is BF16 (a GEMM asked something else is checked, not listed as high precision); the
    per-module summary counts verdicts against the run's recipe."""
    trace = read_trace(CORPUS / "gemm_bench_4096.sqlite.xz")
    result = judge([trace], "fp8-current", expect_map=(("BF16_*", "bf16"),))
    inside = result.gemms["expect_range"].notna()
    assert inside.any() and (~inside).any()
    assert set(result.gemms.loc[inside, "expected"]) == {"bf16"}
    assert set(result.gemms.loc[~inside, "expected"]) == {"fp8-current"} and result.gemms["verdict"].notna().all()
    assert list(result.summary.columns) == SUMMARY_COLUMNS + VERDICT_COUNT_COLUMNS
    high = judge([trace], "bf16", expect_map=(("FP8Block_*", "fp8-block"),))
    assert set(high.gemms.loc[high.gemms["expect_range"].isna(), "expected"]) == {"bf16"}
    assert high.coverage.empty and not high.gemms["asked_high"].any()
    # the same of GEMMs whose requests the hook recorded (Megatron keeping its first and last layers in BF16)
    hooked = judge([read_trace(CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz")], "bf16")
    assert hooked.gemms["requested"].notna().all() and hooked.coverage.empty
    assert not judge([read_trace(CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz")]).coverage.empty


RANGE_COLUMNS = ["pattern", "range", "expected", "instances", "gemms", "gemm_time_ns", "expected_time_share",
                 "fallbacks", "unknown", "nested", "verdict"]


def _ranges_checked_by_hand(gemms, result, expect_map) -> list[dict]:
    """ranges_checked's table, counted here from the GEMM rows, the trace's NVTX rows (marks are
    no ranges) and the ranges attribution found around each GEMM."""
    import fnmatch
    import math

    names = Counter(name for t in result.job.traces for name in t.nvtx.loc[t.nvtx["kind"] != "mark", "name"].dropna())
    claimed_by = {name: next((i for i, (p, _) in enumerate(expect_map) if fnmatch.fnmatchcase(name, p)), None)
                  for name in names}
    mapped = gemms[gemms["expect_range"].notna()]
    around = dict(zip(mapped.index, result.job.ranges.lists(mapped["kernel_row"].to_numpy())))
    rows = []
    for position, (pattern, recipe) in enumerate(expect_map):
        found = sorted(name for name, at in claimed_by.items() if at == position)
        if not found:
            rows.append({"pattern": pattern, "range": None, "expected": recipe, "instances": 0, "gemms": 0,
                         "gemm_time_ns": 0, "expected_time_share": None, "fallbacks": 0, "unknown": 0, "nested": 0,
                         "verdict": "NOT FOUND"})
        for name in found:
            mine = mapped[mapped["expect_range"] == name]
            time = int(mine["duration_ns"].sum())
            ok_time = int(mine.loc[mine["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), "duration_ns"].sum())
            fallbacks = int(((mine["verdict"] == "FALLBACK") & ~mine["allowed"]).sum())
            nested = sum(name in around[i] and mapped.at[i, "expect_range"] != name for i in mapped.index)
            verdict = ("NO GEMM" if not len(mine) and not nested else "NESTED" if not len(mine)
                       else "FALLBACK" if fallbacks else "OK")
            rows.append({"pattern": pattern, "range": name, "expected": recipe, "instances": names[name],
                         "gemms": len(mine), "gemm_time_ns": time,
                         "expected_time_share": ok_time / time if len(mine) else None, "fallbacks": fallbacks,
                         "unknown": int((mine["verdict"] == "UNKNOWN").sum()), "nested": nested, "verdict": verdict})
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in rows]


def test_ranges_checked_per_mapped_range_counted_from_the_rows():
    """TE's GEMM benchmark with the hook, mapped so that every verdict of a range shows: TE's
    per-GEMM C range claims the TE GEMMs (the recipe ranges around them are NESTED), BF16's
    torch GEMMs fall back against FP8 (one of them not allowed), a pattern names only one of the
    hook's marks (a mark is no range: NOT FOUND), another nothing; some GEMMs marked unknown or
    expected substitutions; then BF16's range with one GEMM left. Every cell as counted by hand."""
    from gemmscope.judging.judgement import ranges_checked

    expect_map = (("nvte_cublas_gemm_v2", "fp8-current"), ("FP8Block_*", "fp8-block"), ("BF16_*", "fp8-current"),
                  ("FP8*", "fp8-current"), ("gemmscope.software*", "bf16"), ("Nope_*", "mxfp8"))
    result = judge([read_trace(CORPUS / "gemm_bench_4096_hook.sqlite.xz")], None, expect_map=expect_map)
    gemms = result.gemms.copy()
    in_te = gemms.index[gemms["expect_range"] == "nvte_cublas_gemm_v2"]
    gemms.loc[in_te[gemms.loc[in_te, "verdict"] == "OK"][:2], "verdict"] = "UNKNOWN"
    gemms.loc[in_te[gemms.loc[in_te, "verdict"] == "OK"][:3], "verdict"] = "EXPECTED-SUBSTITUTION"
    bf16 = gemms.index[gemms["expect_range"] == "BF16_4096x4096x4096"]
    gemms.loc[bf16[1:], "allowed"] = True  # one fallback left that fails
    for case in (gemms, gemms.drop(bf16[1:])):
        table = ranges_checked(case, result.job.ranges, result.job.traces, expect_map)
        assert list(table.columns) == RANGE_COLUMNS and list(table.index) == list(range(len(table)))
        assert all(table[c].dtype == "int64" for c in ("instances", "gemms", "gemm_time_ns", "fallbacks", "unknown",
                                                        "nested"))
        assert table.astype(object).where(table.notna(), None).to_dict("records") == _ranges_checked_by_hand(
            case, result, expect_map)
    assert list(table["verdict"]) == ["FALLBACK", "NESTED", "FALLBACK", "NESTED", "NESTED", "NOT FOUND", "NOT FOUND"]
    assert table.loc[2, "gemms"] == table.loc[2, "fallbacks"] == 1 and table.loc[2, "expected_time_share"] == 0


def test_a_check_leaves_what_it_was_given_and_earlier_results_as_they_were(tmp_path):
    """A loaded trace checked alone, then beside the ranks of its job (where it is ranked by its
    place), keeps its own launches, and the first result its ranks: a result holds launches of its
    own. One assembled job judged twice, against two recipes, gives each its verdicts."""
    from gemmscope.assembly.attribution import attribute
    from gemmscope.assembly.job import assemble
    from gemmscope.judging.judgement import judge

    third = altered_sqlite(GPU / "te_linear_bf16.sqlite.xz",
                           tmp_path / "te_linear_bf16.sqlite", same_session_as(CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz"))
    alone = attribute(read_trace(third))
    given = list(alone.launches.columns)
    first = judge([alone], "bf16")
    assert first.job.kernels["rank"].isna().all()  # one trace, no rank in its name nor marked
    ranks = [attribute(read_trace(CORPUS / f"fsdp_fp8_2gpu_rank{rank}.sqlite.xz")) for rank in (0, 1)]
    together = judge([*ranks, alone], "bf16")
    assert set(together.job.kernels.loc[together.job.kernels["trace"] == third.name, "rank"]) == {2}
    assert first.job.kernels["rank"].isna().all() and list(alone.launches.columns) == given
    assert first.job.kernels is not alone.launches

    job = assemble([alone])
    as_bf16, as_fp8 = judge(job, "bf16"), judge(job, "fp8-current")
    assert set(as_bf16.gemms["verdict"]) == {"OK"} and set(as_fp8.gemms["verdict"]) == {"FALLBACK"}
    assert "verdict" not in job.gemms
