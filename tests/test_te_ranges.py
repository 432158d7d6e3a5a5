"""TE's NVTX range grammar, on labels built the way TE 2.x's source builds them."""

import pandas as pd
import pytest

from gemmscope.assembly import te_ranges
from gemmscope.autocast_hook.gemmscope_protocol import GEMM_PREFIX, PROCESS_PREFIX, format_autocast, format_record


def te_pass_label(fn: str, direction: str, ub_name: str | None, step: str) -> str:
    """As module/linear.py and layernorm_linear.py build it: nvtx_label, then `.{ub_name}` when
    the module has one, then `.{step}`."""
    nvtx_label = f"transformer_engine.{fn}.{direction}"
    if ub_name is not None:
        nvtx_label = f"{nvtx_label}.{ub_name}"
    return f"{nvtx_label}.{step}"


@pytest.mark.parametrize("fn", ["_Linear", "_LayerNormLinear"])
@pytest.mark.parametrize("ub_name", [None, "qkv", "proj", "fc1", "fc2"])
@pytest.mark.parametrize("direction, step, pass_", [
    ("forward", "gemm", "fprop"), ("backward", "dgrad_gemm", "dgrad"), ("backward", "wgrad_gemm", "wgrad")])
def test_te_gemm_ranges_with_and_without_a_name(fn, ub_name, direction, step, pass_):
    got = te_ranges.parse(te_pass_label(fn, direction, ub_name, step))
    assert (got["kind"], got["module"], got["name"], got["pass"], got["direction"]) == (
        te_ranges.TE_GEMM, fn, ub_name, pass_, direction)


@pytest.mark.parametrize("step", sorted(te_ranges.STEPS))
@pytest.mark.parametrize("ub_name", [None, "proj"])
def test_te_step_ranges_are_not_gemms(step, ub_name):
    got = te_ranges.parse(te_pass_label("_Linear", "forward", ub_name, step))
    assert (got["kind"], got["step"], got["name"], got["pass"]) == (te_ranges.TE_STEP, step, ub_name, None)


@pytest.mark.parametrize("cls", te_ranges.TE_MODULE_CLASSES)
def test_module_level_ranges(cls):
    # module/base.py: self.__class__.__name__ + " forward"; f"_{cls}_backward"; f"_{cls}_wgrad"
    forward = te_ranges.parse(f"{cls} forward")
    backward = te_ranges.parse(f"_{cls}_backward")
    wgrad = te_ranges.parse(f"_{cls}_wgrad")
    assert {forward["kind"], backward["kind"], wgrad["kind"]} == {te_ranges.TE_MODULE}
    assert forward["module"] == backward["module"] == wgrad["module"] == f"_{cls}"
    assert (forward["direction"], backward["direction"], wgrad["step"]) == ("forward", "backward", "wgrad")


@pytest.mark.parametrize("label", [
    "transformer_engine.FusedAttnFunc.forward", "FusedAttnFunc.backward",
    "transformer_engine.AttnFuncWithCPAndKVP2P.forward", "transformer_engine.AttnFuncWithCPAndQKVOA2A.backward"])
def test_attention_ranges(label):
    assert te_ranges.parse(label)["kind"] == te_ranges.TE_ATTENTION


@pytest.mark.parametrize("label, kind", [
    ("nvte_cublas_gemm_v2", te_ranges.TE_C_GEMM), ("nvte_multi_stream_cublas_gemm", te_ranges.TE_C_GEMM),
    ("nvte_grouped_gemm", te_ranges.TE_C_GEMM), ("nvte_quantize_v2", te_ranges.TE_C_API),
    ("nvte_compute_amax", te_ranges.TE_C_API)])
def test_c_library_ranges(label, kind):
    assert te_ranges.parse(label)["kind"] == kind


@pytest.mark.parametrize("label", [
    "ncclAllReduce", "ncclGroupEnd", "step_0", "forward", "Linear", "transformer_engine._Linear.forward",
    "transformer_engine._Linear.forward.qkv.not_a_step", "MyLinear forward", "aten::mm, seq = 12"])
def test_other_ranges_are_none_of_ours(label):
    assert te_ranges.parse(label)["kind"] is None


def test_hook_records_round_trip():
    label = format_record(GEMM_PREFIX, {"entry": "general_gemm", "module": "LayerNormMLP", "name": "fc1",
                                        "layer": "3.layernorm_mlp", "pass": "dgrad",
                                        "a": "fp8-delayed", "b": "fp8-current"})
    got = te_ranges.parse(label)
    assert (got["kind"], got["module"], got["name"], got["layer"], got["pass"]) == (
        te_ranges.HOOK_GEMM, "_LayerNormMLP", "fc1", "3.layernorm_mlp", "dgrad")
    assert got["requested"] == "fp8"  # delayed and current scaling both run tensor-scaled FP8 kernels
    assert te_ranges.parse(format_record(PROCESS_PREFIX, {"rank": "3", "pid": 9}))["rank"] == 3
    assert te_ranges.parse(format_record(PROCESS_PREFIX, {"rank": "?"}))["rank"] is None


@pytest.mark.parametrize("a, b, want", [("bf16", "bf16", "bf16"), ("fp8-block", "fp8-block", "fp8-block"),
                                         ("fp8-current", "bf16", "fp8×bf16"), (None, "bf16", None)])
def test_requested_precision(a, b, want):
    assert te_ranges.requested_precision(a, b) == want


def test_classify_parses_each_distinct_name_once_and_keeps_the_index():
    names = pd.Series(["nvte_cublas_gemm_v2", None, "nvte_cublas_gemm_v2", "Linear forward"], index=[7, 8, 9, 10])
    table = te_ranges.classify(names)
    assert list(table.index) == [7, 8, 9, 10]
    assert list(table["kind"].fillna("-")) == [te_ranges.TE_C_GEMM, "-", te_ranges.TE_C_GEMM, te_ranges.TE_MODULE]


def test_names_with_no_prefix_of_ours_are_none_of_ours_unparsed():
    """parse_distinct says of each name what parse says, parsing only those that start with one of
    PREFIXES; every name parse gives a kind starts with one: the filter drops none of TE's or ours."""
    import numpy as np

    from gemmscope.autocast_hook.gemmscope_protocol import AUTOCAST_PREFIX, TORCH_GEMM_PREFIX

    ours = [te_pass_label("_Linear", "backward", "fc1", "wgrad_gemm"), te_pass_label("_LayerNormLinear", "forward",
                                                                                      None, "norm"),
            *(f"{cls} forward" for cls in te_ranges.TE_MODULE_CLASSES),
            *(f"_{cls}_{end}" for cls in te_ranges.TE_MODULE_CLASSES for end in ("backward", "wgrad")),
            "transformer_engine.FusedAttnFunc.forward", "FusedAttnFunc.backward", "AttnFuncWithCPAndKVP2P.forward",
            "nvte_cublas_gemm_v2", "nvte_quantize_v2", AUTOCAST_PREFIX + "Float8BlockScaling)",
            format_record(GEMM_PREFIX, {"module": "GroupedLinear", "pass": "wgrad", "a": "fp8-block", "b": "bf16"}),
            format_record(TORCH_GEMM_PREFIX, {"op": "mm", "a": "bf16", "b": "bf16", "m": "8"}),
            format_record(PROCESS_PREFIX, {"rank": "1"})]
    others = ["aten::mm, op_id = 12, sizes = [[8, 8], [8, 8]], input_op_ids = [(3,0), (4,0)]", "step_0",
              "_GroupedLinear, seq = 0, op_id = 168", "_GroupedLinearBackward, seq = 0, op_id = 219",
              "autograd::engine::evaluate_function: _GroupedLinearBackward, op_id = 218", "ncclAllReduce"]
    assert all(te_ranges.parse(name)["kind"] is not None for name in ours)
    assert all(name.startswith(te_ranges.PREFIXES) for name in ours)
    names = [*ours, *others, None]
    table = te_ranges.parse_distinct(np.array(names, dtype=object))
    assert list(table.index) == list(range(len(names)))
    for name, row in zip(names[:-1], table.to_dict("records")):
        assert {k: None if pd.isna(v) else v for k, v in row.items()} == te_ranges.parse(name), name
    assert table.iloc[-1].isna().all()


def test_an_autocast_range_says_its_recipes_backward_override_and_where_it_came_from():
    """What the hook writes at te.autocast's enter (format_autocast) is what the reader takes: the
    recipe's class whatever else the range holds, and each override once."""
    names = [format_autocast("Float8CurrentScaling", "high_precision", True),
             format_autocast("Float8CurrentScaling", "high_precision", True),
             format_autocast("Float8BlockScaling", "dequantized", False), format_autocast("DelayedScaling", None, False)]
    assert [te_ranges.parse(n)["recipe_class"] for n in names] == [
        "Float8CurrentScaling", "Float8CurrentScaling", "Float8BlockScaling", "DelayedScaling"]
    assert te_ranges.recorded_backward_overrides(names) == [
        "backward_override=high_precision (NVTE_BACKWARD_OVERRIDE)", "backward_override=dequantized"]


def test_an_autocast_range_says_the_per_module_recipe_that_entered_it():
    """Megatron-Core's per-module recipe: the range a module's own te.autocast writes names the
    YAML's config key, the matcher that chose it and the layer, whatever characters the user's
    YAML holds (no separator, no ")" survives into the range); the reader gives per layer what
    asked, an evaluation recipe said apart, and a layer that asked two ways says both."""
    proj = "decoder.layers.1.self_attention.linear_proj"
    names = [format_autocast("disabled", None, False, {"quant_config": "bf16", "matcher": "*linear_proj*",
                                                       "layer": proj}),
             format_autocast("Float8BlockScaling", "high_precision", True,
                             {"quant_config": "block|odd)", "matcher": "*fc2*", "layer": "decoder.layers.0.mlp.linear_fc2"}),
             format_autocast("Float8CurrentScaling", None, False, {"quant_config": "eval", "matcher": "*linear_proj*",
                                                                   "layer": proj, "phase": "evaluation"}),
             format_autocast("Float8CurrentScaling", None, False)]
    assert [te_ranges.parse(n)["recipe_class"] for n in names] == [
        "disabled", "Float8BlockScaling", "Float8CurrentScaling", "Float8CurrentScaling"]
    assert te_ranges.recorded_module_recipes(names) == {
        proj: 'quant_recipe config "bf16" (matcher "*linear_proj*"); '
              'quant_recipe config "eval" (matcher "*linear_proj*"), its evaluation recipe',
        "decoder.layers.0.mlp.linear_fc2": 'quant_recipe config "block/odd]" (matcher "*fc2*")'}
    assert te_ranges.recorded_backward_overrides(names) == ["backward_override=high_precision (NVTE_BACKWARD_OVERRIDE)"]
