"""The options every trace command shares (`Options`), validated once: what `gemmscope.Analysis`
is built with, and what the CLI's shared options (cli.group.trace_options) parse into."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gemmscope.autocast_hook.gemmscope_protocol import parse_steps
from gemmscope.errors import InputError
from gemmscope.judging.recipes import RECIPES


@dataclass(frozen=True)
class Options:
    """What the trace commands share, validated once (InputError): `expect`, a recipe
    (recipes.RECIPES) every GEMM is checked against (default: each against what it was asked);
    `expect_map`, NVTX range pattern -> recipe (a mapping, or pairs in order: the first match
    wins); `allow`, shell patterns (kernel, module, layer, NVTX range) whose mismatches are
    accepted; `strict`, a GEMM of unknown precision leaves the run NOT_FULLY_CHECKED;
    `step_range`, the NVTX range (shell pattern) that marks one training step, for the breakdown;
    `steps`, (A, B) or "A-B": only training steps A to B (the hook's marks); `workers`, local
    processes reading several traces; `scheduler`, a Dask scheduler address reading them instead;
    `redact`, every text read redacted as `report` redacts (the CLI's default; `keep`, shell
    patterns the redaction leaves)."""

    expect: str | None = None
    expect_map: tuple[tuple[str, str], ...] = ()
    allow: tuple[str, ...] = ()
    strict: bool = False
    step_range: str | None = None
    steps: tuple[int, int] | None = None
    workers: int | None = None
    scheduler: str | None = None
    redact: bool = False
    keep: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.expect is not None and self.expect not in RECIPES:
            raise InputError(f"unknown recipe {self.expect!r}: choose from {', '.join(RECIPES)}")
        pairs = tuple(self.expect_map.items() if isinstance(self.expect_map, Mapping) else map(tuple, self.expect_map))
        for pair in pairs:
            if len(pair) != 2 or pair[1] not in RECIPES:
                raise InputError(f"unknown recipe {pair[-1]!r} in expect_map: choose from {', '.join(RECIPES)}")
        object.__setattr__(self, "expect_map", pairs)
        for name in ("allow", "keep"):  # one pattern given alone is one pattern, not its characters
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if isinstance(self.steps, str):
            object.__setattr__(self, "steps", step_interval(self.steps))
        elif self.steps is not None:
            first, last = map(int, self.steps)
            if not 0 <= first <= last:
                raise InputError(f"steps {first}-{last}: give the first and last training step, from 0, first <= last")
            object.__setattr__(self, "steps", (first, last))
        if self.workers is not None and self.workers < 1:
            raise InputError(f"workers {self.workers}: give 1 or more")

    @classmethod
    def of(cls, options: Options | None = None, **settings: Any) -> Options:
        """`options` with `settings` (its fields by name) put over it."""
        return dataclasses.replace(options or cls(), **settings) if settings else options or cls()

    @property
    def judging(self) -> bool:
        """Something given that applies to a check of traces, not to a profile run directory."""
        return bool(self.expect or self.expect_map or self.allow or self.strict or self.step_range or self.steps)


def step_interval(text: str) -> tuple[int, int]:
    """`--steps A-B` (inclusive, from 0; "A" alone is one step) as (A, B); InputError otherwise."""
    try:
        return parse_steps(text)
    except ValueError:
        raise InputError(f"--steps {text!r}: give A-B, the first and last training step to capture "
                         "(numbered from 0, A <= B), e.g. --steps 20-22") from None
