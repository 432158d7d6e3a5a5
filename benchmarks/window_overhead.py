"""Benchmark: what checking a long run through a capture window costs. `gemmscope verify --delay D
--duration S -- COMMAND` must bound what nsys collects, never the run: COMMAND runs to its own end
(gemmscope times the window itself: nsys profile's own --duration ends the session, and processes
the program starts later fail) and the whole check should cost at most 1.05x COMMAND's bare wall
time.

Runs COMMAND bare WARMUP times first, not counted (the first run on a fresh machine pays for cold
file and kernel caches), then bare and under `gemmscope verify --delay D --duration S --expect
RECIPE`, ROUNDS times each (the order rotated every round), on the same machine; with --parts also
under nsys alone in the ways named (PARTS), so that what nsys, each of its flags, TE's ranges and
gemmscope's hook add can be told apart. Prints each run's wall time (until the program itself
ended: it holds stderr) and exit status (for verify, when each of its stages began), the medians
and their ratio to bare, and the exit statuses (a run cut short by the window would not end with
COMMAND's own).

Needs a GPU for a real training command, e.g. TE's FSDP example for 400 iterations
(tests/fixtures/gpu/corpus/commands.txt):

    python benchmarks/window_overhead.py --delay 40 --duration 8 --expect fp8-delayed -- \\
        torchrun --standalone --nproc-per-node 1 fsdp.py --num-iters 400 ...
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

_NSYS_ALONE = """import sys
from gemmscope.profilers import nsys_runner
report, delay_s, duration_s, memory_usage, *command = sys.argv[1:]
sys.exit(nsys_runner.profile(command, report, delay_s=float(delay_s), duration_s=float(duration_s),
                             memory_usage=memory_usage == "memory").returncode)
"""
# A delay no run outlasts: nsys is in the program's processes with its flags, and never collects.
_NEVER_S = 10**6
# --parts: the command under nsys alone (without gemmscope's hook), as verify runs it unless said
PARTS = {
    "nsys": "verify's flags and window",
    "nsys+memory": "and GPU memory events (--cuda-memory-usage, which verify recorded before 2026-11-26)",
    "nsys+TE": "and TE's NVTX ranges (NVTE_NVTX_ENABLED=1, as verify sets it)",
    "nsys-armed": "verify's flags, the window never opened: what nsys costs in the processes alone",
}


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, int, list[str], str]:
    """Wall seconds, exit status, when each of verify's stage lines came (seconds from start), and
    everything the run printed (a bare program prints on stdout; under verify its output is relayed
    to stderr)."""
    started = time.perf_counter()
    stages, printed = [], []
    with tempfile.TemporaryFile("w+", errors="replace") as stdout, \
            subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, text=True, errors="replace",
                             env=env) as process:
        for line in process.stderr:
            printed.append(line)
            if line.startswith("gemmscope: ["):
                stages.append(f"{time.perf_counter() - started:.1f} s {line.split(']')[0].split('[')[1]}")
        process.wait()
        wall_s = time.perf_counter() - started
        stdout.seek(0)
        printed.append(stdout.read())
    return wall_s, process.returncode, stages, "".join(printed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, required=True, help="seconds before collecting starts")
    parser.add_argument("--duration", type=float, required=True, help="seconds collected")
    parser.add_argument("--expect", default="bf16", help="recipe verify checks against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="bare runs first, not counted")
    parser.add_argument("--parts", type=lambda text: text.split(","), default=[],
                        help="comma-separated: also run COMMAND under nsys alone, " +
                             "; ".join(f"{name}: {what}" for name, what in PARTS.items()))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if set(args.parts) - set(PARTS):
        parser.error(f"--parts: choose from {', '.join(PARTS)}")
    with tempfile.TemporaryDirectory(prefix="window-overhead-") as out:
        # kind: (argv, environment); verify's own run last in each round's order
        runs = {"bare": (command, None)}
        for part in args.parts:
            delay_s = _NEVER_S if part == "nsys-armed" else args.delay
            under_nsys = [sys.executable, "-c", _NSYS_ALONE, f"{out}/{part}.nsys-rep", f"{delay_s:g}",
                          f"{args.duration:g}", "memory" if part == "nsys+memory" else "-", *command]
            runs[part] = (under_nsys, {**os.environ, "NVTE_NVTX_ENABLED": "1"} if part == "nsys+TE" else None)
        runs["verify"] = ([sys.executable, "-c", "from gemmscope.cli import main; main()", "verify",
                           "--delay", f"{args.delay:g}", "--duration", f"{args.duration:g}", "--expect",
                           args.expect, "--format", "json", "--out", out, "--", *command], None)
        # verify exits 0/1 on the program's success and 3 on its failure: a run the window cut short is 3
        compare(runs, command, args.rounds, args.warmup, target={"verify": 1.05})


def compare(runs: dict[str, tuple[list[str], dict | None]], command: list[str], rounds: int, warmup: int,
            target: dict[str, float], timer=timed) -> dict[str, list[float]]:
    """Each run of `runs` (kind: argv, environment; "bare" among them) ROUNDS times, the order
    rotated every round, after WARMUP bare runs not counted, each timed by `timer` (timed's
    signature); prints each run and the medians against bare; the wall times per kind."""
    walls: dict[str, list[float]] = {kind: [] for kind in runs}
    statuses: dict[str, set[int]] = {kind: set() for kind in runs}
    for _ in range(warmup):
        wall_s, status, *_ = timed(command)
        print(f"warm-up  bare        {wall_s:8.1f} s  exit {status} (not counted)", flush=True)
    for round_ in range(rounds):
        kinds = list(runs)
        for kind in kinds[round_ % len(kinds):] + kinds[:round_ % len(kinds)]:  # the order rotated
            wall_s, status, stages, _ = timer(*runs[kind])
            walls[kind].append(wall_s)
            statuses[kind].add(status)
            print(f"round {round_ + 1} {kind:11s} {wall_s:8.1f} s  exit {status}"
                  f"{'  (stages began at ' + ', '.join(stages) + ')' if stages else ''}", flush=True)
    bare = statistics.median(walls["bare"])
    for kind, seconds in walls.items():
        spread = f"{min(seconds):.1f}-{max(seconds):.1f} s"
        print(f"median {kind:11s} {statistics.median(seconds):6.1f} s ({spread}): "
              f"{statistics.median(seconds) / bare:.3f}x bare"
              f"{f' (target <= {target[kind]}x)' if kind in target else ''}{paired(seconds, walls['bare'])}; "
              f"exit statuses {sorted(statuses[kind])}")
    return walls


def paired(figures: list[float], bare: list[float]) -> str:
    """Each round's figure against the same round's bare one (a slow spell of the machine falls on
    both): their median and range, said beside the medians' ratio."""
    if figures is bare or len(figures) != len(bare) or not figures:
        return ""
    ratios = [f / b for f, b in zip(figures, bare)]
    return f" (paired by round: {statistics.median(ratios):.3f}x, {min(ratios):.3f}-{max(ratios):.3f})"

if __name__ == "__main__":
    main()
