"""The recommendations written out as the change the run's framework takes, as files to apply.

- Megatron-Core: its arguments `--first-last-layers-bf16 --num-layers-at-start-in-bf16 N
  --num-layers-at-end-in-bf16 M`. They act on whole transformer layers at the start and the end:
  a layer goes BF16 where its modules together are faster in BF16; a recommendation finer than
  that, or for a middle layer, is said, with a TE debug-API file that does it per module. Its
  output layer is not a TE module: no switch moves it to low precision, which is said.
- torchao (and accelerate's torchao backend), plain torch: a Python file defining
  `module_filter_fn(module, fqn)`, true for the FQNs to run in float8, for
  `convert_to_float8_training(model, module_filter_fn=...)` or
  `AORecipeKwargs(module_filter_func=...)`.
- Transformer Engine (plain, or a Hugging Face model accelerate's TE backend converted): a TE
  debug-API YAML (TE's DisableQuantizationLayer feature for nvdlfw_inspect) that keeps the named layers in high
  precision, and a `te.autocast` region snippet for either direction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from gemmscope.common.sinks import python_literal, yaml_scalar
from gemmscope.whatif.advice import Advice
from gemmscope.whatif.groups import RunGroups

# A Megatron transformer layer's path up to its index, and the index.
_MEGATRON_LAYER = re.compile(r"^((?:module\.)*decoder\.layers\.)(\d+)(?=\.)")
MEGATRON_ARGS = "megatron_args.txt"
MODULE_FILTER = "module_filter.py"
TE_DEBUG_YAML = "te_debug_bf16.yaml"
TE_AUTOCAST = "te_autocast_region.py"
# TE's module classes (as groups name them): what Megatron's precision switches act on.
TE_CLASSES = {"Linear", "LayerNormLinear", "LayerNormMLP", "GroupedLinear"}


@dataclass
class Changes:
    """The files to apply (name -> text) and what the report says of them."""

    framework: str
    files: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # the change, said in the report
    notes: list[str] = field(default_factory=list)  # where the framework cannot do what is recommended
    # GEMM + quantization ms per step with the files applied as written (they may act on more or
    # less than the recommendations: Megatron's whole layers); NaN where a module was not measured
    predicted_ms: float = float("nan")


def _applied_ms(modules: pd.DataFrame, low: pd.Series) -> float:
    """Σ per module of its time at the precision the written change leaves it at (`low`: low
    precision), NaN where that time was not measured."""
    times = modules["low_ms"].where(low, modules["bf16_ms"])
    return float(times.sum()) if times.notna().all() else float("nan")


def module_states(run: RunGroups, advice: Advice) -> pd.DataFrame:
    """Per module path: its group, whether it runs low precision now and after the recommended
    changes, and its time per step in BF16 and in low precision (NaN where not measured)."""
    groups = advice.groups
    moved = groups["action"] == "move"
    per_module = pd.DataFrame({
        "group": groups["group"], "name": groups["name"], "layers": groups["layers"],
        "module_class": groups["module_class"],
        "low_now": groups["low_precision"], "low_after": groups["low_precision"] ^ moved,
        "bf16_ms": groups["now_ms"].where(~groups["low_precision"], groups["target_ms"]) / groups["modules"],
        "low_ms": groups["target_ms"].where(~groups["low_precision"], groups["now_ms"]) / groups["modules"],
    }).explode("layers").rename(columns={"layers": "path"})
    return per_module.reset_index(drop=True)


def write_changes(run: RunGroups, advice: Advice) -> Changes:
    modules = module_states(run, advice)
    if run.framework == "megatron-core":
        return _megatron(run, modules)
    if run.framework in ("torchao", "torch"):
        return _torchao(run, modules)
    return _te(run, modules)


def _megatron(run: RunGroups, modules: pd.DataFrame) -> Changes:
    changes = Changes(run.framework)
    number = modules["path"].str.extract(_MEGATRON_LAYER)[1].astype("Int64")
    # what Megatron's switches reach: the TE modules of its transformer layers (not the output
    # layer, nor a router, which run BF16 whatever the layer's precision)
    switchable = (modules["module_class"].str.split("/").map(lambda c: set(c) <= TE_CLASSES).to_numpy()
                  & number.notna().to_numpy())
    number = number.where(switchable)
    in_layers = modules[switchable].assign(layer=number[switchable])
    per_layer = in_layers.groupby("layer").agg(bf16_ms=("bf16_ms", "sum"), low_ms=("low_ms", "sum"),
                                               low_now=("low_now", "all"), mixed_after=("low_after", "nunique"))
    measured = per_layer[["bf16_ms", "low_ms"]].notna().all(axis=1)
    faster_bf16 = per_layer["bf16_ms"] < per_layer["low_ms"]
    bf16_after = (faster_bf16 & measured) | (~per_layer["low_now"] & ~measured)
    layers = per_layer.index.max() + 1 if len(per_layer) else 0
    wanted = sorted(int(n) for n in per_layer.index[bf16_after])
    start = next((i for i in range(layers + 1) if i not in wanted), layers)
    end = next((i for i in range(layers + 1) if layers - 1 - i not in wanted), layers)
    end = min(end, layers - start)
    args = (f"--first-last-layers-bf16 --num-layers-at-start-in-bf16 {start} --num-layers-at-end-in-bf16 {end}"
            if start or end else "")
    changes.files[MEGATRON_ARGS] = (args or "# no layer in BF16: leave out --first-last-layers-bf16") + "\n"
    said = (f"Megatron-Core arguments: {args}" if args else
            "Megatron-Core arguments: none (every layer at the run's recipe; leave out --first-last-layers-bf16)")
    changes.lines.append(said + f" ({MEGATRON_ARGS})")
    changes.notes.append("Megatron's switches act on whole transformer layers (the first N and last M)")
    middle = [n for n in wanted if start <= n < layers - end]
    finer = in_layers[in_layers["layer"].map(per_layer["mixed_after"]) > 1]
    bf16_te = in_layers[~in_layers["low_after"]]
    not_paying = debug_api_not_paying(run, bf16_te) if len(finer) or middle else None
    per_module = "TE's debug API would do it per module (not written: below)" if not_paying else \
        f"{TE_DEBUG_YAML} does it per module"
    if middle:
        changes.notes.append(f"layers {', '.join(map(str, middle))} would be faster in BF16, but Megatron keeps only "
                             f"the first and last layers in BF16: {per_module}")
    if len(finer):
        changes.notes.append("a recommendation is finer than whole layers (some modules of a layer BF16, others "
                             f"not): Megatron's arguments cannot say it; {per_module}")
    outside = modules[~switchable]
    stuck = outside[~outside["low_now"] & outside["low_after"]]
    for name in stuck["name"].unique():
        what = "Megatron's output layer" if name == "output_layer" else f"{name} (Megatron's, not a TE module)"
        changes.notes.append(f"{what}: no switch moves it to low precision: it stays BF16")
    applied_bf16 = (number < start) | (number >= layers - end)
    changes.predicted_ms = _applied_ms(modules, (modules["low_now"] & number.isna()) | (
        number.notna() & ~applied_bf16).fillna(False))
    if not_paying:
        changes.notes.append(not_paying)
    elif len(finer) or middle:
        changes.files[TE_DEBUG_YAML] = te_debug_yaml(bf16_te["path"].tolist(), run.framework)
    return changes


def _torchao(run: RunGroups, modules: pd.DataFrame) -> Changes:
    changes = Changes(run.framework)
    fqns = sorted(modules.loc[modules["low_after"], "path"].unique())
    changes.files[MODULE_FILTER] = module_filter_file(fqns)
    changes.predicted_ms = _applied_ms(modules, modules["low_after"])
    # said by group (layer numbers folded), the file lists every FQN
    kept = sorted(modules.loc[~modules["low_after"], "name"].unique())
    changes.lines.append(f"torchao module filter: float8 for {len(fqns)} modules, BF16 for {', '.join(kept) or 'none'} "
                         f"({MODULE_FILTER}: convert_to_float8_training(model, module_filter_fn=module_filter_fn), or "
                         "accelerate's AORecipeKwargs(module_filter_func=module_filter_fn))")
    return changes


# TE's debug API's host work per layer it names, per training step: measured once, +11.2 ms a step for
# 28 layers (an HF Llama on accelerate's TE backend, H200 host, 2026-11-27; benchmarks/HISTORY.md).
DEBUG_API_HOST_MS_PER_LAYER = 0.4


def debug_api_not_paying(run: RunGroups, named: pd.DataFrame) -> str | None:
    """Why the debug-API file that keeps the `named` modules in high precision is not written, or
    None. Where the GPU idles over half the step, host work lengthens the step one for one: a file
    whose host work exceeds the GEMM time it saves makes the step slower."""
    saved = float((named["low_ms"] - named["bf16_ms"]).where(named["low_now"], 0).sum())
    cost = DEBUG_API_HOST_MS_PER_LAYER * named["path"].nunique()
    if not run.busy_ms < run.step_ms / 2 or cost <= saved:  # GPU-bound, or no steps to tell: written
        return None
    return (f"{TE_DEBUG_YAML} not written: TE's debug API would save {saved:.2f} ms of GEMM time a step, but this "
            f"step's GPU idles {1 - run.busy_ms / run.step_ms:.0%} of it, and the API's host work (~"
            f"{DEBUG_API_HOST_MS_PER_LAYER} ms a layer a step, measured once) would add ~{cost:.1f} ms to it; a "
            "te.autocast region adds no such work")


def _te(run: RunGroups, modules: pd.DataFrame) -> Changes:
    changes = Changes(run.framework)
    bf16_after = modules["low_now"] & ~modules["low_after"]
    to_bf16 = sorted(modules.loc[bf16_after, "path"].unique())
    to_low = sorted(modules.loc[~modules["low_now"] & modules["low_after"], "path"].unique())
    changes.predicted_ms = _applied_ms(modules, modules["low_after"])
    not_paying = debug_api_not_paying(run, modules[bf16_after]) if to_bf16 else None
    if to_bf16 and not_paying:
        changes.lines.append(f"TE: {len(to_bf16)} modules to keep in high precision: {not_paying}")
    elif to_bf16:
        changes.files[TE_DEBUG_YAML] = te_debug_yaml(to_bf16, run.framework)
        changes.lines.append(f"TE debug API: {len(to_bf16)} modules kept in high precision ({TE_DEBUG_YAML}; needs "
                             "nvdlfw_inspect and debug_api.initialize(config_file=..., feature_dirs=[TE's "
                             "transformer_engine/debug/features]) in the program, and debug_api.step() after each step)")
    if to_bf16 or to_low:
        changes.files[TE_AUTOCAST] = te_autocast_snippet(to_bf16, to_low, run.recipes)
        changes.lines.append(f"{'or ' * (TE_DEBUG_YAML in changes.files)}a te.autocast region around those modules' "
                             f"calls ({TE_AUTOCAST})")
    if TE_DEBUG_YAML in changes.files:
        # measured: whatif_claim.py's hf_accelerate_te, benchmarks/HISTORY.md
        changes.notes.append(f"TE's debug API ({TE_DEBUG_YAML}) runs Python on the host for every tensor of the layers "
                             "it names: on an HF Llama on accelerate's TE backend (28 layers named, H200) the GEMM "
                             "time fell as predicted but the step, whose GPU idled 83 % of it, went from 34.7 to 45.8 "
                             "ms. Where the GPU mostly waits on the host, that cost can exceed the gain; a te.autocast "
                             "region adds no such work")
    if run.framework == "hf-accelerate-te":
        changes.notes.append("accelerate's TE backend converts every nn.Linear and takes no filter: TE's debug API or "
                             "a te.autocast region in the model's code keeps modules in high precision, or use "
                             "accelerate's torchao backend with a module filter. With FP32 "
                             "parameters TE 2.20.2 failed in cuBLAS on the first GEMM the file keeps in high "
                             "precision; with BF16 parameters it ran (H200, 2026-11-27)")
    if not changes.files:
        changes.lines.append("no change to write: every group is at its faster precision")
    return changes


def module_filter_file(fqns: list[str]) -> str:
    """torchao's filter: float8 for exactly `fqns`."""
    listed = "".join(f"    {fqn!r},\n" for fqn in fqns)
    return ('"""Written by gemmscope whatif: the modules to train in float8 (torchao), by fully qualified name.\n\n'
            "    from module_filter import module_filter_fn\n"
            "    convert_to_float8_training(model, module_filter_fn=module_filter_fn)\n"
            "    # or accelerate: AORecipeKwargs(module_filter_func=module_filter_fn)\n"
            '"""\n\n'
            f"FLOAT8_FQNS = frozenset({{\n{listed}}})\n\n\n"
            "def module_filter_fn(module, fqn: str) -> bool:\n"
            "    return fqn in FLOAT8_FQNS\n")


def debug_api_names(paths: list[str], framework: str) -> list[str]:
    """The layer names nvdlfw_inspect's infer_and_assign_layer_names(model) gives the modules at
    `paths` (module paths from the model's root): "model." before the path, and, under a ModuleList
    whose children carry a `layer_number` (Megatron-Core's transformer layers, numbered from 1), that
    number in place of the child's index."""
    if framework == "megatron-core":
        paths = [_MEGATRON_LAYER.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + 1}", p) for p in paths]
    return [f"model.{p}" for p in paths]


def te_debug_yaml(paths: list[str], framework: str) -> str:
    """A TE debug-API config keeping the layers at `paths` out of low precision, named as
    debug_api.infer_and_assign_layer_names names them (debug_api_names)."""
    pattern = "^(" + "|".join(re.escape(p) for p in debug_api_names(paths, framework)) + ")$"
    return ("# Written by gemmscope whatif: these TE layers run their GEMMs in high precision.\n"
            "# Needs nvdlfw_inspect, and in the program, before its first TE module is built:\n"
            "#   import nvdlfw_inspect.api as debug_api\n"
            "#   debug_api.initialize(config_file=\"te_debug_bf16.yaml\", feature_dirs=[<transformer_engine>/debug/features])\n"
            "# then, once the model is built (the names below are the ones it gives):\n"
            "#   debug_api.infer_and_assign_layer_names(model)\n"
            "# and debug_api.step() after each training step.\n"
            "# A Transformer Engine older than DisableQuantizationLayer: DisableFP8Layer, same fields.\n"
            "gemmscope_whatif_bf16:\n"
            "  enabled: True\n"
            "  layers:\n"
            f"    layer_name_regex_pattern: {yaml_scalar(pattern)}\n"
            "  transformer_engine:\n"
            "    DisableQuantizationLayer:\n"
            "      enabled: True\n")


def te_autocast_snippet(to_bf16: list[str], to_low: list[str], recipes: list[str]) -> str:
    lines = ["# Written by gemmscope whatif: te.autocast regions around the calls of these modules.",
             "import transformer_engine.pytorch as te", ""]
    if to_bf16:
        lines += ["# in high precision (inside the program's FP8 autocast):", *[f"#   {python_literal(p)}" for p in to_bf16],
                  "with te.autocast(enabled=False):", "    out = module(x)  # a GroupedLinear: module(x, m_splits)", ""]
    if to_low:
        recipe = recipes[0] if recipes else "fp8-current"
        lines += [f"# in low precision ({python_literal(recipe)}):", *[f"#   {python_literal(p)}" for p in to_low],
                  "with te.autocast(enabled=True, recipe=recipe):", "    out = module(x)  # a GroupedLinear: module(x, m_splits)",
                  ""]
    return "\n".join(lines)
