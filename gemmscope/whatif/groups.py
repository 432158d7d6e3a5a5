"""A run's GEMMs grouped for `gemmscope whatif`: by module pattern and the precision they ran at.

A module's layer numbers are folded where its precision is the same: the four
`decoder.layers.N.mlp.linear_fc1` of a model that runs layers 0 and 3 in BF16 and the others in
FP8 make two groups, `decoder.layers.{1,2}.mlp.linear_fc1` (FP8) and
`decoder.layers.{0,3}.mlp.linear_fc1` (BF16); a module met in one precision at every number is
`decoder.layers.*.mlp.linear_fc1`. Per group: its module class, the distinct shapes each pass ran,
the calls and the GPU time per training step (its GEMM kernels and the quantization kernels that
feed them), measured from the trace.

A grouped module (TE's GroupedLinear: one GEMM per expert) has its shape from the members the
hook recorded of each call (gemmscope_protocol.MEMBERS_FIELD): tokens the members' sum, and
`m_splits`, the tokens per member. Routing changes them every call (and the tokens in all, where
the program pads each expert's): per group and (in, out) features, the one call whose sizes,
largest first, are nearest the calls' average stands for them all, one shape to time (a call that
ran, so its sizes are ones the program's recipe takes). A grouped module whose members were not
recorded has no shape.

Per step: over the run's steps (gemmscope.diagnosing.steps) after the first (the first holds the warm-up:
autotuning, lazy initialisation), averaged over ranks; without steps, over the whole capture,
which the groups say.

Quantization kernels belong to a group where the attribution names their module (torchao's
casts, which the hook's records enclose); the others (TE's, launched in C++ beside the GEMM) to
the low-precision GEMM launched next on the same thread, which is the one they quantize for:
TE quantizes a GEMM's operands just before it calls the GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gemmscope.autocast_hook.gemmscope_protocol import parse_members
from gemmscope.diagnosing.steps import NO_STEPS, described, launching_step, located_steps
from gemmscope.judging.judgement import Judgement, recorded_recipes
from gemmscope.judging.recipes import HIGH_PRECISIONS, RECIPES

# A number between dots in a module path: a layer, an expert, an index in a container.
_NUMBER = r"(?<![^.])\d+(?![^.])"
# Per pass, the module's (tokens, in-features, out-features) from the GEMM's (m, k, n) as the
# hook records it (TE and torch alike: fprop X·Wᵀ is (tokens, in, out), dgrad (tokens, out, in),
# wgrad (out, tokens, in)).
_MODULE_DIMS = {"fprop": ("gemm_m", "gemm_k", "gemm_n"), "dgrad": ("gemm_m", "gemm_n", "gemm_k"),
                "wgrad": ("gemm_k", "gemm_n", "gemm_m")}
# The request the torchao hook records for a tensor-wise float8 Linear, as whatif names the recipe.
TORCHAO_RECIPES = {"fp8": "fp8-tensorwise", "fp8-rowwise": "fp8-rowwise"}
# The frameworks whatif writes a change for (changes.py) and how it tells them apart.
FRAMEWORKS = ("megatron-core", "hf-accelerate-te", "transformer-engine", "torchao", "torch")
# A layer number in a group's name: one, or folded (`*`, `{0,3}`: _group_names).
_LAYER = r"(?:\d+|\*|\{[\d,]+\})"
_MEGATRON_PATH = rf"^(?:module\.)*decoder\.layers\.{_LAYER}\.(?:self_attention|mlp)\.|^output_layer$"
_HF_PATH = rf"^(?:model\.)?(?:model\.)?layers\.{_LAYER}\.(?:self_attn|mlp)\.|^lm_head$"


@dataclass
class RunGroups:
    """A run's GEMM groups and what the figures per step rest on."""

    groups: pd.DataFrame  # one row per group (GROUP_COLUMNS)
    shapes: pd.DataFrame  # per group and module shape: passes, launches per step, time now per step (and its GEMMs')
    framework: str  # FRAMEWORKS
    recipes: list[str]  # the recipes the run's te.autocast regions recorded
    steps: int  # steps the figures are per (0: the whole capture)
    steps_note: str  # how the steps were found, or that there were none
    gpu: str | None  # the trace's GPU
    notes: list[str] = field(default_factory=list)
    step_ms: float = float("nan")  # the mean step's wall time on the host (NaN without steps)
    busy_ms: float = float("nan")  # kernel time per step, all kernels (NaN without steps)


def _folded_patterns(layer: pd.Series) -> pd.Series:
    return layer.str.replace(_NUMBER, "*", regex=True)


def group_gemms(result: Judgement, step_range: str | None = None) -> RunGroups:
    """The run's GEMMs grouped (module docstring), with their time per step."""
    kernels = result.job.kernels
    gemms = result.gemms
    steps, pattern = located_steps(result, step_range)
    found = described(pattern) if pattern is not None else None  # a pattern whenever steps were found
    kernel_step = launching_step(kernels, steps) if len(steps) else np.zeros(len(kernels), dtype=int)
    gemm_rows = gemms["kernel_row"].to_numpy()
    unstepped = len(steps) > 0 and not (kernel_step[gemm_rows] >= 0).any()
    if unstepped:  # ranges that repeat, but launch none of the GEMMs: not the training steps
        steps = steps.iloc[0:0]
    if len(steps):
        first = steps.groupby(["trace", "pid"])["index"].transform("min")
        # the first step of each process holds the warm-up; a run of one step keeps it
        counted = steps[(steps["index"] != first) | (steps.groupby(["trace", "pid"])["index"].transform("size") == 1)]
        keep_step = np.isin(kernel_step, counted["index"].unique()) & (kernel_step >= 0)
        per_process = counted.groupby(["trace", "pid"]).size()
        step_count = int(round(per_process.mean()))
        processes = len(per_process)
        dropped = len(steps) - len(counted)
        steps_note = (f"per step: {step_count} steps{' after the first' * bool(dropped)}: {found}"
                      f"{f', averaged over {processes} processes' if processes > 1 else ''}")
        step_ms = float((counted["end"] - counted["start"]).mean()) / 1e6
        busy_ms = float(kernels.loc[keep_step, "duration_ns"].sum()) / (step_count * processes) / 1e6
    else:
        keep_step = np.ones(len(kernels), dtype=bool)
        step_count, processes = 0, max(1, kernels["global_pid"].nunique())
        step_ms = busy_ms = float("nan")
        steps_note = (f"per whole capture: {found} hold none of its GEMMs; "
                      f"{NO_STEPS.split(', ', 1)[1]}" if unstepped else f"per whole capture: {NO_STEPS}")
    divisor = max(step_count, 1) * processes

    rows = gemms[keep_step[gemm_rows]].copy()
    rows["layer"] = rows["layer"].astype("object").where(rows["layer"].notna(), rows["module"].astype("object"))
    rows["quant_ns"] = _quantize_ns(kernels, rows, keep_step)
    rows["pattern"] = _folded_patterns(rows["layer"].astype(str))
    rows["precision"] = rows["precision"].astype("object").fillna("unknown")
    module_precision = (rows.groupby("layer")["precision"]
                        .agg(lambda p: "+".join(sorted(set(p)))).rename("group_precision"))
    rows = rows.join(module_precision, on="layer")
    rows["module_class"] = rows["te_module"].astype("object").fillna(rows["module"].astype("object")).str.lstrip("_")
    rows["number"] = rows["layer"].astype(str).str.extract(f"({_NUMBER})", expand=False)
    rows["time_ns"] = rows["duration_ns"].astype("int64") + rows["quant_ns"]
    tokens, inputs, outputs = _module_dims(rows)
    members = _member_dims(rows)
    rows["tokens"] = tokens.fillna(members["tokens"])
    rows["in_features"], rows["out_features"] = inputs.fillna(members["in"]), outputs.fillna(members["out"])
    rows["m_splits"] = members["m_splits"]
    for dim in ("tokens", "in_features", "out_features"):  # a backward node's GEMMs: their module's forward shape
        rows[dim] = rows[dim].fillna(rows.groupby("layer")[dim].transform("first"))
    rows["call_share"] = _call_shares(rows)

    key = ["pattern", "group_precision"]
    precisions_per_pattern = rows.groupby("pattern")["group_precision"].transform("nunique")
    rows["name"] = _group_names(rows, precisions_per_pattern > 1)
    grouped = rows.groupby(key, sort=False)
    groups = pd.DataFrame({
        "name": grouped["name"].first(),
        "module_class": grouped["module_class"].agg(lambda c: "/".join(sorted(set(c)))),
        "modules": grouped["layer"].nunique(),
        "layers": grouped["layer"].agg(lambda paths: sorted(set(paths))),
        "requested": grouped["requested_a"].agg(_most_common) if "requested_a" in rows else None,
        "gemms_per_step": grouped.size() / divisor,
        "calls_per_step": grouped["call_share"].sum().round() / divisor,
        "gemm_ms": grouped["duration_ns"].sum() / divisor / 1e6,
        "quant_ms": grouped["quant_ns"].sum() / divisor / 1e6,
    }).reset_index().rename(columns={"group_precision": "precision"})
    groups["now_ms"] = groups["gemm_ms"] + groups["quant_ms"]
    groups["low_precision"] = ~groups["precision"].str.split("+").map(lambda p: set(p) <= set(HIGH_PRECISIONS))
    recipes = recorded_recipes(result.job.traces)
    framework = detect_framework(groups, recipes)
    groups["now_recipe"] = _now_recipes(groups, framework, recipes)
    groups = groups.sort_values("now_ms", ascending=False, ignore_index=True)
    groups.insert(0, "group", [f"g{i + 1}" for i in range(len(groups))])

    shape_rows = rows.merge(groups[["pattern", "precision", "group"]].rename(columns={"precision": "group_precision"}),
                            on=key)
    shape_rows = _standing_calls(shape_rows)
    shapes = (shape_rows.groupby(["group", "tokens", "in_features", "out_features"], dropna=False, sort=False)
              .agg(passes=("te_pass", lambda p: ",".join(sorted(set(p.dropna())))),
                   gemms_per_step=("te_pass", "size"), now_ns=("time_ns", "sum"), gemm_ns=("duration_ns", "sum"),
                   m_splits=("m_splits", "first"))
              .reset_index())
    shapes["gemms_per_step"] = shapes["gemms_per_step"] / divisor
    shapes["now_ms"] = shapes.pop("now_ns") / divisor / 1e6
    shapes["gemm_ms"] = shapes.pop("gemm_ns").astype("float64") / divisor / 1e6
    notes = []
    if groups["low_precision"].any() and groups.loc[groups["low_precision"], "quant_ms"].eq(0).all():
        notes.append("no quantization kernel was found beside the low-precision GEMMs: time now is their GEMM "
                     "kernels alone")
    gpus = result.job.traces[0].meta.get("gpus") if result.job.traces else None
    return RunGroups(groups=groups, shapes=shapes, framework=framework, recipes=recipes, steps=step_count,
                     steps_note=steps_note, gpu=gpus[0]["name"] if gpus else None, notes=notes, step_ms=step_ms,
                     busy_ms=busy_ms)


def _most_common(values: pd.Series):
    values = values.dropna()
    return values.mode().iat[0] if len(values) else None


def _group_names(rows: pd.DataFrame, split: pd.Series) -> pd.Series:
    """Each row's group name: its pattern with `*`, or, where the pattern's modules ran at more
    than one precision (`split`), the first `*` spelled as the numbers this precision ran at."""
    numbers = (rows[split.to_numpy()].groupby(["pattern", "group_precision"])["number"]
               .agg(lambda n: "{" + ",".join(sorted(set(n.dropna()), key=int)) + "}"))
    spelled = rows[["pattern", "group_precision"]].join(numbers, on=["pattern", "group_precision"])["number"]
    names = rows["pattern"].copy()
    named = spelled.notna().to_numpy()
    names[named] = [p.replace("*", n, 1) for p, n in zip(rows["pattern"][named], spelled[named])]
    return names


def _module_dims(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Per GEMM, its module's (tokens, in-features, out-features) from its pass and shape (NA
    where the hook recorded no shape: a grouped call, a backward node)."""
    passes = rows["te_pass"].astype("object")
    out = []
    for position in range(3):
        conditions = [(passes == p).to_numpy() for p in _MODULE_DIMS]
        choices = [rows[dims[position]].astype("Int64").to_numpy(dtype="float64", na_value=np.nan)
                   for dims in _MODULE_DIMS.values()]
        out.append(pd.Series(np.select(conditions, choices, default=np.nan), index=rows.index).astype("Int64"))
    return out[0], out[1], out[2]


def _call_shares(rows: pd.DataFrame) -> pd.Series:
    """Per GEMM, its share of one forward call: 1 for an fprop GEMM, 0 for the backward's; a
    grouped call (members recorded) launches one GEMM per member with tokens, each 1/that many."""
    splits = rows["m_splits"].dropna()
    launched = splits.map({text: sum(t != "0" for t in text.split(",")) for text in splits.unique()})
    per_call = pd.Series(1.0, index=rows.index)
    per_call[launched.index] = 1 / launched.clip(lower=1)
    return per_call.where(rows["te_pass"] == "fprop", 0.0)


def _member_dims(rows: pd.DataFrame) -> pd.DataFrame:
    """Per GEMM of a grouped call whose members the hook recorded: its module's tokens (the
    members' sum), in- and out-features (which every member shares) and m_splits (each member's
    tokens, in order, "a,b,c"); NA elsewhere. Each distinct (members, pass) is read once."""
    out = pd.DataFrame({"tokens": pd.NA, "in": pd.NA, "out": pd.NA, "m_splits": None}, index=rows.index)
    recorded = (rows["gemm_members"].notna() & rows["te_pass"].isin(list(_MODULE_DIMS)) if "gemm_members" in rows
                else pd.Series(False, index=rows.index))
    if not recorded.any():
        return out.astype({"tokens": "Int64", "in": "Int64", "out": "Int64"})
    keys = rows.loc[recorded, ["gemm_members", "te_pass"]].astype(str)
    distinct = keys.drop_duplicates()
    read = [_module_members(text, gemm_pass) for text, gemm_pass in zip(distinct["gemm_members"], distinct["te_pass"])]
    table = pd.DataFrame(read, columns=["tokens", "in", "out", "m_splits"], index=pd.MultiIndex.from_frame(distinct))
    found = table.reindex(pd.MultiIndex.from_frame(keys)).set_axis(keys.index)
    out.loc[recorded, ["tokens", "in", "out", "m_splits"]] = found.to_numpy()
    return out.astype({"tokens": "Int64", "in": "Int64", "out": "Int64"})


def _module_members(text: str, gemm_pass: str) -> tuple:
    """(tokens, in, out, m_splits) of one grouped call from its members field and pass (all None
    where the field is not one the hook writes, or the members do not share their features)."""
    members = parse_members(text)
    if members is None:
        return None, None, None, None
    dims = [("gemm_m", "gemm_n", "gemm_k").index(d) for d in _MODULE_DIMS[gemm_pass]]
    tokens, inputs, outputs = ([member[d] for member in members] for d in dims)
    if len(set(inputs)) != 1 or len(set(outputs)) != 1:
        return None, None, None, None
    return sum(tokens), inputs[0], outputs[0], ",".join(map(str, tokens))


def _standing_calls(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (with their group) where each grouped call's tokens and m_splits are those of the
    call that stands for its group and features (_representative_splits): one shape to time."""
    grouped = rows["m_splits"].notna()
    if not grouped.any():
        return rows
    keys = ["group", "in_features", "out_features"]
    stands = rows[grouped].groupby(keys)["m_splits"].agg(_representative_splits).rename("stands").reset_index()
    stands["stands_tokens"] = [sum(map(int, splits.split(","))) for splits in stands["stands"]]  # one per group
    rows = rows.merge(stands, on=keys, how="left")
    standing = rows["stands"].notna() & grouped.to_numpy()
    rows["tokens"] = rows["tokens"].mask(standing, rows["stands_tokens"].astype("Int64"))
    rows["m_splits"] = rows["stands"].where(standing, None)
    return rows.drop(columns=["stands", "stands_tokens"])


def _representative_splits(splits: pd.Series) -> str | None:
    """The m_splits that stand for a grouped shape's calls (module docstring): of the distinct
    ones, the one whose sizes sorted largest first are nearest (L1), position by position, the
    calls' average of theirs; the first met of equals."""
    counts = splits.dropna().value_counts(sort=False)
    if counts.empty:
        return None
    lists = [sorted(map(int, text.split(",")), reverse=True) for text in counts.index]
    width = max(map(len, lists))
    sizes = np.array([values + [0] * (width - len(values)) for values in lists], dtype="float64")
    average = np.average(sizes, axis=0, weights=counts.to_numpy())
    return str(counts.index[int(np.abs(sizes - average).sum(axis=1).argmin())])


def _quantize_ns(kernels: pd.DataFrame, gemms: pd.DataFrame, keep_step: np.ndarray) -> np.ndarray:
    """Per GEMM row of `gemms`, the quantization kernel time (ns) that belongs to it (module
    docstring): a cast the attribution names a module of goes to the first GEMM of that module
    and pass; the others to the next low-precision GEMM launched on the same thread."""
    quant = kernels[(kernels["role"] == "quantize").to_numpy() & keep_step]
    out = pd.Series(0, index=gemms.index, dtype="int64")
    if quant.empty or gemms.empty:
        return out.to_numpy()
    named = quant["layer"].notna()
    if named.any():
        per_module = quant[named].groupby("layer", observed=True)["duration_ns"].sum()
        first_of_module = ~gemms["layer"].duplicated()
        out[first_of_module] = gemms.loc[first_of_module, "layer"].map(per_module).fillna(0).astype("int64")
    low = gemms[~gemms["precision"].isin(HIGH_PRECISIONS) & gemms["launch_start"].notna()]
    rest = quant[~named & quant["launch_start"].notna()]
    if len(low) and len(rest):
        targets = pd.DataFrame({"at": low["launch_start"].astype("int64").to_numpy(),
                                "tid": low["launch_global_tid"].astype("int64").to_numpy(),
                                "row": low.index.to_numpy()}).sort_values("at")
        casts = pd.DataFrame({"at": rest["launch_start"].astype("int64").to_numpy(),
                              "tid": rest["launch_global_tid"].astype("int64").to_numpy(),
                              "ns": rest["duration_ns"].astype("int64").to_numpy()}).sort_values("at")
        joined = pd.merge_asof(casts, targets, on="at", by="tid", direction="forward")
        joined = joined[joined["row"].notna()]
        out = out.add(joined.groupby("row")["ns"].sum().reindex(out.index, fill_value=0).astype("int64"))
    return out.to_numpy()


def detect_framework(groups: pd.DataFrame, recipes: list[str]) -> str:
    """Which framework ran the GEMMs (FRAMEWORKS), from the module classes and paths: Megatron-Core
    (its TE subclasses under decoder.layers.N, its output_layer), a Hugging Face model that
    accelerate's TE backend converted (te.Linear under model.layers.N and lm_head), plain TE,
    torchao (Float8Linear; accelerate's torchao backend is torchao), else plain torch."""
    classes = set("/".join(groups["module_class"]).split("/"))
    names = groups["name"].astype(str)
    te = bool(classes & {"Linear", "LayerNormLinear", "LayerNormMLP", "GroupedLinear"}) and bool(
        recipes or groups["low_precision"].any())
    te = te and not (classes == {"Linear"} and not recipes)  # nn.Linear alone is plain torch
    if names.str.contains(_MEGATRON_PATH, regex=True).any() or classes & {"ColumnParallelLinear", "RowParallelLinear"}:
        return "megatron-core"
    if "Float8Linear" in classes:
        return "torchao"
    if te and names.str.contains(_HF_PATH, regex=True).any():
        return "hf-accelerate-te"
    return "transformer-engine" if te else "torch"


def _now_recipes(groups: pd.DataFrame, framework: str, recipes: list[str]) -> pd.Series:
    """The recipe each group runs now, as the measurement names it: BF16 for high precision, the
    run's TE recipe (the group's recorded request, else the one autocast recipe), torchao's
    tensor-wise or row-wise float8."""
    run_recipe = recipes[0] if len(recipes) == 1 and recipes[0] in RECIPES else None
    asked = groups["requested"].where(groups["requested"].isin(RECIPES), run_recipe)
    if framework == "torchao":
        asked = groups["precision"].map(lambda p: TORCHAO_RECIPES.get(p.split("+")[-1]))
    return asked.where(groups["low_precision"], "bf16")
