"""Benchmark: gemmscope's kernel-only GEMM time (from the nsys trace) against a bare PyTorch loop
timed with CUDA events in the same process, for the CodonFM-5B fprop shapes and 8192³ in BF16 and
FP8. Needs a GPU, TE and nsys. Prints one row per shape and precision; the two should agree
within a few percent.

    python benchmarks/kernel_time_vs_bare_loop.py [--iters 100]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

# (M, K, N): CodonFM-5B's fprop GEMMs at micro-batch 31 x seq 512 (qkv, attn_out, mlp_up,
# mlp_down), and a square one. Each loop takes 0.4 ms or more per GEMM: below ~0.2 ms, the gaps
# between launches under nsys (~5 us) make a CUDA-event-timed loop read slower than its kernels.
SHAPES = ((15872, 4096, 12288), (15872, 4096, 4096), (15872, 4096, 16384), (15872, 16384, 4096),
          (8192, 8192, 8192))
PRECISIONS = ("bf16", "fp8-current")
# gemmscope's entry and the bare loop alternate, their order swapped each round (A B, B A, ...),
# and each loop starts after the same sustained warm-up, so both run at the clocks the GPU holds
# under load (a 700 W part slows down within a second of full load): medians over rounds.
ROUNDS = 9
WARM_UP_S = 0.5
BARE_PREFIX = "bare|"
# TE gives cuBLASLt a 32 MiB workspace on Hopper; torch's default is smaller, and at 8192³ FP8
# cuBLAS then picks another kernel for torch._scaled_mm than for TE. In KiB.
CUBLASLT_WORKSPACE_KIB = "32768"


def bare_loop_ms(precision: str, m: int, k: int, n: int, iters: int, warmup: int, label: str) -> float:
    """Mean per-iteration time of a torch.matmul / torch._scaled_mm loop, one CUDA-event pair
    around it (as TE's benchmark times), computing X·Wᵀ as TE's fprop does: W stored out×in, so
    its transpose is column-major as cuBLAS FP8 wants; FP8 operands scaled to the E4M3 range per
    tensor, as current scaling does (the same data a TE GEMM sees), with fast accumulation, as
    TE asks for in fprop. The loop runs inside NVTX range `label`."""
    import torch

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if precision == "bf16":
        def step():
            return x @ w.t()
    else:
        fp8_max = torch.finfo(torch.float8_e4m3fn).max
        x_scale = fp8_max / x.abs().max().float()
        w_scale = fp8_max / w.abs().max().float()
        x8 = (x.float() * x_scale).to(torch.float8_e4m3fn)
        w8 = (w.float() * w_scale).to(torch.float8_e4m3fn)
        x_inv, w_inv = 1 / x_scale, 1 / w_scale

        def step():
            return torch._scaled_mm(x8, w8.t(), x_inv, w_inv, out_dtype=torch.bfloat16, use_fast_accum=True)
    for _ in range(warmup):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(label)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def inner(iters: int) -> None:
    """Runs under nsys: gemmscope's prequantized fprop entries and the bare loops, alternating."""
    import torch

    from gemmscope.plan.workload import PLAN_PREFIX, Entry, run_entry, warm_up_gpu

    gemms = [{"op": f"shape{i}.round{r}", "pass": "fprop", "m": m, "k": k, "n": n, "count": 1}
             for r in range(ROUNDS) for i, (m, k, n) in enumerate(SHAPES)]
    torch.cuda.nvtx.mark(PLAN_PREFIX + json.dumps({"model": "bench", "num_layers": 1, "gemms": gemms}))
    warm_up_gpu(3.0)
    for index, g in enumerate(gemms):
        swapped = index // len(SHAPES) % 2 == 1
        for precision in PRECISIONS:
            label = f"{BARE_PREFIX}op={g['op']}|precision={precision}"

            def ours():
                run_entry(Entry(g["op"], "fprop", g["m"], g["k"], g["n"], precision, "prequant", iters), warmup=10)

            def bare():
                ms = bare_loop_ms(precision, g["m"], g["k"], g["n"], iters, warmup=10, label=label)
                torch.cuda.nvtx.mark(f"{label}|ms={ms}")

            for loop in (bare, ours) if swapped else (ours, bare):
                warm_up_gpu(WARM_UP_S)
                loop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args.iters)
        return

    import numpy as np

    from gemmscope.assembly.attribution import launches_with_ranges
    from gemmscope.plan.profile_run import analyze_run
    from gemmscope.profilers import nsys_runner
    from gemmscope.traces.read import read_trace

    report = Path(tempfile.mkdtemp(prefix="gemmscope-bench-")) / "bench.nsys-rep"
    env = dict(os.environ, CUBLASLT_WORKSPACE_SIZE=CUBLASLT_WORKSPACE_KIB)
    done = nsys_runner.profile([sys.executable, __file__, "--inner", "--iters", str(args.iters)], report, env)
    if done.returncode != 0:
        sys.exit(f"benchmark workload failed (exit {done.returncode})")
    trace = read_trace(nsys_runner.export_sqlite(report))
    run = analyze_run(trace)
    bare_ms = {}
    for name in trace.nvtx.loc[trace.nvtx["kind"] == "mark", "name"].dropna():
        if name.startswith(BARE_PREFIX):
            label, _, ms = name.rpartition("|ms=")
            bare_ms[label] = float(ms)
    # each bare loop's GEMM kernel and kernel time, from the same trace
    k, ranges = launches_with_ranges(trace)
    k["bare"] = ranges.innermost_matching([glob.escape(BARE_PREFIX) + "*"], np.arange(len(k)))  # loops do not nest
    k = k[(k["role"] == "gemm") & k["bare"].notna()]
    bare_kernel, bare_kernel_ns = {}, {}
    for label, kernel, ns in zip(k["bare"], k["name"], k["duration_ns"]):
        bare_kernel[label] = kernel
        bare_kernel_ns.setdefault(label, []).append(ns)
    rows = []
    for row in run.gemms.itertuples():
        label = f"{BARE_PREFIX}op={row.op}|precision={row.precision}"
        rows.append({"shape": f"{row.m}x{row.k}x{row.n}", "precision": row.precision,
                     "gemmscope": row.kernel_ms, "bare": bare_ms[label],
                     "bare_kernel": statistics.fmean(bare_kernel_ns[label]) / 1e6,
                     "same": bare_kernel[label] == row.kernel})
    print(f"{run.device['name']}: {args.iters} iterations per loop, {ROUNDS} rounds alternating; medians over rounds")
    print("  gemmscope ms: TE's GEMM, kernel time from the trace; bare ms: a bare torch loop, CUDA events;"
          " ratio IQR: of the per-round ratios; bare kernel ms: the bare loop's kernels in the trace")
    print(f"{'shape (MxKxN)':>20} {'precision':>12} {'gemmscope ms':>13} {'bare ms':>9} {'ratio':>6} {'IQR':>6} "
          f"{'bare kernel ms':>15} {'ratio':>6}  same kernel")
    grouped: dict[tuple, list] = {}
    for r in rows:
        grouped.setdefault((r["shape"], r["precision"]), []).append(r)
    for (shape, precision), group in grouped.items():
        ours, bare, bare_kernel_ms = (statistics.median(r[c] for r in group) for c in ("gemmscope", "bare", "bare_kernel"))
        q1, _, q3 = statistics.quantiles([r["gemmscope"] / r["bare"] for r in group], n=4)
        same = f"{sum(r['same'] for r in group)}/{len(group)} rounds"
        print(f"{shape:>20} {precision:>12} {ours:>13.4f} {bare:>9.4f} {ours / bare:>6.3f} {q3 - q1:>6.3f} "
              f"{bare_kernel_ms:>15.4f} {bare_kernel_ms / bare:>6.3f}  {same}")


if __name__ == "__main__":
    main()
