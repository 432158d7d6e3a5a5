"""Training steps: which GPU work each training iteration launched.

Where steps come from, the first that finds any: the NVTX range a user names (`--step-range`, a
shell pattern); the marks gemmscope's hook makes at every optimizer step
(``gemmscope.step|n=N``, gemmscope_protocol); the program's own numbered ranges that repeat
(`default_step_pattern`). Steps are a frame with one row per step and process: `trace`, `pid`,
`name`, `start`, `end` (ns, the CPU's clock) and `index` (the step's number: the iteration for
marked steps, the order found in for ranges), in time order per process.
"""

from __future__ import annotations

import re
from dataclasses import replace as dataclass_replace

import numpy as np
import pandas as pd

from gemmscope.assembly import te_ranges
from gemmscope.assembly.attribution import LoadedTrace, literal_prefix, name_matches
from gemmscope.autocast_hook.gemmscope_protocol import STEP_PREFIX, parse_record
from gemmscope.errors import InputError
from gemmscope.judging.judgement import Judgement
from gemmscope.traces.model import Trace, process_id

# The columns of the steps found (one row per step and process); diagnosis.STEP_COLUMNS are the figures per step.
FOUND_COLUMNS = ["trace", "pid", "name", "start", "end", "index"]
# How the output names marked steps, each step's name, and what it says of a run whose hook
# watched for optimizer steps and saw none.
MARKED_NAME = "gemmscope.step "
MARKED_PATTERN = MARKED_NAME + "*"
NO_OPTIMIZER_STEP = ("no optimizer step ran (gemmscope marks every torch.optim step; without one, as in inference "
                     "or a custom update, name the program's own step range with --step-range)")
# Without --step-range or marks, steps are the push/pop ranges of one name and a number
# ("tp_step_0", "moe_step_1", "iteration 2") that repeat, with several numbers, in one process: a
# loop's body.
_NUMBERED = re.compile(r"^(?P<stem>.*\D)\d+$")
# Among those, names that say "step" or "iteration" are taken first ("step 3", "train_step_3").
_STEP_WORD = re.compile(r"(?:step|iteration|iter)[ _.:#-]*$", re.IGNORECASE)
# C++ operator ranges PyTorch's emit_nvtx pushes ("aten::mm, seq = 12", "autograd::engine::...
# op_id = 5") are numbered too, but are operators, not loop bodies.
_OPERATOR_RANGE = "::"
# What the output says when no steps were found (no marks, no repeating numbered ranges).
NO_STEPS = "no steps found, name them with --step-range"


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=FOUND_COLUMNS)


def marked_steps(trace: Trace, launches: pd.DataFrame) -> pd.DataFrame:
    """The steps the hook's marks say in one trace (FOUND_COLUMNS): step n of a process ends at its
    last mark and begins at the last mark of n-1, step 0 at the process's first kernel launch
    (`launches`: kernels with `launch_start`, of this trace or, with a `trace` column, of several);
    a step whose beginning the trace does not hold (a capture opened inside it) is left out."""
    nvtx = trace.nvtx
    number = _mark_numbers(trace)
    if number.empty:
        return _empty()
    marks = nvtx[nvtx["name"].isin(number.index)]
    ends = (pd.DataFrame({"pid": marks["pid"].to_numpy(dtype="int64"),
                          "index": number.reindex(marks["name"]).to_numpy(),
                          "at": marks["start"].to_numpy(dtype="int64")})
            .groupby(["pid", "index"], as_index=False)["at"].max().rename(columns={"at": "end"})
            .sort_values(["pid", "index"], ignore_index=True))
    previous = ends.groupby("pid")["index"].shift()
    ends["start"] = ends.groupby("pid")["end"].shift().where(previous == ends["index"] - 1)
    if "trace" in launches:
        launches = launches[launches["trace"] == trace.path.name]
    first_launch = (launches.assign(pid=process_id(launches["global_pid"].astype("int64")))
                    .groupby("pid")["launch_start"].min())
    zero = ends["index"] == 0
    ends.loc[zero, "start"] = ends.loc[zero, "pid"].map(first_launch).to_numpy()
    ends = ends.dropna(subset=["start"])
    return pd.DataFrame({"trace": trace.path.name, "pid": ends["pid"].to_numpy(),
                         "name": (MARKED_NAME + ends["index"].astype(str)).to_numpy(dtype=object),
                         "start": ends["start"].astype("int64").to_numpy(), "end": ends["end"].to_numpy(),
                         "index": ends["index"].to_numpy()})


def described(step_range: str) -> str:
    """What a step pattern (located_steps') is, as the output says it."""
    if step_range == MARKED_PATTERN:
        return f"the optimizer steps gemmscope's hook marked ({step_range})"
    return f"NVTX ranges matching {step_range}"


def _mark_numbers(trace: Trace) -> pd.Series:
    """The step number of each distinct step mark's name (gemmscope.step|n=N), indexed by name."""
    marks = trace.range_names_starting(STEP_PREFIX)  # one per step
    fields = [parse_record(STEP_PREFIX, name) or {} for name in marks]
    number = pd.Series([f.get("n") for f in fields], index=marks, dtype=object)
    return pd.to_numeric(number, errors="coerce").dropna().astype("int64")


def watched_without_steps(result: Judgement) -> bool:
    """The hook watched for optimizer steps (its mark at torch's import) and marked none."""
    said = [name[len(STEP_PREFIX):] for t in result.job.traces for name in t.range_names_starting(STEP_PREFIX)]
    return any(s.startswith("watching") for s in said) and not any(s.startswith("n=") for s in said)


def default_step_pattern(result: Judgement) -> str | None:
    """The step ranges to use without --step-range or marks, as a shell pattern
    (`tp_step_[0-9]*`), or None: push/pop ranges named a stem and a number, the stem met with at
    least two numbers in one process, neither TE's nor gemmscope's own nor a PyTorch operator's;
    stems that say step or iteration first, then the one whose ranges span the most time (the
    outermost loop)."""
    parts = []
    for trace in result.job.traces:
        n = trace.nvtx[trace.nvtx["kind"] == "push-pop"]
        # Only a name that ends in a number can be one; of those, TE's grammar (its prefix filter
        # first) is asked only about the few that are not an operator's. (The trace's names, of
        # every kind of range: only the push/pop ranges' are looked up in them below.)
        numbered = pd.Series([name for name in trace.range_names_ending_in_digit() if _OPERATOR_RANGE not in name],
                             dtype=object)
        stems = numbered.str.extract(_NUMBERED)["stem"]
        own = stems.notna() & te_ranges.parse_distinct(numbered.to_numpy())["kind"].isna()
        stem_of = pd.Series(stems[own].to_numpy(), index=numbered[own].to_numpy())
        numbered = n[n["name"].isin(stem_of.index)]
        parts.append(pd.DataFrame({
            "stem": stem_of.reindex(numbered["name"]).to_numpy(), "name": numbered["name"].to_numpy(),
            "pid": numbered["pid"].to_numpy(), "trace": trace.path.name,
            "span": (numbered["end"] - numbered["start"]).fillna(0).to_numpy()}))
    found = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if found.empty:
        return None
    numbers = found.groupby(["stem", "trace", "pid"])["name"].nunique().groupby("stem").max()
    span = found.groupby("stem")["span"].sum()
    stems = pd.DataFrame({"numbers": numbers, "span": span})
    stems = stems[stems["numbers"] >= 2]
    if stems.empty:
        return None
    stems["says_step"] = stems.index.str.contains(_STEP_WORD)
    best = stems.sort_values(["says_step", "span"], ascending=False).index[0]
    return re.sub(r"([*?\[])", r"[\1]", best) + "[0-9]*"


def find_steps(result: Judgement, pattern: str | None = None) -> pd.DataFrame:
    """The run's steps (FOUND_COLUMNS): instances of the push/pop range `pattern` (a shell
    pattern) names; without one, the hook's marks, else default_step_pattern's ranges."""
    return located_steps(result, pattern)[0]


def located_steps(result: Judgement, pattern: str | None = None) -> tuple[pd.DataFrame, str | None]:
    """find_steps' steps, and the pattern of their names: MARKED_PATTERN for the hook's marks,
    the ranges' otherwise (None when there are none)."""
    if pattern is None:
        marked = [marked_steps(t, result.job.kernels) for t in result.job.traces]
        marked = [m for m in marked if len(m)]
        if marked:
            return pd.concat(marked, ignore_index=True).sort_values(["trace", "pid", "start"], ignore_index=True), MARKED_PATTERN
        pattern = default_step_pattern(result)
    return _ranges_named(result, pattern), pattern


def _ranges_named(result: Judgement, pattern: str | None) -> pd.DataFrame:
    parts = []
    for trace in result.job.traces:
        n = trace.nvtx
        # each distinct name matched once, not each range; only those that start as the pattern does
        named = np.array(trace.range_names_starting(literal_prefix(pattern)) if pattern else [], dtype=object)
        wanted = named[name_matches(named, [pattern], distinct_names=True)] if pattern else []
        parts.append(n[n["name"].isin(wanted) & (n["kind"] == "push-pop")].assign(trace=trace.path.name))
    steps = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if steps.empty:
        return _empty()
    steps = steps.sort_values(["trace", "pid", "start"], ignore_index=True)
    steps["index"] = steps.groupby(["trace", "pid"]).cumcount()
    return steps[FOUND_COLUMNS]


def launching_step(kernels: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Per kernel, the `index` of the step range (of its own trace and process) that its launch
    call fell in, or -1."""
    pid = process_id(kernels["global_pid"].astype("int64")).to_numpy()
    trace_code = _trace_codes(kernels)
    code_of = {name: code for code, name in enumerate(trace_code.categories)}
    launched = kernels["launch_start"].fillna(kernels["start"]).astype("int64").to_numpy()
    step_of = np.full(len(kernels), -1)
    for (trace, process), own in steps.groupby(["trace", "pid"], sort=False):  # per process, not per launch
        mine = np.flatnonzero((trace_code.codes == code_of.get(trace, -2)) & (pid == process))
        # a range an older export left without an end is open to the end of the capture
        starts, ends = own["start"].to_numpy("int64"), own["end"].fillna(np.iinfo("int64").max).to_numpy("int64")
        at = np.searchsorted(starts, launched[mine], side="right") - 1
        inside = (at >= 0) & (launched[mine] <= ends[np.maximum(at, 0)])
        step_of[mine[inside]] = own["index"].to_numpy()[at[inside]]
    return step_of


def _trace_codes(kernels: pd.DataFrame) -> pd.Categorical:
    """The kernels' trace names as codes: compared and grouped as integers, not a million strings."""
    return pd.Categorical(kernels["trace"])




def keep_steps(item: LoadedTrace, first: int, last: int) -> LoadedTrace:
    """A trace cut to the kernels launched in its marked steps first..last (and the memory
    operations between the first and the last of them): what `--steps A-B` checks. A trace that
    holds none of them is told as one that could not be used, with the steps it holds."""
    if item.error is not None or item.trace is None or item.launches is None or item.ranges is None:
        return item
    launches = item.launches
    found = marked_steps(item.trace, launches)
    wanted = found[found["index"].between(first, last)]
    step_of = launching_step(launches.assign(trace=item.trace.path.name), wanted)
    # A kernel whose launch call the trace lacks was launched before the capture opened (a
    # torch.profiler window's first kernels finish the step before it): it is no kernel of these steps.
    rows = np.flatnonzero((step_of >= 0) & launches["launch_start"].notna().to_numpy())
    if not len(rows):
        held = (f"it holds steps {found['index'].min()}-{found['index'].max()}" if len(found)
                else "it holds no step marked by gemmscope's hook")
        return LoadedTrace(item.path, error=f"{item.path.name} holds no kernel of steps {first}-{last}: {held}")
    kept = launches.iloc[rows].reset_index(drop=True)
    memops, nvtx = item.trace.memops, item.trace.nvtx
    between = (memops["start"] >= kept["start"].min()) & (memops["start"] <= kept["end"].max())
    # the marks of other steps go too, so that the steps found later are these alone
    number = _mark_numbers(item.trace)
    other_steps = nvtx["name"].map(number[(number < first - 1) | (number > last)]).notna()
    trace = dataclass_replace(item.trace, memops=memops[between.to_numpy()].reset_index(drop=True),
                              nvtx=nvtx[~other_steps.to_numpy()].reset_index(drop=True))
    return LoadedTrace(item.path, trace, kept, item.ranges.take(rows))


def cut_to_steps(loaded: list[LoadedTrace], first: int, last: int) -> tuple[list[LoadedTrace], list[int], list[int]]:
    """`--steps first-last` over traces: each cut to those steps (keep_steps), the steps asked
    that no trace holds, and those checked. None of them in any usable trace is an InputError,
    never an empty pass; traces none of which could be used are left to the check to report."""
    asked = set(range(first, last + 1))
    if all(item.error is not None for item in loaded):  # nothing to cut: the check says why
        return loaded, [], sorted(asked)
    held = {n for item in loaded for n in held_steps(item)}
    if not held & asked:
        ran = f"it holds steps {min(held)}-{max(held)}" if held else "no step marked by gemmscope's hook is in it"
        raise InputError(f"steps {first}-{last} are not in the trace{'s' * (len(loaded) > 1)}: {ran} (the hook "
                         "marks each optimizer step; did the job end before them?)")
    return [keep_steps(item, first, last) for item in loaded], sorted(asked - held), sorted(asked & held)


def held_steps(item: LoadedTrace) -> list[int]:
    """The numbers of the marked steps a trace holds whole."""
    if item.trace is None or item.launches is None:
        return []
    return sorted(marked_steps(item.trace, item.launches)["index"].astype(int).tolist())
