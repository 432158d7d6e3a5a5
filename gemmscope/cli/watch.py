"""`gemmscope timeline`: a job's windows, as `verify --every` or `--follow` judged them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

import gemmscope
from gemmscope import api
from gemmscope.cli.group import emit, format_option, main, note
from gemmscope.common.atomic import written_whole
from gemmscope.errors import ExitCode, InputError, State

TIMELINE_FORMATS = ("table", "json", "html")


@main.command("timeline")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--follow", is_flag=True,
              help="Judge each trace another tool writes into FOLDER (torch.profiler's, nsys exports), once complete, "
                   "as a window; one line each on stderr, its alerts with it.")
@click.option("--count", type=click.IntRange(min=1), help="With --follow: stop after COUNT traces (default: Ctrl-C).")
@click.option("--until-pid", type=int, metavar="PID",
              help="With --follow: stop once process PID has ended and its last traces are judged.")
@click.option("--expect", help="With --follow: the recipe every GEMM should run (default: what each asked).")
@click.option("--allow", multiple=True, help="With --follow: shell patterns whose mismatches are accepted.")
@format_option(TIMELINE_FORMATS, help_text="html: one self-contained page (plots of the windows over their steps, "
                                            "the alerts, the window table), written to --output.")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="With --format html: the file to write ('-': standard output).")
def timeline_cmd(folder: Path, follow: bool, count: int | None, until_pid: int | None, expect: str | None,
                 allow: tuple[str, ...], fmt: str, out: Path | None) -> None:
    """A job's windows (FOLDER/timeline.jsonl), each judged, with what changed since the first:
    exits with the worst window's state."""
    from gemmscope.watching.timeline import timeline_document, timeline_table

    if not follow and (count or until_pid or expect or allow):
        raise click.UsageError("--count, --until-pid, --expect and --allow go with --follow")
    if (fmt == "html") != (out is not None):
        raise click.UsageError("--format html writes a page: give it -o FILE ('-': standard output), and -o only it")
    records = (gemmscope.follow(folder, count=count, until_pid=until_pid, expect=expect, allow=allow,
                                say=note).records if follow
               else gemmscope.timeline(folder))
    if out is not None:
        _write_page(out, api.timeline_page(records, f"Timeline of {folder.name}"))
    else:
        emit(json.dumps(timeline_document(records), indent=2) + "\n" if fmt == "json" else timeline_table(records))
    state = timeline_document(records)["state"]
    sys.exit(State(state).exit_code if state else ExitCode.NOT_CHECKED)


def _write_page(out: Path, text: str) -> None:
    """The page as the file `out` (through a temporary name: whole or not at all), or on stdout for '-'."""
    if str(out) == "-":
        emit(text)
        return
    try:
        with written_whole(out) as partial:
            partial.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror}") from None
    note(f"wrote {out}")
