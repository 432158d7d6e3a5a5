"""Benchmark: gemmscope's kernel-only GEMM time (from the nsys trace) against a bare PyTorch loop
timed with CUDA events in the same process, for a few shapes in BF16 and FP8. Needs a GPU, TE
and nsys. Prints one row per shape and precision; the two should agree within a few percent.

    python benchmarks/kernel_time_vs_bare_loop.py [--iters 100]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (15872, 4096, 12288), (15872, 16384, 4096))
PRECISIONS = ("bf16", "fp8-current")
BARE_PREFIX = "bare|"


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
    """Runs under nsys: gemmscope's prequantized fprop entries, then the bare loops."""
    import torch

    from gemmscope.workload import PLAN_PREFIX, Entry, run_entry, warm_up_gpu

    gemms = [{"op": f"shape{i}", "pass": "fprop", "m": m, "k": k, "n": n, "count": 1}
             for i, (m, k, n) in enumerate(SHAPES)]
    torch.cuda.nvtx.mark(PLAN_PREFIX + json.dumps({"model": "bench", "num_layers": 1, "gemms": gemms}))
    warm_up_gpu(3.0)
    # the bare loop runs before and after gemmscope's entry: its mean cancels clock drift
    for g in gemms:
        for precision in PRECISIONS:
            for when in ("before", "after"):
                label = f"{BARE_PREFIX}op={g['op']}|precision={precision}|{when}"
                ms = bare_loop_ms(precision, g["m"], g["k"], g["n"], iters, warmup=10, label=label)
                torch.cuda.nvtx.mark(f"{label}|ms={ms}")
                if when == "before":
                    run_entry(Entry(g["op"], "fprop", g["m"], g["k"], g["n"], precision, "prequant", iters),
                              warmup=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args.iters)
        return

    from gemmscope import nsys_runner
    from gemmscope.profile import analyze_run
    from gemmscope.trace_parser import launches, read_trace

    report = Path(tempfile.mkdtemp(prefix="gemmscope-bench-")) / "bench.nsys-rep"
    done = nsys_runner.profile([sys.executable, __file__, "--inner", "--iters", str(args.iters)], report)
    if done.returncode != 0:
        sys.exit(f"benchmark workload failed (exit {done.returncode})")
    trace = read_trace(nsys_runner.export_sqlite(report))
    run = analyze_run(trace)
    bare_ms: dict[str, list[float]] = {}
    for name in trace.nvtx.loc[trace.nvtx["kind"] == "mark", "name"].dropna():
        if name.startswith(BARE_PREFIX):
            label, _, ms = name.rpartition("|ms=")
            bare_ms.setdefault(label.rsplit("|", 1)[0], []).append(float(ms))
    # which GEMM kernel each bare loop ran, and its kernel time, from the same trace
    k = launches(trace)
    k = k[k["role"] == "gemm"]
    bare_kernel: dict[str, str] = {}
    bare_kernel_ns: dict[str, list[int]] = {}
    for names, kernel, ns in zip(k["ranges"], k["name"], k["duration_ns"]):
        for label in names:
            if label.startswith(BARE_PREFIX):
                label = label.rsplit("|", 1)[0]
                bare_kernel[label] = kernel
                bare_kernel_ns.setdefault(label, []).append(ns)
    print(f"{run.device['name']}: gemmscope kernel-only time from the trace vs a bare torch loop timed with "
          f"CUDA events in the same process, {args.iters} iterations each (means)")
    print("  gemmscope ms: the TE GEMM's kernel time from the trace; bare ms: the bare loop's CUDA-event"
          " time (mean of a run before and one after); bare kernel ms: the bare loop's kernels in the trace")
    print(f"{'shape (MxKxN)':>20} {'precision':>12} {'gemmscope ms':>13} {'bare ms':>9} {'ratio':>6} "
          f"{'bare kernel ms':>15} {'ratio':>6}  same kernel")
    for row in run.gemms.itertuples():
        label = f"{BARE_PREFIX}op={row.op}|precision={row.precision}"
        ms = sum(bare_ms[label]) / len(bare_ms[label])
        kernel_ms = sum(bare_kernel_ns[label]) / len(bare_kernel_ns[label]) / 1e6
        same = "yes" if bare_kernel.get(label) == row.kernel else f"no ({bare_kernel.get(label)})"
        print(f"{f'{row.m}x{row.k}x{row.n}':>20} {row.precision:>12} {row.kernel_ms:>13.4f} {ms:>9.4f} "
              f"{row.kernel_ms / ms:>6.3f} {kernel_ms:>15.4f} {kernel_ms / ms:>6.3f}  {same}")


if __name__ == "__main__":
    main()
