"""gemmscope as a library: what the CLI's trace commands do, as Python calls, all through
`gemmscope.Analysis` (gemmscope.analysis), as the CLI's own commands are.

    import gemmscope as gs
    traces = gs.load("rank*.sqlite")           # nsys exports or torch.profiler traces
    traces.gemms                                # one row per GEMM launch (GEMM_COLUMNS)
    result = gs.check(traces, expect="fp8-block")
    result.state, result.passed                 # gs.State.PASS, FAIL, NOT_CHECKED or NOT_FULLY_CHECKED; a bool
    result.mismatches, result.unjudged          # the failing GEMM launches, those with nothing to judge them by
    gs.diagnose(result).findings                # why low precision does or does not pay
    gs.compare("bf16.sqlite", "fp8.sqlite").render("markdown")
    gs.capture(["python", "train.py"])         # a run captured under nsys (or profiler="torch")
    gs.follow("traces/", count=2)              # each trace written there judged as a window, alerts said
    gs.timeline("traces/")                     # the job's windows, one record each

and, for traces or a `gemmscope profile` run directory, `report` (the page `gemmscope report`
writes), `bundle` (the zip `gemmscope bundle` writes) and `scrub` (a trace's scrubbed copy), here
as gemmscope.api.report / bundle / scrub (`gemmscope.report`, `gemmscope.bundle` and
`gemmscope.redaction.scrub` are the modules that make them).

The states are the CLI's: `result.state.exit_code` is what `gemmscope verify --trace` exits with
on the same traces and options, and what the CLI says in one line and exits 2 for is raised as
gemmscope.InputError, at once (`load` of a missing file included). Results are dataclasses with
`to_dict()` (JSON-able). pandas and the readers are imported on the first call, not by `import
gemmscope`, so that importing it stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemmscope.analysis import (
    GEMM_COLUMNS,
    VERDICT_COLUMNS,
    Analysis,
    CheckResult,
    Comparison,
    Options,
    Source,
    Traces,
)
from gemmscope.errors import InputError, NoGpuKernels

if TYPE_CHECKING:
    import pandas as pd

    from gemmscope.bundle import Bundle
    from gemmscope.diagnosing.diagnosis import Diagnosis
    from gemmscope.redaction.policy import Redactor
    from gemmscope.report.model import Report
    from gemmscope.watching.timeline import Timeline

__all__ = ["GEMM_COLUMNS", "VERDICT_COLUMNS", "Analysis", "CheckResult", "Comparison", "Options", "Shared", "Traces",
           "bundle", "check", "compare", "diagnose", "follow", "load", "report", "scrub", "timeline"]


def load(paths: str | Path | Sequence[str | Path], workers: int | None = None,
         scheduler: str | None = None, **settings: Any) -> Traces:
    """Read and attribute traces: files, folders or glob patterns (`rank*.sqlite`), nsys exports
    (.sqlite, .sqlite.xz, .nsys-rep) or torch.profiler traces (.json, .json.gz). Several are read
    in `workers` processes (default: one per trace, up to one per CPU), or on the Dask cluster at
    `scheduler`; `redact=True` (and `keep`): every text redacted as the CLI prints it. Raises
    gemmscope.InputError, at once, where the CLI says its one line and exits 2: a name that
    matches nothing, no trace that could be read (a missing file, not a trace), a capture blind to
    GPU kernels. A trace that could not be read beside others that could is kept with its reason
    (`errors`), and a run that launched no GPU kernel is a result (`check`)."""
    from gemmscope.assembly import job

    traces = Analysis(paths, workers=workers, scheduler=scheduler, **settings).traces
    try:
        job.raise_if_none_usable(traces.loaded)
    except NoGpuKernels as exc:
        if not exc.cuda_traced:
            raise
    return traces


def check(traces: Source, expect: str | None = None, allow: Sequence[str] = (), **settings: Any) -> CheckResult:
    """Check every GEMM of `traces` (a `load` result, or what `load` takes) against the recipe
    `expect` (recipes.RECIPES), or, without it, each against what the run asked for as gemmscope's
    hook recorded it. `allow`: shell patterns (kernel, module, layer, NVTX range) whose mismatches,
    and GEMMs with nothing to judge them by, are accepted; the other Options by name:
    `expect_map`, NVTX range pattern -> recipe, as `verify --expect-map`; `strict`: as --strict,
    a GEMM of unknown precision leaves the state NOT_FULLY_CHECKED; `steps`: (A, B), as --steps,
    only training steps A to B (the optimizer steps gemmscope's hook marks); `workers`. A run
    that launched no GPU kernel is state FAIL, with a `note`. The same as `Analysis(traces, ...).check`."""
    return Analysis(traces, expect=expect, allow=allow, **settings).check


def diagnose(traces: CheckResult | Source, expect: str | None = None, step_range: str | None = None,
             **settings: Any) -> Diagnosis:
    """Where the GPU time of `traces` (a `check` result, a `load` result, or what `load` takes)
    went and why low precision does or does not pay: per rank, the time per category, and the
    findings, most time at stake first; over the training steps after the first when steps are
    found (`step_range`: the NVTX range that marks one, a shell pattern)."""
    if isinstance(traces, CheckResult):
        if traces.judgement is None:  # the CLI's diagnose says this line and exits 1
            raise NoGpuKernels(traces.note or "no GPU kernel ran", cuda_traced=True)
        from gemmscope.diagnosing.diagnosis import diagnose as diagnosed

        return diagnosed(traces.judgement, step_range)
    analysis = Analysis(traces, expect=expect, step_range=step_range, **settings)
    if analysis.check.judgement is None:
        raise NoGpuKernels(analysis.check.note or "no GPU kernel ran", cuda_traced=True)
    return analysis.diagnosis


def compare(base: Source, new: Source, options: Options | None = None, **settings: Any) -> Comparison:
    """Two runs of one program side by side (`gemmscope compare BASE NEW`): where NEW gained or
    lost GPU time against BASE, per category and per module and pass, which GEMM kernels changed,
    and each run's findings (`figures`; `render(fmt)`, `to_dict()`)."""
    first, second = Analysis.together([base, new], options, **settings)
    return first.compare(second)


@dataclass(frozen=True)
class Shared:
    """A report made to be shared (`report`): from the traces scrubbed and redacted, by `redactor`
    (its `counts`: what was taken out)."""

    report: Report
    redactor: Redactor

    def render(self, fmt: str = "html") -> str:
        from gemmscope.report import render

        return render(self.report, fmt)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        return self.report.tables


def report(targets: Source, options: Options | None = None, **settings: Any) -> Shared:
    """The report `gemmscope report` writes (`render("html")` or "markdown"; its `tables`), of a
    `gemmscope profile` run directory or of traces, made from them scrubbed and redacted
    (Options.keep: what the redaction leaves)."""
    from gemmscope.report.profile import is_run_dir

    options = Options.of(options, **settings)
    named = _named(targets)
    if any(is_run_dir(Path(t)) for t in named):
        if len(named) > 1:
            raise InputError("give one profile run directory, or traces, not both")
        if options.judging:
            raise InputError("--expect, --expect-map, --allow, --strict, --step-range and --steps apply to traces, "
                             "not to a profile run directory")
        return _run_report(Path(named[0]), options.keep)
    shared = Analysis(targets, options).scrubbed()
    page = shared.report("page")
    assert shared.redactor is not None  # a scrubbed copy's
    return Shared(page, shared.redactor)


def _run_report(run_dir: Path, keep: Sequence[str]) -> Shared:
    """A profile run directory's report, from its trace scrubbed; and the Redactor that scrubbed it."""
    import tempfile

    from gemmscope.common import scratch
    from gemmscope.plan import profile_run
    from gemmscope.redaction.scrub import recorded_redactor
    from gemmscope.redaction.scrub import scrub as scrub_trace
    from gemmscope.report.model import redacted
    from gemmscope.report.profile import profile_report
    from gemmscope.traces.nsys import sqlite_export

    trace = next((run_dir / name for name in profile_run.RUN_TRACES if (run_dir / name).exists()), None)
    if trace is None:  # a run made with --no-nsys: no trace, its events only
        redactor = recorded_redactor([], keep)
        return Shared(redacted(profile_report(profile_run.load_run(run_dir), run_dir), redactor), redactor)
    export = sqlite_export(trace)
    redactor = recorded_redactor([export], keep)
    staging = Path(tempfile.mkdtemp(dir=scratch.folder()))
    scrub_trace(export, staging / "trace.sqlite", redactor)
    return Shared(redacted(profile_report(profile_run.load_run(staging), run_dir), redactor), redactor)


def bundle(inputs: Source, out: str | Path, options: Options | None = None, **settings: Any) -> Bundle:
    """The zip `gemmscope bundle` writes, of traces or of one `gemmscope profile` run directory
    (gemmscope.bundle): the report, its JSON and tables, the traces scrubbed, the environment."""
    from gemmscope.bundle import bundle_run, run_directory

    options = Options.of(options, **settings)
    if isinstance(inputs, Traces):
        return Analysis(inputs, options).bundle(out)
    run_dir = run_directory(_named(inputs))
    if run_dir is None:
        return Analysis(inputs, options).bundle(out)
    if options.judging:
        raise InputError("--expect, --expect-map, --allow, --strict, --step-range and --steps are for traces, not a "
                         "profile run directory")
    return bundle_run(run_dir, out, options.keep)


def scrub(trace: str | Path, out: str | Path, keep: Sequence[str] = ()) -> tuple[Path, Redactor]:
    """A copy of `trace` without what nsys recorded of the machine and the user, every text in it
    redacted (gemmscope.redaction.scrub; `keep`: shell patterns the redaction leaves), as `gemmscope scrub`
    writes it; and the Redactor, whose `counts` say what was taken out."""
    from gemmscope.redaction.scrub import recorded_redactor
    from gemmscope.redaction.scrub import scrub as scrub_trace
    from gemmscope.traces.read import trace_source

    redactor = recorded_redactor([trace_source(trace)], keep)
    return scrub_trace(trace, out, redactor), redactor


def _named(source: Source) -> list[str | Path]:
    """What `load` takes, as a list of names."""
    if isinstance(source, Traces):
        return list(source.paths)
    return [source] if isinstance(source, (str, Path)) else list(source)


def timeline(folder: str | Path) -> list[dict[str, Any]]:
    """The records of a job's timeline (`verify --every`, `follow`): one per window judged, with
    its alerts (gemmscope/schemas/timeline.schema.json)."""
    from gemmscope.watching.timeline import read_timeline

    return read_timeline(folder)


def follow(folder: str | Path, options: Options | None = None, count: int | None = None,
           say: Callable[[str], None] = lambda line: None, **settings: Any) -> Timeline:
    """Judges each trace another tool writes into `folder`, once complete, as a window of the
    job's timeline (FOLDER/timeline.jsonl), each compared with the first; until `count` traces
    were judged (None: until interrupted). `say`: a line per window, its alerts with it."""
    from gemmscope.watching.follow import follow as follow_folder
    from gemmscope.watching.timeline import Timeline

    if not Path(folder).is_dir():
        raise InputError(f"{folder}: no such folder to follow")
    return follow_folder(folder, Timeline(folder, Options.of(options, **settings), say=say), count)
