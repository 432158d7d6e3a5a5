"""The `gemmscope` command group: every failure as one line, Ctrl-C, and the options and output
that its commands share.

Exit codes: errors.EXIT_CODES, shown by `gemmscope --help` (3, COMMAND_FAILED: the verdicts on
what the command ran are still printed).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import click

from gemmscope import scratch, verify
from gemmscope.errors import ExitCode, InputError, exit_codes_help

EXAMPLE_TRACE = Path(__file__).parent.parent / "examples" / "h200-train-mixed-fp8-current.sqlite.xz"
EXAMPLE_RUN = Path(__file__).parent.parent / "examples" / "h200-codonfm-5b"


class _Interrupted(Exception):
    """Ctrl-C, carried past click (which would turn it into its own message)."""


# What a command may end with that is not a bug in gemmscope: each is said in one line (_Group.main).
_EXPECTED = (click.exceptions.ClickException, click.exceptions.Exit, click.Abort, InputError, OSError, sqlite3.Error,
             MemoryError)


class _Unexpected(Exception):
    """An exception no rule of gemmscope's expects (a bug), with the command and the inputs it
    was given, for a one-line report."""

    def __init__(self, error: BaseException, command: str, inputs: list[str]):
        super().__init__(str(error))
        self.error, self.command, self.inputs = error, command, inputs


class _Command(click.Command):
    """A command that names its inputs (its path arguments, verify's --trace) when it fails
    unexpectedly."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except _EXPECTED:
            raise
        except Exception as exc:
            raise _Unexpected(exc, ctx.info_name or "", _inputs(ctx)) from exc


def _inputs(ctx: click.Context) -> list[str]:
    """The paths a command was given to read (the traces, a run directory), as given."""
    named: list[str] = []
    for param in ctx.command.params:
        if (isinstance(param, click.Argument) or param.name == "trace_args") and isinstance(param.type, click.Path):
            value = ctx.params.get(param.name or "")
            named += [str(v) for v in (value if isinstance(value, tuple) else (value,)) if v is not None]
    return named


class _Group(click.Group):
    """Every failure as one line on stderr: InputError, click's usage errors, what the system
    refuses (a folder not writable, a name too long, a full disk, out of memory) and SQLite's
    errors exit 2; Ctrl-C exits 130 (what a shell reports for SIGINT); any other exception is a
    bug: one line naming the inputs, exit 70. Outputs are written through temporary names, so
    nothing is left half-written. Without a command: the help, exit 2."""

    command_class = _Command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args:  # not one error line holding the whole help: the help, as --help prints it
            click.echo(ctx.get_help())
            sys.exit(ExitCode.BAD_INPUT)
        return super().parse_args(ctx, args)

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
        except MemoryError:
            _fail("out of memory")
        except _Unexpected as exc:
            _internal_error(exc)


def _internal_error(exc: _Unexpected) -> NoReturn:
    """A bug: one line naming what was read and asking for a report (GEMMSCOPE_DEBUG=1: the
    traceback too), exit 70, never 1 (a check that failed)."""
    if os.environ.get("GEMMSCOPE_DEBUG", "") not in ("", "0"):
        traceback.print_exception(exc.error)
    what = ", ".join(exc.inputs) if exc.inputs else "its default input"
    error = " ".join(f"{type(exc.error).__name__}: {exc.error}".split())
    click.echo(f"gemmscope: internal error in `gemmscope {exc.command}` on {what} ({error}): a bug in gemmscope; "
               "please report it with this line and `gemmscope --version` (GEMMSCOPE_DEBUG=1 shows the traceback)",
               err=True)
    sys.exit(ExitCode.INTERNAL_ERROR)


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


@click.group(cls=_Group, epilog=exit_codes_help())
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
             "'*.nvidia.com', '10.0.*'; docs/redaction.md); repeatable.")(func)


def redaction_options(func):
    """--keep and --no-redact: what analyze, verify, diagnose and compare print is redacted as
    report's is (docs/redaction.md)."""
    func = click.option("--no-redact", is_flag=True,
                        help="Print every name and text as the traces hold them, secrets included (for local "
                             "debugging, not for pasting); by default redacted as report redacts (docs/"
                             "redaction.md).")(func)
    return keep_option(func)


def say_redacted(redactor) -> None:
    """What the redaction took out, per kind (never the values)."""
    click.echo(f"gemmscope: redacted: {redactor.summary()}", err=True)


def strict_option(func):
    return click.option(
        "--strict", "strict_unknown", is_flag=True,
        help="A GEMM whose kernel name does not tell its precision (UNKNOWN: Triton's, ...) leaves the run NOT "
             "FULLY CHECKED (exit 5) unless --allow names it; without it, such GEMMs are listed only.")(func)


def _steps(_ctx, _param, text: str | None) -> tuple[int, int] | None:
    from gemmscope.steps import step_interval

    return None if text is None else step_interval(text)


def check_options(func):
    """What analyze and verify share: --expect-map, --allow, --strict, --step-range, --steps,
    --workers, --scheduler, --plots."""
    options = [
        expect_map_option,
        click.option("--allow", multiple=True, metavar="PATTERN",
                     help="Shell pattern (kernel, TE module, layer or NVTX range) whose mismatches are "
                          "allowed; repeatable."),
        strict_option,
        click.option("--step-range", metavar="PATTERN",
                     help="NVTX range (shell pattern) that marks one training step: the breakdown covers the "
                          "steps after the first. Default: ranges named a stem and a number that repeat in a "
                          "process (tp_step_0, iteration 3; names saying step or iteration first); the output "
                          "says which were taken, or that none were found."),
        click.option("--steps", metavar="A-B", callback=_steps,
                     help="Only training steps A to B (inclusive, numbered from 0): the optimizer steps "
                          "gemmscope's hook marks. verify -- COMMAND collects those steps alone, on every rank "
                          "(nsys or --profiler torch); with traces, only their GEMMs are checked."),
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
