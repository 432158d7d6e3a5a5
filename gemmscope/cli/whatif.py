"""The `whatif` command: per group of a run's GEMMs, the measured gain or loss of changing its
precision, and the change that does it (gemmscope.whatif)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from gemmscope.atomic import written_whole
from gemmscope.cli.group import TRACE_PATH, emit, format_option, main, note, reading_options
from gemmscope.errors import ExitCode, InputError
from gemmscope.options import Options
from gemmscope.report import render
from gemmscope.report.model import redacted

# What `whatif` writes into its --out folder beside the change files.
JSON_NAME, HTML_NAME, MEASUREMENT = "whatif.json", "whatif.html", "measurement"


@main.command("whatif")
@click.argument("traces", nargs=-1, required=True, type=TRACE_PATH)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the measurement, the report (whatif.json, whatif.html) and the change files "
                   "(default on a GPU: ./gemmscope-whatif-<time>; without a GPU: nothing is written unless given).")
@click.option("--measured", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR",
              help="Advise from a measurement made before (the `measurement` folder a run on a GPU wrote), "
                   "on any machine.")
@click.option("--no-measure", is_flag=True, help="List the groups and the command that measures them; time nothing.")
@click.option("--iters", type=click.IntRange(min=2), default=30, show_default=True,
              help="Timed forward+backward iterations per module shape and recipe.")
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True)
@format_option(("table", "json"))
@reading_options
def whatif_cmd(traces: tuple[Path, ...], out: Path | None, measured: Path | None, no_measure: bool, iters: int,
               warmup: int, fmt: str, options: Options) -> None:
    """Per group of the run's GEMMs (module pattern and precision, layer numbers folded): its time
    per step now, its time measured on this GPU at BF16 and each low-precision recipe (the module's
    forward and backward, quantization included, under nsys), what to keep and what to move, and
    the change written out for the run's framework (Megatron-Core arguments, a torchao module
    filter, a TE debug-API file, a te.autocast region). Without a GPU: the groups that would be
    measured and the command that measures them (exit 0, as profile without a GPU). A run that
    launched no GPU kernel: one line, exit 1."""
    from gemmscope.analysis import Analysis
    from gemmscope.whatif import advice, changes, measure, report
    from gemmscope.whatif.groups import group_gemms

    analysis = Analysis(list(traces), options, say=note)
    result = analysis.check
    # what the traces recorded (host, paths, the program's names) redacted wherever it is said, as the
    # trace commands do; the change files are the user's own to apply, left as the program names things
    redactor = analysis.traces.redactor
    say = redactor if redactor is not None else str
    if result.verification is None:  # the run launched no GPU kernel: nothing to group, as a check fails it
        click.echo(f"gemmscope: {result.note}", err=True)
        sys.exit(ExitCode.MISMATCH)
    run = group_gemms(result.verification, options.step_range)
    if run.groups.empty:  # kernels ran, no GEMM among them: nothing to group, as a check with a recipe fails it
        click.echo("gemmscope: the traces hold no GEMM: nothing to group or measure", err=True)
        sys.exit(ExitCode.MISMATCH)
    planned = measure.plan(run)
    why = None if measured else ("--no-measure" if no_measure else measure.measuring_possible(run.framework))
    if why is not None:
        command = shlex.join(["gemmscope", "whatif", *map(str, traces), "--out", str(out or "whatif-out")])
        click.echo(say(f"gemmscope: {why}: nothing measured; on a GPU machine run: {command}"), err=True)
        whole = report.listing_report(run, planned, why, command)
    else:
        if measured is None:
            out = out or Path(time.strftime("gemmscope-whatif-%Y%m%d-%H%M%S"))
            if out.exists():
                raise InputError(f"{out} exists: give a new --out folder")
            measured = measure.run(measure.spec(planned, run, iters, warmup), out / MEASUREMENT)
        results, device = measure.read_measurement(measured)
        advised = advice.advise(run, results, device)
        written = changes.write_changes(run, advised)
        whole = report.advice_report(run, advised, written, str(out) if out else None)
        if out:
            out.mkdir(parents=True, exist_ok=True)
            for name, text in written.files.items():
                _write(out / name, text)
    if redactor is not None:
        whole = redacted(whole, redactor)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        _write(out / JSON_NAME, render(whole, "json"))
        _write(out / HTML_NAME, render(whole, "html"))
    emit(render(whole, fmt))


def _write(path: Path, text: str) -> None:
    with written_whole(path) as partial:
        partial.write_text(text, encoding="utf-8")
