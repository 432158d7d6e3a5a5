"""Benchmark aid: a training run's time step by step, bare and under `verify --steps A-B`, so that
what a window costs is read inside each run rather than from the wall time of whole runs (whose
start-up and step times move between identical runs by more than the window costs).

Run the program through it, unmodified (runpy), e.g. as steps_overhead.py's COMMAND under torchrun,
then summarise the folder:

    STEP_CLOCK_DIR=clocks python benchmarks/steps_overhead.py --steps 200-202 ... -- \\
        torchrun --standalone --nproc-per-node 1 benchmarks/step_clock.py fsdp.py --num-iters 400 ...
    python benchmarks/step_clock.py --summary clocks --steps 200-202

Each process writes at exit (into STEP_CLOCK_DIR) when each of its optimizer steps ended
(time.perf_counter in torch's global optimizer step post hook, registered after gemmscope's hook,
so a step holds what the hook did at its end) and, where the hook's torch.profiler window runs in
it, how long each of the window's calls held the program: torch.profiler's start, its step() at
each mark (the last stops Kineto and saves the trace), the hook's export and torch's JSON export in
it. The summary gives, per run in the order they ran: the program's start-up (to its first step),
the median step before and after the window, what steps A-5..B+4 took beyond the median of the 40
steps before them (in a bare run: the spread of 12 steps), and the window's calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

CLOCK_FOLDER = "STEP_CLOCK_DIR"
# Steps A-MARGIN_BEFORE..B+MARGIN_AFTER hold the window: it opens at the end of step A-2 and
# closes at the end of step B+1 (gemmscope_steps.on_first_mark).
MARGIN_BEFORE, MARGIN_AFTER = 5, 4
BASELINE_STEPS = 40


def run(script: str, args: list[str]) -> None:
    """Run `script` as __main__ with `args`, clocking its optimizer steps."""
    # torch loads gemmscope's hook, where it is on the path, and with it the hook's own step marks
    # first: a step's clock then holds what the hook did at its end
    from torch.optim.optimizer import register_optimizer_step_post_hook

    started = time.perf_counter()
    ends: list[float] = []
    calls: list[tuple[str, float, float]] = []
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: ends.append(time.perf_counter()))
    hooked = "gemmscope_records" in sys.modules
    if hooked and os.environ.get("GEMMSCOPE_TORCH_TRACE_FOLDER"):
        _time_window_calls(calls)

    def write() -> None:
        label = ("bare" if not hooked else "audit" if os.environ.get("GEMMSCOPE_AUDIT")
                 else "hook" if not os.environ.get("GEMMSCOPE_STEPS")
                 else "torch-steps" if os.environ.get("GEMMSCOPE_TORCH_TRACE_FOLDER") else "steps")
        folder = Path(os.environ.get(CLOCK_FOLDER, "."))
        record = {"label": label, "started": started, "ends": ends, "calls": calls}
        (folder / f"{time.time_ns()}-{label}-{os.getpid()}.json").write_text(json.dumps(record))

    import atexit

    atexit.register(write)
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).resolve().parent)
    import runpy

    runpy.run_path(script, run_name="__main__")


def _time_window_calls(calls: list[tuple[str, float, float]]) -> None:
    """Wrap the calls the hook's window makes (looked up when called) to time each."""
    import gemmscope_torch_profiler
    import torch.profiler

    def timed(name: str, call):
        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                calls.append((name, began, time.perf_counter() - began))
        return wrapper

    gemmscope_torch_profiler._export = timed("export", gemmscope_torch_profiler._export)
    for name in ("start", "step", "export_chrome_trace"):
        setattr(torch.profiler.profile, name, timed(name, getattr(torch.profiler.profile, name)))


def summary(record: dict, first: int, last: int) -> dict:
    """One run's figures (seconds): see the module's docstring."""
    ends = record["ends"]
    durations = {k: ends[k] - ends[k - 1] for k in range(1, len(ends))}
    window = [durations[k] for k in range(first - MARGIN_BEFORE, last + MARGIN_AFTER + 1) if k in durations]
    start = first - MARGIN_BEFORE
    baseline = [durations[k] for k in range(max(1, start - BASELINE_STEPS), start) if k in durations]
    if len(window) < MARGIN_BEFORE + MARGIN_AFTER + last - first + 1 or not baseline:
        raise SystemExit(f"{record['label']}: {len(ends)} steps clocked, too few around steps {first}-{last}")
    step = statistics.median(baseline)
    after = [durations[k] for k in durations if k > last + MARGIN_AFTER]
    calls = record["calls"]
    steps = [seconds for name, _, seconds in calls if name == "step"]
    return {"start_up": ends[0] - record["started"],
            "before": statistics.median(durations[k] for k in durations if k >= 20 and k < start),
            "after": statistics.median(after) if after else float("nan"),
            "window_extra": sum(window) - len(window) * step, "longest_extra": max(window) - step,
            "start": sum(seconds for name, _, seconds in calls if name == "start"),
            "last_step": max(steps, default=0.0),
            "export": sum(seconds for name, _, seconds in calls if name == "export"),
            "json": sum(seconds for name, _, seconds in calls if name == "export_chrome_trace")}


def audit_summary(record: dict, every: int, window: int, first: int = 10) -> dict:
    """An audited (or bare) run's figures: per window of `verify --every`, what its steps and
    margins took beyond the median of the steps before it, and the median step after it against
    before it; the whole audit's share of the run (the windows' extra over the run's time)."""
    ends = record["ends"]
    durations = [ends[k] - ends[k - 1] for k in range(1, len(ends))]  # durations[k-1]: step k
    extras, paces = [], []
    start = first
    while start + window + MARGIN_AFTER < len(ends):
        lo, hi = start - MARGIN_BEFORE, start + window - 1 + MARGIN_AFTER
        before = durations[max(0, lo - 1 - BASELINE_STEPS):lo - 1]
        after = durations[hi:hi + BASELINE_STEPS]
        if before and after:
            step = statistics.median(before)
            extras.append(sum(durations[lo - 1:hi]) - (hi - lo + 1) * step)
            paces.append(statistics.median(after) / step)
        start += every
    run_s = ends[-1] - record["started"]
    return {"windows": len(extras), "extra_s": extras, "after_over_before": paces, "run_s": run_s,
            "audit_share": sum(extras) / run_s if run_s else float("nan"),
            "step_ms": statistics.median(durations) * 1e3 if durations else float("nan")}


def main() -> None:
    if sys.argv[1:2] != ["--summary"]:
        if len(sys.argv) < 2:
            raise SystemExit("usage: step_clock.py SCRIPT [ARGS...] | --summary FOLDER --steps A-B")
        run(sys.argv[1], sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", required=True, type=Path, help="the folder STEP_CLOCK_DIR named")
    parser.add_argument("--steps", help="A-B: the steps verify collected")
    parser.add_argument("--every", type=int, help="with --window: an audit's windows (verify --every)")
    parser.add_argument("--window", type=int, default=3)
    args = parser.parse_args()
    if args.every:
        print(f"{'run':8} {'run s':>7} {'step ms':>8} {'windows':>7} {'audit share':>11} {'window +s (each)':>30} "
              f"{'after/before (each)':>30}")
        for path in sorted(args.summary.glob("*.json")):
            record = json.loads(path.read_text())
            a = audit_summary(record, args.every, args.window)
            print(f"{record['label']:8} {a['run_s']:7.1f} {a['step_ms']:8.2f} {a['windows']:7} "
                  f"{100 * a['audit_share']:10.2f}% {' '.join(f'{x:.2f}' for x in a['extra_s']):>30} "
                  f"{' '.join(f'{x:.3f}' for x in a['after_over_before']):>30}")
        return
    if not args.steps:
        raise SystemExit("give --steps A-B, or --every N [--window W]")
    first, last = (int(n) for n in args.steps.split("-"))
    print(f"{'run':12} {'start-up s':>10} {'step before ms':>14} {'after ms':>9} {'window +s':>9} "
          f"{'longest +s':>10} | {'start ms':>8} {'last step() ms':>14} {'export ms':>9} {'of it JSON ms':>13}")
    for path in sorted(args.summary.glob("*.json")):  # named by when each process ended
        record = json.loads(path.read_text())
        s = summary(record, first, last)
        calls = (f" | {s['start'] * 1e3:8.1f} {s['last_step'] * 1e3:14.1f} {s['export'] * 1e3:9.1f} "
                 f"{s['json'] * 1e3:13.1f}" if record["calls"] else "")
        print(f"{record['label']:12} {s['start_up']:10.1f} {s['before'] * 1e3:14.1f} {s['after'] * 1e3:9.1f} "
              f"{s['window_extra']:9.2f} {s['longest_extra']:10.2f}{calls}")


if __name__ == "__main__":
    main()
