"""Requested vs dispatched precision: a verdict for every GEMM kernel launch of a trace.

Verdicts:
- ``OK``: the kernel ran at a precision the recipe asks for;
- ``FALLBACK``: it ran at another precision (e.g. FP8 asked, a BF16 kernel ran);
- ``EXPECTED-SUBSTITUTION``: another precision by design: TE's (FP8 block scaling runs as MXFP8
  on sm100+), or the program's (torchao's `emulate` runs a float8 GEMM as FP32 on dequantized
  operands, on purpose: cause ``emulated``);
- ``UNKNOWN``: the kernel name does not say its precision.
A FALLBACK that matches an ``--allow`` pattern keeps its verdict and is marked ``allowed``.

What a GEMM is checked against (its `expected`):
- without ``--expect``, what the GEMM itself was asked, as gemmscope's hook recorded it: the
  operand types TE was handed (the recipe of the te.autocast active at its call, wherever a run
  enters one, Megatron one per layer; BF16 where none was enabled or a recipe keeps a GEMM in high
  precision), or for a GEMM outside TE its operands' types and float8 scaling. Two answers follow:
  *dispatch* (asked X, ran Y: a FALLBACK, the check fails) and *coverage* (the GEMMs asked for
  high precision, `coverage`: where they are and their share of GEMM time; not a failure). A GEMM
  the hook did not record is checked against the one recipe its trace's te.autocast recorded, if
  there is one (never another run's), else left unchecked;
- with ``--expect RECIPE``, that recipe, for every GEMM: a GEMM asked for anything else (high
  precision, or another FP8 recipe) is a FALLBACK;
- with ``--expect-map PATTERN=RECIPE``, the recipe mapped to the innermost NVTX range
  around its launch whose name matches a pattern: a trace made by another tool (TE's GEMM benchmark
pushes ``BF16_4096x4096x4096``, ``FP8Block_4096x4096x4096``, ...) is checked range by range. GEMMs
outside every mapped range fall back to their trace's recipe, or stay unchecked without one. A mapped
range in which no GEMM ran (the recipe raised, or was skipped) and a pattern that names no range
are failures, never passes.

Judgement is total (`Judgement.state`): a GEMM whose kernel names its precision and that had
nothing to be judged against (no request recorded, no ``--expect``, outside every mapped range)
leaves the run NOT FULLY CHECKED, never passed, unless an ``--allow`` pattern names it. A GEMM
whose kernel does not name its precision (UNKNOWN: Triton's) is listed and does not count against
the run, unless `strict_unknown` (``--strict``): then it too leaves the run not fully checked.

Where gemmscope's hook recorded what TE was handed, a FALLBACK says why (``cause``): TE was handed
operands of another precision (``requested-bf16``: a layer outside autocast, or a recipe that
keeps this GEMM in high precision; ``backward-override``: a backward GEMM of a recipe whose
``backward_override`` runs it on high-precision operands, `request_cause` says which;
``module-recipe``: a module's own recipe, Megatron-Core's quant_recipe, asked another: its config
and matcher in `request_cause`), TE was handed the requested precision and the kernel still ran
another (``kernel-differs``), the GEMM ran outside TE (``outside-te``), or no record (``no-record``).

Several traces (one per rank, or one holding every rank) are checked together, assembled as one
job first (gemmscope.assembly.job: each GEMM keeps its trace and rank), then judged (`judge`);
`rank_comparison` says whether all ranks ran the same kernels for the same GEMM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pandas as pd

from gemmscope.assembly import te_ranges
from gemmscope.assembly.attribution import EnclosingRanges, LoadedTrace, first_matching_pattern, name_matches
from gemmscope.assembly.job import Job, assemble
from gemmscope.autocast_hook.gemmscope_protocol import BACKWARD_OVERRIDE, EMULATED
from gemmscope.errors import InputError, State
from gemmscope.judging.recipes import (
    EXPECTED_SUBSTITUTIONS,
    HIGH_PRECISIONS,
    RECIPE_BY_CLASS,
    RECIPE_PRECISIONS,
    RECIPES,
    RESCALED,
)
from gemmscope.traces.model import Trace, gpu_sm

# Verdicts of a mapped range (ranges_checked) that fail the check.
RANGE_FAILURES = ("FALLBACK", "NO GEMM", "NOT FOUND")


# FP4 whose scale type the kernel's name does not tell: either of these ran.
_FP4_PRECISIONS = frozenset({"nvfp4", "mxfp4"})


def _operand_precisions(precision: str) -> tuple[str, str]:
    """The precisions of A and B: both halves of a mixed "a×b", else the one precision twice."""
    a, _, b = precision.partition("×")
    return (a, b) if b else (a, a)


def _operands_verdict(ran: str, asked: str) -> str | None:
    """Operand by operand, for a mixed precision on either side (a kernel may swap A and B, as
    trtllm-gen's transposed-output kernels do, so either order is the request's): OK where both
    operands match, FALLBACK where one does not; None where neither side is mixed."""
    if "×" not in ran and "×" not in asked:
        return None
    pairs = _operand_precisions(ran)
    wanted = _operand_precisions(asked)
    return "OK" if pairs in {wanted, wanted[::-1]} else "FALLBACK"


def verdict(precision: str | None, asked: str, sm: int | None) -> str:
    """`precision` ran where `asked` (a recipe, or a precision a GEMM's own request named) was
    asked for. A precision gemmscope learned later is judged by what it is, never failed for being
    new: FP4 whose scale type the name does not tell is UNKNOWN against an FP4 request (and a
    FALLBACK against any other), mixed operands are compared operand by operand."""
    if precision is None or precision == "unknown":
        return "UNKNOWN"
    accepted = RECIPE_PRECISIONS.get(asked, {asked})
    if precision in accepted:
        return "OK"
    if precision == "fp4" and accepted <= _FP4_PRECISIONS:
        return "UNKNOWN"
    by_operand = _operands_verdict(precision, asked)
    if by_operand is not None:
        return by_operand
    min_sm = EXPECTED_SUBSTITUTIONS.get((asked, precision))
    if min_sm is not None and sm is not None and sm >= min_sm:
        return "EXPECTED-SUBSTITUTION"
    return "FALLBACK"


def recorded_recipes(traces: Sequence[Trace]) -> list[str]:
    """Recipes of the enabled `te.autocast` regions the autocast hook recorded, in order seen (a
    framework's subclass of a TE recipe is recorded as the TE recipe it derives from)."""
    seen: list[str] = []
    for trace in traces:
        # parsed one by one: a handful of names per trace, and a run may have thousands of traces
        regions = [te_ranges.parse(name) for name in trace.range_names_starting(te_ranges.AUTOCAST_PREFIX)]
        for cls in (region["recipe_class"] for region in regions if region["kind"] == te_ranges.AUTOCAST):
            recipe = RECIPE_BY_CLASS.get(cls, cls)
            if cls != "disabled" and recipe not in seen:
                seen.append(recipe)
    return seen


def resolve_expected(traces: Sequence[Trace], expect: str | None) -> str | None:
    """The recipe to check every GEMM against (--expect), else the one known recipe the run's
    te.autocast recorded, for the GEMMs the hook did not record; else None (several recipes, or
    one gemmscope does not know: those GEMMs stay unchecked)."""
    if expect is not None:
        if expect not in RECIPES:
            raise InputError(f"unknown recipe {expect!r}: choose from {', '.join(RECIPES)}")
        return expect
    recorded = recorded_recipes(traces)
    return recorded[0] if len(recorded) == 1 and recorded[0] in RECIPES else None


def parse_expect_map(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`PATTERN=RECIPE` items (shell-style pattern over NVTX range names) as (pattern, recipe)
    pairs, in the order given: where one range name matches several patterns, the first wins."""
    pairs = []
    for item in items:
        pattern, sep, recipe = item.rpartition("=")
        if not sep or not pattern:
            raise InputError(f"--expect-map {item!r}: give PATTERN=RECIPE, e.g. 'FP8Block_*=fp8-block'")
        if recipe not in RECIPES:
            raise InputError(f"--expect-map {item!r}: unknown recipe {recipe!r}: choose from {', '.join(RECIPES)}")
        pairs.append((pattern, recipe))
    return tuple(pairs)


def innermost_match(ranges: EnclosingRanges, rows: np.ndarray, patterns: Sequence[str]) -> tuple[pd.Series, pd.Series]:
    """Per launch of `rows` (kernel rows `ranges` covers), the innermost enclosing range whose
    name matches one of `patterns`, and that pattern's position (NA where none). Patterns are
    matched once per distinct range name, not per launch."""
    name = pd.Series(ranges.innermost_matching(patterns, rows), dtype="object")
    return name, first_pattern(name, patterns)


def first_pattern(names: pd.Series, patterns: Sequence[str]) -> pd.Series:
    """Per name, the position of the first of `patterns` that matches it (NA where none)."""
    position = pd.Series(first_matching_pattern(names, patterns), index=names.index, dtype="Int64")
    return position.where(position >= 0)


@dataclass
class Judgement:
    """GEMM launches with verdicts, and the summaries built from them."""

    expected: str | None  # --expect, or the run's one recorded recipe (for GEMMs the hook did not record)
    # the job's GEMM launches with their verdicts: a copy of job.gemms, with its kernel_row
    gemms: pd.DataFrame
    job: Job  # what was judged: the traces, every launch, the NVTX ranges, what could not be read
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    rank_comparison: pd.DataFrame = field(default_factory=pd.DataFrame)
    expect_map: tuple[tuple[str, str], ...] = ()
    ranges_checked: pd.DataFrame = field(default_factory=pd.DataFrame)  # per mapped range (ranges_checked())
    expect_given: bool = False  # --expect: every GEMM against `expected`; else each against its own request
    strict_unknown: bool = False  # --strict: a GEMM of unknown precision leaves the run not fully checked

    @property
    def checked(self) -> bool:
        """GEMMs have verdicts: there was a recipe, or a map, to check them against."""
        return "verdict" in self.gemms

    @property
    def expected_recipes(self) -> list[str]:
        """Every recipe some GEMM was checked against: the mapped ones in the order given, then
        the run's."""
        return list(dict.fromkeys([r for _, r in self.expect_map] + ([self.expected] if self.expected else [])))

    @property
    def coverage(self) -> pd.DataFrame:
        """The GEMM launches checked against their own request that asked for high precision
        (HIGH_PRECISIONS): not a failure, what low precision does not cover."""
        if "asked_high" not in self.gemms:
            return self.gemms.iloc[0:0]
        return self.gemms[self.gemms["asked_high"]]

    @property
    def hook_recorded(self) -> bool:
        """Some trace holds a record of gemmscope's hook (autocast, GEMM call, process or software):
        the run was made with it, so a GEMM without a record is one the hook did not see."""
        return any(t.range_names_starting(te_ranges.HOOK_PREFIXES) for t in self.job.traces)

    @property
    def requests_recorded(self) -> bool:
        """Gemmscope's hook recorded what some GEMM asked; else each GEMM was checked against the
        run's recipe (or --expect's), or nothing."""
        return bool(len(self.gemms)) and bool(self.gemms["requested"].notna().any())

    @property
    def unpatched(self) -> list[dict[str, str | None]]:
        """What gemmscope's hook could not patch in the run (a torch or TE release that moved an
        entry point: te_ranges.recorded_unpatched), so the records its traces lack; GEMMs left
        without a record are judged by the other rules, or left unjudged."""
        return te_ranges.unpatched_in(self.job.traces)

    @property
    def mismatches(self) -> pd.DataFrame:
        if "verdict" not in self.gemms:
            return self.gemms.iloc[0:0]
        return self.gemms[(self.gemms["verdict"] == "FALLBACK") & ~self.gemms["allowed"]]

    @property
    def allowed(self) -> pd.DataFrame:
        if "verdict" not in self.gemms:
            return self.gemms.iloc[0:0]
        return self.gemms[(self.gemms["verdict"] == "FALLBACK") & self.gemms["allowed"]]

    @property
    def unjudged(self) -> pd.DataFrame:
        """The GEMM launches that had nothing to be judged against and no --allow pattern names
        (module docstring): they leave the run NOT FULLY CHECKED."""
        if "unjudged" not in self.gemms:
            return self.gemms.iloc[0:0]
        return self.gemms[self.gemms["unjudged"]]

    @property
    def state(self) -> State:
        """What the check concludes: a failure first (`failed`), then nothing checked at all, then
        GEMMs left unjudged; else a pass."""
        if self.failed:
            return State.FAIL
        if not self.checked:
            return State.NOT_CHECKED
        return State.NOT_FULLY_CHECKED if len(self.unjudged) else State.PASS

    @property
    def failed(self) -> bool:
        """The check fails on a non-allowed FALLBACK, when a recipe was asked for and no GEMM ran,
        when a mapped range failed (RANGE_FAILURES: a fallback, no GEMM in it, or a pattern that
        names no range), or when a trace could not be read."""
        nothing_ran = self.expected is not None and len(self.gemms) == 0
        ranges_failed = bool(len(self.ranges_checked)) and bool(
            self.ranges_checked["verdict"].isin(RANGE_FAILURES).any())
        return len(self.mismatches) > 0 or nothing_ran or ranges_failed or bool(self.job.unreadable)


def judge(traces: Job | Trace | LoadedTrace | Sequence[Trace | LoadedTrace], expect: str | None = None,
          allow: tuple[str, ...] = (), expect_map: Sequence[tuple[str, str]] = (),
          strict_unknown: bool = False) -> Judgement:
    """Verdict per GEMM launch of a job (or of traces, read here or already loaded by
    `loading.load` in workers, assembled as one: job.assemble) against `expect`, or each against
    what it was asked (module docstring), and inside the NVTX ranges `expect_map` names
    (parse_expect_map) against their own recipe (`strict_unknown`: --strict, module docstring).
    The job is left as it was: the verdicts are columns of a copy of its GEMM launches."""
    job = traces if isinstance(traces, Job) else assemble(traces)
    read_traces = job.traces
    expect_map = tuple(expect_map)
    expected = resolve_expected(read_traces, expect)
    # a GEMM the hook did not record falls back to its own trace's recipe, never another run's
    own_recipes = [expected] * len(read_traces) if len(read_traces) == 1 or expect is not None else [
        resolve_expected([trace], None) for trace in read_traces]
    gemms = job.gemms.copy(deep=False)
    # each GEMM's own request where the hook recorded one, else its own trace's recipe
    asked = gemms["requested"].astype("object") if expect is None else pd.Series(expect, index=gemms.index, dtype="object")
    part = job.trace_of(gemms["kernel_row"].to_numpy())
    asked = asked.where(asked.notna(), pd.Series(np.array(own_recipes, dtype=object)[part], index=gemms.index))
    if expect_map:
        gemms["expect_range"], position = innermost_match(job.ranges, gemms["kernel_row"].to_numpy(),
                                                          [p for p, _ in expect_map])
        mapped = position.map(dict(enumerate(r for _, r in expect_map)))
        asked = mapped.where(mapped.notna(), asked)
    if asked.notna().any() or expect is not None or expect_map:
        gemms["expected"] = asked.astype("object")
        # checked against its own request: recorded, no --expect, outside every mapped range
        own = gemms["requested"].notna().to_numpy() & (expect is None)
        if expect_map:
            own &= gemms["expect_range"].isna().to_numpy()
        gemms["asked_high"] = own & gemms["expected"].isin(HIGH_PRECISIONS).to_numpy()
        gemms["request_cause"] = _request_causes(gemms, te_ranges.backward_overrides_in(read_traces),
                                                 te_ranges.module_recipes_in(read_traces))
        _judge(gemms, gpu_sm(read_traces), allow, job.ranges, strict_unknown)
    result = Judgement(expected=expected, gemms=gemms, job=job, expect_map=expect_map,
                       expect_given=expect is not None, strict_unknown=strict_unknown)
    if expect_map:
        result.ranges_checked = ranges_checked(gemms, job.ranges, read_traces, expect_map)
    result.summary = summarize(gemms, expected)
    result.groups = group(gemms)
    result.rank_comparison = compare_ranks(gemms)
    return result


def _judge(gemms: pd.DataFrame, sm: int | None, allow: tuple[str, ...], ranges: EnclosingRanges,
           strict_unknown: bool) -> None:
    """Verdict, cause and `allowed` of each GEMM against its own `expected` recipe (None:
    unchecked, no verdict), and whether it is `unjudged` (Judgement.unjudged)."""
    keys = gemms["precision"].astype(str) + "|" + gemms["expected"].astype(str)
    pairs = gemms.loc[gemms["expected"].notna(), ["precision", "expected"]].assign(key=keys).drop_duplicates("key")
    verdicts = {key: verdict(p if isinstance(p, str) else None, e, sm) for p, e, key in pairs.itertuples(index=False)}
    gemms["verdict"] = keys.map(verdicts).where(gemms["expected"].notna(), None)
    asked, ran, scaling = RESCALED
    rescaled = ((gemms["expected"] == asked) & (gemms["precision"] == ran)
                & (gemms["requested_scale"] == scaling)).fillna(False).to_numpy(dtype=bool)
    gemms.loc[rescaled, "verdict"] = "EXPECTED-SUBSTITUTION"
    # --expect names one FP8 recipe and TE was handed operands quantized by another: the same
    # kernels run, the recipe asked is not the one expected
    operand_recipe = gemms["requested_a"].where(gemms["requested_a"].isin(RECIPES))
    other_recipe = (operand_recipe.notna() & gemms["expected"].isin(RECIPES) & (operand_recipe != gemms["expected"])
                    & ~gemms["expected"].isin(HIGH_PRECISIONS)).to_numpy(dtype=bool)
    gemms.loc[other_recipe & (gemms["verdict"] == "OK").to_numpy(), "verdict"] = "FALLBACK"
    # torchao's emulation: an FP32 GEMM standing, on purpose, for the float8 one that was expected
    emulated = (gemms["requested_scale"].astype("object").str.startswith(EMULATED, na=False)
                & gemms["precision"].isin(("fp32", "tf32")) & _asked_as_expected(gemms)).to_numpy(dtype=bool)
    gemms.loc[emulated & (gemms["verdict"] == "FALLBACK").to_numpy(), "verdict"] = "EXPECTED-SUBSTITUTION"
    gemms["cause"] = _causes(gemms)
    gemms.loc[emulated & (gemms["verdict"] == "EXPECTED-SUBSTITUTION").to_numpy(), "cause"] = "emulated"
    named = allowed(allow, gemms, ranges)
    gemms["allowed"] = (gemms["verdict"] == "FALLBACK").to_numpy() & named
    told = (gemms["precision"].notna() & (gemms["precision"] != "unknown")).to_numpy()
    no_verdict = gemms["verdict"].isna().to_numpy()
    unknown = (gemms["verdict"] == "UNKNOWN").to_numpy() | (no_verdict & ~told)
    gemms["unjudged"] = ((no_verdict & told) | (strict_unknown & unknown)) & ~named


def ranges_checked(gemms: pd.DataFrame, ranges: EnclosingRanges, traces: Sequence[Trace],
                   expect_map: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """One row per NVTX range name an --expect-map pattern claims (the first pattern matching it),
    plus one per pattern that names no range: the GEMMs checked against its recipe, their time,
    the share at that recipe, the fallbacks, the GEMMs inside it that a nested mapped range
    claimed (`nested`), and a verdict: OK, FALLBACK, NESTED (every GEMM in it was checked in a
    nested mapped range), NO GEMM (no GEMM ran in it: its recipe raised, or was skipped) or NOT
    FOUND."""
    columns = ["pattern", "range", "expected", "instances", "gemms", "gemm_time_ns", "expected_time_share",
               "fallbacks", "unknown", "nested", "verdict"]
    patterns = [p for p, _ in expect_map]
    names = pd.Series(pd.concat([t.nvtx.loc[t.nvtx["kind"] != "mark", "name"] for t in traces]).dropna())
    instances = names.value_counts(sort=False)
    position = first_pattern(pd.Series(instances.index.to_numpy(dtype=object), dtype="object"), patterns)
    found = pd.DataFrame({"range": instances.index.to_numpy(dtype=object), "position": position.to_numpy(dtype=object)})
    found = found.dropna()
    found["instances"] = instances[found["range"]].to_numpy()
    g = gemms[gemms["expect_range"].notna()]
    ok = g["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"])
    per_range = pd.DataFrame({
        "gemms": g.groupby("expect_range").size(),
        "gemm_time_ns": g.groupby("expect_range")["duration_ns"].sum(),
        "ok_time_ns": g["duration_ns"].where(ok, 0).groupby(g["expect_range"]).sum(),
        "fallbacks": ((g["verdict"] == "FALLBACK") & ~g["allowed"]).groupby(g["expect_range"]).sum(),
        "unknown": (g["verdict"] == "UNKNOWN").groupby(g["expect_range"]).sum(),
    })
    which, around = ranges.around(g["kernel_row"].to_numpy())
    pairs = pd.DataFrame({"gemm": g.index.to_numpy()[which], "ranges": around})
    own = g["expect_range"].to_numpy(dtype=object)[which]
    outer = pairs[pairs["ranges"].isin(found["range"]).to_numpy() & (around != own)]
    nested = outer.drop_duplicates().groupby("ranges").size().rename("nested")
    out = found.join(per_range, on="range").join(nested, on="range")
    missing = sorted(set(range(len(patterns))) - set(out["position"].astype(int)))
    out = pd.concat([out, pd.DataFrame({"position": missing, "instances": 0})], ignore_index=True)
    out["position"] = out["position"].astype(int)
    out["pattern"] = [patterns[i] for i in out["position"]]
    out["expected"] = [expect_map[i][1] for i in out["position"]]
    for column in ("instances", "gemms", "gemm_time_ns", "fallbacks", "unknown", "nested"):
        out[column] = out[column].fillna(0).astype("int64")
    out["expected_time_share"] = (out["ok_time_ns"] / out["gemm_time_ns"]).where(out["gemms"] > 0)
    out["verdict"] = np.select(
        [out["range"].isna(), (out["gemms"] == 0) & (out["nested"] == 0), out["gemms"] == 0, out["fallbacks"] > 0],
        ["NOT FOUND", "NO GEMM", "NESTED", "FALLBACK"], default="OK")
    return out.sort_values(["position", "range"], ignore_index=True)[columns]


def _request_causes(gemms: pd.DataFrame, backward_overrides: list[str], module_recipes: dict[str, str]) -> pd.Series:
    """Why a GEMM asked what it asked, where the run recorded why: every GEMM of a layer whose own
    per-module recipe asked (Megatron-Core's quant_recipe: `module_recipes`, by layer path); the
    backward GEMMs (dgrad, wgrad) asked high precision by a run whose recipe set a
    backward_override (one override for the run: TE's autocast regions do not say which forward a
    backward GEMM belongs to), of a module whose forward GEMMs asked low precision (a layer left
    outside autocast asks high precision in both passes, for another reason). None elsewhere."""
    cause = gemms["layer"].map(module_recipes).astype("object")  # NaN where no module recipe asked
    if len(backward_overrides) == 1:
        module = gemms["layer"].astype(str) + "|" + gemms["module"].astype(str)
        forward_low = (gemms["te_pass"] == "fprop") & gemms["requested"].notna() & ~gemms["requested"].isin(
            HIGH_PRECISIONS)
        backward_high = (gemms["te_pass"].isin(("dgrad", "wgrad")) & gemms["requested"].isin(HIGH_PRECISIONS)
                         & module.isin(module[forward_low]))
        cause[backward_high] = backward_overrides[0]
    return cause


def _asked_as_expected(gemms: pd.DataFrame) -> pd.Series:
    """Whether a GEMM asked what it was expected to run: the recipe itself, or a precision the
    expected recipe runs at (RECIPE_PRECISIONS)."""
    wanted = {f"{recipe}|{precision}" for recipe, precisions in RECIPE_PRECISIONS.items() for precision in precisions}
    expected, requested = gemms["expected"].astype(str), gemms["requested"].astype(str)
    return (expected + "|" + requested).isin(wanted) | (expected == requested)


def _causes(gemms: pd.DataFrame) -> np.ndarray:
    """Why a FALLBACK ran another precision than its `expected` recipe (module docstring); None
    for other verdicts. A GEMM asked what it was expected to run ran another kernel
    (`kernel-differs`, outside TE too); one asked something else says what (`requested-…`: the
    FP8 recipe of its operands where they name one)."""
    requested = gemms["requested"]
    requested_wanted = _asked_as_expected(gemms)
    operand_recipe = gemms["requested_a"].where(gemms["requested_a"].isin(RECIPES), requested)
    other_recipe = (gemms["requested_a"].isin(RECIPES) & gemms["expected"].isin(RECIPES)
                    & (gemms["requested_a"] != gemms["expected"]))
    why = gemms["request_cause"].astype("object")
    backward_override = why.str.startswith(BACKWARD_OVERRIDE, na=False)
    cause = np.select(
        [requested.isna() & (gemms["origin"] == "outside-te"), requested.isna(),
         backward_override & ~requested_wanted, why.notna() & (~requested_wanted | other_recipe),
         ~requested_wanted | other_recipe],
        ["outside-te", "no-record", "backward-override", "module-recipe",
         "requested-" + operand_recipe.fillna("").astype(str)],
        default="kernel-differs",
    )
    # numpy's stubs take no None for where's `y` (an object array's missing value) and fall back to its one-argument form
    return cast(np.ndarray, np.where(gemms["verdict"] == "FALLBACK", cause, None))


def allowed(patterns: Sequence[str], gemms: pd.DataFrame, ranges: EnclosingRanges) -> np.ndarray:
    """Per GEMM launch, whether an --allow pattern (shell-style, case-sensitive) matches its
    kernel name, its module label (a TE module, or "(outside TE)"), its layer, or any NVTX range
    around the launch (e.g. '*lm_head*')."""
    if not patterns or gemms.empty:
        return np.zeros(len(gemms), dtype=bool)
    hit = ranges.any_matching(patterns, gemms["kernel_row"].to_numpy())
    for column in ("name", "module", "layer"):
        hit |= name_matches(gemms[column], patterns)
    return hit


def group(gemms: pd.DataFrame) -> pd.DataFrame:
    """GEMM launches grouped by layer × module × pass × kernel (and verdict and cause, where
    checked), with launch counts, ranks and kernel time: a 100-layer, 3-step run in one screen."""
    keys = ["layer", "module", "pass", "kernel", "precision"]
    keys += [c for c in ("expected", "requested", "verdict", "cause", "allowed") if c in gemms]
    if gemms.empty:
        return pd.DataFrame(columns=[*keys, "launches", "ranks", "time_ns"])
    g = gemms.assign(**{"pass": gemms["te_pass"], "kernel": gemms["name"]})
    grouped = g.groupby(keys, dropna=False, sort=False)
    out = grouped.agg(launches=("duration_ns", "size"), ranks=("rank", "nunique"),
                      time_ns=("duration_ns", "sum"))
    return out.reset_index()


def compare_ranks(gemms: pd.DataFrame) -> pd.DataFrame:
    """With several ranks: per layer × module × pass, the kernels each rank ran, and which ranks
    differ from the most common set. Empty with one rank."""
    ranked = gemms[gemms["rank"].notna()]
    if ranked["rank"].nunique() < 2:
        return pd.DataFrame(columns=["layer", "module", "pass", "ranks", "kernels", "differing_ranks"])
    keys = ["layer", "module", "pass"]
    r = ranked.assign(**{"pass": ranked["te_pass"]})
    per_rank = (r.groupby([*keys, "rank"], dropna=False, sort=False)["name"]
                .agg(lambda names: " + ".join(sorted(set(names)))).rename("kernels").reset_index())
    rows = []
    for key, part in per_rank.groupby(keys, dropna=False, sort=False):
        common = part["kernels"].mode().iloc[0]
        differing = part.loc[part["kernels"] != common, "rank"].tolist()
        rows.append((*key, part["rank"].nunique(), common, differing))
    return pd.DataFrame(rows, columns=[*keys, "ranks", "kernels", "differing_ranks"])


def summarize(gemms: pd.DataFrame, expected: str | None) -> pd.DataFrame:
    """Per module and pass: GEMM launches, GEMM kernel time, and with a recipe the share of that
    time that ran at the expected precision, plus verdict counts."""
    columns = ["module", "pass", "gemms", "gemm_time_ns"]
    if gemms.empty:
        return pd.DataFrame(columns=columns)
    g = gemms.assign(**{"pass": gemms["te_pass"].fillna("?")})
    grouped = g.groupby(["module", "pass"], sort=False)
    out = grouped.agg(gemms=("duration_ns", "size"), gemm_time_ns=("duration_ns", "sum"))
    if expected is not None:
        ok_time = g["duration_ns"].where(g["verdict"].isin(["OK", "EXPECTED-SUBSTITUTION"]), 0)
        out["expected_time_share"] = ok_time.groupby([g["module"], g["pass"]], sort=False).sum() / out["gemm_time_ns"]
        for v in ("OK", "FALLBACK", "EXPECTED-SUBSTITUTION", "UNKNOWN"):
            out[v.lower()] = (g["verdict"] == v).groupby([g["module"], g["pass"]], sort=False).sum()
        out["allowed"] = g["allowed"].groupby([g["module"], g["pass"]], sort=False).sum()
    return out.reset_index()
