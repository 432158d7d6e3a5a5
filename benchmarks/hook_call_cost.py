"""Benchmark: what gemmscope's hook costs the program's thread per call, on any machine with torch
(a CPU build will do): a GEMM call (F.linear), an autograd Function's apply and an optimizer step,
each timed in a child process:

- bare: no hook;
- hook, outside a --steps window: the hook on PYTHONPATH with a window the run never reaches, as
  every step before and after `verify --steps A-B` runs (GEMM calls not recorded, steps marked);
- hook, recording: the hook as a whole-run verify runs it, every GEMM call recorded (a CPU GEMM
  launches no kernel, so the child counts it as one that does, as the hook's own tests do).

Tiny CPU operands, so that the call itself, not arithmetic, is what is timed. Each child times
ITERS calls of each kind ROUNDS times; the figures are the medians, per call, and the hook's
extra over bare. A step's cost outside a window is then CALLS × the extra per call: the figures
say whether a step of a given program can feel it (benchmarks/README.md).

    python benchmarks/hook_call_cost.py [--rounds 7] [--iters 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HOOK = Path(__file__).resolve().parent.parent / "gemmscope" / "autocast_hook"

_CHILD = """
import json, sys, time
import torch

iters, rounds, as_if_cuda = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
# A CPU torch has no NVTX (each call raises): a library with no profiler attached does nothing, as here.
nvtx = torch.cuda.nvtx
nvtx.range_push, nvtx.range_pop, nvtx.mark = lambda label: 0, lambda: 0, lambda label: None
if as_if_cuda:  # a CPU GEMM counted as one that launches a kernel: the hook records it
    sys.modules["gemmscope_torch_gemms"].launches_kernel = lambda tensor: True
x, w = torch.randn(2, 4), torch.randn(3, 4)
parameter = torch.nn.Parameter(torch.randn(4))
parameter.grad = torch.zeros(4)
optimizer = torch.optim.SGD([parameter], lr=0.0)

class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t

    @staticmethod
    def backward(ctx, g):
        return g

def linear():
    torch.nn.functional.linear(x, w)

def apply():
    Identity.apply(x)

def step():
    optimizer.step()

def per_call_us(call):
    for _ in range(iters // 10):
        call()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters * 1e6

figures = {name: [per_call_us(call) for _ in range(rounds)]
           for name, call in (("F.linear", linear), ("Function.apply", apply), ("optimizer.step", step))}
print(json.dumps(figures))
"""

# A window no run reaches: outside it the hook records no GEMM call, as before and after any window.
_NEVER = "100000000-100000001"


def run_child(env_extra: dict[str, str], iters: int, rounds: int, as_if_cuda: bool) -> dict[str, list[float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEMMSCOPE_")}
    env.update(env_extra)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(iters), str(rounds), "1" if as_if_cuda else "0"],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=20000)
    args = parser.parse_args()
    hook_path = os.pathsep.join(p for p in (str(HOOK), os.environ.get("PYTHONPATH")) if p)
    runs = {
        "bare": ({}, False),
        "hook, outside a --steps window": ({"PYTHONPATH": hook_path, "GEMMSCOPE_STEPS": _NEVER}, False),
        "hook, recording (whole-run verify)": ({"PYTHONPATH": hook_path}, True),
    }
    figures = {name: run_child(env, args.iters, args.rounds, as_if_cuda) for name, (env, as_if_cuda) in runs.items()}
    calls = list(figures["bare"])
    print(f"µs per call, median of {args.rounds} rounds of {args.iters} calls; in brackets: the hook's extra over bare")
    print(f"{'run':<36}" + "".join(f"{call:>24}" for call in calls))
    for name, by_call in figures.items():
        cells = []
        for call in calls:
            median = statistics.median(by_call[call])
            extra = median - statistics.median(figures["bare"][call])
            cells.append(f"{median:.2f}" + ("" if name == "bare" else f" [{extra:+.2f}]"))
        print(f"{name:<36}" + "".join(f"{cell:>24}" for cell in cells))


if __name__ == "__main__":
    main()
