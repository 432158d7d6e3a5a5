"""The commands on traces: `analyze`, `verify` (a command captured under nsys or torch.profiler,
or --trace), `diagnose`, `compare`, `report`, `bundle` and `scrub`. Each is the same few steps:
its options parsed into one analysis.Options (cli.group.trace_options), a gemmscope.Analysis of
the traces, what it says emitted, and the exit code of its state."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from gemmscope import api
from gemmscope.analysis import Analysis, CheckResult, Options, no_gemm_ran
from gemmscope.cli.group import (
    COMPARISON_FORMATS,
    EXAMPLE_RUN,
    EXAMPLE_TRACE,
    PAGE_FORMATS,
    TRACE_PATH,
    Output,
    emit,
    format_option,
    keep_option,
    main,
    make_dir,
    note,
    output_options,
    say_redacted,
    trace_options,
    with_options,
    wrote,
)
from gemmscope.common.atomic import written_whole
from gemmscope.errors import ExitCode, InputError, NoGpuKernels, State
from gemmscope.running.capturing import PROFILERS, CaptureWindow, check_profiler


@main.command()
@click.argument("traces", nargs=-1, type=TRACE_PATH)
@trace_options()
@output_options
def analyze(traces: tuple[Path, ...], options: Options, output: Output) -> None:
    """Every GEMM kernel of nsys traces (.sqlite, .sqlite.xz or .nsys-rep) or torch.profiler
    traces (.json, .json.gz; told by content); files, folders or globs, e.g. one per rank: precision, rank, thread, NVTX ranges, TE module, layer and pass,
    and with --expect (or the recipe the run recorded) a verdict. Without TRACES: a real H200
    trace shipped with gemmscope, a small TE model trained in FP8 in which one block runs with
    autocast disabled and the LM head is a plain torch.nn.Linear. Exit codes: `gemmscope --help`."""
    if not traces:
        traces = (EXAMPLE_TRACE,)
        click.echo(f"(no trace given: analyzing the bundled example {EXAMPLE_TRACE.name})", err=True)
    output.make_plots_folder()
    analysis = Analysis(traces, options, say=note)
    _emit(analysis, output, "analysis")  # a run that launched no GPU kernel too: its document says so
    _exit_as_checked(analysis.check)


def _emit(analysis: Analysis, output: Output, kind: str) -> None:
    """analyze's and verify's output: JSONL streamed a line at a time, any other format at once;
    then the plots (--plots DIR), named on stderr."""
    if output.fmt == "jsonl":
        for line in analysis.launch_lines():
            sys.stdout.write(line)
        sys.stdout.flush()
    else:
        emit(analysis.render(output.fmt, kind, output.detail, output.per_launch))
    if output.plots is not None:
        from gemmscope.report import plots

        written = plots.write(analysis.plots(), output.plots)
        wrote(f"plots into {output.plots}: {', '.join(p.name for p in written)}" if written
              else f"no plot into {output.plots}: nothing to draw")


def _exit_as_checked(result: CheckResult, said: bool = False) -> NoReturn:
    """The exit code of the check's state (errors.EXIT_CODES); on stderr, where the run launched no
    GPU kernel, that nothing ran (unless `said` already), and where GEMMs went unchecked, what to
    give to check them."""
    state = result.state
    if result.judgement is None and not said:
        note(f"gemmscope: {result.note}")
    elif state is State.NOT_CHECKED:
        note("gemmscope: no recipe to check against: the run recorded no GEMM's request and no enabled "
             "te.autocast recipe; pass --expect RECIPE (e.g. --expect bf16)")
    elif state is State.NOT_FULLY_CHECKED:
        note(f"gemmscope: not fully checked: {len(result.unjudged)} GEMM launches had nothing to judge them "
             "against; pass --expect RECIPE, or --allow PATTERN for those you accept unchecked")
    sys.exit(state.exit_code)


@contextmanager
def _exit_if_no_kernel_ran(expect: str | None) -> Iterator[None]:
    """Traces whose run launched no GPU kernel end a command that has nothing to say of them
    (compare): said in one line, exit 1; a capture blind to kernels is bad input."""
    try:
        yield
    except NoGpuKernels as exc:
        if not exc.cuda_traced:
            raise
        note(no_gemm_ran(str(exc), expect))
        sys.exit(ExitCode.MISMATCH)


class _VerifyCommand(click.Command):
    """verify's parser, which remembers whether `--` was given: without it, names after
    --trace FILE are more traces (`--trace a.sqlite b.sqlite`), not a command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_DOUBLE_DASH] = "--" in args
        return super().parse_args(ctx, args)


_DOUBLE_DASH = "gemmscope.verify.double_dash"


@dataclasses.dataclass(frozen=True)
class _CaptureArgs:
    """How verify captures a command: where it keeps the capture, with what, and which window
    (its steps are --steps, a trace option)."""

    out: Path | None
    profiler: str | None  # None: not given (nsys)
    window: CaptureWindow
    keep_windows: int | None = None  # with --every: the traces of windows with nothing new kept


def _every(_ctx, _param, text: str | None) -> int | str | None:
    """--every: a number of steps, else a period of wall time as given (CaptureWindow checks both)."""
    return int(text) if text is not None and text.isdigit() else text


def _capture_options(func):
    """verify's --out, --profiler, --capture-range, --delay and --duration, given to it as one
    _CaptureArgs (`capturing`)."""
    @functools.wraps(func)
    def command(*args, **params):
        every, window_steps, keep_windows = params.pop("every"), params.pop("window"), params.pop("keep_windows")
        window = CaptureWindow(params.pop("capture_range"), params.pop("delay"), params.pop("duration"),
                               audit=(every, window_steps) if every is not None else None)
        return func(*args, capturing=_CaptureArgs(params.pop("out"), params.pop("profiler"), window, keep_windows),
                    **params)

    return with_options(command, [
        click.option("--out", type=click.Path(path_type=Path),
                     help="Keep the capture here (default: a private temporary folder, removed on exit)."),
        click.option("--profiler", type=click.Choice(PROFILERS),
                     help="What captures COMMAND: nsys (the default), or torch: torch.profiler, started by "
                          "gemmscope's hook in every process of COMMAND that imports torch, for machines without "
                          "nsys; each process that used CUDA writes a trace (one per rank), read as --trace reads "
                          "one. With --steps, only those training steps; with --delay/--duration, that time; not "
                          "with --capture-range."),
        click.option("--capture-range", metavar="NVTX_RANGE",
                     help="Collect only the first instance of this NVTX range of COMMAND (e.g. a range your "
                          "training loop pushes around steps 10-12): a long job costs a small trace. "
                          "'cudaProfilerApi': from COMMAND's first cudaProfilerStart to its cudaProfilerStop."),
        click.option("--delay", type=click.FloatRange(min=0), metavar="SECONDS", help="Start collecting after this long."),
        click.option("--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                     help="Collect for this long; COMMAND runs on to its own end. Not with --capture-range."),
        click.option("--every", callback=_every, metavar="STEPS|PERIOD",
                     help="Audit a long job: --window training steps every STEPS, or every PERIOD of wall time "
                          "(30s, 30m, 2h: at the first step once it has passed since the last window), from step 10 "
                          "(after warm-up), on every rank, to the job's own end (torch.profiler; needs --out). Each "
                          "window is judged as it lands into OUT/timeline.jsonl, compared with the first, its alerts "
                          "said; the worst window's state is the exit status (`gemmscope timeline OUT` shows it "
                          "again)."),
        click.option("--window", type=click.IntRange(min=1), default=3, show_default=True, metavar="STEPS",
                     help="With --every: the training steps each window holds."),
        click.option("--keep-windows", type=click.IntRange(min=0), metavar="N",
                     help="With --every: keep the traces of the newest N windows that raised no alert (default: "
                          "all); every window that raised one, and the first, keep theirs."),
    ])


@main.command("verify", cls=_VerifyCommand,
              context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--trace", "trace_args", multiple=True, type=TRACE_PATH,
              help="Check existing traces instead of running a command: files, folders or globs "
                   "(one per rank, or one holding every rank); repeatable.")
@_capture_options
@trace_options()
@output_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def verify_cmd(trace_args: tuple[Path, ...], capturing: _CaptureArgs, options: Options, output: Output,
               command: tuple[str, ...]) -> None:
    """Run COMMAND (after --) under nsys with TE's NVTX ranges and gemmscope's hook on (or with
    torch.profiler and the hook: --profiler torch), or read --trace, and check the precision of every GEMM per
    rank, layer, TE module and pass. Exit 1 on any non-allowed FALLBACK or when no GEMM ran (a
    COMMAND that ran no GPU kernel included), 3 when COMMAND failed, 4 when nothing could be checked
    (no --expect, and the run recorded no request nor te.autocast recipe), 5 when some GEMMs could
    not (`gemmscope --help`: every exit code). The profiler's own output is shown with --verbose or
    when nsys fails."""
    trace_args, command = _traces_or_command(trace_args, command, capturing)
    if capturing.window.audit is not None:
        _audit(command, capturing, options, output)
    check_profiler(capturing.profiler or "nsys", capturing.window)  # before any folder is made
    output.make_plots_folder()
    if trace_args:
        analysis = Analysis(trace_args, options, say=note)
        checked: CheckResult | None = analysis.check  # a capture blind to GPU kernels: bad input, raised here
    else:
        analysis = Analysis.of_command(command, capturing.out, options, profiler=capturing.profiler or "nsys",
                                       window=capturing.window, echo=output.detail == "verbose", say=note)
        checked = analysis.command_check
    if checked is not None:  # a run that launched no GPU kernel too: its document says so
        _emit(analysis, output, "verification")
    captured = analysis.captured
    if captured is not None and captured.failed:
        if checked is not None:  # after a long report, the reason for the exit status once more
            note(f"gemmscope: the command failed (exit {captured.exit_code}): a failed run is never a pass, "
                 "whatever ran before it")
        sys.exit(ExitCode.COMMAND_FAILED)
    assert checked is not None  # without a failed command, the traces were checked (none: exited above)
    _exit_as_checked(checked, said=captured is not None)


def _audit(command: tuple[str, ...], capturing: _CaptureArgs, options: Options, output: Output) -> NoReturn:
    """verify --every: the job's windows judged as they land, its timeline printed at its end."""
    from gemmscope.watching.timeline import timeline_document, timeline_table

    if capturing.out is None:
        raise InputError("--every keeps the job's timeline and its windows' traces: give --out DIR")
    if options.steps is not None:
        raise InputError("--every captures windows of its own: not with --steps")
    if output.fmt not in ("table", "json"):
        raise InputError(f"--every prints its timeline as table or json, not {output.fmt}")
    check_profiler(capturing.profiler or "torch", capturing.window)
    assert capturing.window.audit is not None  # the caller's test
    every, window = capturing.window.audit
    audited = api.audit_command(command, capturing.out, every, window, options, echo=output.detail == "verbose",
                                say=note, keep_windows=capturing.keep_windows)
    records = audited.timeline.records
    emit(json.dumps(timeline_document(records), indent=2) + "\n" if output.fmt == "json" else timeline_table(records))
    if audited.captured.failed:
        note(f"gemmscope: the command failed (exit {audited.captured.exit_code}): a failed run is never a pass, "
             "whatever its windows said")
    sys.exit(audited.exit_code)


def _traces_or_command(trace_args: tuple[Path, ...], command: tuple[str, ...],
                       capturing: _CaptureArgs) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """--trace FILE, or a COMMAND after --: names after --trace without `--` are more traces."""
    if trace_args and command and not click.get_current_context().meta.get(_DOUBLE_DASH):
        trace_args, command = trace_args + tuple(TRACE_PATH.convert(c, None, None) for c in command), ()
    if trace_args and command:
        raise InputError("give either --trace FILE or a command after --, not both")
    if trace_args and (capturing.profiler or capturing.window.timed_or_ranged):
        raise InputError("--profiler, --capture-range, --delay and --duration choose how a command is captured: "
                         "they do not apply to --trace")
    if not trace_args and not command:
        raise InputError("nothing to verify: give a command after -- or --trace FILE")
    return trace_args, command


@main.command("diagnose")
@click.argument("traces", nargs=-1, required=True, type=TRACE_PATH)
@trace_options()
def diagnose_cmd(traces: tuple[Path, ...], options: Options) -> None:
    """Where the GPU time of traces went and why low precision does or does not pay: the verdict,
    the time per rank and category (busy, idle, GEMMs, quantization, attention, communication,
    memory operations) and the findings, most time at stake first. analyze and verify end with the
    same (--format json: `breakdown` and `findings`); compare BASE NEW sets two runs side by side.
    Exit codes as analyze's: the verdict's."""
    analysis = Analysis(traces, options, say=note)
    emit(analysis.render("table", "diagnosis"))  # a run that launched no GPU kernel too: it says so
    _exit_as_checked(analysis.check)


@main.command("compare")
@click.argument("base", type=TRACE_PATH)
@click.argument("new", type=TRACE_PATH)
@trace_options()
@format_option(COMPARISON_FORMATS)
def compare_cmd(base: Path, new: Path, options: Options, fmt: str) -> None:
    """Two traces of one program (BF16 vs FP8, before vs after an upgrade): where NEW gained or
    lost time against BASE, per category and per module/pass, which GEMM kernels changed, and
    each run's findings. The differences add up to the difference in GPU window. Exit 0 once
    printed: compare judges no GEMM; a run that launched no GPU kernel: 1, as analyze."""
    with _exit_if_no_kernel_ran(options.expect):
        first, second = Analysis.together([base, new], options, say=note)
        comparison = first.compare(second)
    emit(comparison.render(fmt))


@main.command("report")
@click.argument("targets", nargs=-1, type=TRACE_PATH)
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="File to write ('-': standard output).")
@format_option(PAGE_FORMATS, default=None, help_text="Default: markdown for an output ending in .md, else html.")
@trace_options(printed=False)
@click.option("--tables", "tables_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Also write each table of the report as a CSV file into DIR (made if missing): "
                   "mismatches.csv, findings.csv, breakdown-per-rank.csv, …; for a run directory "
                   "gemm-entries.csv, … (docs/machine-interface.md). Names whole, times in the unit the "
                   "column names (_ns, _ms), blank where nothing ran; other gemmscope tables in DIR are removed.")
def report_cmd(targets: tuple[Path, ...], out: Path, fmt: str | None, options: Options,
               tables_dir: Path | None) -> None:
    """One file to attach to an issue: a self-contained HTML page (nothing loaded from anywhere:
    sortable tables, per-GEMM details, findings, plots, environment; verdict first) or the same
    as Markdown. TARGETS: a `gemmscope profile` run directory, or traces as for analyze. Without
    TARGETS: the H200 run shipped with gemmscope. Made from the traces scrubbed, and redacted as
    scrub and bundle are (stderr says what was taken out). Exit 0 once written, whatever the
    verdict (it is in the file); traces that ran no GPU kernel: 1, as analyze, the file written saying so."""
    make_dir(tables_dir, "--tables")
    if not targets:
        targets = (EXAMPLE_RUN,)
        click.echo(f"(nothing given: reporting the bundled run {EXAMPLE_RUN.name})", err=True)
    shared = api.report(targets, options)  # a run that launched no GPU kernel too: the page says so
    text = shared.render(fmt or ("markdown" if out.suffix.lower() in (".md", ".markdown") else "html"))
    if str(out) == "-":
        emit(text)
    else:
        _write_whole(out, text)
        wrote(out)
    if tables_dir is not None:
        from gemmscope.report.tables import write_tables

        written = write_tables(shared.tables, tables_dir)
        wrote(f"{len(written)} tables (CSV) into {tables_dir}")
    say_redacted(shared.redactor)
    if shared.nothing_ran is not None:  # written, and as analyze: nothing ran fails (exit 1)
        note(f"gemmscope: {shared.nothing_ran}")
        sys.exit(ExitCode.MISMATCH)


def _write_whole(out: Path, text: str) -> None:
    """`text` as the file `out`, through a temporary name: it appears whole or not at all."""
    try:
        with written_whole(out) as partial:
            partial.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror}") from None


@main.command("bundle")
@click.argument("inputs", nargs=-1, required=True, type=TRACE_PATH)
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="The zip to write.")
@trace_options(printed=False)
def bundle_cmd(inputs: tuple[Path, ...], out: Path, options: Options) -> None:
    """A zip to attach to a bug report, secrets taken out: report.md and its JSON, the report's
    tables as CSV (tables/, as `report --tables`), the traces scrubbed, and environment.json (GPU,
    driver, CUDA, nsys, recipes, the command line redacted). INPUTS: traces (files, folders or
    globs), or one `gemmscope profile` run directory. Every member redacted (docs/redaction.md;
    stderr says what was taken out). Exit 0 once written, whatever the verdict (report.md says it),
    also for traces that cannot be analyzed (report.md says why)."""
    made = api.bundle(inputs, out, options)
    if made.analysis_error:
        note(f"gemmscope: note: the traces could not be analyzed ({made.analysis_error}); the bundle "
             "holds them, the environment and this reason")
    wrote(made.path)
    say_redacted(made.redactor)


@main.command("scrub")
@click.argument("trace", type=TRACE_PATH)
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path))
@keep_option
def scrub_cmd(trace: Path, out: Path, keep: tuple[str, ...]) -> None:
    """Copy a trace without the environment, command line, user and host names nsys recorded,
    and with every text in it redacted (docs/redaction.md; stderr says what was taken out). Exit 0
    once written: scrub checks nothing."""
    written, redactor = api.scrub(trace, out, keep)
    wrote(written)
    say_redacted(redactor)
