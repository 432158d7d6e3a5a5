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
    gs.api.timeline_page("traces/")            # the same as one self-contained HTML page

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

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
    from gemmscope.plan.model_config import ModelConfig
    from gemmscope.plan.profile_run import ProfileRun
    from gemmscope.plan.shapes import Gemm
    from gemmscope.redaction.policy import Redactor
    from gemmscope.report.model import Report
    from gemmscope.watching.audit import Audited
    from gemmscope.watching.timeline import Timeline
    from gemmscope.whatif.answer import Answer

__all__ = ["GEMM_COLUMNS", "VERDICT_COLUMNS", "Analysis", "CheckResult", "Comparison", "Kernels", "Options", "Profiled",
           "Shapes", "Shared", "Traces", "audit", "audit_command", "bundle", "check", "compare", "decode_kernels",
           "diagnose", "follow", "gemm_shapes", "load", "profile_model", "report", "scrub", "timeline", "timeline_page",
           "what_if"]


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
    nothing_ran: str | None = None  # where the run launched no GPU kernel, why (the page says it too)

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
    from gemmscope.plan.profile_run import run_directory

    options = Options.of(options, **settings)
    run_dir = run_directory(_named(targets), "report")
    if run_dir is not None:
        if options.judging:
            raise InputError("--expect, --expect-map, --allow, --strict, --step-range and --steps apply to traces, "
                             "not to a profile run directory")
        return _run_report(run_dir, options.keep)
    shared = Analysis(targets, options).scrubbed()
    page = shared.report("page")
    assert shared.redactor is not None  # a scrubbed copy's
    checked = shared.check
    return Shared(page, shared.redactor, checked.note if checked.judgement is None else None)


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
    from gemmscope.bundle import bundle_run
    from gemmscope.plan.profile_run import run_directory

    options = Options.of(options, **settings)
    if isinstance(inputs, Traces):
        return Analysis(inputs, options).bundle(out)
    named = _named(inputs)
    if not named:
        raise InputError("nothing to bundle: give traces or a gemmscope profile run directory")
    run_dir = run_directory(named, "bundle")
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


def timeline_page(source: str | Path | Sequence[dict[str, Any]], title: str | None = None) -> str:
    """A job's timeline as one self-contained HTML page, as `gemmscope timeline DIR --format html`
    writes it (nothing loaded from anywhere): its windows over their steps as plots, its alerts with
    their window, ranks and place, and the window table. `source`: the job's folder (or timeline
    file), or its records (`timeline`, `follow(...).records`)."""
    from gemmscope.report.html import to_html
    from gemmscope.watching.timeline import read_timeline, timeline_report

    if isinstance(source, (str, Path)):
        records, named = read_timeline(source), f"Timeline of {Path(source).name}"
    else:
        records, named = list(source), "Timeline of a job"
    return to_html(timeline_report(records, title or named))


def follow(folder: str | Path, options: Options | None = None, count: int | None = None,
           say: Callable[[str], None] = lambda line: None, until_pid: int | None = None, **settings: Any) -> Timeline:
    """Judges each trace another tool writes into `folder`, once complete, as a window of the
    job's timeline (FOLDER/timeline.jsonl), each compared with the first; until `count` traces
    were judged, or process `until_pid` has ended and its last traces are judged (neither: until
    interrupted). `say`: a line per window, its alerts with it."""
    from gemmscope.watching.follow import follow as follow_folder
    from gemmscope.watching.timeline import Timeline

    if not Path(folder).is_dir():
        raise InputError(f"{folder}: no such folder to follow")
    return follow_folder(folder, Timeline(folder, Options.of(options, **settings), say=say), count,
                         until_pid=until_pid)


def audit_command(command: Sequence[str], out: str | Path, every: int | str, window: int = 3,
                  options: Options | None = None, *, echo: bool = False, say: Callable[[str], None] = lambda line: None,
                  keep_windows: int | None = None, **settings: Any) -> Audited:
    """`verify --every`: `command` run with `window` training steps captured every `every` steps,
    or every `every` of wall time ("30m"; torch.profiler, in each of its processes), each window
    judged as it lands into OUT/timeline.jsonl, compared with the first; `say`: a line per window,
    its alerts with it; `keep_windows`: how many traces of windows with nothing new are kept, the
    newest (None: all)."""
    from gemmscope.watching.audit import audit

    return audit(command, out, every, window, Options.of(options, **settings), echo=echo, say=say,
                 keep_windows=keep_windows)


def audit(every: int | str, window: int = 3, out: str | Path = "gemmscope-audit", *, expect: str | None = None,
          follow: bool = True) -> Path:
    """One line in a training script: this process audited from now on as `verify --every` audits
    a command (gemmscope.watching.in_process.audit): `window` steps every `every` steps, or every
    `every` of wall time ("30m", "2h"), each window's trace in `out`, judged there into
    timeline.jsonl by a follower the rank-0 process starts."""
    from gemmscope.watching.in_process import audit as audit_here

    return audit_here(every, window, out, expect=expect, follow=follow)


# --- the products beside the check: one call each, as their commands make it -----------------------


@dataclass(frozen=True)
class Shapes:
    """The GEMMs a model runs per training step (`gemm_shapes`): its `config` and `gemms`
    (gemmscope.plan.shapes.Gemm), one row each in `frame`."""

    config: ModelConfig
    gemms: list[Gemm]

    @property
    def frame(self) -> pd.DataFrame:
        from gemmscope.plan.shapes import plan_frame

        return plan_frame(self.gemms)

    def to_dict(self) -> dict[str, Any]:
        """`gemmscope shapes --format json`'s document."""
        from gemmscope.report.documents import shapes_document

        return shapes_document(self.gemms)

    def render(self, fmt: str = "table") -> str:
        """What `gemmscope shapes --format FMT` prints: table, json, csv or markdown."""
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        if fmt == "csv":
            from gemmscope.report.tables import csv_text

            return csv_text(self.frame)
        if fmt not in ("table", "markdown"):
            raise InputError(f"shapes cannot be written as {fmt}: choose from table, json, csv, markdown")
        from gemmscope.report.model import flop_text

        # for a person: FLOPs in a unit (1.23 TFLOP), not a 13-digit count (CSV and JSON keep the count)
        read = self.frame.assign(flops=self.frame["flops"].map(flop_text),
                                 total_flops=self.frame["total_flops"].map(flop_text))
        if fmt == "markdown":
            from gemmscope.report.markdown import markdown_table

            return markdown_table(read)
        from gemmscope.report import terminal

        title = f"{self.config.name}: {self.config.tokens} tokens, {len(self.gemms)} GEMMs"
        return terminal.table_text(title, read)


def gemm_shapes(model: str | None = None, config: str | Path | None = None, lm_head: bool = False,
                **fields: Any) -> Shapes:
    """The GEMMs a transformer runs per training step (`gemmscope shapes`): op, pass, M×K×N, FLOPs,
    count; of a preset `model` (gemmscope.plan.model_config.PRESETS) or a Hugging Face config.json
    (`config`), ModelConfig's `fields` by name over it (hidden_size=4096, tp=2, ...; alone without
    either); `lm_head`: the LM head's GEMMs too."""
    from gemmscope.plan import shapes
    from gemmscope.plan.hf_config import resolve_config

    resolved = resolve_config(model, None if config is None else str(config), **fields)
    return Shapes(resolved, shapes.plan(resolved, lm_head=lm_head))


@dataclass(frozen=True)
class Kernels:
    """Kernel names decoded (`decode_kernels`): one row per name in `frame` (gemmscope.kernels.decode_frame)."""

    frame: pd.DataFrame

    def to_dict(self) -> dict[str, Any]:
        """`gemmscope kernel --format json`'s document."""
        from gemmscope.report.documents import kernels_document

        return kernels_document(self.frame)

    def render(self, fmt: str = "table") -> str:
        """What `gemmscope kernel --format FMT` prints: table or json."""
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        if fmt != "table":
            raise InputError(f"kernels cannot be written as {fmt}: choose from table, json")
        from gemmscope import kernels
        from gemmscope.report import terminal

        # each name followed (under the table) by whether its GEMM is grouped and why its precision
        # is open: too long for a column of a terminal's width
        frame = self.frame
        remarks = [" · ".join(part for part in ("grouped GEMM" if grouped else "", note or "") if part)
                   for grouped, note in zip(frame["grouped"], frame["note"])]
        names = [f"{name}\n  {remark}" if remark else name for name, remark in zip(frame["name"], remarks)]
        return terminal.kernels_text(frame[["name", *kernels.TABLE_COLUMNS]].assign(name=names))


def decode_kernels(names: Sequence[str]) -> Kernels:
    """What CUDA kernel names say (`gemmscope kernel`): family, arch, role, precision, operand
    types, scale mode, layout, whether grouped, and why a precision is unknown."""
    import pandas as pd

    from gemmscope import kernels

    return Kernels(kernels.decode_frame(pd.Series(list(names), dtype=object)))


@dataclass(frozen=True)
class Profiled:
    """A `gemmscope profile` run read back (`profile_model`): `run` (gemmscope.plan.profile_run),
    the run directory it is in, and how long it took here (None: the run shipped with gemmscope)."""

    run: ProfileRun = field(repr=False)
    run_dir: Path
    wall_s: float | None = None

    def report(self, detail: str = "normal") -> Report:
        """What gemmscope says of the run at `detail` ("quiet", "normal", "verbose")."""
        from gemmscope.report.profile import profile_report

        return profile_report(self.run, self.run_dir, detail=detail, written_to=self.run_dir)

    def render(self, fmt: str = "table", detail: str = "normal") -> str:
        from gemmscope.report import render

        return render(self.report(detail), fmt)


def profile_model(model: str | None = None, config: str | Path | None = None, *, lm_head: bool = False,
                  precisions: Sequence[str] | None = None, modes: Sequence[str] | None = None, iters: int = 100,
                  warmup: int = 10, out: str | Path | None = None, use_nsys: bool = True, shipped: bool = False,
                  **fields: Any) -> Profiled:
    """Every GEMM of a model (`gemm_shapes`' arguments) through TE at each of `precisions` (default:
    every recipe) and `modes` (autocast, prequant), on this GPU under nsys (unless `use_nsys` is
    False) into the new run directory `out` (default ./gemmscope-run-<time>), read back, its
    results and report written there (`gemmscope profile`). `shipped`: the run shipped with
    gemmscope instead, re-derived from its trace on any machine (the other arguments unread)."""
    import time

    from gemmscope.judging.recipes import RECIPES
    from gemmscope.plan import EXAMPLE_RUN, gpu_profile, profile_run
    from gemmscope.report.profile import write_profile_reports

    if shipped:
        return Profiled(profile_run.load_run(EXAMPLE_RUN), EXAMPLE_RUN)
    started = time.perf_counter()
    planned = gemm_shapes(model, config, lm_head, **fields)
    if not gpu_profile.gpu_available():
        raise InputError("no CUDA GPU here: nothing can be profiled")
    run_dir = Path(out) if out is not None else Path(time.strftime("gemmscope-run-%Y%m%d-%H%M%S"))
    spec = gpu_profile.spec_for(planned.config, planned.gemms, precisions or RECIPES, modes or profile_run.MODES,
                                iters, warmup)
    gpu_profile.run(spec, run_dir, use_nsys=use_nsys)
    run = profile_run.load_run(run_dir)
    wall_s = time.perf_counter() - started
    write_profile_reports(run, run_dir, wall_s)
    return Profiled(run, run_dir, wall_s)


def what_if(traces: Source, options: Options | None = None, *, out: str | Path | None = None,
            measured: str | Path | None = None, measure: bool = True, iters: int = 30, warmup: int = 5,
            say: Callable[[str], None] | None = None, **settings: Any) -> Answer:
    """Per group of the run's GEMMs (`gemmscope whatif`): its time per step now, its time measured
    on this GPU at each recipe (into `out`/measurement; a new folder named by the time where `out`
    is None), or read from a measurement made before (`measured`), what to keep and what to move,
    and the change for the run's framework, written into `out` (whatif.json, whatif.html, the
    change files). Without a GPU, or with `measure` False: the groups and the command that
    measures them. gemmscope.whatif.answer.NothingToGroup where the run launched no GEMM."""
    from gemmscope.common.atomic import written_whole
    from gemmscope.whatif.answer import answer

    found = answer(_named(traces), Options.of(options, **settings), out=None if out is None else Path(out),
                   measured=None if measured is None else Path(measured), measure=measure, iters=iters,
                   warmup=warmup, say=say)
    if found.out is not None:
        found.out.mkdir(parents=True, exist_ok=True)
        for name, text in found.files.items():
            with written_whole(found.out / name) as partial:
                partial.write_text(text, encoding="utf-8")
    return found
