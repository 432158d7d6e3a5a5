"""Benchmark: gemmscope's torch.profiler (Kineto) reader next to Holistic Trace Analysis's parser
(`TraceAnalysis(trace_dir=...)`) on the same file. CPU only.

The seed is a real Kineto trace (default: tests/fixtures/kineto/hta_v100_train_rank0.json.gz, a
V100 training trace from HTA's own test data). A larger trace is the seed grown `--grow` times:
its events repeated one copy after the other on the timeline, correlation and External ids
offset per copy so that kernels still join one to one; the head (devices, rank) stays once. Its
head says so (`gemmscope_replicas`), so nobody takes it for a capture.

Each tool reads the file `--rounds` times, each time in a fresh process (the two alternating),
and the script prints per tool the median and interquartile range of the wall seconds and of
the peak resident memory (ru_maxrss), and the kernels each found (they must agree).

    pip install 'gemmscope[benchmark]'     # HolisticTraceAnalysis
    python benchmarks/kineto_vs_hta.py [--seed PATH] [--grow 1,20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SEED = REPO / "tests" / "fixtures" / "kineto" / "hta_v100_train_rank0.json.gz"

# Each reader in a process of its own: prints {"seconds", "kernels", "max_rss_mib"} as JSON.
GEMMSCOPE = """
import json, resource, sys, time
t = time.perf_counter()
from gemmscope.traces.read import read_trace
trace = read_trace(sys.argv[1])
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "kernels": len(trace.kernels),
                  "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
HTA = """
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
seconds = time.perf_counter() - t
frame = analysis.t.get_trace(next(iter(analysis.t.traces)))
kernel = analysis.t.symbol_table.sym_index.get("kernel")
kernels = int((frame["cat"] == kernel).sum()) if kernel is not None else None
print(json.dumps({"seconds": seconds, "kernels": kernels,
                  "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def grown(seed: Path, factor: int, out: Path) -> Path:
    """The seed's events `factor` times, one copy after the other (see the module docstring)."""
    with gzip.open(seed, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    timed = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(timed) - min(timed) + 1000.0
    ids = [v for e in events for k, v in (e.get("args") or {}).items()
           if k in ("correlation", "External id") and isinstance(v, int)]
    id_step = max(ids, default=0) + 1
    copies = []
    for copy in range(factor):
        for event in events:
            if copy and event.get("ph") == "M":
                continue  # process and thread names once
            event = dict(event)
            if copy and isinstance(event.get("ts"), (int, float)):
                event["ts"] = event["ts"] + copy * span
            args = event.get("args")
            if copy and args:
                event["args"] = {k: v + copy * id_step if k in ("correlation", "External id") and isinstance(v, int)
                                 else v for k, v in args.items()}
            copies.append(event)
    doc = dict(doc, traceEvents=copies, gemmscope_replicas=factor)
    path = out / f"grown{factor}" / "rank0.json.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def run(script: str, argument: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", script, str(argument)], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"benchmark run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(values: list[float]) -> str:
    """median [IQR low – high]"""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return f"{median:8.2f} [{q1:.2f}–{q3:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=Path, default=DEFAULT_SEED)
    parser.add_argument("--grow", default="1,20", help="comma-separated factors")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for factor in map(int, options.grow.split(",")):
            path = grown(options.seed, factor, Path(scratch))
            raw = sum(len(chunk) for chunk in iter(lambda f=gzip.open(path, "rb"): f.read(1 << 24), b""))
            results = {"gemmscope": [], "HTA": []}
            for _ in range(options.rounds):
                results["gemmscope"].append(run(GEMMSCOPE, path))
                results["HTA"].append(run(HTA, path.parent))
            print(f"\n{options.seed.name} × {factor}: {path.stat().st_size / 2**20:.1f} MiB gzip, "
                  f"{raw / 2**20:.1f} MiB JSON; {options.rounds} runs each, median [IQR]")
            print(f"{'reader':10} {'seconds':>24} {'peak RSS MiB':>28} {'kernels':>8}")
            for name, runs in results.items():
                print(f"{name:10} {summary([r['seconds'] for r in runs]):>24} "
                      f"{summary([r['max_rss_mib'] for r in runs]):>28} {runs[0]['kernels']!s:>8}")


if __name__ == "__main__":
    main()
