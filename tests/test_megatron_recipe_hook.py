"""Megatron-Core's per-module recipe (TransformerConfig.quant_recipe, `--te-precision-config-file`)
under gemmscope's hook, with Megatron's own loader and matcher on the CPU: the config Megatron's
RecipeConfig.match returns for a module carries which config key asked and the glob matcher that
chose it (the first enabled one that matches, as Megatron takes it), and a module no matcher
takes carries nothing. What the te.autocast of such a module then says, and how the check reads
it, is in test_te_ranges.py; the whole path, on a GPU, in test_gpu.py."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gemmscope

HOOK_DIR = Path(gemmscope.__file__).resolve().parent / "autocast_hook"

# Looked for, not imported: importing megatron.core here, at collection, would import torch's
# Inductor before the hook's own tests patch torch (their extern kernels would hold the originals).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("megatron") is None, reason="megatron-core is not installed")

# The per-module YAML of Megatron's docs (megatron/core/extensions/TransformerEngineMixedPrecision.md):
# every linear_proj BF16, every linear_fc2 FP8 block scaling, the rest of the model untouched.
_RECIPE_YAML = """\
configs:
  bf16:
    transformer_engine_config_type: "TEQuantizationParams"
    training_recipe: {}
  block:
    transformer_engine_config_type: "TEQuantizationParams"
    training_recipe:
      fp8_quantization_recipe: "blockwise"
matchers:
  off:
    config: "block"
    type: "glob"
    pattern: "*"
    enabled: false
  proj:
    config: "bf16"
    type: "glob"
    pattern: "*.linear_proj"
    enabled: true
  fc2:
    config: "block"
    type: "glob"
    pattern: "*linear_fc2"
    enabled: true
"""

_PROGRAM = """\
import json, sys
from megatron.core.quantization.quant_config import MatchContext, RecipeConfig
recipe = RecipeConfig.from_yaml_file(sys.argv[1])
asked = {}
for path in ("decoder.layers.0.self_attention.linear_proj", "decoder.layers.1.mlp.linear_fc2",
             "decoder.layers.1.mlp.linear_fc1", "output_layer"):
    config = recipe.match(MatchContext(module_path=path, layer_number=None))
    asked[path] = None if config is None else [config.config_key, vars(config).get("_gemmscope_asked_by")]
print(json.dumps(asked))
"""


def test_megatron_s_match_says_which_config_and_matcher_asked(tmp_path):
    recipe = tmp_path / "precision.yaml"
    recipe.write_text(_RECIPE_YAML)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK_DIR), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _PROGRAM, str(recipe)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gemmscope hook:" not in done.stderr, done.stderr[-3000:]  # every patch applied
    asked = json.loads(done.stdout.splitlines()[-1])
    assert asked == {
        "decoder.layers.0.self_attention.linear_proj": ["bf16", {"quant_config": "bf16", "matcher": "*.linear_proj"}],
        "decoder.layers.1.mlp.linear_fc2": ["block", {"quant_config": "block", "matcher": "*linear_fc2"}],
        "decoder.layers.1.mlp.linear_fc1": None,
        "output_layer": None,
    }
