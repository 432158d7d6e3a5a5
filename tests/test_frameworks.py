"""Verdicts on the frameworks people train with, from real captures of Megatron-Core (GPT on TE's
layer spec: FP8 tensorwise, Megatron's TEDelayedScaling, first/last layers kept BF16, MoE with TE
GroupedLinear experts and FP8 block scaling) and torchao float8 training (tensorwise, rowwise,
rowwise with a high-precision weight gradient), each unmodified, on an H100 with gemmscope's hook
(tests/fixtures/gpu/corpus/README.md, commands.txt).

Ground truth is the model's own module tree, written by the program that built it
(`*.expected.json`: every TE module by its TE base class, its layer and whether Megatron runs that
layer in an FP8 autocast; torchao's converted linears), times the passes and steps it ran; never
the parser.
"""

import json
import lzma
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from gemmscope.judging.judgement import judge
from gemmscope.traces.read import read_trace

from cli_runner import gemmscope as run_gemmscope
from fixture_paths import CORPUS

PASSES = ("fprop", "dgrad", "wgrad")


def gemmscope(*args):
    return run_gemmscope(*args, timeout=300)


def verify_json(name: str, *options: str) -> tuple[int, dict]:
    done = gemmscope("verify", "--trace", CORPUS / f"{name}.sqlite.xz", "--format", "json", "--per-launch", *options)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def expected(name: str) -> dict:
    return json.loads((CORPUS / f"{name}.expected.json").read_text())


@pytest.fixture(scope="module")
def checked():
    cache: dict = {}

    def load(name: str, expect: str | None = None):
        if (name, expect) not in cache:
            cache[name, expect] = judge(read_trace(CORPUS / f"{name}.sqlite.xz"), expect)
        return cache[name, expect]

    return load


def te_gemms(tree: dict, fp8: bool) -> Counter:
    """(layer path, pass) -> launches the module tree says the TE modules ran, for the modules in
    an FP8 layer (fp8) or in one Megatron keeps BF16."""
    return Counter({(m["path"], p): tree["steps"] * m["gemms_per_pass"]
                    for m in tree["te_modules"] if m["fp8"] == fp8 for p in PASSES})


def per_path_pass(gemms) -> Counter:
    return Counter(zip(gemms["layer"], gemms["te_pass"]))


@pytest.mark.parametrize("name", ["megatron_gpt_fp8-tensorwise", "megatron_gpt_fp8-delayed"])
def test_megatron_gpt_every_te_gemm_ok_with_its_path_and_the_output_layer_as_coverage(checked, name):
    tree = expected(name)
    result = checked(name)
    g = result.gemms
    assert not result.failed and len(result.mismatches) == 0
    fp8 = g[g["expected"] == "fp8"]
    assert per_path_pass(fp8) == te_gemms(tree, fp8=True)
    assert len(fp8) == 4 * 4 * 3 * 3 == 144  # layers × TE linears × passes × steps
    assert (fp8["verdict"] == "OK").all() and (fp8["precision"] == "fp8").all()
    assert Counter(fp8["te_pass"]) == {"fprop": 48, "dgrad": 48, "wgrad": 48}
    assert fp8["layer"].str.startswith("decoder.layers.").all()
    assert (fp8["layer_number"] == fp8["layer"].str.split(".").str[2].astype(int)).all()
    # TELayerNormColumnParallelLinear / TERowParallelLinear are TE's LayerNormLinear / Linear
    assert set(fp8["module"]) == {"_LayerNormLinear", "_Linear"}
    output = g[g["layer"] == tree["output_layer"]["path"]]
    assert len(output) == 3 * tree["steps"] and set(output["te_pass"]) == set(PASSES)
    assert output["asked_high"].all() and (output["verdict"] == "OK").all()
    assert set(output["module"]) == {tree["output_layer"]["class"]}
    assert result.coverage.index.equals(output.index)


def test_megatron_delayed_recipe_is_recognised_by_its_te_base_class():
    code, doc = verify_json("megatron_gpt_fp8-delayed")
    assert code == 0
    assert doc["summary"]["expected"] == "fp8-delayed"  # Megatron's TEDelayedScaling is a DelayedScaling
    code, doc = verify_json("megatron_gpt_fp8-delayed", "--expect", "fp8-delayed", "--allow", "output_layer")
    assert code == 0 and doc["summary"]["mismatches"] == 0 and doc["summary"]["allowed"] == 9


def test_megatron_json_verdict_and_coverage_on_the_first_screen(checked):
    code, doc = verify_json("megatron_gpt_fp8-tensorwise")
    summary = doc["summary"]
    assert code == 0 and summary["mode"] == "per-gemm" and summary["mismatches"] == 0
    coverage = summary["coverage"]
    assert coverage["gemm_launches"] == 9
    g = checked("megatron_gpt_fp8-tensorwise").gemms
    assert coverage["time_ns"] == g.loc[g["layer"] == "output_layer", "duration_ns"].sum() > 0
    assert coverage["time_share"] == pytest.approx(coverage["time_ns"] / summary["gemm_time_ns"])
    assert [g["layer"] for g in coverage["groups"]] == ["output_layer"]
    text = gemmscope("verify", "--trace", CORPUS / "megatron_gpt_fp8-tensorwise.sqlite.xz").stdout
    first_screen = "\n".join(text.splitlines()[:8])
    assert "0 mismatches" in first_screen and "coverage:" in first_screen and "output_layer" in first_screen


def test_megatron_expect_is_strict_and_allow_takes_a_module_path():
    code, doc = verify_json("megatron_gpt_fp8-tensorwise", "--expect", "fp8-current")
    assert code == 1
    flagged = [m for m in doc["mismatches"]]
    assert len(flagged) == 9 and {m["layer"] for m in flagged} == {"output_layer"}
    assert {m["cause"] for m in flagged} == {"requested-bf16"}
    code, doc = verify_json("megatron_gpt_fp8-tensorwise", "--expect", "fp8-current", "--allow", "output_layer")
    assert code == 0 and doc["summary"]["allowed"] == 9
    code, _ = verify_json("megatron_gpt_fp8-tensorwise", "--expect", "fp8-current", "--allow", "decoder.layers.0.*")
    assert code == 1


@pytest.mark.parametrize("name, expect, recorded", [
    ("megatron_gpt_fp8-tensorwise", "fp8-delayed", "fp8-current"),
    ("megatron_gpt_fp8-delayed", "fp8-current", "fp8-delayed"),
])
def test_expecting_the_other_fp8_recipe_fails_and_names_both(name, expect, recorded):
    done = gemmscope("verify", "--trace", CORPUS / f"{name}.sqlite.xz", "--expect", expect)
    assert done.returncode == 1
    asked = next(line for line in done.stdout.splitlines() if line.startswith("Asked:"))
    assert expect in asked and recorded in asked
    assert f"requested-{recorded}" in done.stdout


@pytest.mark.parametrize("name, expect, recorded", [
    ("megatron_gpt_fp8-tensorwise", "fp8-delayed", "fp8-current"),
    ("megatron_gpt_fp8-delayed", "fp8-current", "fp8-delayed"),
])
def test_expecting_the_other_fp8_recipe_flags_each_te_gemm_though_its_kernel_is_fp8(name, expect, recorded):
    # the same FP8 kernels run under either recipe: what TE was handed says which one was asked
    gemms = judge([read_trace(CORPUS / f"{name}.sqlite.xz")], expect).gemms
    te = gemms[gemms["origin"] == "te"]
    assert len(te) == 144 and set(te["precision"]) == {"fp8"}
    assert set(te["verdict"]) == {"FALLBACK"} and set(te["cause"]) == {f"requested-{recorded}"}


def test_megatron_first_last_layers_bf16_are_coverage_not_mismatches(checked):
    name = "megatron_gpt_first-last-bf16"
    tree = expected(name)
    result = checked(name)
    assert not result.failed
    bf16_layers = {m["layer"] for m in tree["te_modules"] if not m["fp8"]}
    assert bf16_layers == {0, tree["layers"] - 1}
    high = result.coverage
    assert per_path_pass(high[high["layer"] != "output_layer"]) == te_gemms(tree, fp8=False)
    assert set(high["layer_number"].dropna()) == bf16_layers
    assert per_path_pass(result.gemms[result.gemms["expected"] == "fp8"]) == te_gemms(tree, fp8=True)
    text = gemmscope("verify", "--trace", CORPUS / f"{name}.sqlite.xz")
    assert text.returncode == 0
    assert "coverage: " in text.stdout and "(layers 0, 3; output_layer)" in " ".join(text.stdout.split())


def test_megatron_moe_router_is_coverage_and_experts_have_path_pass_precision(checked):
    name = "megatron_moe_fp8-block"
    tree = expected(name)
    result = checked(name)
    g = result.gemms
    assert not result.failed
    routers = g[g["layer"].isin([r["path"] for r in tree["routers"]])]
    assert Counter(zip(routers["layer"], routers["te_pass"])) == Counter(
        {(r["path"], p): tree["steps"] for r in tree["routers"] for p in PASSES})
    assert routers["asked_high"].all() and routers["origin"].eq("te").all()  # TE is handed it in BF16
    experts = [m for m in tree["te_modules"] if m["te_class"] == "GroupedLinear"]
    ran = g[g["layer"].isin([m["path"] for m in experts])]
    assert set(zip(ran["layer"], ran["te_pass"])) == {(m["path"], p) for m in experts for p in PASSES}
    assert (ran["module"] == "_GroupedLinear").all() and (ran["precision"] == "fp8-block").all()
    assert (ran["verdict"] == "OK").all()


def test_torchao_tensorwise_fp8_gemms_ok_with_paths_and_the_head_as_coverage(checked):
    name = "torchao_tensorwise"
    tree = expected(name)
    result = checked(name)
    g = result.gemms
    assert not result.failed and result.expected is None  # no TE, no autocast: each GEMM's own request
    float8 = [lin["path"] for lin in tree["linears"] if lin["float8"]]
    fp8 = g[g["layer"].isin(float8)]
    assert per_path_pass(fp8) == Counter({(p, s): tree["steps"] for p in float8 for s in PASSES})
    assert (fp8["expected"] == "fp8").all() and (fp8["verdict"] == "OK").all()
    assert (fp8["module"] == "Float8Linear").all()
    head = g[g["layer"] == "head"]
    assert per_path_pass(head) == Counter({("head", s): tree["steps"] for s in PASSES})
    assert head["asked_high"].all() and result.coverage.index.equals(head.index)
    assert gemmscope("verify", "--trace", CORPUS / f"{name}.sqlite.xz").returncode == 0


@pytest.mark.parametrize("name", ["torchao_rowwise", "torchao_rowwise_with_gw_hp"])
def test_torchao_rowwise_every_fp8_gemm_is_rowwise_never_a_mismatch_or_bare_fp8(checked, name):
    result = checked(name)
    g = result.gemms
    assert not result.failed
    fp8 = g[g["precision"].isin(["fp8", "fp8-rowwise"])]
    assert (fp8["expected"] == "fp8-rowwise").all()
    outer_vector = fp8["precision"] == "fp8-rowwise"
    assert (fp8.loc[outer_vector, "verdict"] == "OK").all()
    assert fp8.loc[outer_vector, "name"].str.contains("ovscale").all()
    # torchao runs row-wise backward GEMMs (use_fast_accum off) as tensor-wise ones plus a rescale
    rescaled = fp8[~outer_vector]
    assert len(rescaled) and (rescaled["verdict"] == "EXPECTED-SUBSTITUTION").all()
    assert (rescaled["requested_scale"] == "rowwise-rescaled").all()
    assert set(rescaled["te_pass"]) <= {"dgrad", "wgrad"}


def test_a_rescaled_gemm_is_a_substitution_only_where_row_wise_was_expected():
    # --expect fp8-current: the tensor-wise kernel of a rescaled row-wise request is what was
    # expected (OK), and the row-wise kernels are fallbacks
    gemms = judge([read_trace(CORPUS / "torchao_rowwise.sqlite.xz")], "fp8-current").gemms
    rescaled = gemms["requested_scale"] == "rowwise-rescaled"
    assert rescaled.sum() == 18 and set(gemms.loc[rescaled, "verdict"]) == {"OK"}
    row_wise = gemms[gemms["precision"] == "fp8-rowwise"]
    assert set(zip(row_wise["verdict"], row_wise["cause"])) == {("FALLBACK", "requested-fp8-rowwise")}


def test_torchao_rowwise_with_gw_hp_weight_gradients_are_coverage(checked):
    result = checked("torchao_rowwise_with_gw_hp")
    high = result.coverage
    float8 = high[high["module"] == "Float8Linear"]
    assert len(float8) == 3 * 3 and set(float8["te_pass"]) == {"wgrad"} and (float8["precision"] == "bf16").all()


def _fp8_handed_to_te_and_a_bf16_kernel_ran(tmp_path: Path) -> Path:
    """The real Megatron trace with one FP8 kernel's name changed to the BF16 kernel of the same
    tile: TE was handed FP8 (the hook's record) and a BF16 kernel ran."""
    forced = tmp_path / "forced.sqlite"
    forced.write_bytes(lzma.decompress((CORPUS / "megatron_gpt_fp8-tensorwise.sqlite.xz").read_bytes()))
    with sqlite3.connect(forced) as db:
        string_id, fp8_name = db.execute(
            "SELECT id, value FROM StringIds WHERE value LIKE 'nvjet_sm90_qqtst%' ORDER BY id").fetchone()
        db.execute("UPDATE StringIds SET value = ? WHERE id = ?", (fp8_name.replace("_qqtst_", "_tst_"), string_id))
    db.close()
    return forced


def test_a_dispatch_mismatch_fails_fp8_handed_to_te_and_a_bf16_kernel_ran(tmp_path):
    done = gemmscope("verify", "--trace", _fp8_handed_to_te_and_a_bf16_kernel_ran(tmp_path), "--format", "json",
                     "--per-launch")
    assert done.returncode == 1
    mismatches = json.loads(done.stdout)["mismatches"]
    assert mismatches and {m["cause"] for m in mismatches} == {"kernel-differs"}
    assert {(m["requested"], m["precision"]) for m in mismatches} == {("fp8", "bf16")}


@pytest.mark.parametrize("expect", [None, "fp8-current"])
def test_a_kernel_that_differs_from_what_te_was_handed_is_kernel_differs(tmp_path, expect):
    # in-process (mutmut sees no subprocess), and against the recipe TE was handed too
    forced = _fp8_handed_to_te_and_a_bf16_kernel_ran(tmp_path)
    handed_fp8 = judge([read_trace(forced)], expect).mismatches.query("requested == 'fp8'")
    assert len(handed_fp8) and set(handed_fp8["cause"]) == {"kernel-differs"}


def test_plain_megatron_capture_is_checked_strictly_never_passed_silently():
    """Megatron-Core GPT under a plain `nsys profile` (no hook, no TE ranges): nothing says what a
    GEMM asked. Without --expect there is no recipe to check against (exit 4, never a pass);
    with --expect fp8-current the strict check flags exactly the output layer's BF16 GEMMs
    (3 passes × 3 steps), and the 144 TE GEMMs are FP8 and OK."""
    tree = expected("megatron_gpt_fp8-tensorwise")
    plain = CORPUS / "megatron_gpt_fp8-tensorwise_plain.sqlite.xz"
    assert gemmscope("verify", "--trace", plain).returncode == 4
    code, doc = verify_json("megatron_gpt_fp8-tensorwise_plain", "--expect", "fp8-current")
    assert code == 1 and doc["summary"]["mode"] != "per-gemm"
    assert len(doc["mismatches"]) == 3 * tree["steps"]
    assert {m["precision"] for m in doc["mismatches"]} == {"bf16"}
    assert {m["cause"] for m in doc["mismatches"]} == {"outside-te"}
    result = judge(read_trace(plain), "fp8-current")
    ok = result.gemms[result.gemms["verdict"] == "OK"]
    assert len(ok) == 4 * 4 * 3 * tree["steps"] and set(ok["precision"]) == {"fp8"}
    # no hook, no TE ranges: forward or backward is told by the thread that launched the GEMM
    assert Counter(ok["te_pass"].isin(["dgrad", "wgrad", "backward"])) == {True: 96, False: 48}


def test_plain_torchao_rowwise_capture_is_checked_strictly():
    """torchao rowwise under a plain `nsys profile`: --expect fp8-current (TE's tensor-wise
    recipe) flags the row-wise forward GEMMs and the BF16 head, never a silent pass; the
    backward GEMMs torchao runs tensor-wise (use_fast_accum off) are FP8 and OK."""
    tree = expected("torchao_rowwise")
    code, doc = verify_json("torchao_rowwise_plain", "--expect", "fp8-current")
    assert code == 1
    converted = sum(linear["float8"] for linear in tree["linears"])
    flagged = Counter(m["precision"] for m in doc["mismatches"])
    assert flagged == {"fp8-rowwise": converted * tree["steps"], "bf16": 3 * tree["steps"]}
