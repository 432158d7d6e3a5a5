"""The `whatif` command: per group of a run's GEMMs, the measured gain or loss of changing its
precision, and the change that does it (gemmscope.whatif)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gemmscope.cli.group import TRACE_PATH, emit, format_option, main, note, reading_options, wrote
from gemmscope.errors import ExitCode
from gemmscope.options import Options


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
    from gemmscope import api
    from gemmscope.report import render
    from gemmscope.whatif.answer import NothingToGroup

    try:
        found = api.what_if(list(traces), options, out=out, measured=measured, measure=not no_measure, iters=iters,
                            warmup=warmup, say=note)
    except NothingToGroup as exc:
        note(f"gemmscope: {exc}")
        sys.exit(ExitCode.MISMATCH)
    for line in found.said:
        note(line)
    if found.out is not None and found.files:
        wrote(f"{', '.join(sorted(found.files))} into {found.out}")
    emit(render(found.report, fmt))
