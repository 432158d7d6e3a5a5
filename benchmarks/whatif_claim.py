"""Benchmark: does `gemmscope whatif`'s prediction hold once its change is applied? For each corpus
program (tests/fixtures/gpu/corpus): a torchao MLP with a BF16 head, a Megatron-Core GPT with its
first and last layers in BF16 (at two widths), a Hugging Face Llama through accelerate's torchao FP8 backend and
through its TE backend:

1. run it under `gemmscope verify --out CAPTURE` (nsys, the hook);
2. `gemmscope whatif CAPTURE --out WHATIF`: its groups measured on this GPU, the change written out;
3. apply the change as written, unmodified: Megatron's arguments from megatron_args.txt in place of
   the program's BF16 flags; torchao's and accelerate's `--module-filter WHATIF/module_filter.py`;
   TE's debug-API file, `--te-debug-config WHATIF/te_debug_bf16.yaml` (the program sets the debug
   API up as the file's comments say);
4. run it again under verify and group its GEMMs as whatif does (gemmscope.whatif.groups);
5. compare the predicted GEMM + quantization ms per step (whatif's `changes.predicted_ms`) with the
   re-run's measured one (target: within 10 %), and the step time before and after the change
   (the program alone, `--step-times`, no nsys, no hook; before and after alternating
   TIMED_ROUNDS times: median and IQR of the steps after WARMUP, pooled), flagging an after-step
   slower than before beyond the before-steps' IQR.

Needs a GPU with TE, torchao, megatron-core, transformers, accelerate and nvdlfw_inspect. Each program's row is
printed as it ends; on an H200 torchao_mlp and megatron_gpt together took under 5 minutes, and
hf_accelerate 2 (2026-11-27): under a 10-minute limit a call, run them as two series (--programs).

    python benchmarks/whatif_claim.py [--programs torchao_mlp,megatron_gpt,megatron_gpt_4096,hf_accelerate,hf_accelerate_te] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "gpu" / "corpus"
CAPTURE_STEPS = 6  # under verify: the groups are per step over the steps after the first
TIMED_STEPS = 30  # --step-times runs, of which the first WARMUP are dropped
WARMUP = 5
TIMED_ROUNDS = 2  # before and after alternate, each ROUNDS times, their steps pooled
TARGET = 0.10  # the claim: predicted within ±10 % of the re-run
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]


@dataclass
class Program:
    command: list[str]  # the program without its precision choice
    precision: list[str] = field(default_factory=list)  # the precision choice it is run with first


PROGRAMS = {
    "torchao_mlp": Program([sys.executable, str(CORPUS / "torchao_mlp.py"), "--recipe", "tensorwise"]),
    "megatron_gpt": Program([*TORCHRUN, str(CORPUS / "megatron_gpt.py"), "--fp8-recipe", "tensorwise"],
                            ["--first-last-layers-bf16"]),
    # the same at 4× the width, a GPU-bound step: its BF16 first and last layers are large enough to gain in FP8
    "megatron_gpt_4096": Program([*TORCHRUN, str(CORPUS / "megatron_gpt.py"), "--fp8-recipe", "tensorwise",
                                  "--hidden", "4096", "--ffn", "16384", "--heads", "32", "--seq", "2048"],
                                 ["--first-last-layers-bf16"]),
    "hf_accelerate": Program([sys.executable, str(CORPUS / "hf_plain_loop.py"), "--accelerate-fp8",
                              "--fp8-backend", "ao"]),
    # BF16 parameters: with FP32 ones TE 2.20.2's high-precision GEMM of a layer the debug API keeps
    # out of FP8 failed in cuBLAS (benchmarks/HISTORY.md)
    "hf_accelerate_te": Program([sys.executable, str(CORPUS / "hf_plain_loop.py"), "--accelerate-fp8",
                                 "--fp8-backend", "te", "--params-dtype", "bfloat16"]),
}


def gemmscope(*args: str, ok=(0, 1, 4, 5)) -> subprocess.CompletedProcess:
    """A gemmscope command; its checking states (1, 4, 5) are no failure here, a failed command (3) is."""
    done = subprocess.run([sys.executable, "-m", "gemmscope", *args], capture_output=True, text=True, cwd=REPO)
    if done.returncode not in ok:
        raise RuntimeError(f"gemmscope {shlex.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def applied(whatif_dir: Path, program: Program) -> list[str] | None:
    """The change as whatif wrote it, as the program's own arguments; None where it wrote only a
    te.autocast region, which the program's code must take."""
    if (whatif_dir / "megatron_args.txt").exists():  # the files it names (the per-module recipe) are beside it
        args = shlex.split((whatif_dir / "megatron_args.txt").read_text(), comments=True)
        return [str(whatif_dir / arg) if (whatif_dir / arg).is_file() else arg for arg in args]
    if (whatif_dir / "module_filter.py").exists():
        return ["--module-filter", str(whatif_dir / "module_filter.py")]
    if (whatif_dir / "te_debug_bf16.yaml").exists():
        return ["--te-debug-config", str(whatif_dir / "te_debug_bf16.yaml")]
    if (whatif_dir / "te_autocast_region.py").exists():  # a change the program's code must take: none to pass
        return None
    return program.precision  # nothing to change: the run as it was


def gemm_ms_per_step(capture: Path) -> float:
    """GEMM + quantization ms per step of a capture, grouped as whatif groups it."""
    import gemmscope as gs
    from gemmscope.whatif.groups import group_gemms

    return float(group_gemms(gs.check(capture).judgement).groups["now_ms"].sum())


def step_samples(command: list[str]) -> list[float]:
    done = subprocess.run([*command, "--steps", str(TIMED_STEPS), "--step-times"], capture_output=True, text=True,
                          check=True)
    line = next(line for line in done.stdout.splitlines() if line.startswith("step_ms "))
    return json.loads(line.removeprefix("step_ms "))[WARMUP:]


def step_times(before_cmd: list[str], after_cmd: list[str]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Median and IQR (ms) of the steps before and after the change: the two programs alternate,
    so that a slow spell of the machine falls on both."""
    before: list[float] = []
    after: list[float] = []
    for _ in range(TIMED_ROUNDS):
        before += step_samples(before_cmd)
        after += step_samples(after_cmd)
    quartiles = [statistics.quantiles(samples, n=4) for samples in (before, after)]
    return tuple((median, q1, q3) for q1, median, q3 in quartiles)  # type: ignore[return-value]


def claim(name: str, program: Program, work: Path) -> dict:
    before_cmd = [*program.command, *program.precision]
    gemmscope("verify", "--quiet", "--out", str(work / "before"), "--", *before_cmd, "--steps", str(CAPTURE_STEPS))
    whatif = gemmscope("whatif", str(work / "before"), "--out", str(work / "whatif"), "--iters", "20", "--warmup", "3",
                       "--format", "json", ok=(0,))
    document = json.loads(whatif.stdout)
    if document["state"] != "measured":
        raise RuntimeError(f"{name}: whatif measured nothing: {document.get('not_measured')}")
    change = applied(work / "whatif", program)
    if change is None:  # nothing to re-run: said, not failed
        return {"program": name, "not_applied": " ".join(document["changes"]["lines"])}
    after_cmd = [*program.command, *change]
    gemmscope("verify", "--quiet", "--out", str(work / "after"), "--", *after_cmd, "--steps", str(CAPTURE_STEPS))
    predicted = document["changes"]["predicted_ms"]
    measured = gemm_ms_per_step(work / "after")
    before_step, after_step = step_times(before_cmd, after_cmd)
    return {"program": name, "change": shlex.join(change) or "(none)", "top": [r["text"] for r in
                                                                              document["recommendations"][:3]],
            "now_ms": document["changes"]["now_ms"], "predicted_ms": predicted, "measured_ms": measured,
            "error": (predicted - measured) / measured if predicted is not None else None,
            "step_before": before_step, "step_after": after_step,
            "worse": after_step[0] > before_step[0] + (before_step[2] - before_step[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--keep", type=Path, help="keep the captures and whatif folders here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="whatif-claim-"))
    print(f"{'program':14s} {'now':>8s} {'predicted':>9s} {'measured':>9s} {'error':>7s}  "
          f"{'step before [IQR]':>22s} {'step after [IQR]':>22s}  change", flush=True)
    for name in args.programs.split(","):
        print(f"whatif_claim: {name} ...", file=sys.stderr, flush=True)
        try:
            row = claim(name, PROGRAMS[name], root / name)
        except (RuntimeError, subprocess.CalledProcessError) as exc:  # said, and the next program runs
            row = {"program": name, "failed": str(exc)[-500:]}
        print_row(row)  # as each program ends: a run a time limit stops keeps what it measured
    print(f"folders: {root}", file=sys.stderr)


def print_row(row: dict) -> None:
    if "failed" in row:
        print(f"{row['program']:14s} FAILED: {row['failed']}", flush=True)
        return
    if "not_applied" in row:
        print(f"{row['program']:14s} no change the program takes as written, nothing re-run: {row['not_applied']}",
              flush=True)
        return
    error = f"{row['error']:+.1%}" if row["error"] is not None else "n/a"
    verdict = "ok" if row["error"] is not None and abs(row["error"]) <= TARGET else "OUTSIDE ±10 %"
    b, a = row["step_before"], row["step_after"]
    print(f"{row['program']:14s} {row['now_ms']:8.3f} {row['predicted_ms'] or float('nan'):9.3f} "
          f"{row['measured_ms']:9.3f} {error:>7s}  {b[0]:8.2f} [{b[1]:.2f}-{b[2]:.2f}] ms "
          f"{a[0]:8.2f} [{a[1]:.2f}-{a[2]:.2f}] ms  {row['change']}")
    print(f"{'':14s} GEMM+quantize ms/step; prediction {verdict}; step time "
          f"{'WORSE beyond noise' if row['worse'] else 'not worse beyond noise'}")
    for line in row["top"]:
        print(f"{'':14s} - {line}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
