"""How long sharing a long trace takes: `gemmscope scrub` and `gemmscope bundle` next to `gemmscope
verify --trace` (read and check alone) on the same trace, and `analyze` in the formats a person
pastes, redacted (the default) and with --no-redact. Each command runs in its own process, as a
user runs it, the commands taking turns round by round (a machine busy for a while slows them
all alike); medians of the rounds, wall time and CPU time (user + system, the process and its
children). CPU only:

    python benchmarks/share_speed.py                      # the 63 k-kernel corpus trace, 5 rounds
    python benchmarks/share_speed.py --rounds 3 --trace PATH.sqlite.xz
    PYTHONPATH=OTHER_CHECKOUT python benchmarks/share_speed.py --without-no-redact  # one before --no-redact
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "fixtures" / "gpu" / "corpus" / "fsdp_8x100_fp8_1gpu.sqlite.xz"

# label -> gemmscope's arguments (TRACE: the trace; OUT: a new file in a fresh folder)
COMMANDS = {
    "verify --trace": ["verify", "--trace", "TRACE"],
    "scrub": ["scrub", "TRACE", "-o", "OUT/shared.sqlite.xz"],
    "bundle": ["bundle", "TRACE", "-o", "OUT/issue.zip"],
    "analyze": ["analyze", "TRACE"],
    "analyze --no-redact": ["analyze", "TRACE", "--no-redact"],
    "analyze --format csv": ["analyze", "TRACE", "--format", "csv"],
    "analyze --format csv --no-redact": ["analyze", "TRACE", "--format", "csv", "--no-redact"],
    "analyze --format json": ["analyze", "TRACE", "--format", "json"],
    "analyze --format json --no-redact": ["analyze", "TRACE", "--format", "json", "--no-redact"],
}


def timed(arguments: list[str], trace: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `gemmscope ARGUMENTS` (exit 0 or 1: a run's mismatches)."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "gemmscope",
                   *(a.replace("TRACE", str(trace)).replace("OUT", out) for a in arguments)]
        # run outside any checkout, so that PYTHONPATH says which gemmscope runs (this one's by default)
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT)}
        before = os.times()
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=out, env=env)
        wall = time.perf_counter() - started
        after = os.times()
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(arguments)} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--without-no-redact", action="store_true",
                        help="leave out the --no-redact runs (a gemmscope that has no such option)")
    args = parser.parse_args()
    commands = {label: arguments for label, arguments in COMMANDS.items()
                if not (args.without_no_redact and "--no-redact" in arguments)}
    walls: dict[str, list[float]] = {label: [] for label in commands}
    cpus: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(args.rounds):
        for label, arguments in commands.items():
            wall, cpu = timed(arguments, args.trace)
            walls[label].append(wall)
            cpus[label].append(cpu)
    verify = statistics.median(walls["verify --trace"])
    print(f"{args.trace.name}, {args.rounds} rounds, medians")
    print("| command | wall s | CPU s | wall / verify's |")
    print("|---|---|---|---|")
    for label in commands:
        wall = statistics.median(walls[label])
        print(f"| {label} | {wall:.2f} | {statistics.median(cpus[label]):.2f} | {wall / verify:.2f} |")


if __name__ == "__main__":
    main()
