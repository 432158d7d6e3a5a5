"""gemmscope as a library: what `analyze`, `verify --trace` and `diagnose` do, as Python calls.

    import gemmscope as gs
    traces = gs.load("rank*.sqlite")           # nsys exports or torch.profiler traces
    traces.gemms                                # one row per GEMM launch (GEMM_COLUMNS)
    result = gs.check(traces, expect="fp8-block")
    result.state, result.passed                 # gs.State.PASS, FAIL, NOT_CHECKED or NOT_FULLY_CHECKED; a bool
    result.mismatches, result.unjudged          # the failing GEMM launches, those with nothing to judge them by
    gs.diagnose(result).findings                # why low precision does or does not pay

The states are the CLI's: `result.state.exit_code` is what `gemmscope verify --trace` exits with
on the same traces and options, and what the CLI says in one line and exits 2 for is raised as
gemmscope.InputError, at once (`load` of a missing file included). Results are dataclasses with
`to_dict()` (JSON-able). pandas and the readers are imported on the first call, not by `import
gemmscope`, so that importing it stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemmscope.errors import InputError, NoGpuKernels, State

if TYPE_CHECKING:
    import pandas as pd

    from gemmscope.attribution import LoadedTrace
    from gemmscope.diagnosis import Diagnosis
    from gemmscope.verify import Verification

# The GEMM tables' columns: public name <- the column of verify's frame it is. Times are ns.
GEMM_COLUMNS = {
    "trace": "trace", "rank": "rank", "kernel": "name", "precision": "precision", "pass": "te_pass",
    "module": "module", "layer": "layer", "requested": "requested", "m": "gemm_m", "n": "gemm_n", "k": "gemm_k",
    "thread": "thread", "start_ns": "start", "duration_ns": "duration_ns",
}
# What a check adds to each GEMM: the recipe it was checked against, its verdict and why.
VERDICT_COLUMNS = {"expected": "expected", "verdict": "verdict", "cause": "cause", "allowed": "allowed"}


@dataclass(eq=False)
class Traces:
    """Traces read and attributed (`load`): one per file, in order; a trace that could not be
    read is kept with the reason (`errors`), never dropped."""

    loaded: list[LoadedTrace] = field(repr=False)
    paths: list[Path] = field(default_factory=list)

    @property
    def errors(self) -> dict[str, str]:
        """Per trace that could not be read (file name): why."""
        return {item.path.name: item.error for item in self.loaded if item.error is not None}

    @property
    def gemms(self) -> pd.DataFrame:
        """Every GEMM launch: GEMM_COLUMNS, whatever was asked for (none where the run launched no
        GPU kernel)."""
        return check(self).gemms[list(GEMM_COLUMNS)]


# What check and diagnose take: traces `load` returned, or what `load` takes.
PathsOrTraces = str | Path | Sequence[str | Path] | Traces


@dataclass(eq=False)
class CheckResult:
    """A check of traces against a recipe (`check`): every GEMM launch with its verdict, and the
    state the CLI would say (its exit code: `state.exit_code`)."""

    state: State  # PASS, FAIL, NOT_CHECKED (nothing to check against) or NOT_FULLY_CHECKED (README: Exit codes)
    expected: list[str]  # the recipes GEMMs were checked against (none: each against its own recorded request)
    unreadable: list[dict]  # traces that could not be read: trace, rank, error
    # traces whose process launched no GPU kernel beside traces that did (torch.compile's
    # workers ...): trace, rank; nothing in them to check, no failure
    without_kernels: list[dict]
    gemms: pd.DataFrame = field(repr=False)  # GEMM_COLUMNS, and VERDICT_COLUMNS where something was checked
    # everything verify computed (the CLI's reports read it); None where the run launched no GPU kernel
    verification: Verification | None = field(repr=False)
    note: str | None = field(default=None, repr=False)  # why nothing was checked: the run launched no GPU kernel

    @property
    def passed(self) -> bool:
        """Every GEMM judged (or allowed) and none failed: the CLI's exit 0."""
        return self.state is State.PASS

    @property
    def mismatches(self) -> pd.DataFrame:
        """The GEMM launches that ran another precision than asked, not allowed (none where nothing
        was checked)."""
        return self._public("mismatches")

    @property
    def allowed(self) -> pd.DataFrame:
        """The mismatches an `allow` pattern accepted (still listed)."""
        return self._public("allowed")

    @property
    def unjudged(self) -> pd.DataFrame:
        """The GEMM launches that had nothing to be judged against, not allowed: they make the
        state NOT_FULLY_CHECKED (with `strict`, those of unknown precision too)."""
        return self._public("unjudged")

    def _public(self, which: str) -> pd.DataFrame:
        if self.verification is None:
            return self.gemms
        return _table(getattr(self.verification, which), GEMM_COLUMNS | VERDICT_COLUMNS)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able values: the mismatches and the unjudged GEMMs one record per launch."""
        from gemmscope.jsonable import frame_records

        return {"state": self.state.value, "passed": self.passed, "expected": self.expected,
                "unreadable": self.unreadable, "without_kernels": self.without_kernels, "note": self.note,
                "gemm_launches": len(self.gemms), "allowed_launches": len(self.allowed),
                "mismatches": frame_records(self.mismatches), "unjudged": frame_records(self.unjudged)}


def load(paths: str | Path | Sequence[str | Path], workers: int | None = None,
         scheduler: str | None = None) -> Traces:
    """Read and attribute traces: files, folders or glob patterns (`rank*.sqlite`), nsys exports
    (.sqlite, .sqlite.xz, .nsys-rep) or torch.profiler traces (.json, .json.gz). Several are read
    in `workers` processes (default: one per trace, up to one per CPU), or on the Dask cluster at
    `scheduler`. Raises gemmscope.InputError, at once, where the CLI says its one line and exits 2:
    a name that matches nothing, no trace that could be read (a missing file, not a trace), a
    capture blind to GPU kernels. A trace that could not be read beside others that could is kept
    with its reason (`errors`), and a run that launched no GPU kernel is a result (`check`)."""
    from gemmscope import job, loading
    from gemmscope.traces.read import trace_paths

    found = trace_paths([paths] if isinstance(paths, (str, Path)) else list(paths))
    loaded = loading.load(found, workers, scheduler)
    try:
        job.raise_if_none_usable(loaded)
    except NoGpuKernels as exc:
        if not exc.cuda_traced:
            raise
    return Traces(loaded, found)


def check(traces: PathsOrTraces, expect: str | None = None, allow: Sequence[str] = (),
          expect_map: Mapping[str, str] | None = None, workers: int | None = None,
          strict: bool = False, steps: tuple[int, int] | None = None) -> CheckResult:
    """Check every GEMM of `traces` (a `load` result, or what `load` takes) against the recipe
    `expect` (recipes.RECIPES), or, without it, each against what the run asked for as gemmscope's
    hook recorded it. `allow`: shell patterns (kernel, module, layer, NVTX range) whose mismatches,
    and GEMMs with nothing to judge them by, are accepted; `expect_map`: NVTX range pattern ->
    recipe, as `verify --expect-map`; `strict`: as --strict, a GEMM of unknown precision leaves
    the state NOT_FULLY_CHECKED; `steps`: (A, B), as --steps, only training steps A to B (the
    optimizer steps gemmscope's hook marks). A run that launched no GPU kernel is state FAIL, with
    a `note`."""
    from gemmscope.recipes import RECIPES

    if expect is not None and expect not in RECIPES:
        raise InputError(f"unknown recipe {expect!r}: choose from {', '.join(RECIPES)}")
    mapped = tuple((expect_map or {}).items())
    for _, recipe in mapped:
        if recipe not in RECIPES:
            raise InputError(f"unknown recipe {recipe!r} in expect_map: choose from {', '.join(RECIPES)}")
    loaded = traces if isinstance(traces, Traces) else load(traces, workers)
    items = loaded.loaded
    if steps is not None:
        from gemmscope.steps import cut_to_steps

        items = cut_to_steps(items, *steps)[0]
    try:
        result = _verify(items, expect, tuple(allow), mapped, strict)
    except NoGpuKernels as exc:  # load let through only a run that launched no kernel: nothing ran, a failure
        import pandas as pd

        empty = pd.DataFrame(columns=list(GEMM_COLUMNS))
        return CheckResult(state=State.FAIL, expected=[expect] if expect else [], unreadable=[], without_kernels=[],
                           gemms=empty, verification=None, note=f"{exc}: no GEMM ran")
    return CheckResult(state=result.state, expected=result.expected_recipes, unreadable=result.unreadable,
                       without_kernels=result.without_kernels,
                       gemms=_table(result.gemms, GEMM_COLUMNS | VERDICT_COLUMNS), verification=result)


def diagnose(traces: CheckResult | PathsOrTraces, expect: str | None = None, step_range: str | None = None,
             workers: int | None = None) -> Diagnosis:
    """Where the GPU time of `traces` (a `check` result, a `load` result, or what `load` takes)
    went and why low precision does or does not pay: per rank, the time per category, and the
    findings, most time at stake first; over the training steps after the first when steps are
    found (`step_range`: the NVTX range that marks one, a shell pattern)."""
    from gemmscope.diagnosis import diagnose as diagnosed

    result = traces if isinstance(traces, CheckResult) else check(traces, expect, workers=workers)
    if result.verification is None:  # the CLI's diagnose says this line and exits 1
        raise NoGpuKernels(result.note or "no GPU kernel ran", cuda_traced=True)
    return diagnosed(result.verification, step_range)


def _verify(loaded: list[LoadedTrace], expect: str | None, allow: tuple[str, ...],
            expect_map: tuple[tuple[str, str], ...], strict: bool = False) -> Verification:
    from gemmscope import verify

    return verify.check(loaded, expect, allow, expect_map, strict)


def _table(gemms: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """verify's GEMM frame under the public names, in `columns`' order (a column the check did
    not make, such as a verdict without a recipe, is left out)."""
    present = {public: own for public, own in columns.items() if own in gemms}
    return gemms[list(present.values())].set_axis(list(present), axis=1).reset_index(drop=True)
