"""Benchmark: how long a torch.profiler window's end holds the program's thread. Under `verify
--profiler torch --steps A-B` the hook stops torch.profiler at the first optimizer step after B and
writes the trace there, in the program (gemmscope_torch_profiler._export): the job waits for it once.
This times the same calls on a loop of small operator calls (CUDA where there is a GPU, else CPU):
torch.profiler recording STEPS steps of OPS calls each with operator shapes, as the hook records,
then Kineto's stop (its own processing of what it recorded) and the hook's export (the trace's
JSON, then gzipped), each on its own, ROUNDS times; medians, and the trace's events and size.

    python benchmarks/window_close.py [--ops 3000] [--steps 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gemmscope" / "autocast_hook"))


def one_window(torch, ops: int, steps: int, folder: str) -> dict[str, float]:
    from gemmscope_torch_profiler import _export, _started

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, w = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    profiler = _started(torch)
    for _ in range(steps):
        for _ in range(ops):
            torch.nn.functional.linear(x, w)
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    profiler.stop()
    stopped = time.perf_counter()
    _export(profiler, folder)
    exported = time.perf_counter()
    [trace] = Path(folder).glob("trace.*.json.gz")
    with gzip.open(trace, "rt") as text:
        events = len(json.load(text)["traceEvents"])
    size = trace.stat().st_size
    trace.unlink()
    return {"stop_s": stopped - started, "export_s": exported - stopped, "events": events, "gzipped_mb": size / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=3000, help="operator calls a step")
    parser.add_argument("--steps", type=int, default=4, help="steps the window records")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as folder:
        rounds = [one_window(torch, args.ops, args.steps, folder) for _ in range(args.rounds)]
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"torch {torch.__version__} on {device}; a window of {args.steps} steps of {args.ops} calls, "
          f"{args.rounds} rounds, medians:")
    for key, unit, digits in (("stop_s", "s: Kineto's stop", 3), ("export_s", "s: the hook's export (JSON, gzipped)", 3),
                              ("events", "trace events", 0), ("gzipped_mb", "MB gzipped", 2)):
        figures = [r[key] for r in rounds]
        print(f"  {statistics.median(figures):10.{digits}f} {unit} ({min(figures):.{digits}f}-{max(figures):.{digits}f})")
    total = statistics.median(r["stop_s"] + r["export_s"] for r in rounds)
    print(f"  {total:10.3f} s the program's thread waits at the window's end")


if __name__ == "__main__":
    main()
