"""The `gemmscope` command group: every failure as one line, Ctrl-C, and the options and output
that its commands share.

Exit codes: errors.EXIT_CODES, shown by `gemmscope --help` (3, COMMAND_FAILED: the verdicts on
what the command ran are still printed).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import click

from gemmscope.common import scratch
from gemmscope.common.sinks import for_terminal, terminal_lines
from gemmscope.errors import ExitCode, InputError, exit_codes_help
from gemmscope.judging.recipes import RECIPES
from gemmscope.options import Options
from gemmscope.plan import EXAMPLE_RUN as EXAMPLE_RUN  # defined beside the plan side, which reads it

EXAMPLE_TRACE = Path(__file__).parent.parent / "examples" / "h200-train-mixed-fp8-current.sqlite.xz"


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
    what, error = for_terminal(what), for_terminal(error)
    click.echo(_redacted(f"gemmscope: internal error in `gemmscope {exc.command}` on {what} ({error}): a bug in "
                         "gemmscope; please report it with this line and `gemmscope --version` (GEMMSCOPE_DEBUG=1 "
                         "shows the traceback)"), err=True)
    sys.exit(ExitCode.INTERNAL_ERROR)


def _fail(message: str) -> NoReturn:
    """One line, whatever the message holds: a file name or a trace's text in it with its control
    characters escaped, and redacted as every error line is."""
    click.echo(_redacted(f"gemmscope: error: {for_terminal(' '.join(message.split()))}"), err=True)
    sys.exit(ExitCode.BAD_INPUT)


def _redacted(line: str) -> str:
    """An error line redacted by the rules every output gemmscope writes for sharing passes
    (docs/redaction.md): it may quote a trace's text (a token in it, what SQLite quotes of text it
    could not decode), and it is pasted into issues as often as a report is."""
    from gemmscope.redaction.policy import Redactor

    return Redactor()(line)


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


# Each output's formats, in one place: a trace report's (jsonl: its GEMM launches streamed), a
# comparison's, a page to share's, and the tables of the commands beside the check.
TRACE_FORMATS = ("table", "json", "jsonl", "csv", "markdown")
COMPARISON_FORMATS = ("table", "json", "markdown")
PAGE_FORMATS = ("html", "markdown")
SHAPES_FORMATS = ("table", "json", "csv", "markdown")
KERNEL_FORMATS = ("table", "json")


def format_option(formats: tuple[str, ...], default: str | None = "table", help_text: str | None = None):
    return click.option("--format", "fmt", type=click.Choice(formats), default=default,
                        show_default=default is not None, help=help_text)


def with_options(func, options: list) -> Callable:
    """`func` with `options` (click.option decorators), in the order listed."""
    for option in reversed(options):
        func = option(func)
    return func


def _parse_expect_map(items: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    if not items:  # the default: the judging module, and pandas under it, not imported before a command needs them
        return ()
    from gemmscope.judging import judgement

    return judgement.parse_expect_map(items)


def _steps(_ctx, _param, text: str | None) -> tuple[int, int] | None:
    from gemmscope.options import step_interval

    return None if text is None else step_interval(text)


_KEEP = click.option(
    "--keep", multiple=True, metavar="PATTERN",
    help="Leave what matches this shell pattern although a redaction rule matches it (e.g. "
         "'*.nvidia.com', '10.0.*'; docs/redaction.md); repeatable.")

# What every command that reads traces shares (steps, workers), each declared here alone.
_READING_OPTIONS = [
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
]

# What every trace command shares (analysis.Options), each declared here alone.
_TRACE_OPTIONS = [
    click.option("--expect", type=click.Choice(RECIPES),
                 help="Recipe every GEMM should run at; default: what each GEMM was asked for, as gemmscope's hook "
                      "recorded it, else the recipe the run's te.autocast asked for."),
    click.option(
        "--expect-map", "expect_map", multiple=True, metavar="PATTERN=RECIPE",
        callback=lambda _ctx, _param, items: _parse_expect_map(items),
        help="GEMMs inside an NVTX range whose name matches PATTERN (shell-style; the innermost "
             "matching range decides) should run at RECIPE, e.g. 'FP8Block_*=fp8-block'; repeatable. "
             "A mapped range that ran no GEMM, or a pattern that names no range, fails the check."),
    click.option("--allow", multiple=True, metavar="PATTERN",
                 help="Shell pattern (kernel, TE module, layer or NVTX range) whose mismatches are "
                      "allowed; repeatable."),
    click.option(
        "--strict", is_flag=True,
        help="A GEMM whose kernel name does not tell its precision (UNKNOWN: Triton's, ...) leaves the run NOT "
             "FULLY CHECKED (exit 5) unless --allow names it; without it, such GEMMs are listed only."),
    *_READING_OPTIONS,
    _KEEP,
]
_NO_REDACT = click.option(
    "--no-redact", is_flag=True,
    help="Print every name and text as the traces hold them, secrets included (for local debugging, not for "
         "pasting); by default redacted as report redacts (docs/redaction.md).")


def trace_options(printed: bool = True):
    """The options every trace command shares, given to it as one validated analysis.Options
    (`options`). `printed`: what the command prints is redacted unless --no-redact; else (report,
    bundle: made from the traces scrubbed) it is always redacted."""
    def decorate(func):
        @functools.wraps(func)
        def command(*args, **params):
            options = Options(
                expect=params.pop("expect"), expect_map=params.pop("expect_map"), allow=params.pop("allow"),
                strict=params.pop("strict"), step_range=params.pop("step_range"), steps=params.pop("steps"),
                workers=params.pop("workers"), scheduler=params.pop("scheduler"), keep=params.pop("keep"),
                redact=not params.pop("no_redact", False))
            return func(*args, options=options, **params)

        return with_options(command, _TRACE_OPTIONS + [_NO_REDACT] * printed)
    return decorate


def reading_options(func):
    """The options of a command that reads traces without judging them (whatif): the trace
    commands' steps, workers and redaction, as one analysis.Options (`options`); what it prints is
    redacted unless --no-redact."""
    @functools.wraps(func)
    def command(*args, **params):
        options = Options(step_range=params.pop("step_range"), steps=params.pop("steps"),
                          workers=params.pop("workers"), scheduler=params.pop("scheduler"), keep=params.pop("keep"),
                          redact=not params.pop("no_redact"))
        return func(*args, options=options, **params)

    return with_options(command, [*_READING_OPTIONS, _KEEP, _NO_REDACT])


def keep_option(func):
    return _KEEP(func)


@dataclass(frozen=True)
class Output:
    """How a trace report is printed: its format, its detail ("quiet", "normal", "verbose"),
    every GEMM launch in its JSON (`per_launch`), and the folder its plots go to."""

    fmt: str
    detail: str
    per_launch: bool
    plots: Path | None

    def make_plots_folder(self) -> None:
        """Made before the traces are read: one that cannot be made fails first."""
        make_dir(self.plots, "--plots")


def output_options(func):
    """--format, --quiet, --verbose, --per-launch and --plots, given to the command as one Output (`output`)."""
    @functools.wraps(func)
    def command(*args, **params):
        output = Output(params.pop("fmt"), detail_level(params.pop("quiet"), params.pop("verbose")),
                        params.pop("per_launch"), params.pop("plots_dir"))
        return func(*args, output=output, **params)

    return with_options(command, [
        format_option(TRACE_FORMATS),
        click.option("--quiet", is_flag=True, help="Print only the verdict block."),
        click.option("--verbose", is_flag=True, help="Also list every GEMM launch."),
        click.option("--per-launch", is_flag=True,
                     help="JSON: also one object per GEMM launch (analyze: `gemms`; verify: `mismatches` and "
                          "`allowed`); by default GEMMs come grouped per layer, module, pass and kernel."),
        click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
                     help="Also write the plots as PNG files into DIR (made if missing): GPU time per rank, "
                          "GEMM TFLOP/s against the GPU's peak, and GPU time per step when steps are found."),
    ])


def make_dir(directory: Path | None, option: str) -> None:
    """A folder an option names, made before the traces are read: one that cannot be made fails first."""
    if directory is not None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot make the {option} folder {directory}: {exc.strerror}") from None


def say_redacted(redactor) -> None:
    """What the redaction took out, per kind (never the values)."""
    click.echo(f"gemmscope: redacted: {redactor.summary()}", err=True)


def note(text: str) -> None:
    """A line on stderr beside the output, a name or a path in it with its control characters
    escaped (sinks.terminal_lines)."""
    click.echo(terminal_lines(text), err=True)


def wrote(what: str | Path) -> None:
    """What a command wrote, said the one way every command says it: `gemmscope: wrote WHAT` on
    stderr, as every other note, so that stdout holds only what the command prints (`report -o -`:
    the page itself)."""
    note(f"gemmscope: wrote {for_terminal(str(what))}")


def detail_level(quiet: bool, verbose: bool) -> str:
    if quiet and verbose:
        raise InputError("--quiet and --verbose contradict each other: give one")
    return "quiet" if quiet else "verbose" if verbose else "normal"


def emit(text: str) -> None:
    click.echo(text, nl=False)
