"""The recommendations written out as the change the run's framework takes, as files to apply.

- Megatron-Core: its arguments `--first-last-layers-bf16 --num-layers-at-start-in-bf16 N
  --num-layers-at-end-in-bf16 M` where they say exactly the recommended change (they act on whole
  transformer layers at the start and the end); else its per-module recipe file
  (`--te-precision-config-file`, megatron_recipe.py) naming only the modules that change, passed
  beside the run's own layer switches as they were. Its output layer and routers are not TE
  modules: nothing moves them to low precision, which is said.
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

import numpy as np
import pandas as pd

from gemmscope.common.sinks import python_literal, yaml_scalar
from gemmscope.whatif.advice import Advice
from gemmscope.whatif.groups import RunGroups
from gemmscope.whatif.megatron_recipe import (
    MEGATRON_RECIPE_YAML,
    MEGATRON_RECIPES,
    PER_MODULE_CLASSES,
    PRECISION_FLAG,
    recipe_file,
)

# A Megatron transformer layer's index in its module path.
_MEGATRON_LAYER = re.compile(r"^(?:module\.)*decoder\.layers\.(\d+)(?=\.)")
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
    # GEMM + quantization ms per step with the files applied as written (they may act on less than
    # the recommendations: a module the framework's change does not reach, such as Megatron's
    # output layer, stays as it ran); NaN where a module it changes was not measured
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
        "low_now": groups["low_precision"], "low_after": groups["low_precision"] ^ moved, "target": groups["target"],
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


def _layer_switches(number: pd.Series, bf16: pd.Series) -> tuple[int, int, bool]:
    """Megatron's `--num-layers-at-start-in-bf16` and `--num-layers-at-end-in-bf16` for the modules
    of its transformer layers (`number`: each one's layer) that run BF16 (`bf16`): the leading and
    trailing layers whose modules all do, and whether those switches say exactly that set."""
    all_bf16 = bf16.groupby(number.to_numpy()).all()
    layers = int(all_bf16.index.max()) + 1 if len(all_bf16) else 0
    start = next((i for i in range(layers + 1) if not all_bf16.get(i, False)), layers)
    end = next((i for i in range(layers + 1) if not all_bf16.get(layers - 1 - i, False)), layers)
    end = min(end, layers - start)
    switched = (number < start) | (number >= layers - end)
    return start, end, bool((switched.to_numpy() == bf16.to_numpy()).all())


def _switch_args(start: int, end: int) -> str:
    return (f"--first-last-layers-bf16 --num-layers-at-start-in-bf16 {start} --num-layers-at-end-in-bf16 {end}"
            if start or end else "")


def _megatron(run: RunGroups, modules: pd.DataFrame) -> Changes:
    """Megatron's layer switches where they say exactly the recommended change, else its per-module
    recipe file naming the modules that change, beside the run's own switches as they were."""
    changes = Changes(run.framework)
    number = modules["path"].str.extract(_MEGATRON_LAYER)[0].astype("Int64")
    classes = modules["module_class"].str.split("/")
    te = classes.map(lambda c: set(c) <= TE_CLASSES).to_numpy()  # the output layer, a router: neither reaches them
    in_layers = te & number.notna().to_numpy()
    per_module = classes.map(lambda c: set(c) <= PER_MODULE_CLASSES).to_numpy()
    low_now = modules["low_now"].to_numpy(dtype=bool)
    wanted = np.where(te, modules["low_after"].to_numpy(dtype=bool), low_now)
    start, end, switches_say_it = _layer_switches(number[in_layers], pd.Series(~wanted[in_layers]))
    if switches_say_it and (wanted == low_now)[te & ~in_layers].all():
        args = _switch_args(start, end)
        changes.files[MEGATRON_ARGS] = (args or "# no layer in BF16: leave out --first-last-layers-bf16") + "\n"
        changes.lines.append((f"Megatron-Core arguments: {args}" if args else "Megatron-Core arguments: none (every "
                              "layer at the run's recipe; leave out --first-last-layers-bf16)") + f" ({MEGATRON_ARGS})")
        applied = wanted
    else:
        applied = _megatron_per_module(changes, modules, number, in_layers, per_module, wanted)
    outside = modules[~te]
    stuck = outside[~outside["low_now"] & outside["low_after"]]
    for name in stuck["name"].unique():
        what = "Megatron's output layer" if name == "output_layer" else f"{name} (Megatron's, not a TE module)"
        changes.notes.append(f"{what}: no switch moves it to low precision: it stays BF16")
    changes.predicted_ms = _applied_ms(modules, pd.Series(applied, index=modules.index))
    return changes


def _megatron_per_module(changes: Changes, modules: pd.DataFrame, number: pd.Series, in_layers: np.ndarray,
                         per_module: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Megatron's per-module recipe file for the modules whose precision changes (those it can move,
    to a recipe it can name), and its flag beside the run's layer switches as they were; the
    precision each module runs at with both applied."""
    low_now = modules["low_now"].to_numpy(dtype=bool)
    to_bf16 = per_module & low_now & ~wanted
    to_low = per_module & ~low_now & wanted
    recipes = modules.loc[to_low, "target"].unique()
    recipe = recipes[0] if len(recipes) else None
    if recipe is not None and (len(recipes) > 1 or recipe not in MEGATRON_RECIPES):
        changes.notes.append(f"Megatron's per-module file takes none of {', '.join(map(str, recipes))}: "
                             f"{', '.join(modules.loc[to_low, 'name'].unique())} stay BF16")
        to_low[:] = False
    unmoved = (wanted != low_now) & ~per_module
    for name in modules.loc[unmoved, "name"].unique():
        changes.notes.append(f"{name}: Megatron's per-module file does not reach its module class: it stays as it is")
    start, end, _ = _layer_switches(number[in_layers], pd.Series(~low_now[in_layers]))
    moves = bool(to_bf16.any() or to_low.any())  # else nothing the file can move: no file
    args = " ".join(filter(None, [_switch_args(start, end), f"{PRECISION_FLAG} {MEGATRON_RECIPE_YAML}" * moves]))
    changes.files[MEGATRON_ARGS] = (args or "# no layer in BF16: leave out --first-last-layers-bf16") + "\n"
    if moves:
        changes.files[MEGATRON_RECIPE_YAML] = recipe_file(modules.loc[to_bf16, "path"].tolist(),
                                                          modules.loc[to_low, "path"].tolist(), recipe)
        moved = [f"{to_bf16.sum()} modules to BF16 ({', '.join(modules.loc[to_bf16, 'name'].unique())})"] * bool(
            to_bf16.any()) + [f"{to_low.sum()} to {recipe} ({', '.join(modules.loc[to_low, 'name'].unique())})"] * bool(
            to_low.any())
        changes.lines.append(f"Megatron-Core per-module recipe: {'; '.join(moved)}, every other module as it ran "
                             f"({MEGATRON_RECIPE_YAML}, megatron-core 0.16 or newer)")
    changes.lines.append(f"Megatron-Core arguments: {args or 'none'} ({MEGATRON_ARGS}: the run's own layer switches "
                         f"as they were{', and the per-module file' * moves})")
    return low_now ^ to_bf16 ^ to_low


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
        changes.files[TE_DEBUG_YAML] = te_debug_yaml(to_bf16)
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


def debug_api_names(paths: list[str]) -> list[str]:
    """The layer names nvdlfw_inspect's infer_and_assign_layer_names(model) gives the modules at
    `paths` (module paths from the model's root): "model." before the path."""
    return [f"model.{p}" for p in paths]


def te_debug_yaml(paths: list[str]) -> str:
    """A TE debug-API config keeping the layers at `paths` out of low precision, named as
    debug_api.infer_and_assign_layer_names names them (debug_api_names); the pattern quoted and
    escaped (sinks.yaml_scalar), as a module name from a trace may hold a quote or a newline."""
    pattern = "^(" + "|".join(re.escape(p) for p in debug_api_names(paths)) + ")$"
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
