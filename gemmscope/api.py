"""gemmscope as a library: what `analyze`, `verify --trace` and `diagnose` do, as Python calls.

    import gemmscope as gs
    traces = gs.load("rank*.sqlite")           # nsys exports or torch.profiler traces
    traces.gemms                                # one row per GEMM launch (GEMM_COLUMNS)
    result = gs.check(traces, expect="fp8-block")
    result.passed, result.mismatches            # a bool, the failing GEMM launches
    gs.diagnose(result).findings                # why low precision does or does not pay

Results are dataclasses with `to_dict()` (JSON-able). pandas and the readers are imported on the
first call, not by `import gemmscope`, so that importing it stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemmscope.errors import InputError

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
        """Every GEMM launch: GEMM_COLUMNS, whatever was asked for."""
        return _table(_verify(self.loaded, None, (), ()).gemms, GEMM_COLUMNS)


# What check and diagnose take: traces `load` returned, or what `load` takes.
PathsOrTraces = str | Path | Sequence[str | Path] | Traces


@dataclass(eq=False)
class CheckResult:
    """A check of traces against a recipe (`check`): every GEMM launch with its verdict."""

    passed: bool  # no FALLBACK outside --allow, a GEMM ran, every trace was read, every mapped range held a GEMM
    expected: list[str]  # the recipes GEMMs were checked against (none: each against its own recorded request)
    unreadable: list[dict]  # traces that could not be read: trace, rank, error
    # traces whose process launched no GPU kernel beside traces that did (torch.compile's
    # workers ...): trace, rank; nothing in them to check, no failure
    without_kernels: list[dict]
    gemms: pd.DataFrame = field(repr=False)  # GEMM_COLUMNS and VERDICT_COLUMNS
    verification: Verification = field(repr=False)  # everything verify computed (the CLI's reports read it)

    @property
    def mismatches(self) -> pd.DataFrame:
        """The GEMM launches that ran another precision than asked, not allowed."""
        return self.gemms[(self.gemms["verdict"] == "FALLBACK") & ~self.gemms["allowed"]]

    @property
    def allowed(self) -> pd.DataFrame:
        """The mismatches an `allow` pattern accepted (still listed)."""
        return self.gemms[(self.gemms["verdict"] == "FALLBACK") & self.gemms["allowed"]]

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able values: the mismatches one record per launch."""
        from gemmscope.jsonable import frame_records

        return {"passed": self.passed, "expected": self.expected, "unreadable": self.unreadable,
                "without_kernels": self.without_kernels,
                "gemm_launches": len(self.gemms), "allowed_launches": len(self.allowed),
                "mismatches": frame_records(self.mismatches)}


def load(paths: str | Path | Sequence[str | Path], workers: int | None = None,
         scheduler: str | None = None) -> Traces:
    """Read and attribute traces: files, folders or glob patterns (`rank*.sqlite`), nsys exports
    (.sqlite, .sqlite.xz, .nsys-rep) or torch.profiler traces (.json, .json.gz). Several are read
    in `workers` processes (default: one per trace, up to one per CPU), or on the Dask cluster at
    `scheduler`. Raises gemmscope.InputError for a name that matches nothing."""
    from gemmscope import loading
    from gemmscope.traces.read import trace_paths

    found = trace_paths([paths] if isinstance(paths, (str, Path)) else list(paths))
    return Traces(loading.load(found, workers, scheduler), found)


def check(traces: PathsOrTraces, expect: str | None = None, allow: Sequence[str] = (),
          expect_map: Mapping[str, str] | None = None, workers: int | None = None) -> CheckResult:
    """Check every GEMM of `traces` (a `load` result, or what `load` takes) against the recipe
    `expect` (recipes.RECIPES), or, without it, each against what the run asked for as gemmscope's
    hook recorded it. `allow`: shell patterns (kernel, module, layer, NVTX range) whose mismatches
    are accepted; `expect_map`: NVTX range pattern -> recipe, as `verify --expect-map`."""
    from gemmscope.recipes import RECIPES

    if expect is not None and expect not in RECIPES:
        raise InputError(f"unknown recipe {expect!r}: choose from {', '.join(RECIPES)}")
    mapped = tuple((expect_map or {}).items())
    for _, recipe in mapped:
        if recipe not in RECIPES:
            raise InputError(f"unknown recipe {recipe!r} in expect_map: choose from {', '.join(RECIPES)}")
    loaded = traces if isinstance(traces, Traces) else load(traces, workers)
    result = _verify(loaded.loaded, expect, tuple(allow), mapped)
    return CheckResult(passed=not result.failed, expected=result.expected_recipes, unreadable=result.unreadable,
                       without_kernels=result.without_kernels, gemms=_table(result.gemms, GEMM_COLUMNS | VERDICT_COLUMNS), verification=result)


def diagnose(traces: CheckResult | PathsOrTraces, expect: str | None = None, step_range: str | None = None,
             workers: int | None = None) -> Diagnosis:
    """Where the GPU time of `traces` (a `check` result, a `load` result, or what `load` takes)
    went and why low precision does or does not pay: per rank, the time per category, and the
    findings, most time at stake first; over the training steps after the first when steps are
    found (`step_range`: the NVTX range that marks one, a shell pattern)."""
    from gemmscope.diagnosis import diagnose as diagnosed

    result = traces if isinstance(traces, CheckResult) else check(traces, expect, workers=workers)
    return diagnosed(result.verification, step_range)


def _verify(loaded: list[LoadedTrace], expect: str | None, allow: tuple[str, ...],
            expect_map: tuple[tuple[str, str], ...]) -> Verification:
    from gemmscope import verify

    return verify.check(loaded, expect, allow, expect_map)


def _table(gemms: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """verify's GEMM frame under the public names, in `columns`' order (a column the check did
    not make, such as a verdict without a recipe, is left out)."""
    present = {public: own for public, own in columns.items() if own in gemms}
    return gemms[list(present.values())].set_axis(list(present), axis=1).reset_index(drop=True)
