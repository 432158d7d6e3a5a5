"""Megatron-Core's side of gemmscope's start-up hook (sitecustomize.py beside this file): which
config of a per-module recipe (TransformerConfig.quant_recipe, --te-precision-config-file's glob
matchers -> configs) asked a module's precision, and the matcher that chose it. Megatron keeps
neither on the module (only the recipe parsed from the config), so the match is marked on the
config it returns and carried onto the parsed recipe; the te.autocast the module enters for its
own recipe then says them (gemmscope_te, gemmscope_protocol.MODULE_RECIPE_FIELDS)."""

from gemmscope_modules import running_module
from gemmscope_protocol import EVALUATION_PHASE
from gemmscope_records import patch

QUANT_CONFIG_MODULE = "megatron.core.quantization.quant_config"
TE_EXTENSIONS_MODULE = "megatron.core.extensions.transformer_engine"
_ASKED_BY = "_gemmscope_asked_by"
_MISSES = "which config of Megatron's per-module recipe asked each module's precision, and its matcher"
_matched = False  # a per-module recipe matched a module: only then are te.autocast's callers read


def patch_quant_config(quant_config_module) -> None:
    def match(original):
        def matched(self, operator_context):
            global _matched
            config = original(self, operator_context)
            if config is not None:
                # the first matcher that matches is the one Megatron took (RecipeConfig.match_to_config_key)
                chosen = next((m for m in self.matchers if m.match(operator_context) is not None), None)
                config.__dict__[_ASKED_BY] = {"quant_config": config.config_key,
                                              "matcher": getattr(chosen, "pattern", None)}
                _matched = True
            return config
        return matched

    patch(quant_config_module, "RecipeConfig.match", match, _MISSES)


def patch_te_extensions(extensions_module) -> None:
    def parse(original):
        def parsed(quant_config):
            params = original(quant_config)
            asked_by = getattr(quant_config, "__dict__", {}).get(_ASKED_BY)
            if asked_by is not None:
                params.__dict__[_ASKED_BY] = asked_by
            return params
        return staticmethod(parsed)

    patch(extensions_module, "TEQuantizationParams.parse_from_config", parse, _MISSES)


def module_recipe(frame) -> dict | None:
    """The per-module recipe of the module whose forward enters te.autocast from `frame` (None
    for every other region: a layer's, the program's): its config, matcher, layer path, and
    whether its evaluation recipe ran (Megatron's TEQuantizationParams picks it where the module
    is not training)."""
    if not _matched:
        return None
    module = running_module(frame)
    params = getattr(module, "te_quant_params", None)
    asked_by = getattr(params, "__dict__", {}).get(_ASKED_BY)
    if asked_by is None:
        return None
    evaluation = not module.training and getattr(params, "evaluation_recipe", None) is not None
    return {**asked_by, "layer": module.__dict__.get("_gemmscope_path"),
            "phase": EVALUATION_PHASE if evaluation else None}
