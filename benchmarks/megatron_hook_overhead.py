"""Benchmark: what `gemmscope verify`'s hook costs a Megatron-Core training step. Runs
tests/fixtures/gpu/corpus/megatron_gpt.py (a 4-layer GPT on TE's layer spec, FP8 tensorwise,
Megatron-Core unmodified) under torchrun, `--step-times`, in two configurations, alternating
round by round:

- bare: as the program runs by itself;
- te-nvtx: NVTE_NVTX_ENABLED=1 only (TE's own ranges, which verify turns on);
- hook: NVTE_NVTX_ENABLED=1 and gemmscope's start-up hook on PYTHONPATH, as `gemmscope verify`
  runs it (without nsys, whose own cost is not the hook's).

Each run's first WARMUP steps are dropped; every other step is a sample. Prints each
configuration's median ms per step [IQR] and its ratio of medians to bare. Needs a GPU,
TE and megatron-core.

    python benchmarks/megatron_hook_overhead.py [--rounds 3] [--steps 30] [-- megatron_gpt.py options]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / "gemmscope" / "autocast_hook"
PROGRAM = REPO / "tests" / "fixtures" / "gpu" / "corpus" / "megatron_gpt.py"
WARMUP = 5


def run(config: str, steps: int, extra: list[str]) -> list[float]:
    env = dict(os.environ)
    if config != "bare":
        env["NVTE_NVTX_ENABLED"] = "1"
    if config == "hook":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                           str(PROGRAM), "--steps", str(steps), "--step-times", *extra],
                          env=env, capture_output=True, text=True, check=True)
    line = next(line for line in done.stdout.splitlines() if line.startswith("step_ms "))
    return json.loads(line.removeprefix("step_ms "))[WARMUP:]


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return median, q1, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("extra", nargs="*", help="megatron_gpt.py options (after --)")
    args = parser.parse_args()
    configs = ("bare", "te-nvtx", "hook")
    samples: dict[str, list[float]] = {config: [] for config in configs}
    for round_ in range(args.rounds):
        for config in configs[round_ % len(configs):] + configs[:round_ % len(configs)]:
            samples[config] += run(config, args.steps, args.extra)
    bare = quartiles(samples["bare"])[0]
    for config, values in samples.items():
        median, q1, q3 = quartiles(values)
        print(f"{config:8s} {median:8.2f} ms/step [IQR {q1:.2f}-{q3:.2f}], {len(values)} steps, "
              f"{median / bare:.3f}x bare")


if __name__ == "__main__":
    main()
