"""The `gemmscope` command group: every failure as one line, Ctrl-C, and the options and output
that its commands share.

Exit codes: errors.ExitCode (3, COMMAND_FAILED: the verdicts on what the command ran are still
printed).
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import NoReturn

import click

from gemmscope import scratch, verify
from gemmscope.errors import ExitCode, InputError

EXAMPLE_TRACE = Path(__file__).parent.parent / "examples" / "h200-train-mixed-fp8-current.sqlite.xz"
EXAMPLE_RUN = Path(__file__).parent.parent / "examples" / "h200-codonfm-5b"


class _Interrupted(Exception):
    """Ctrl-C, carried past click (which would turn it into its own message)."""


class _Group(click.Group):
    """Every failure as one line on stderr: InputError, click's usage errors, what the system
    refuses (a folder not writable, a name too long, a full disk) and SQLite's errors exit 2;
    Ctrl-C exits 130 (what a shell reports for SIGINT). Outputs are written through temporary
    names, so nothing is left half-written."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted() from None

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except (_Interrupted, KeyboardInterrupt, click.Abort):
            click.echo("gemmscope: interrupted", err=True)
            # Out at once, joining no thread: a worker the Ctrl-C ended while it was sending its
            # result leaves the process pool's thread (loading.load) waiting forever, and a normal
            # exit joins it. The scratch folder goes first, as an exit handler would remove it.
            sys.stdout.flush()
            sys.stderr.flush()
            scratch.remove()
            os._exit(ExitCode.INTERRUPTED)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message())
        except InputError as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc))
        except sqlite3.Error as exc:
            _fail(f"SQLite: {exc}")


def _fail(message: str) -> NoReturn:
    click.echo(f"gemmscope: error: {' '.join(message.split())}", err=True)
    sys.exit(ExitCode.BAD_INPUT)


class TracePath(click.Path):
    """A trace, folder or glob named on the command line: an empty name (an unset shell variable)
    is refused, never read as the current folder (which Path("") is)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            self.fail("an empty trace name was given (an unset shell variable?): name a trace, folder or glob",
                      param, ctx)
        return super().convert(value, param, ctx)


TRACE_PATH = TracePath(path_type=Path)


@click.group(cls=_Group)
@click.version_option(package_name="gemmscope")
def main() -> None:
    """Is the precision Transformer Engine was asked for the precision that ran?"""


# analyze's and verify's formats: jsonl streams the launches, the others render the report.
TRACE_FORMATS = ("table", "json", "jsonl", "csv", "markdown")


def format_option(formats=TRACE_FORMATS):
    return click.option("--format", "fmt", type=click.Choice(formats), default="table", show_default=True)


def expect_map_option(func):
    return click.option(
        "--expect-map", "expect_map", multiple=True, metavar="PATTERN=RECIPE",
        callback=lambda _ctx, _param, items: verify.parse_expect_map(items),
        help="GEMMs inside an NVTX range whose name matches PATTERN (shell-style; the innermost "
             "matching range decides) should run at RECIPE, e.g. 'FP8Block_*=fp8-block'; repeatable. "
             "A mapped range that ran no GEMM, or a pattern that names no range, fails the check.")(func)


def keep_option(func):
    return click.option(
        "--keep", multiple=True, metavar="PATTERN",
        help="Leave what matches this shell pattern although a redaction rule matches it (e.g. "
             "'*.nvidia.com', '10.0.*'; README: Redaction); repeatable.")(func)


def say_redacted(redactor) -> None:
    """What the redaction took out, per kind (never the values)."""
    click.echo(f"gemmscope: redacted: {redactor.summary()}", err=True)


def check_options(func):
    """What analyze and verify share: --expect-map, --allow, --step-range, --workers, --scheduler, --plots."""
    options = [
        expect_map_option,
        click.option("--allow", multiple=True, metavar="PATTERN",
                     help="Shell pattern (kernel, TE module, layer or NVTX range) whose mismatches are "
                          "allowed; repeatable."),
        click.option("--step-range", metavar="PATTERN",
                     help="NVTX range (shell pattern) that marks one training step: the breakdown covers the "
                          "steps after the first. Default: ranges named a stem and a number that repeat in a "
                          "process (tp_step_0, iteration 3; names saying step or iteration first); the output "
                          "says which were taken, or that none were found."),
        click.option("--workers", type=click.IntRange(min=1), metavar="N",
                     help="Read several traces in N local processes (default: one per trace, up to one per CPU)."),
        click.option("--scheduler", metavar="ADDRESS",
                     help="Read the traces on a Dask distributed cluster (e.g. tcp://host:8786) instead."),
        click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
                     help="Also write the plots as PNG files into DIR (made if missing): GPU time per rank, "
                          "GEMM TFLOP/s against the GPU's peak, and GPU time per step when steps are found."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def detail_options(func):
    """--quiet (the verdict block only) and --verbose (every GEMM launch too) for text output;
    --per-launch (every GEMM launch too) for JSON."""
    func = click.option("--per-launch", is_flag=True,
                        help="JSON: also one object per GEMM launch (analyze: `gemms`; verify: `mismatches` and "
                             "`allowed`); by default GEMMs come grouped per layer, module, pass and kernel.")(func)
    func = click.option("--verbose", is_flag=True, help="Also list every GEMM launch.")(func)
    return click.option("--quiet", is_flag=True, help="Print only the verdict block.")(func)


def detail_level(quiet: bool, verbose: bool) -> str:
    if quiet and verbose:
        raise InputError("--quiet and --verbose contradict each other: give one")
    return "quiet" if quiet else "verbose" if verbose else "normal"


def emit(text: str) -> None:
    click.echo(text, nl=False)
