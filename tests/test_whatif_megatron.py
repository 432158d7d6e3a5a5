"""The per-module recipe file whatif writes for Megatron-Core (`--te-precision-config-file`), loaded
by Megatron's own loader and judged by Megatron's own rule of whether a module runs quantized
(megatron-core's TE extension, which imports without a GPU), against the module tree the corpus
program wrote from the GPTModel itself (its *.expected.json, not gemmscope's output)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

import gemmscope as gs
from gemmscope.whatif import advice, answer, changes, megatron_recipe
from gemmscope.whatif.groups import group_gemms

from fixture_paths import CORPUS, GPU

FIRST_LAST = CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"
MEASURED_H200 = GPU / "whatif" / "megatron_first-last-bf16_h200"
BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _megatron_tree() -> list[dict]:
    """Every TE module of the run, by Megatron's own path (GPTModel.named_modules), and whether its
    layer ran in FP8."""
    return json.loads(FIRST_LAST.with_name("megatron_gpt_first-last-bf16.expected.json").read_text())["te_modules"]


def _runs_quantized(recipe, path: str, layer_quantized: bool) -> bool:
    """Megatron's answer for the module at `path` under the loaded recipe: GPTModel's match
    (get_quant_config_or_none), the TE module's parse (finish_init) and will_execute_quantized."""
    from megatron.core.extensions.transformer_engine import (
        TEQuantizationParams,
        _get_should_context_be_quantized_params,
    )
    from megatron.core.quantization.utils import get_quant_config_or_none

    config = get_quant_config_or_none(path, recipe)
    params = TEQuantizationParams.parse_from_config(config) if config is not None else None
    return _get_should_context_be_quantized_params(params, True, layer_quantized)


def _write(files: dict[str, str], folder: Path) -> Path:
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_the_first_last_run_gets_a_recipe_file_megatron_loads_moving_only_the_moved_groups(megatron_core, tmp_path):
    """The corpus's first/last-BF16 run, advised from the H200's measurement: the file moves to BF16
    exactly the modules of the groups whatif moves (layers 1 and 2's linear_proj, linear_qkv and
    linear_fc2), and under Megatron's loader and rule every other module of the run keeps its layer's
    precision; the arguments keep the run's own switches and add the flag, as the corpus program and
    the claim benchmark take them; the prediction is that of exactly those modules moved."""
    from megatron.core.quantization.utils import get_quant_config_or_none, load_quantization_recipe

    found = answer.answer([FIRST_LAST], measured=MEASURED_H200, out=tmp_path / "out")
    document = found.report.document
    moves = [r for r in document["recommendations"] if r["action"] == "move"]
    assert {r["name"] for r in moves} == {f"decoder.layers.{{1,2}}.{m}" for m in (
        "self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc2")}
    assert {r["target"] for r in moves} == {"bf16"}
    layers = {g["name"]: g["layers"] for g in document["groups"]}
    moved = {path for r in moves for path in layers[r["name"]]}
    folder = _write(found.files, tmp_path / "written")
    recipe = load_quantization_recipe(str(folder / megatron_recipe.MEGATRON_RECIPE_YAML))
    tree = _megatron_tree()
    assert moved <= {m["path"] for m in tree}  # named as Megatron names them
    ran = {m["path"]: _runs_quantized(recipe, m["path"], m["fp8"]) for m in tree}
    assert ran == {m["path"]: m["fp8"] and m["path"] not in moved for m in tree}
    assert get_quant_config_or_none("output_layer", recipe) is None
    program = _module("megatron_gpt", CORPUS / "megatron_gpt.py")
    parsed = program.parse_args(found.files[changes.MEGATRON_ARGS].split())
    assert parsed.first_last_bf16 and (parsed.num_layers_at_start_in_bf16, parsed.num_layers_at_end_in_bf16) == (1, 1)
    assert parsed.te_precision_config_file == megatron_recipe.MEGATRON_RECIPE_YAML
    claim = _module("whatif_claim", BENCHMARKS / "whatif_claim.py")
    applied = claim.applied(folder, claim.PROGRAMS["megatron_gpt"])
    assert applied[applied.index("--te-precision-config-file") + 1] == str(folder / megatron_recipe.MEGATRON_RECIPE_YAML)
    figures = {(r["group"], r["recipe"]): r["predicted_ms"] for r in document["per_recipe"]}
    moved_groups = {r["group"] for r in moves}
    expected = sum(figures[(g["group"], "bf16")] if g["group"] in moved_groups else g["now_ms"]
                   for g in document["groups"])
    assert document["changes"]["predicted_ms"] == pytest.approx(expected)


def test_a_bf16_layers_module_moved_to_fp8_runs_the_measured_recipe_under_megatron(megatron_core, tmp_path):
    """A module of a BF16 first/last layer recommended to FP8 (its siblings in that layer not): the
    file overrides its layer's BF16 with the recipe measured, current scaling in TE's default HYBRID
    format, and Megatron runs exactly those modules quantized."""
    from megatron.core.quantization.utils import get_quant_config_or_none, load_quantization_recipe

    run = group_gemms(gs.check(FIRST_LAST).judgement)
    advised = advice.advise(run, _results_from(MEASURED_H200), {"name": "NVIDIA H200"})
    fc1 = advised.groups["name"] == "decoder.layers.{0,3}.mlp.linear_fc1"
    advised.groups.loc[fc1, "action"] = "move"  # a recommendation the measurement did not make: the file's other path
    assert advised.groups.loc[fc1, "target"].tolist() == ["fp8-current"]
    written = changes.write_changes(run, advised)
    folder = _write(written.files, tmp_path / "written")
    recipe = load_quantization_recipe(str(folder / megatron_recipe.MEGATRON_RECIPE_YAML))
    to_fp8 = {"decoder.layers.0.mlp.linear_fc1", "decoder.layers.3.mlp.linear_fc1"}
    moved = {g for layers in advised.groups.loc[advised.groups["action"] == "move", "layers"] for g in layers}
    ran = {m["path"]: _runs_quantized(recipe, m["path"], m["fp8"]) for m in _megatron_tree()}
    assert ran == {path: (path in to_fp8) or (fp8 and path not in moved)
                   for path, fp8 in ((m["path"], m["fp8"]) for m in _megatron_tree())}
    config = get_quant_config_or_none("decoder.layers.3.mlp.linear_fc1", recipe).config["training_recipe"]
    assert config == {"fp8_quantization_recipe": "tensorwise", "fp8_format": "hybrid",
                      "override_nonquantized_autocast": True}


def _results_from(folder: Path):
    from gemmscope.whatif import measure

    return measure.read_measurement(folder)[0]


HOSTILE = ["module.decoder.layers.1.self_attention.linear_proj", "decoder.layers.[1].mlp.fc*?", 'a"b\nc: #d\'e\\',
           "ünï\U0001f600.x\u2028", "true", "123", "*"]
NEIGHBOURS = ["decoder.layers.1.self_attention.linear_proj_x", "decoder.layers.1.mlp.fc1",
              "decoder.layers.11.self_attention.linear_proj", "x.decoder.layers.1.self_attention.linear_proj",
              "1.mlp.fc*?", "a", "ünï", "false", "12", "**"]


def test_the_recipe_file_names_hostile_module_names_exactly(megatron_core, tmp_path):
    """Module names from a trace may hold quotes, newlines, `#`, fnmatch's `*?[` and any Unicode:
    Megatron's loader reads each back as itself and matches exactly the modules named (as Megatron
    names them, without the `module.` of its wrappers), no neighbour."""
    from megatron.core.quantization.utils import get_quant_config_or_none, load_quantization_recipe

    path = tmp_path / megatron_recipe.MEGATRON_RECIPE_YAML
    path.write_text(megatron_recipe.recipe_file(HOSTILE, ["decoder.layers.0.mlp.linear_fc1"], "fp8-block"),
                    encoding="utf-8")
    recipe = load_quantization_recipe(str(path))
    named = {re.sub(r"^(module\.)*", "", p) for p in HOSTILE}
    keys = {name: getattr(get_quant_config_or_none(name, recipe), "config_key", None)
            for name in [*named, *NEIGHBOURS, "decoder.layers.0.mlp.linear_fc1"]}
    assert {name for name, key in keys.items() if key == "bf16"} == named
    assert keys["decoder.layers.0.mlp.linear_fc1"] == "fp8_block"
    assert all(keys[name] is None for name in NEIGHBOURS)
    assert _runs_quantized(recipe, "decoder.layers.0.mlp.linear_fc1", False)
