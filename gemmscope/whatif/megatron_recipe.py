"""Megatron-Core's per-module recipe file: the YAML its `--te-precision-config-file` loads
(megatron-core 0.16 or newer: RecipeConfig.from_yaml_file into TransformerConfig.quant_recipe;
megatron/core/extensions/TransformerEngineMixedPrecision.md).

How Megatron reads it: once the model is built, GPTModel walks its own `named_modules()` and, for
each TE linear (TELinear and its column/row-parallel kinds, TELayerNormColumnParallelLinear,
TEGroupedLinear), takes the config of the first enabled matcher whose glob (fnmatch, the whole
name) matches the module's path. The paths are the GPTModel's own: `decoder.layers.1.mlp.linear_fc2`,
the layer by its index in the ModuleList (from 0), without the `module.` of the Float16Module and
DDP wrappers it is trained in. A module no matcher names keeps the run's precision as it was (its
layer's autocast: the run's recipe, or BF16 in a `--first-last-layers-bf16` layer), so the file names
only the modules it moves, each by its exact path (fnmatch has no braces, and a `*` could reach a
module meant to stay): to BF16 (a training recipe without a quantization recipe, which overrides the
layer's FP8 autocast), or to the recipe measured (overriding a BF16 layer's autocast).
"""

from __future__ import annotations

import re

from gemmscope.common.sinks import yaml_text

MEGATRON_RECIPE_YAML = "megatron_precision.yaml"
PRECISION_FLAG = "--te-precision-config-file"
# The TE classes (as groups name them) of the Megatron modules that take a per-module config
# (finish_init): TELinear's kinds, TELayerNormColumnParallelLinear, TEGroupedLinear.
PER_MODULE_CLASSES = {"Linear", "LayerNormLinear", "GroupedLinear"}
# Megatron's per-module config for each recipe whatif measures, as the runner ran it (TE's recipe with
# TE's defaults: current scaling in HYBRID, the others E4M3). Delayed scaling is not in its scope.
MEGATRON_RECIPES = {
    "fp8-current": {"fp8_quantization_recipe": "tensorwise", "fp8_format": "hybrid"},
    "fp8-block": {"fp8_quantization_recipe": "blockwise", "fp8_format": "e4m3"},
    "mxfp8": {"fp8_quantization_recipe": "mxfp8", "fp8_format": "e4m3"},
    "nvfp4": {"fp4_quantization_recipe": "nvfp4"},
}
# The wrappers Megatron's trainer puts around the GPTModel (Float16Module, DDP: each a `module`).
_WRAPPERS = re.compile(r"^(?:module\.)*")


def megatron_name(path: str) -> str:
    """A module's path as Megatron matches it: the GPTModel's own, without its wrappers."""
    return _WRAPPERS.sub("", path, count=1)


def glob_literal(name: str) -> str:
    """An fnmatch pattern that matches exactly `name`: its `*`, `?` and `[` each in brackets."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _config(training_recipe: dict) -> dict:
    return {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": training_recipe}


def recipe_file(to_bf16: list[str], to_low: list[str], recipe: str | None) -> str:
    """The file that moves the modules at `to_bf16` (paths as gemmscope reports them) to BF16 and
    those at `to_low` to `recipe` (one of MEGATRON_RECIPES where `to_low` names any), and names no
    other module."""
    configs: dict = {}
    matchers: dict = {}
    for config, paths in (("bf16", to_bf16), (str(recipe).replace("-", "_"), to_low)):
        if not paths:
            continue
        configs[config] = _config({} if config == "bf16" else MEGATRON_RECIPES[str(recipe)]
                                  | {"override_nonquantized_autocast": True})
        for i, path in enumerate(sorted(paths)):
            matchers[f"{config}_{i + 1}"] = {"config": config, "type": "glob",
                                             "pattern": glob_literal(megatron_name(path)), "enabled": True}
    return ("# Written by gemmscope whatif: Megatron-Core's per-module precision (megatron-core 0.16 or newer).\n"
            f"# Pass it with the run's other arguments as they were: {PRECISION_FLAG} {MEGATRON_RECIPE_YAML}\n"
            "# It names only the modules it moves; every other module keeps the run's precision.\n"
            + yaml_text({"configs": configs, "matchers": matchers}))
