"""The per-module recipe file whatif writes for Megatron-Core (`--te-precision-config-file`), loaded
by Megatron's own loader and judged by Megatron's own rule of whether a module runs quantized
(megatron-core's TE extension, which imports without a GPU), against the module tree the corpus
program wrote from the GPTModel itself (its *.expected.json, not gemmscope's output)."""

from __future__ import annotations

import re

from gemmscope.whatif import megatron_recipe


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
