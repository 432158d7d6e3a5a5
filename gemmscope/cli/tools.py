"""The commands beside the check: `shapes`, `kernel`, `doctor` and `profile`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gemmscope.cli.group import (
    EXAMPLE_RUN,
    KERNEL_FORMATS,
    SHAPES_FORMATS,
    detail_level,
    emit,
    format_option,
    main,
    with_options,
    wrote,
)
from gemmscope.common.sinks import terminal_lines
from gemmscope.errors import ExitCode, InputError
from gemmscope.judging.recipes import RECIPES
from gemmscope.plan.model_config import ACTIVATIONS, PRESETS


def config_options(func):
    """Model config sources shared by `shapes` and `profile`: a preset, an HF config.json, flags."""
    return with_options(func, [
        click.option("--model", help=f"Preset: {', '.join(PRESETS)}."),
        click.option("--config", "config_path", type=click.Path(), help="Hugging Face config.json."),
        click.option("--hidden-size", type=int),
        click.option("--intermediate-size", type=int),
        click.option("--num-attention-heads", type=int),
        click.option("--num-kv-heads", type=int),
        click.option("--head-dim", type=int),
        click.option("--num-layers", type=int),
        click.option("--micro-batch-size", type=int),
        click.option("--seq-len", type=int),
        click.option("--vocab-size", type=int),
        click.option("--activation", type=click.Choice(ACTIVATIONS)),
        click.option("--tp", type=int, help="Tensor-parallel size."),
        click.option("--num-experts", type=int),
        click.option("--moe-top-k", type=int),
        click.option("--mtp-layers", type=int,
                     help="Multi-token prediction modules trained with the model (DeepSeek-V3's config: 1)."),
        click.option("--lm-head", is_flag=True, help="Include the LM head GEMMs."),
    ])


@main.command("shapes")
@config_options
@format_option(SHAPES_FORMATS)
def shapes_cmd(fmt: str, model: str | None, config_path: str | None, lm_head: bool, **fields) -> None:
    """The GEMMs a transformer runs per training step: op, pass, M×K×N, FLOPs, count."""
    from gemmscope import api

    emit(api.gemm_shapes(model, config_path, lm_head, **fields).render(fmt))


def _names_from(source: str) -> list[str]:
    """Kernel names one a line from a file, or stdin for "-" (a profiler's kernel list pasted):
    blank lines skipped, each name stripped of the blanks around it."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise InputError(f"--from {source}: cannot read it ({err.strerror or err})") from err
    return [line.strip() for line in text.splitlines() if line.strip()]


@main.command("kernel")
@click.argument("names", nargs=-1)
@click.option("--from", "source", metavar="FILE", help="Also read names from FILE, one a line ('-': stdin).")
@format_option(KERNEL_FORMATS)
def kernel_cmd(names: tuple[str, ...], source: str | None, fmt: str) -> None:
    """Decode kernel names: family, arch, role, precision, operand types, scale mode, layout, whether
    grouped, and why a precision is unknown. NAMES, or one a line from --from FILE or stdin (piped,
    without NAMES): a profiler's kernel list pasted."""
    from gemmscope import api

    listed = list(names)
    if source is not None:
        listed += _names_from(source)
    elif not listed and not sys.stdin.isatty():
        listed = _names_from("-")
    if not listed:
        raise InputError("no kernel names: give NAMES, --from FILE, or pipe them in one a line")
    emit(api.decode_kernels(listed).render(fmt))


@main.command()
@click.option("--canary", is_flag=True,
              help="Also run a tiny GEMM that asks for FP8 but runs BF16, under nsys, and check it is flagged.")
def doctor(canary: bool) -> None:
    """What this machine can do: nsys, GPU, Transformer Engine and each recipe's availability."""
    from gemmscope.report import terminal
    from gemmscope.running import doctor as doctor_checks

    checked = doctor_checks.checks()
    emit(terminal.table_text("gemmscope doctor", checked, wrap={"detail"}))
    if canary:
        if missing := doctor_checks.canary_missing(checked):
            raise InputError(f"--canary cannot run here: {missing}")
        flagged = doctor_checks.canary()
        emit(terminal_lines(flagged.message) + "\n")
        sys.exit(ExitCode.OK if flagged.ok else ExitCode.MISMATCH)


def _csv_choice(value: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [v for v in items if v not in allowed]
    if unknown or not items:
        raise InputError(f"unknown {what} {', '.join(unknown) or '(none)'}: choose from {', '.join(allowed)}")
    return items


@main.command("profile")
@config_options
@click.option("--precisions", default=",".join(RECIPES), show_default=True)
@click.option("--modes", default="autocast,prequant", show_default=True)
@click.option("--iters", type=click.IntRange(min=2), default=100, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--no-nsys", is_flag=True, help="CUDA-event times only: no trace, no kernel times, no verdicts.")
@click.option("--out", type=click.Path(path_type=Path), help="New run directory (default: ./gemmscope-run-<time>).")
@click.option("--quiet", is_flag=True, help="Print only the verdict block.")
@click.option("--verbose", is_flag=True, help="Also print each entry's throughput, % of peak, intensity and noise.")
def profile_cmd(precisions, modes, iters, warmup, no_nsys, out, quiet, verbose, model, config_path, lm_head,
                **fields) -> None:
    """Every GEMM of the model through TE at each recipe and mode, under nsys: speedup tables
    and, per GEMM, the kernel that ran and whether its precision is the one asked for. On a
    machine without a GPU: the run shipped with gemmscope, re-derived from its trace."""
    from gemmscope import api
    from gemmscope.plan import gpu_profile, profile_run

    shipped = not gpu_profile.gpu_available()
    if shipped:
        given = {"model": model, "config_path": config_path, "lm_head": lm_head} | fields
        asked = [f"--{name.replace('_', '-')}" for name, value in given.items() if value not in (None, False)]
        if asked or out or no_nsys:
            raise InputError(f"no CUDA GPU here: nothing can be profiled ({' '.join(asked + ['--out'] * bool(out))}"
                             f"{' --no-nsys' * no_nsys}); without model options, gemmscope profile shows the run "
                             f"shipped with gemmscope ({EXAMPLE_RUN.name})")
        click.echo(f"gemmscope: no CUDA GPU here: showing the run shipped with gemmscope, "
                   f"re-derived from its trace ({EXAMPLE_RUN.name})", err=True)
    else:
        precisions = _csv_choice(precisions, RECIPES, "precision")
        modes = _csv_choice(modes, profile_run.MODES, "mode")
    profiled = api.profile_model(model, config_path, lm_head=lm_head, precisions=precisions, modes=modes, iters=iters,
                                 warmup=warmup, out=out, use_nsys=not no_nsys, shipped=shipped, **fields)
    emit(profiled.render("table", detail_level(quiet, verbose)))
    if not shipped:
        wrote(f"the run directory {profiled.run_dir} ({profiled.wall_s:.1f} s)")
