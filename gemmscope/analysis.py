"""One analysis of traces, the one every trace command of the CLI stands on.

    import gemmscope as gs
    analysis = gs.Analysis("rank*.sqlite", expect="fp8-block", allow=["output_layer"])
    analysis.check.state                  # gs.State: what `gemmscope verify --trace` says, and exits with
    analysis.diagnosis.findings           # why low precision does or does not pay
    analysis.render("markdown")           # what `gemmscope analyze --format markdown` prints
    analysis.tables                       # the report's tables, as `report --tables` writes them
    analysis.compare(gs.Analysis("bf16.sqlite"))   # as `gemmscope compare`
    analysis.bundle("issue.zip")          # as `gemmscope bundle`
    analysis.scrubbed().render("html")    # as `gemmscope report`: from the traces scrubbed

An Analysis is built from traces (files, folders or globs; a `load` result; a `capture`) and one
`Options`. It reads them on first use and computes each result once (the check, the diagnosis,
each report), never changing what it was given: the check runs on its own copies of the loaded
frames, so two analyses of the same `Traces` give independent results. What a command says on
stderr beside its output (a trace given twice, steps missing, what a profiler does not record) is
in `notes`, and given to `say` as it is found.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemmscope.errors import InputError, NoGpuKernels, State
from gemmscope.judging.check_result import GEMM_COLUMNS, VERDICT_COLUMNS, CheckResult, public_table
from gemmscope.options import Options

if TYPE_CHECKING:
    import pandas as pd

    from gemmscope.assembly.attribution import LoadedTrace
    from gemmscope.assembly.job import Job
    from gemmscope.bundle import Bundle
    from gemmscope.diagnosing.diagnosis import Diagnosis
    from gemmscope.judging.judgement import Judgement
    from gemmscope.redaction.policy import Redactor
    from gemmscope.report.model import Report
    from gemmscope.report.plots import Plot
    from gemmscope.running.capturing import Captured, CaptureWindow
    from gemmscope.traces.model import Trace

# The reports an Analysis makes (`Analysis.report`): analyze's (its JSON document analyze's),
# verify's (its JSON document verify's), the page `report` writes (no JSON document) and diagnose's.
REPORT_KINDS = ("analysis", "verification", "page", "diagnosis")
# What `render` writes besides a report's formats (report.render's): one JSON line per GEMM launch.
STREAMED = "jsonl"


@dataclass(eq=False)
class Traces:
    """Traces read and attributed (`load`): one per file, in order; a trace that could not be
    read is kept with the reason (`errors`), never dropped. `redactor`: what redacted them
    (Options.redact), else None."""

    loaded: list[LoadedTrace] = field(repr=False)
    paths: list[Path] = field(default_factory=list)
    redactor: Redactor | None = field(default=None, repr=False)

    @classmethod
    def of(cls, traces: Sequence[Trace]) -> Traces:
        """Traces already read (traces.read.read_trace), attributed here."""
        from gemmscope.assembly.attribution import attribute

        return cls([attribute(trace) for trace in traces], [trace.path for trace in traces])

    @property
    def errors(self) -> dict[str, str]:
        """Per trace that could not be read (file name): why."""
        return {item.path.name: item.error for item in self.loaded if item.error is not None}

    @functools.cached_property
    def _check(self) -> CheckResult:
        return Analysis(self).check

    @property
    def gemms(self) -> pd.DataFrame:
        """Every GEMM launch: GEMM_COLUMNS, whatever was asked for (none where the run launched no
        GPU kernel); checked once, a new frame each time."""
        return self._check.gemms[list(GEMM_COLUMNS)]


@dataclass(frozen=True)
class Comparison:
    """Two analyses side by side (`Analysis.compare`): `figures` as comparison.compare gives them,
    `report` what `gemmscope compare` prints (`render`)."""

    figures: dict[str, Any] = field(repr=False)
    report: Report = field(repr=False)

    def render(self, fmt: str = "table") -> str:
        from gemmscope.report import render

        return render(self.report, fmt)

    def to_dict(self) -> dict[str, Any]:
        """`gemmscope compare --format json`'s document."""
        assert self.report.document is not None  # comparison_report always makes one
        return self.report.document


# What Analysis is built from: what `load` takes, its result, or a capture.
Source = str | Path | Sequence[str | Path] | Traces


class Analysis:
    """Traces (paths, a `load` result, or a `capture`) under one `Options` (or its fields by name,
    over `options`): read on first use, each result computed once."""

    def __init__(self, traces: Source | Captured, options: Options | None = None, /, *,
                 say: Callable[[str], None] | None = None, **settings: Any) -> None:
        from gemmscope.running.capturing import Captured

        self.options = Options.of(options, **settings)
        self.captured = traces if isinstance(traces, Captured) else None
        if self.captured is not None and self.captured.window.steps is not None and self.options.steps is None:
            # the steps a capture collected are the steps checked: nobody joins them by hand
            self.options = Options.of(self.options, steps=self.captured.window.steps)
        self._given: Source = list(traces.traces) if isinstance(traces, Captured) else traces
        self._read = traces.read if isinstance(traces, Captured) else {}  # read while its program ran on
        self.notes: list[str] = []  # what the CLI says on stderr beside the output, in the order found
        self._say = say
        self._shared_by: Redactor | None = None  # set on a scrubbed copy: its reports are redacted by it
        self._reports: dict[tuple[str, str, bool], Report] = {}

    @classmethod
    def of_command(cls, command: Sequence[str], out: str | Path | None = None, options: Options | None = None, /, *,
                   profiler: str = "nsys", window: CaptureWindow | None = None, echo: bool = False,
                   say: Callable[[str], None] | None = None, **settings: Any) -> Analysis:
        """Run `command` under `profiler` with gemmscope's hook (running.capturing.capture: `out`,
        `window`, `echo` as there), collecting the steps Options.steps asks, and analyse what it
        left: `verify -- COMMAND`. Its check is `command_check`."""
        from gemmscope.running.capturing import CaptureWindow, capture, progress, say_on_stderr

        options = Options.of(options, **settings)
        window = dataclasses.replace(window or CaptureWindow(), steps=options.steps)
        speak = say or say_on_stderr  # what capture says of a failed command is said, as verify does
        captured = capture(command, out, profiler=profiler, window=window, echo=echo, redact=options.redact,
                           keep=options.keep, say=speak)
        progress(3, "checking the GEMMs", speak)
        return cls(captured, options, say=say)

    @classmethod
    def together(cls, sources: Sequence[Source], options: Options | None = None, /, *,
                 say: Callable[[str], None] | None = None, **settings: Any) -> list[Analysis]:
        """One analysis per source (BASE and NEW), the traces of all read together and redacted
        (Options.redact) by one Redactor, so that what any of them recorded is redacted in all."""
        options = Options.of(options, **settings)
        if any(isinstance(source, Traces) for source in sources):
            return [cls(source, options, say=say) for source in sources]
        from gemmscope.assembly import loading

        paths = [cls(source).paths for source in sources]
        every = [path for part in paths for path in part]
        loaded = loading.load(every, options.workers, options.scheduler)
        read = _redacted(loaded, every, options.keep) if options.redact else Traces(loaded, every)
        starts = [sum(map(len, paths[:i])) for i in range(len(paths))]
        return [cls(Traces(read.loaded[start:start + len(part)], part, read.redactor), options, say=say)
                for start, part in zip(starts, paths)]

    def _note(self, text: str) -> None:
        self.notes.append(text)
        if self._say is not None:
            self._say(text)

    @functools.cached_property
    def paths(self) -> list[Path]:
        """The traces, as files: globs and folders expanded, in order (InputError: a name that matches nothing)."""
        if isinstance(self._given, Traces):
            return list(self._given.paths)
        from gemmscope.traces.read import trace_paths

        return trace_paths([self._given] if isinstance(self._given, (str, Path)) else list(self._given))

    @functools.cached_property
    def traces(self) -> Traces:
        """The traces read and attributed (in `workers` processes, or on the `scheduler`'s
        cluster), redacted where Options.redact asks; a trace that could not be read is kept with
        its reason."""
        given = self._given if isinstance(self._given, Traces) else None
        if given is not None and (given.redactor is not None or not self.options.redact):
            traces = given  # read (and redacted) already
        else:
            from gemmscope.assembly import loading

            options = self.options
            loaded = (given.loaded if given is not None
                      else loading.load(self.paths, options.workers, options.scheduler, self._read))
            traces = _redacted(loaded, self.paths, options.keep) if options.redact else Traces(loaded, self.paths)
        self._note_lacking(traces)
        return traces

    def _note_lacking(self, traces: Traces) -> None:
        """What traces made by another profiler than nsys do not hold, once per distinct list."""
        by_lacks: dict[tuple, list[str]] = {}
        for trace in (item.trace for item in traces.loaded if item.trace is not None and item.error is None):
            if trace.meta["lacks"]:  # keyed by the profiler too: the note names the one that made them
                by_lacks.setdefault((trace.meta["profiler"], *trace.meta["lacks"]), []).append(trace.path.name)
        for (profiler, *lacks), names in by_lacks.items():
            self._note(f"gemmscope: note: {_which(names)} ({profiler}) has no {'; no '.join(lacks)}")

    @functools.cached_property
    def job(self) -> Job:
        """The traces as one job (job.assemble: ranks, autotuning apart, module labels), cut to
        Options.steps (the steps no trace holds noted). NoGpuKernels where the run launched no GPU
        kernel (`cuda_traced`: its CUDA calls were captured; else a capture blind to kernels)."""
        from gemmscope.assembly.job import assemble

        loaded = self.traces.loaded
        if self.options.steps is not None:
            from gemmscope.diagnosing.steps import cut_to_steps

            first, last = self.options.steps
            loaded, missing, held = cut_to_steps(loaded, first, last)
            if missing:
                self._note(f"gemmscope: note: steps {_spans(missing)} are not in the traces (the job ended before "
                           f"them?): checking steps {_spans(held)}")
        job = assemble(loaded)  # through copies of the loaded launches: they stay as they were
        for repeat in job.repeated:
            self._note(f"gemmscope: note: {repeat['trace']} is the capture {repeat['same_as']} holds (the same "
                       "capture given twice): read once")
        if job.without_kernels:
            names = [t["trace"] for t in job.without_kernels]
            self._note(f"gemmscope: note: {_which(names)}: the process ran and launched no GPU kernel (its CUDA "
                       "calls were captured); nothing in it to check")
        return job

    @functools.cached_property
    def judgement(self) -> Judgement:
        """Every GEMM launch of the job judged against Options.expect, expect_map, allow and strict
        (judging.judgement.judge; NoGpuKernels as `job`)."""
        from gemmscope.judging.judgement import judge

        options = self.options
        return judge(self.job, options.expect, options.allow, options.expect_map, options.strict)

    @functools.cached_property
    def check(self) -> CheckResult:
        """The check as the public result: a run that launched no GPU kernel (captured with CUDA
        tracing, or by `capture`, also one that left no trace) is state FAIL, with a `note`."""
        if self.captured is not None and not self.captured.traces:
            return self._nothing_ran("the command used no CUDA (no process of it wrote a torch.profiler trace)"
                                     if self.captured.profiler == "torch" else "nsys wrote no report of the command")
        try:
            result = self.judgement
        except NoGpuKernels as exc:
            if not exc.cuda_traced and self.captured is None:  # a capture gemmscope made traces CUDA: not blind
                raise
            return self._nothing_ran(str(exc) if self.captured is None else "the command ran no GPU kernel")
        return CheckResult(state=result.state, expected=result.expected_recipes, unreadable=result.job.unreadable,
                           without_kernels=result.job.without_kernels,
                           gemms=public_table(result.gemms, GEMM_COLUMNS | VERDICT_COLUMNS), judgement=result,
                           unpatched=result.unpatched)

    @functools.cached_property
    def command_check(self) -> CheckResult | None:
        """The check of what a command left (`of_command`), its outcome said once: a run that
        launched no GPU kernel or left no trace fails the check; None where a failed command left
        nothing that could be read (said why)."""
        assert self.captured is not None, "command_check is the check of a command: Analysis.of_command"
        captured, expect = self.captured, self.options.expect
        if not captured.traces:  # torch.profiler: no process of the command used CUDA (a failed one: said already)
            if not captured.failed:
                self._note(no_gemm_ran("the command exited 0 and used no CUDA (no process of it wrote a "
                                       "torch.profiler trace)", expect))
            return self.check
        try:
            checked = self.check
        except InputError as exc:
            if not captured.failed:
                raise
            self._note(f"gemmscope: nothing to check in what it ran: {exc}")
            return None
        if checked.judgement is None:
            self._note("gemmscope: it ran no GPU kernel before it ended" if captured.failed
                       else no_gemm_ran("the command exited 0 and ran no GPU kernel", expect))
        return checked

    def _nothing_ran(self, why: str) -> CheckResult:
        """The check of a run that launched no GPU kernel (`why`: what its traces say)."""
        import pandas as pd

        from gemmscope.assembly.job import rank_in_name
        from gemmscope.assembly.te_ranges import unpatched_in

        expect = self.options.expect
        loaded = self.traces.loaded if self.paths else []
        without = [{"trace": item.path.name, "rank": rank_in_name(item.path)} for item in loaded if item.no_kernels]
        return CheckResult(state=State.FAIL, expected=[expect] if expect else [], unreadable=[],
                           without_kernels=without, gemms=pd.DataFrame(columns=list(GEMM_COLUMNS)), judgement=None,
                           note=f"{why}: no GEMM ran" + (f" at {expect}" if expect else ""),
                           unpatched=unpatched_in(self._read_without_kernels))

    @functools.cached_property
    def _read_without_kernels(self) -> list[Trace]:
        """The traces of a run that launched no GPU kernel, as read (none where the command left none)."""
        return [item.trace for item in (self.traces.loaded if self.paths else []) if item.trace is not None]

    @functools.cached_property
    def diagnosis(self) -> Diagnosis:
        """Where the GPU time went and why low precision does or does not pay (diagnosis.diagnose),
        over the steps Options.step_range marks (else those found)."""
        from gemmscope.diagnosing.diagnosis import diagnose

        return diagnose(self.judgement, self.options.step_range)

    def report(self, kind: str = "analysis", detail: str = "normal", per_launch: bool = False) -> Report:
        """The report of `kind` (REPORT_KINDS) at `detail` ("quiet": the verdict block; "normal";
        "verbose": every GEMM launch too); `per_launch`: its JSON document lists every GEMM launch
        (analysis) or mismatch (verification). A scrubbed copy's reports are redacted by its Redactor."""
        if kind not in REPORT_KINDS:
            raise InputError(f"unknown report {kind!r}: choose from {', '.join(REPORT_KINDS)}")
        key = (kind, detail, per_launch)
        if key not in self._reports:
            self._reports[key] = self._report(kind, detail, per_launch)
        return self._reports[key]

    def _report(self, kind: str, detail: str, per_launch: bool) -> Report:
        from gemmscope.report import documents
        from gemmscope.report.verification import diagnosis_report, verification_report

        command = self.captured.outcome if self.captured is not None else None
        if self.check.judgement is None:  # the run launched no GPU kernel: every format says so
            return self._redacted(self._nothing_ran_report(kind, command, per_launch))
        result, diagnosis = self.judgement, self.diagnosis
        if kind == "diagnosis":
            report = diagnosis_report(result, diagnosis)
        elif kind == "page":
            report = verification_report(result, diagnosis)
        else:
            document = (documents.analysis_document if kind == "analysis" else documents.verification_document)(
                result, command, diagnosis, per_launch)
            report = verification_report(result, diagnosis, document, detail)
        return self._redacted(report)

    def _redacted(self, report: Report) -> Report:
        """A scrubbed copy's report redacted by its Redactor; any other as it is."""
        if self._shared_by is None:
            return report
        from gemmscope.report.model import redacted

        return redacted(report, self._shared_by)

    def _nothing_ran_report(self, kind: str, command: dict | None, per_launch: bool) -> Report:
        from gemmscope.judging.judgement import resolve_expected
        from gemmscope.report.verification import nothing_ran_report

        options, check, read = self.options, self.check, self._read_without_kernels
        assert check.note is not None  # a run that launched no GPU kernel says why
        return nothing_ran_report(kind, read, [path.name for path in self.paths], resolve_expected(read, options.expect),
                                  options.expect is not None, options.expect_map, check.note, check.without_kernels,
                                  check.unpatched, command, per_launch)

    def render(self, fmt: str = "table", kind: str = "analysis", detail: str = "normal",
               per_launch: bool = False) -> str:
        """The report of `kind` as the text of `fmt` (what report.render writes, or "jsonl": one JSON line
        per GEMM launch, as `launch_lines`)."""
        if fmt == STREAMED:
            return "".join(self.launch_lines())
        from gemmscope.report import render

        return render(self.report(kind, detail, per_launch), fmt)

    def launch_lines(self) -> Iterator[str]:
        """One JSON line per GEMM launch (`--format jsonl`), made as they are read."""
        from gemmscope.report import documents

        if self.check.judgement is None:  # the run launched no GPU kernel: no launch to list
            return iter(())
        return documents.launch_lines(self.judgement)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """The report's tables by file name (report.tables.TABLE_FILES), as `report --tables` writes them."""
        return self.report("page").tables

    def plots(self) -> list[Plot]:
        """The trace plots: GPU time per rank, GEMM TFLOP/s against the GPU's peak, time per step."""
        from gemmscope.report import plots

        if self.check.judgement is None:  # the run launched no GPU kernel: nothing to draw
            return []
        return plots.trace_plots(self.judgement, self.diagnosis)

    def compare(self, new: Analysis) -> Comparison:
        """This run (BASE) against `new` (NEW): where NEW gained or lost GPU time, per category and
        per module and pass, which GEMM kernels changed (comparison.compare)."""
        from gemmscope.diagnosing.compare_runs import compare
        from gemmscope.report.comparison import comparison_report

        figures = compare(self.judgement, new.judgement, step_range=self.options.step_range)
        return Comparison(figures, comparison_report(figures))

    def scrubbed(self, folder: str | Path | None = None) -> Analysis:
        """The same analysis of the traces scrubbed (gemmscope.redaction.scrub: into `folder`, default the
        private scratch folder), read back under their own names redacted, by one Redactor learnt
        from all of them (`redactor`); its reports are redacted by it too: what `report` writes."""
        from gemmscope.common import scratch
        from gemmscope.redaction.scrub import recorded_redactor, scrub
        from gemmscope.traces.read import read_trace, trace_source

        exports = [trace_source(path) for path in self.paths]
        redactor = recorded_redactor(exports, self.options.keep)
        staging = Path(folder) if folder is not None else _new_folder(scratch.folder())
        traces = [dataclasses.replace(read_trace(scrub(export, staging / f"{i}.sqlite", redactor), name=path),
                                      path=Path(redactor(path.name)))
                  for i, (path, export) in enumerate(zip(self.paths, exports))]
        return self._over(traces, redactor)

    def _over(self, traces: list[Trace], redactor: Redactor) -> Analysis:
        """An analysis of scrubbed copies under these options: read here (a cluster does not see
        the scratch folder), not redacted again, its reports redacted by `redactor`."""
        shared = Analysis(Traces.of(traces), self.options, say=self._say, redact=False, scheduler=None)
        shared._shared_by = redactor
        return shared

    @property
    def redactor(self) -> Redactor | None:
        """What redacted what this analysis says: a scrubbed copy's Redactor, or the one that
        redacted the traces as read (Options.redact); None where nothing was."""
        return self._shared_by if self._shared_by is not None else self.traces.redactor

    def bundle(self, out: str | Path) -> Bundle:
        """The zip `gemmscope bundle` writes (gemmscope.bundle): the report, its JSON document with
        every GEMM launch, its tables, the traces scrubbed and the environment they record."""
        from gemmscope.bundle import bundle_traces

        def analysis_of(traces: list[Trace], redactor: Redactor) -> Report:
            return self._over(traces, redactor).report("analysis", per_launch=True)

        return bundle_traces(self.paths, out, self.options.keep, analysis_of)


def _redacted(loaded: list[LoadedTrace], paths: list[Path], keep: tuple[str, ...]) -> Traces:
    from gemmscope.redaction.scrub import redacted_traces

    items, redactor = redacted_traces(loaded, keep)
    return Traces(items, paths, redactor)


def _new_folder(parent: Path) -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(dir=parent))


def no_gemm_ran(said: str, expect: str | None) -> str:
    """The line that says a run launched no GPU kernel (`said`: how that was seen): nothing ran at
    any recipe, which fails a check (exit 1), unlike a capture blind to kernels (bad input, exit 2)."""
    return f"gemmscope: {said}: no GEMM ran{f' at {expect}' if expect else ''}"


def _which(names: list[str]) -> str:
    """One trace by its name, several by their count and the first name."""
    return names[0] if len(names) == 1 else f"{len(names)} traces ({names[0]}, …)"


def _spans(numbers: list[int]) -> str:
    """[3, 4, 5, 8] as "3-5, 8"."""
    spans, start = [], None
    for i, n in enumerate(numbers):
        start = n if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            spans.append(f"{start}-{n}" if n != start else str(n))
            start = None
    return ", ".join(spans)
