"""Benchmark: what `gemmscope verify` adds to the program it checks. verify runs COMMAND with
TE's NVTX ranges on (NVTE_NVTX_ENABLED=1) and gemmscope's start-up hook on PYTHONPATH; both run
Python at every TE GEMM call, so a CPU-bound training step gets slower and verify's timing
findings (gpu-idle, launch-bound) would describe the hook, not the program. This times one
training step of a small te.Linear (CPU-bound on purpose: the worst case) in child processes:

- bare: neither;
- te-nvtx: NVTE_NVTX_ENABLED=1 only;
- verify: NVTE_NVTX_ENABLED=1 and the hook, as `gemmscope verify` sets them;
- with --hook-before DIR, also verify with the hook found in DIR (e.g. an older version).

Each configuration runs ROUNDS times, the order rotating every round; each run times ITERS steps
after WARMUP, one sample per step (wall time, the CPU launching, a synchronize at the end of each
step). Prints median ms per step [IQR] and the ratio to bare. Needs a GPU and TE; --nsys runs each
child under `nsys profile --trace=cuda,nvtx` (as verify does; nsys's start-up is not timed).

    python benchmarks/hook_overhead.py [--nsys] [--rounds 4] [--hook-before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HOOK = Path(__file__).resolve().parent.parent / "gemmscope" / "autocast_hook"
ITERS, WARMUP = 100, 20

# One training step of a te.Linear in FP8 current scaling (3 GEMMs), sized so that launching,
# not the GPU, sets the pace.
_CHILD = """
import json, sys, time, torch
import transformer_engine.pytorch as te
from transformer_engine.common.recipe import Float8CurrentScaling
iters, warmup = int(sys.argv[1]), int(sys.argv[2])
model = te.Linear(1024, 1024, params_dtype=torch.bfloat16)
x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
recipe = Float8CurrentScaling()
samples = []
for i in range(warmup + iters):
    start = time.perf_counter()
    with te.autocast(enabled=True, recipe=recipe):
        y = model(x)
    y.float().sum().backward()
    torch.cuda.synchronize()
    if i >= warmup:
        samples.append((time.perf_counter() - start) * 1e3)
print("SAMPLES " + json.dumps(samples))
"""


def environments(hook_before: Path | None) -> dict[str, dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if k != "NVTE_NVTX_ENABLED"}
    python_path = base.get("PYTHONPATH")

    def with_hook(hook: Path) -> dict[str, str]:
        return dict(base, NVTE_NVTX_ENABLED="1",
                    PYTHONPATH=os.pathsep.join(p for p in (str(hook), python_path) if p))

    configs = {"bare": base, "te-nvtx": dict(base, NVTE_NVTX_ENABLED="1"), "verify": with_hook(HOOK)}
    if hook_before is not None:
        configs["verify (hook before)"] = with_hook(hook_before)
    return configs


def run_once(env: dict[str, str], nsys: bool) -> list[float]:
    command = [sys.executable, "-c", _CHILD, str(ITERS), str(WARMUP)]
    with tempfile.TemporaryDirectory() as tmp:
        if nsys:
            command = ["nsys", "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                       "-o", str(Path(tmp) / "run"), *command]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SAMPLES ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the child failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return json.loads(lines[0].removeprefix("SAMPLES "))


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return q1, median, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsys", action="store_true", help="run each child under nsys profile, as verify does")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hook-before", type=Path, help="also time verify with the hook in this folder")
    args = parser.parse_args()
    configs = environments(args.hook_before)
    names = list(configs)
    print(f"{'configuration':<22} {'ms per step median [IQR]':>28} {'/ bare':>7}   "
          f"({args.rounds} rounds x {ITERS} steps{', under nsys' if args.nsys else ''})")
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name] += run_once(configs[name], args.nsys)
    bare = quartiles(samples["bare"])[1]
    for name in names:
        q1, median, q3 = quartiles(samples[name])
        print(f"{name:<22} {median:>12.3f} [{q1:.3f}–{q3:.3f}] {median / bare:>7.2f}")


if __name__ == "__main__":
    main()
