"""`gemmscope whatif`'s answer: traces in, the report and the files to write out (gemmscope.api.what_if
writes them; the command line prints the report)."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gemmscope.errors import InputError
from gemmscope.options import Options
from gemmscope.report import render
from gemmscope.report.model import Report, redacted

# What whatif writes into its out folder beside the change files, and the measurement's folder there.
JSON_NAME, HTML_NAME, MEASUREMENT = "whatif.json", "whatif.html", "measurement"


class NothingToGroup(Exception):
    """The traces launched no GPU kernel, or no GEMM: nothing to group or measure (the CLI: one line, exit 1)."""


@dataclass
class Answer:
    report: Report  # redacted where Options.redact asks
    files: dict[str, str] = field(default_factory=dict)  # name -> text, for the out folder (none without one)
    said: list[str] = field(default_factory=list)  # lines for stderr beside the report
    out: Path | None = None  # the folder `files` belong in (the measurement is there already)


def answer(traces: Sequence[str | Path], options: Options | None = None, *, out: Path | None = None,
           measured: Path | None = None, measure: bool = True, iters: int = 30, warmup: int = 5,
           say: Callable[[str], None] | None = None) -> Answer:
    """Per group of the run's GEMMs: the time per step now, and, measured on this GPU (into
    `out`/measurement, a new folder named by the time where `out` is None) or read from a measurement
    made before (`measured`), the recommendations and the change that applies them. Without a GPU,
    or with `measure` False: the groups and the command that measures them."""
    from gemmscope.analysis import Analysis
    from gemmscope.whatif import advice, changes, report
    from gemmscope.whatif import measure as measuring
    from gemmscope.whatif.groups import group_gemms

    options = options or Options()
    analysis = Analysis(list(traces), options, say=say)
    result = analysis.check
    if result.judgement is None:  # the run launched no GPU kernel, as a check fails it
        raise NothingToGroup(result.note or "no GPU kernel ran")
    run = group_gemms(result.judgement, options.step_range)
    if run.groups.empty:  # kernels ran, no GEMM among them, as a check with a recipe fails it
        raise NothingToGroup("the traces hold no GEMM: nothing to group or measure")
    # what the traces recorded (host, paths, the program's names) redacted wherever it is said, as the
    # trace commands do; the change files are the user's own to apply, left as the program names things
    redactor = analysis.traces.redactor
    planned = measuring.plan(run)
    files: dict[str, str] = {}
    said: list[str] = []
    why = None if measured else ("--no-measure" if not measure else measuring.measuring_possible(run.framework))
    if why is not None:
        command = shlex.join(["gemmscope", "whatif", *map(str, traces), "--out", str(out or "whatif-out")])
        said.append(f"gemmscope: {why}: nothing measured; on a GPU machine run: {command}")
        whole = report.listing_report(run, planned, why, command)
    else:
        if measured is None:
            out = out or Path(time.strftime("gemmscope-whatif-%Y%m%d-%H%M%S"))
            if out.exists():
                raise InputError(f"{out} exists: give a new --out folder")
            measured = measuring.run(measuring.spec(planned, run, iters, warmup), out / MEASUREMENT)
        results, device = measuring.read_measurement(measured)
        advised = advice.advise(run, results, device)
        written = changes.write_changes(run, advised)
        whole = report.advice_report(run, advised, written, str(out) if out else None)
        files.update(written.files)
    if redactor is not None:
        whole = redacted(whole, redactor)
        said = [redactor(line) for line in said]
    if out:
        files.update({JSON_NAME: render(whole, "json"), HTML_NAME: render(whole, "html")})
    return Answer(whole, files if out else {}, said, out)
