"""Benchmark: what checking a few training steps of a long run costs. `gemmscope verify --steps
A-B -- COMMAND` collects those steps alone (the hook marks optimizer steps and opens the capture
around them), with torch.profiler (target: <= 1.03x COMMAND's bare wall time, the trace written and
checked within 5 s of the program's end) or with nsys (target: no more than nsys merely armed in
the processes costs); the hook alone should cost <= 2 % of a step.

Runs, alternating, ROUNDS times after WARMUP bare runs (window_overhead.compare): COMMAND bare;
with gemmscope's hook alone (on PYTHONPATH, TE's ranges on, no profiler); hook-steps, the hook as
`verify --profiler torch --steps A-B` runs it but with no profiler (GEMMs recorded in the window alone); `verify --profiler torch
--steps A-B`; `verify --steps A-B` (nsys); and nsys armed (in the processes with verify's flags,
never collecting); and nsys-range-armed: all that `verify --steps` sets up (its nsys flags with an NVTX
capture range, nsys told to match unregistered range names, TE's ranges, the hook) with a range no one
opens, so that what watching NVTX for the range costs is told apart from collecting the steps. For
each verify run, the seconds from the program's end ("[3/3]": the command
has exited) to verify's own exit, and the trace's size. With --step-time, also the program's own
figure for its steps (what it prints, found by a regular expression), per kind against bare: the
end-to-end wall time holds start-up, whose spread between runs is larger than the hook's cost.

Needs a GPU, e.g. TE's FSDP example for 400 iterations (tests/fixtures/gpu/corpus/commands.txt):

    python benchmarks/steps_overhead.py --steps 200-202 --expect fp8-delayed -- \\
        torchrun --standalone --nproc-per-node 1 fsdp.py --precision fp8 --num-layers 8 --num-iters 400 \\
        --batch-size 4 --seq-length 512
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

from window_overhead import _NEVER_S, _NSYS_ALONE, compare, paired, timed

import gemmscope
from gemmscope.autocast_hook.gemmscope_protocol import STEPS

# nsys waiting for an NVTX capture range that never opens, as `verify --steps` runs it otherwise
_NSYS_RANGE_NEVER_OPENED = """import sys
from gemmscope.profilers import nsys_runner
report, *command = sys.argv[1:]
sys.exit(nsys_runner.profile(command, report, nvtx_range="gemmscope.never-opened").returncode)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", required=True, help="A-B: the training steps verify collects")
    parser.add_argument("--expect", default="bf16", help="recipe verify checks against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="bare runs first, not counted")
    parser.add_argument("--out", help="keep the last capture of each verify run here (default: removed)")
    parser.add_argument("--kinds", type=lambda text: text.split(","),
                        default=["hook", "torch-steps", "nsys-steps", "nsys-armed"],
                        help="comma-separated runs beside bare: hook, hook-steps, torch-steps, nsys-steps, "
                             "nsys-armed, nsys-range-armed")
    parser.add_argument("--step-time", type=re.compile,
                        help="regular expression whose first group is the program's own step time as it prints "
                             "it: a number, or a JSON list of step times (the steps after the first are taken)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    hook = str(Path(gemmscope.__file__).parent / "autocast_hook")
    with tempfile.TemporaryDirectory(prefix="steps-overhead-") as scratch:
        out = args.out or scratch
        def verify(profiler: str) -> list[str]:
            return [sys.executable, "-c", "from gemmscope.cli import main; main()", "verify", "--profiler", profiler,
                    "--steps", args.steps, "--expect", args.expect, "--format", "json", "--out",
                    f"{out}/{profiler}", "--", *command]

        hook_env = {**os.environ, "NVTE_NVTX_ENABLED": "1",
                    "PYTHONPATH": os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH")) if p)}
        runs = {
            "bare": (command, None),
            "hook": (command, hook_env),
            "hook-steps": (command, {**os.environ, STEPS: args.steps, "PYTHONPATH": hook_env["PYTHONPATH"]}),
            "torch-steps": (verify("torch"), None),
            "nsys-steps": (verify("nsys"), None),
            "nsys-armed": ([sys.executable, "-c", _NSYS_ALONE, f"{out}/armed.nsys-rep", f"{_NEVER_S:g}", "1", "-",
                            *command], None),
            "nsys-range-armed": ([sys.executable, "-c", _NSYS_RANGE_NEVER_OPENED, f"{out}/range-armed.nsys-rep",
                                  *command], {**hook_env, STEPS: args.steps, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}),
        }
        runs = {kind: run for kind, run in runs.items() if kind == "bare" or kind in args.kinds}
        after_end: dict[str, list[float]] = {kind: [] for kind in ("torch-steps", "nsys-steps") if kind in runs}
        step_times: dict[str, list[float]] = {kind: [] for kind in runs}

        def timed_verify(argv: list[str], env: dict | None = None):
            wall_s, status, stages, printed = timed(argv, env)
            kind = next(k for k in runs if runs[k][0] is argv and runs[k][1] is env)  # bare and hook share argv
            figure = program_step_time(args.step_time, printed) if args.step_time else None
            if figure is not None:
                step_times[kind].append(figure)
                print(f"  {kind}: the program's own step time {figure:.4g}", flush=True)
            checking = [float(s.split()[0]) for s in stages if s.endswith("3/3")]
            if kind in after_end and checking:
                after_end[kind].append(wall_s - checking[0])
                sizes = sum(f.stat().st_size for f in Path(out, kind.split("-")[0]).rglob("*") if f.is_file())
                print(f"  {kind}: checked {wall_s - checking[0]:.1f} s after the program ended; "
                      f"capture folder {sizes / 1e6:.1f} MB", flush=True)
            return wall_s, status, stages, printed

        compare(runs, command, args.rounds, args.warmup, target={"torch-steps": 1.03}, timer=timed_verify)
    bare_step = statistics.median(step_times["bare"]) if step_times["bare"] else None
    for kind, figures in step_times.items():
        if figures and bare_step:
            print(f"median {kind}: the program's own step time {statistics.median(figures):.4g} "
                  f"({min(figures):.4g}-{max(figures):.4g}): {statistics.median(figures) / bare_step:.3f}x bare"
                  f"{' (target <= 1.02x for the hook)' if kind.startswith('hook') else ''}"
                  f"{paired(figures, step_times['bare'])}")
    for kind, seconds in after_end.items():
        if seconds:
            print(f"median {kind}: checked {statistics.median(seconds):.1f} s after the program ended "
                  f"({min(seconds):.1f}-{max(seconds):.1f} s; target <= 5 s for torch-steps)")


def program_step_time(pattern: re.Pattern, printed: str) -> float | None:
    found = pattern.search(printed)
    if found is None:
        return None
    value = json.loads(found.group(1))
    return statistics.median(value[1:]) if isinstance(value, list) else float(value)


if __name__ == "__main__":
    main()
