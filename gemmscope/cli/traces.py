"""The commands on traces: `analyze`, `verify` (a command captured under nsys or torch.profiler,
or --trace), `diagnose`, `compare` and `report`."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import click

from gemmscope import loading, scratch, verify
from gemmscope.atomic import written_whole
from gemmscope.attribution import attribute
from gemmscope.autocast_hook import gemmscope_protocol
from gemmscope.cli.group import (
    EXAMPLE_RUN,
    EXAMPLE_TRACE,
    TRACE_PATH,
    check_options,
    detail_level,
    detail_options,
    emit,
    expect_map_option,
    format_option,
    keep_option,
    main,
    redaction_options,
    say_redacted,
    strict_option,
)
from gemmscope.comparison import compare
from gemmscope.diagnosis import Diagnosis, diagnose
from gemmscope.errors import ExitCode, InputError, NoGpuKernels, State
from gemmscope.recipes import RECIPES
from gemmscope.report import documents, render
from gemmscope.report.comparison import comparison_report
from gemmscope.report.model import redacted
from gemmscope.report.profile_run import is_run_dir, profile_report
from gemmscope.report.tables import write_tables
from gemmscope.report.verification import diagnosis_report, verification_report
from gemmscope.traces.read import read_trace, trace_paths

# What `verify -- COMMAND` can capture with.
PROFILERS = ("nsys", "torch")


@main.command()
@click.argument("traces", nargs=-1, type=TRACE_PATH)
@click.option("--expect", type=click.Choice(RECIPES), help="Recipe the GEMMs should run at.")
@check_options
@format_option()
@detail_options
@redaction_options
def analyze(traces: tuple[Path, ...], expect: str | None, expect_map: tuple[tuple[str, str], ...],
            allow: tuple[str, ...], strict_unknown: bool, step_range: str | None, steps: tuple[int, int] | None,
            workers: int | None, scheduler: str | None, plots_dir: Path | None, fmt: str, quiet: bool,
            verbose: bool, per_launch: bool, keep: tuple[str, ...], no_redact: bool) -> None:
    """Every GEMM kernel of nsys traces (.sqlite, .sqlite.xz or .nsys-rep) or torch.profiler
    traces (.json, .json.gz; told by content); files, folders or globs, e.g. one per rank: precision, rank, thread, NVTX ranges, TE module, layer and pass,
    and with --expect (or the recipe the run recorded) a verdict. Without TRACES: a real H200
    trace shipped with gemmscope, a small TE model trained in FP8 in which one block runs with
    autocast disabled and the LM head is a plain torch.nn.Linear. Exit codes: `gemmscope --help`."""
    if not traces:
        traces = (EXAMPLE_TRACE,)
        click.echo(f"(no trace given: analyzing the bundled example {EXAMPLE_TRACE.name})", err=True)
    _make_dir(plots_dir)
    try:
        result = _check(trace_paths(traces), expect, allow, workers, scheduler, expect_map, strict_unknown, steps,
                        _keep(keep, no_redact))
    except NoGpuKernels as exc:
        if not exc.cuda_traced:
            raise
        _exit_no_gemm_ran(str(exc), expect)
    diagnosis = diagnose(result, step_range)
    _print_result(result, fmt, lambda: documents.analysis_document(result, None, diagnosis, per_launch), diagnosis,
                  detail_level(quiet, verbose))
    _write_plots(plots_dir, result, diagnosis)
    _exit_as_checked(result)


def _exit_as_checked(result: verify.Verification) -> NoReturn:
    """The exit code of the check's state (errors.EXIT_CODES); where GEMMs went unchecked, what to
    give to check them, on stderr."""
    state = result.state
    if state is State.NOT_CHECKED:
        click.echo("gemmscope: no recipe to check against: the run recorded no GEMM's request and no enabled "
                   "te.autocast recipe; pass --expect RECIPE (e.g. --expect bf16)", err=True)
    elif state is State.NOT_FULLY_CHECKED:
        click.echo(f"gemmscope: not fully checked: {len(result.unjudged)} GEMM launches had nothing to judge them "
                   "against; pass --expect RECIPE, or --allow PATTERN for those you accept unchecked", err=True)
    sys.exit(state.exit_code)


def _exit_no_gemm_ran(said: str, expect: str | None) -> NoReturn:
    """A run that launched no GPU kernel (captured with CUDA tracing): nothing ran at any recipe,
    which fails a check (exit 1), unlike a capture blind to kernels (bad input, exit 2)."""
    click.echo(f"gemmscope: {said}: no GEMM ran{f' at {expect}' if expect else ''}", err=True)
    sys.exit(ExitCode.MISMATCH)


def _print_result(result: verify.Verification, fmt: str, document, diagnosis: Diagnosis,
                  detail: str) -> None:
    """analyze's and verify's output: JSONL streamed a line at a time, any other format at once
    (`document`: makes the JSON document, which JSONL does without)."""
    if fmt == "jsonl":
        for line in documents.launch_lines(result):
            sys.stdout.write(line)
        sys.stdout.flush()
        return
    emit(render(verification_report(result, diagnosis, document(), detail), fmt))


def _make_dir(directory: Path | None, option: str = "--plots") -> None:
    """A folder an option names, made before the traces are read: one that cannot be made fails first."""
    if directory is not None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot make the {option} folder {directory}: {exc.strerror}") from None


def _write_plots(directory: Path | None, result: verify.Verification, diagnosis: Diagnosis) -> None:
    """--plots DIR: the trace plots as PNG files, named on stderr."""
    if directory is None:
        return
    from gemmscope import plots

    written = plots.write(plots.trace_plots(result, diagnosis), directory)
    click.echo(f"gemmscope: plots in {directory}: {', '.join(p.name for p in written) or 'none'}", err=True)


def _keep(keep: tuple[str, ...], no_redact: bool) -> tuple[str, ...] | None:
    """What the redaction leaves (--keep), or None with --no-redact: nothing is redacted."""
    return None if no_redact else keep


def _check(paths: list[Path], expect, allow, workers=None, scheduler=None, expect_map=(),
           strict_unknown: bool = False, steps: tuple[int, int] | None = None,
           keep: tuple[str, ...] | None = ()) -> verify.Verification:
    """The traces read and checked (--steps: those steps alone), every text of them redacted
    (scrub.redacted_traces) unless `keep` is None (--no-redact)."""
    loaded = _redacted(loading.load(paths, workers, scheduler), keep)
    _say_lacking([item.trace for item in loaded if item.trace is not None])
    if steps is not None:
        loaded = _kept_steps(loaded, *steps)
    result = verify.check(loaded, expect, allow, expect_map, strict_unknown)
    for repeat in result.repeated:
        click.echo(f"gemmscope: note: {repeat['trace']} is the capture {repeat['same_as']} holds (the same "
                   "capture given twice): read once", err=True)
    if result.without_kernels:
        names = [t["trace"] for t in result.without_kernels]
        which = names[0] if len(names) == 1 else f"{len(names)} traces ({names[0]}, …)"
        click.echo(f"gemmscope: note: {which}: the process ran and launched no GPU kernel (its CUDA calls were "
                   "captured); nothing in it to check", err=True)
    return result


def _kept_steps(loaded: list, first: int, last: int) -> list:
    """--steps: each trace cut to those steps' launches, the steps no trace holds said in one line."""
    from gemmscope.steps import cut_to_steps

    kept, missing, held = cut_to_steps(loaded, first, last)
    if missing:
        click.echo(f"gemmscope: note: steps {_spans(missing)} are not in the traces (the job ended before them?): "
                   f"checking steps {_spans(held)}", err=True)
    return kept


def _spans(numbers: list[int]) -> str:
    """[3, 4, 5, 8] as "3-5, 8"."""
    spans, start = [], None
    for i, n in enumerate(numbers):
        start = n if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            spans.append(f"{start}-{n}" if n != start else str(n))
            start = None
    return ", ".join(spans)


def _redacted(loaded: list, keep: tuple[str, ...] | None) -> list:
    """`loaded` redacted (scrub.redacted_traces; what was taken out reads [redacted] where it
    stood); as it is when `keep` is None."""
    if keep is None:
        return loaded
    from gemmscope.scrub import redacted_traces

    return redacted_traces(loaded, keep)[0]


def _say_lacking(traces) -> None:
    """What traces made by another profiler than nsys do not hold, once per distinct list."""
    by_lacks: dict[tuple, list[str]] = {}
    for trace in traces:
        if trace.meta["lacks"]:  # keyed by the profiler too: the note names the one that made them
            by_lacks.setdefault((trace.meta["profiler"], *trace.meta["lacks"]), []).append(trace.path.name)
    for (profiler, *lacks), names in by_lacks.items():
        which = names[0] if len(names) == 1 else f"{len(names)} traces ({names[0]}, …)"
        click.echo(f"gemmscope: note: {which} ({profiler}) has no {'; no '.join(lacks)}", err=True)


class _VerifyCommand(click.Command):
    """verify's parser, which remembers whether `--` was given: without it, names after
    --trace FILE are more traces (`--trace a.sqlite b.sqlite`), not a command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_DOUBLE_DASH] = "--" in args
        return super().parse_args(ctx, args)


_DOUBLE_DASH = "gemmscope.verify.double_dash"


@main.command("verify", cls=_VerifyCommand,
              context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--expect", type=click.Choice(RECIPES),
              help="Recipe every GEMM should run at; default: the recipe the run's te.autocast asked for.")
@click.option("--trace", "trace_args", multiple=True, type=TRACE_PATH,
              help="Check existing traces instead of running a command: files, folders or globs "
                   "(one per rank, or one holding every rank); repeatable.")
@click.option("--out", type=click.Path(path_type=Path), help="Keep the capture here (default: a private temporary folder, removed on exit).")
@click.option("--profiler", type=click.Choice(PROFILERS),
              help="What captures COMMAND: nsys (the default), or torch: torch.profiler, started by "
                   "gemmscope's hook in every process of COMMAND that imports torch, for machines without "
                   "nsys; each process that used CUDA writes a trace (one per rank), read as --trace reads "
                   "one. With --steps, only those training steps; with --delay/--duration, that time; not with "
                   "--capture-range.")
@click.option("--capture-range", metavar="NVTX_RANGE",
              help="Collect only the first instance of this NVTX range of COMMAND (e.g. a range your "
                   "training loop pushes around steps 10-12): a long job costs a small trace. "
                   "'cudaProfilerApi': from COMMAND's first cudaProfilerStart to its cudaProfilerStop.")
@click.option("--delay", type=click.FloatRange(min=0), metavar="SECONDS", help="Start collecting after this long.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Collect for this long; COMMAND runs on to its own end. Not with --capture-range.")
@check_options
@format_option()
@detail_options
@redaction_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def verify_cmd(expect, trace_args, out, profiler, capture_range, delay, duration, expect_map, allow, strict_unknown,
               step_range, steps, workers, scheduler, plots_dir, fmt, quiet, verbose, per_launch, keep, no_redact,
               command) -> None:
    """Run COMMAND (after --) under nsys with TE's NVTX ranges and gemmscope's hook on (or with
    torch.profiler and the hook: --profiler torch), or read --trace, and check the precision of every GEMM per
    rank, layer, TE module and pass. Exit 1 on any non-allowed FALLBACK or when no GEMM ran (a
    COMMAND that ran no GPU kernel included), 3 when COMMAND failed, 4 when nothing could be checked
    (no --expect, and the run recorded no request nor te.autocast recipe), 5 when some GEMMs could
    not (`gemmscope --help`: every exit code). The profiler's own output is shown with --verbose or
    when nsys fails."""
    if trace_args and command and not click.get_current_context().meta.get(_DOUBLE_DASH):
        trace_args, command = trace_args + tuple(TRACE_PATH.convert(c, None, None) for c in command), ()
    if trace_args and command:
        raise InputError("give either --trace FILE or a command after --, not both")
    window = {"nvtx_range": capture_range, "delay_s": delay, "duration_s": duration}
    if trace_args and (profiler or any(v is not None for v in window.values())):
        raise InputError("--profiler, --capture-range, --delay and --duration choose how a command is captured: "
                         "they do not apply to --trace")
    profiler = profiler or "nsys"
    from gemmscope import nsys_runner

    nsys_runner.check_window(**window)
    if steps is not None and command and any(v is not None for v in window.values()):
        raise InputError("--steps is a capture window of its own: give it, or --capture-range / --delay / "
                         "--duration, not both")
    if profiler == "torch" and capture_range is not None:
        raise InputError("--capture-range is nsys's capture window: --profiler torch records each process from "
                         "its import of torch to its exit, or --steps, or --delay/--duration (or use nsys)")
    detail = detail_level(quiet, verbose)
    _make_dir(plots_dir)
    outcome = None
    if trace_args:
        paths = trace_paths(trace_args)
    elif command:
        paths, outcome = _capture(list(command), out, window, profiler, verbose, steps)
        _progress(3, "checking the GEMMs")
    else:
        raise InputError("nothing to verify: give a command after -- or --trace FILE")
    failed_command = outcome is not None and outcome["exit_code"] != 0
    if not paths and not failed_command:  # torch.profiler: no process of the command used CUDA
        _exit_no_gemm_ran("the command exited 0 and used no CUDA (no process of it wrote a torch.profiler trace)",
                          expect)
    result = None
    try:
        if paths:
            result = _check(paths, expect, allow, workers, scheduler, expect_map, strict_unknown, steps,
                            _keep(keep, no_redact))
    except NoGpuKernels as exc:
        if failed_command:
            click.echo("gemmscope: it ran no GPU kernel before it ended", err=True)
        elif outcome is not None or exc.cuda_traced:
            said = "the command exited 0 and ran no GPU kernel" if outcome is not None else str(exc)
            _exit_no_gemm_ran(said, expect)
        else:
            raise
    except InputError as exc:
        if not failed_command:
            raise
        click.echo(f"gemmscope: nothing to check in what it ran: {exc}", err=True)
    if result is not None:
        diagnosis = diagnose(result, step_range)
        _print_result(result, fmt, lambda: documents.verification_document(result, outcome, diagnosis, per_launch),
                      diagnosis, detail)
        _write_plots(plots_dir, result, diagnosis)
    if failed_command:
        assert outcome is not None  # only a command run here can fail
        if result is not None:  # after a long report, the reason for the exit status once more
            click.echo(f"gemmscope: the command failed (exit {outcome['exit_code']}): a failed run is never "
                       "a pass, whatever ran before it", err=True)
        sys.exit(ExitCode.COMMAND_FAILED)
    assert result is not None  # without a failed command, the paths were checked (none: exited above)
    _exit_as_checked(result)


# A job that ended before the steps --steps asks: the same words, and exit code, for both profilers.
_NOT_REACHED = "the command ended before training step {first} (steps are its optimizer steps, from 0)"
# A job that ended before --delay's window opened: likewise.
_NOT_OPENED = ("the command ended before the capture window opened ({delay:g} s after the start): nothing was "
               "collected; give a shorter --delay")


def _steps_window(steps: tuple[int, int]) -> str:
    return f"training steps {steps[0]}-{steps[1]} (its optimizer steps, from 0)"


# How many stages `verify -- COMMAND` goes through, each announced on one line.
_STAGES = 3


def _progress(stage: int, what: str) -> None:
    click.echo(f"gemmscope: [{stage}/{_STAGES}] {what}", err=True)


def _capture(command: list[str], out: Path | None, window: dict, profiler: str, echo_profiler: bool,
             steps: tuple[int, int] | None = None) -> tuple[list[Path], dict]:
    """Run `command` under `profiler` (PROFILERS) with gemmscope's hook; the traces to read (none
    when the run left none) and what the JSON reports of the run (`exit_code`, `capture_window`,
    `profiler`). A command that failed is said first, with its exit status and last stderr lines.
    `steps`: the hook collects those training steps alone (one more on each side: gemmscope_steps)."""
    # Without --out, the capture (the program's environment and output included) lives in the
    # private scratch folder, removed when gemmscope exits.
    if shutil.which(command[0]) is None:  # under nsys it would read as a crashed run (exit 3), under torch 2
        raise InputError(f"{command[0]}: command not found (not on PATH, or not an executable file)")
    kept = out is not None
    out = out or Path(tempfile.mkdtemp(dir=scratch.folder()))
    out.mkdir(parents=True, exist_ok=True)
    hook = str(Path(gemmscope_protocol.__file__).parent)  # the folder of the hook's sitecustomize
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH")) if p))
    if steps is not None:
        env[gemmscope_protocol.STEPS] = f"{steps[0]}-{steps[1]}"
    if profiler == "torch":
        return _capture_torch(command, out, kept, env, echo_profiler, steps, window)
    if steps is not None:
        window = {**window, "nvtx_range": gemmscope_protocol.CAPTURE_RANGE}
    return _capture_nsys(command, out, kept, env, window, echo_profiler, steps)


def _say_if_failed(done, env: dict) -> dict:
    """What the JSON reports of how the command ended; a failure said at once, its last lines on
    stderr redacted as the traces are (what the command's environment `env` says is secret, and
    the policy's rules; verify's --keep and --no-redact, read from its command line)."""
    if done.returncode != 0:
        params = click.get_current_context().params
        lines = done.stderr_tail
        if not params.get("no_redact"):
            from gemmscope.scrub import environment_redactor

            lines = list(map(environment_redactor(env, params.get("keep") or ()), lines))
        tail = "".join(f"\n    {line}" for line in lines)
        click.echo(f"gemmscope: the command failed (exit {done.returncode})"
                   f"{'; its last lines on stderr:' + tail if tail else ', printing nothing on stderr'}", err=True)
    return {"exit_code": done.returncode}


def _capture_nsys(command: list[str], out: Path, kept: bool, env: dict, window: dict,
                  echo_nsys: bool, steps: tuple[int, int] | None = None) -> tuple[list[Path], dict]:
    """The command under nsys, with TE's NVTX ranges on: its trace's export (Parquet where pyarrow
    reads it, else SQLite: nsys_runner.capture_export_format)."""
    from gemmscope import nsys_runner

    report = out / "trace.nsys-rep"
    env["NVTE_NVTX_ENABLED"] = "1"
    if window["nvtx_range"] is not None:  # a range pushed with a plain string, not a registered one
        env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    seen = _steps_window(steps) if steps is not None else nsys_runner.describe_window(**window)
    _progress(1, f"running the command under nsys{f', collecting {seen}' if seen else ''}"
                 f"{'' if echo_nsys else ' (nsys output: --verbose)'}")
    exported: list[Path | InputError] = []

    def export_once_written() -> None:
        # at a window's end nsys returns with its report while the program may run on for long:
        # the export is done meanwhile, not after it (an error in it said once the program ends)
        if report.exists():
            # a trace in the scratch folder is gone when gemmscope exits: its path is said only when kept
            export_format = nsys_runner.capture_export_format()
            _progress(2, f"exporting the trace to {export_format}{f' ({report})' if kept else ''}")
            try:
                exported.append(nsys_runner.CAPTURE_EXPORTERS[export_format](report))
            except InputError as exc:
                exported.append(exc)

    done = nsys_runner.profile(command, report, env, **window, echo_nsys=echo_nsys, once_written=export_once_written)
    captured = {"steps": list(steps)} if steps is not None else {k: v for k, v in window.items() if v is not None}
    outcome = {**_say_if_failed(done, env), "capture_window": captured or None, "profiler": "nsys"}
    if not report.exists():
        if not echo_nsys and done.profiler_text:
            click.echo("\n".join(done.profiler_text), err=True)
        if done.returncode == 0 and steps is not None:
            raise InputError(f"{_NOT_REACHED.format(first=steps[0])}: nothing was collected")
        if done.returncode == 0 and window["delay_s"]:
            raise InputError(_NOT_OPENED.format(delay=window["delay_s"]))
        if done.returncode == 0:
            raise InputError(f"nsys wrote no report for {' '.join(command)}")
        # a command that failed is reported as such even when it left nothing to read
        click.echo("gemmscope: nsys wrote no report for the failed command", err=True)
        return [], outcome
    # The command line itself stays out of reports: it may hold secrets.
    if seen:
        click.echo(f"gemmscope: the trace holds {seen}; the command ran to its own end", err=True)
    if isinstance(exported[0], InputError):
        raise exported[0]
    return [exported[0]], outcome


def _capture_torch(command: list[str], out: Path, kept: bool, env: dict, echo_kineto: bool,
                   steps: tuple[int, int] | None = None, window: dict | None = None) -> tuple[list[Path], dict]:
    """The command with torch.profiler in each of its processes: the traces of those that used CUDA
    (with `steps`, of those that ran them; with a `window` of --delay/--duration, that time of each)."""
    from gemmscope import nsys_runner, torch_runner

    timed = {k: v for k, v in (window or {}).items() if v is not None}
    seen = _steps_window(steps) if steps is not None else nsys_runner.describe_window(**timed) if timed else None
    if timed:
        env[gemmscope_protocol.TIME_WINDOW] = gemmscope_protocol.format_time_window(timed.get("delay_s"),
                                                                                    timed.get("duration_s"))
    _progress(1, "running the command under torch.profiler, in each of its processes that imports torch"
                 f"{f', collecting {seen}' if seen else ''}"
                 f"{'' if echo_kineto else ' (Kineto output: --verbose)'}")
    done = torch_runner.profile(command, out, env, echo_kineto)
    captured = {"steps": list(steps)} if steps is not None else timed or None
    outcome = {**_say_if_failed(done, env), "capture_window": captured, "profiler": "torch"}
    traces = torch_runner.traces(out)
    if not traces and done.returncode == 0 and steps is not None:
        raise InputError(f"{_NOT_REACHED.format(first=steps[0])}: no process wrote a torch.profiler trace")
    if not traces and done.returncode == 0 and timed.get("delay_s"):
        raise InputError(_NOT_OPENED.format(delay=timed["delay_s"]))
    if not traces and done.returncode != 0:
        click.echo("gemmscope: it wrote no torch.profiler trace: no process of it used CUDA before it ended", err=True)
    _progress(2, f"{len(traces)} torch.profiler trace{'s' * (len(traces) != 1)} written, one per process that "
                 f"used CUDA{f' ({out})' if kept else ''}")
    return traces, outcome


@main.command("diagnose")
@click.argument("traces", nargs=-1, required=True, type=TRACE_PATH)
@click.option("--expect", type=click.Choice(RECIPES), help="Recipe the GEMMs should run at.")
@expect_map_option
@click.option("--allow", multiple=True, metavar="PATTERN", help="Mismatches allowed (see analyze); repeatable.")
@strict_option
@click.option("--step-range", metavar="PATTERN", help="NVTX range that marks one training step (see analyze).")
@redaction_options
def diagnose_cmd(traces: tuple[Path, ...], expect: str | None, expect_map: tuple[tuple[str, str], ...],
                 allow: tuple[str, ...], strict_unknown: bool, step_range: str | None, keep: tuple[str, ...],
                 no_redact: bool) -> None:
    """Where the GPU time of traces went and why low precision does or does not pay: the verdict,
    the time per rank and category (busy, idle, GEMMs, quantization, attention, communication,
    memory operations) and the findings, most time at stake first. analyze and verify end with the
    same (--format json: `breakdown` and `findings`); compare BASE NEW sets two runs side by side.
    Exit codes as analyze's: the verdict's."""
    paths = trace_paths(traces)
    try:
        result = _check(paths, expect, allow, expect_map=expect_map, strict_unknown=strict_unknown,
                        keep=_keep(keep, no_redact))
    except NoGpuKernels as exc:
        if not exc.cuda_traced:
            raise
        _exit_no_gemm_ran(str(exc), expect)
    emit(render(diagnosis_report(result, diagnose(result, step_range)), "table"))
    _exit_as_checked(result)


@main.command("compare")
@click.argument("base", type=TRACE_PATH)
@click.argument("new", type=TRACE_PATH)
@click.option("--step-range", metavar="PATTERN", help="NVTX range that marks one training step (see analyze).")
@format_option(("table", "json", "markdown"))
@redaction_options
def compare_cmd(base: Path, new: Path, step_range: str | None, fmt: str, keep: tuple[str, ...],
                no_redact: bool) -> None:
    """Two traces of one program (BF16 vs FP8, before vs after an upgrade): where NEW gained or
    lost time against BASE, per category and per module/pass, which GEMM kernels changed, and
    each run's findings. The differences add up to the difference in GPU window. Exit 0 once
    printed: compare judges no GEMM; a run that launched no GPU kernel: 1, as analyze."""
    try:
        base_trace, new_trace = _redacted([attribute(read_trace(p)) for p in (base, new)], _keep(keep, no_redact))
        base_run, new_run = (verify.check([trace], None, ()) for trace in (base_trace, new_trace))
    except NoGpuKernels as exc:
        if not exc.cuda_traced:
            raise
        _exit_no_gemm_ran(str(exc), None)
    emit(render(comparison_report(compare(base_run, new_run, step_range=step_range)), fmt))


@main.command("report")
@click.argument("targets", nargs=-1, type=TRACE_PATH)
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="File to write ('-': standard output).")
@click.option("--format", "fmt", type=click.Choice(("html", "markdown")),
              help="Default: markdown for an output ending in .md, else html.")
@click.option("--expect", type=click.Choice(RECIPES), help="Traces: recipe the GEMMs should run at.")
@expect_map_option
@click.option("--allow", multiple=True, metavar="PATTERN", help="Traces: mismatches allowed (see analyze); repeatable.")
@strict_option
@click.option("--step-range", metavar="PATTERN", help="Traces: NVTX range that marks one training step (see analyze).")
@click.option("--tables", "tables_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Also write each table of the report as a CSV file into DIR (made if missing): "
                   "mismatches.csv, findings.csv, breakdown-per-rank.csv, …; for a run directory "
                   "gemm-entries.csv, … (docs/machine-interface.md). Names whole, times in the unit the "
                   "column names (_ns, _ms), blank where nothing ran; other gemmscope tables in DIR are removed.")
@keep_option
def report_cmd(targets: tuple[Path, ...], out: Path, fmt: str | None, expect: str | None,
               expect_map: tuple[tuple[str, str], ...], allow: tuple[str, ...], strict_unknown: bool,
               step_range: str | None, tables_dir: Path | None, keep: tuple[str, ...]) -> None:
    """One file to attach to an issue: a self-contained HTML page (nothing loaded from anywhere:
    sortable tables, per-GEMM details, findings, plots, environment; verdict first) or the same
    as Markdown. TARGETS: a `gemmscope profile` run directory, or traces as for analyze. Without
    TARGETS: the H200 run shipped with gemmscope. Made from the traces scrubbed, and redacted as
    scrub and bundle are (stderr says what was taken out). Exit 0 once written, whatever the
    verdict (it is in the file); traces that ran no GPU kernel: 1, as analyze, nothing written."""
    _make_dir(tables_dir, "--tables")
    if not targets:
        targets = (EXAMPLE_RUN,)
        click.echo(f"(nothing given: reporting the bundled run {EXAMPLE_RUN.name})", err=True)
    if any(is_run_dir(t) for t in targets):
        if len(targets) > 1:
            raise InputError("give one profile run directory, or traces, not both")
        if expect or expect_map or allow or strict_unknown or step_range:
            raise InputError("--expect, --expect-map, --allow, --strict and --step-range apply to traces, not to a "
                             "profile run directory")
        report, redactor = _run_report(targets[0], keep)
    else:
        paths = trace_paths(targets)
        redactor, traces = _scrubbed(paths, keep)
        try:
            result = verify.check(traces, expect, allow, expect_map, strict_unknown)
        except NoGpuKernels as exc:
            if not exc.cuda_traced:
                raise
            _exit_no_gemm_ran(str(exc), expect)
        report = verification_report(result, diagnose(result, step_range))
    report = redacted(report, redactor)
    text = render(report, fmt or ("markdown" if out.suffix.lower() in (".md", ".markdown") else "html"))
    if str(out) == "-":
        emit(text)
    else:
        _write_whole(out, text)
        click.echo(f"wrote {out}", err=True)
    if tables_dir is not None:
        written = write_tables(report.tables, tables_dir)
        click.echo(f"wrote {len(written)} tables (CSV) into {tables_dir}", err=True)
    say_redacted(redactor)


def _scrubbed(paths: list[Path], keep: tuple[str, ...]):
    """The traces scrubbed (in the private scratch folder) and read back under their own names,
    redacted; and the Redactor that scrubbed them."""
    from gemmscope.scrub import recorded_redactor, scrub
    from gemmscope.traces.read import trace_source

    exports = [trace_source(path) for path in paths]
    redactor = recorded_redactor(exports, keep)
    staging = Path(tempfile.mkdtemp(dir=scratch.folder()))
    traces = [dataclasses.replace(read_trace(scrub(export, staging / f"{i}.sqlite", redactor), name=path),
                                  path=Path(redactor(path.name)))
              for i, (path, export) in enumerate(zip(paths, exports))]
    return redactor, traces


def _run_report(run_dir: Path, keep: tuple[str, ...]):
    """A profile run directory's report, from its trace scrubbed; and the Redactor that scrubbed it."""
    from gemmscope import profile_run
    from gemmscope.scrub import recorded_redactor, scrub
    from gemmscope.traces.nsys import sqlite_export

    trace = next((run_dir / name for name in profile_run.RUN_TRACES if (run_dir / name).exists()), None)
    if trace is None:  # a run made with --no-nsys: no trace, its events only
        redactor = recorded_redactor([], keep)
        return profile_report(profile_run.load_run(run_dir), run_dir), redactor
    export = sqlite_export(trace)
    redactor = recorded_redactor([export], keep)
    staging = Path(tempfile.mkdtemp(dir=scratch.folder()))
    scrub(export, staging / "trace.sqlite", redactor)
    return profile_report(profile_run.load_run(staging), run_dir), redactor


def _write_whole(out: Path, text: str) -> None:
    """`text` as the file `out`, through a temporary name: it appears whole or not at all."""
    try:
        with written_whole(out) as partial:
            partial.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror}") from None
