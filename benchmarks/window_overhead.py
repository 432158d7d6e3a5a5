"""Benchmark: what checking a long run through a capture window costs. `gemmscope verify --delay D
--duration S -- COMMAND` must bound what nsys collects, never the run: COMMAND runs to its own end
(nsys is told `--kill=none`, where its default ends the program with SIGTERM at the window's end)
and the whole check should cost at most 1.05x COMMAND's bare wall time.

Runs COMMAND bare WARMUP times first, not counted (the first run on a fresh machine pays for cold
file and kernel caches), then bare and under `gemmscope verify --delay D --duration S --expect
RECIPE`, alternating, ROUNDS times each (the order swapped every round), on the same machine;
prints each run's wall time and exit status (for verify, when each of its stages began), the
medians and their ratio, and whether every checked run ended with COMMAND's own status (a run cut
short by the window would not). Needs a GPU for a real training
command, e.g. TE's FSDP example for 400 iterations (tests/fixtures/gpu/corpus/commands.txt):

    python benchmarks/window_overhead.py --delay 40 --duration 8 --expect fp8-delayed -- \\
        torchrun --standalone --nproc-per-node 1 fsdp.py --num-iters 400 ...
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def timed(command: list[str]) -> tuple[float, int, list[str]]:
    """Wall seconds, exit status, and when each of verify's stage lines came (seconds from start)."""
    started = time.perf_counter()
    stages = []
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          errors="replace") as process:
        for line in process.stderr:
            if line.startswith("gemmscope: ["):
                stages.append(f"{time.perf_counter() - started:.1f} s {line.split(']')[0].split('[')[1]}")
    return time.perf_counter() - started, process.returncode, stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, required=True, help="seconds before collecting starts")
    parser.add_argument("--duration", type=float, required=True, help="seconds collected")
    parser.add_argument("--expect", default="bf16", help="recipe verify checks against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="bare runs first, not counted")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    bare_s, checked_s, bare_status, checked_status = [], [], set(), set()
    with tempfile.TemporaryDirectory(prefix="window-overhead-") as out:
        checked = [sys.executable, "-c", "from gemmscope.cli import main; main()", "verify",
                   "--delay", f"{args.delay:g}", "--duration", f"{args.duration:g}", "--expect", args.expect,
                   "--format", "json", "--out", out, "--", *command]
        for _ in range(args.warmup):
            wall_s, status, _ = timed(command)
            print(f"warm-up  bare     {wall_s:8.1f} s  exit {status} (not counted)", flush=True)
        for round_ in range(args.rounds):
            order = [("bare", command), ("checked", checked)]
            for kind, argv in order if round_ % 2 == 0 else order[::-1]:
                wall_s, status, stages = timed(argv)
                (bare_s if kind == "bare" else checked_s).append(wall_s)
                (bare_status if kind == "bare" else checked_status).add(status)
                print(f"round {round_ + 1} {kind:8s} {wall_s:8.1f} s  exit {status}"
                      f"{'  (stages began at ' + ', '.join(stages) + ')' if stages else ''}", flush=True)
    ratio = statistics.median(checked_s) / statistics.median(bare_s)
    print(f"median bare {statistics.median(bare_s):.1f} s, checked {statistics.median(checked_s):.1f} s: "
          f"{ratio:.3f}x (target <= 1.05x)")
    # verify exits 0/1 on the program's success and 3 on its failure: a run the window cut short is 3
    print(f"bare exit statuses {sorted(bare_status)}, verify's {sorted(checked_status)}")


if __name__ == "__main__":
    main()
