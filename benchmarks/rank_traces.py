"""How `gemmscope verify --trace` scales with workers on many per-rank traces.

    python benchmarks/rank_traces.py [--ranks 64] [--workers 1,2] [--rounds 3] [--grow 1]

Builds N per-rank traces from the two real per-rank captures of TE's FSDP example
(tests/fixtures/gpu/corpus/fsdp_fp8_2gpu_rank{0,1}.sqlite.xz, decompressed, one file per rank,
named rank<N>.sqlite; with --grow G, each capture first grown into G replicas of itself as
trace_scale.py builds them), then times `gemmscope verify --trace FOLDER --workers W --format json`
for each W, as separate processes, alternating the order every round, and prints the median
wall and CPU seconds and the speedup over the first W. Checks that every run read N traces and
found the same GEMM count.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

from gemmscope.autocast_hook.gemmscope_protocol import PROCESS_PREFIX

REPO = Path(__file__).resolve().parent.parent

SEEDS = [REPO / "tests" / "fixtures" / "gpu" / "corpus" / f"fsdp_fp8_2gpu_rank{r}.sqlite.xz" for r in (0, 1)]


def build(folder: Path, ranks: int, grow: int = 1) -> None:
    seeds = [lzma.decompress(seed.read_bytes()) for seed in SEEDS]
    if grow > 1:
        from trace_scale import build_replica

        for at, seed in enumerate(seeds):
            plain, grown = folder / f"seed{at}.sqlite", folder / f"seed{at}-x{grow}.sqlite"
            plain.write_bytes(seed)
            build_replica(plain, grown, grow)
            seeds[at] = grown.read_bytes()
            plain.unlink()
            grown.unlink()
    for rank in range(ranks):
        trace = folder / f"rank{rank}.sqlite"
        trace.write_bytes(seeds[rank % len(seeds)])
        # each copy's session a nanosecond after the last, as a job's ranks start, and its hook's
        # process mark naming its own rank: the same session twice is one capture given twice, the
        # same rank twice no job, and gemmscope reads them so
        seed_mark, own_mark = f"{PROCESS_PREFIX}rank={rank % len(seeds)}|", f"{PROCESS_PREFIX}rank={rank}|"
        with closing(sqlite3.connect(trace)) as db, db:
            db.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (rank,))
            db.execute("UPDATE StringIds SET value = replace(value, ?, ?)", (seed_mark, own_mark))
            db.execute("UPDATE NVTX_EVENTS SET text = replace(text, ?, ?) WHERE text IS NOT NULL", (seed_mark, own_mark))


def run(folder: Path, workers: int) -> tuple[float, float, dict]:
    """Wall and CPU seconds of one verify process (children included), and its JSON summary."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    started = time.perf_counter()
    before = os.times()
    done = subprocess.run([sys.executable, "-c", "from gemmscope.cli import main; main()", "verify",
                           "--trace", str(folder), "--workers", str(workers), "--format", "json"],
                          capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"verify exited {done.returncode}: {done.stderr[-500:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grow", type=int, default=1, help="replicas of each real rank capture in one trace")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="gemmscope-ranks-") as tmp:
        folder = Path(tmp)
        build(folder, args.ranks, args.grow)
        print(f"{args.ranks} per-rank traces, each capture grown {args.grow}× ({sum(p.stat().st_size for p in folder.iterdir()) / 2**20:.0f} MiB), "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        samples: dict[int, list[tuple[float, float]]] = {w: [] for w in workers}
        launches = set()
        for round_ in range(args.rounds):
            for w in (workers if round_ % 2 == 0 else list(reversed(workers))):
                wall, cpu, document = run(folder, w)
                # the copies keep the rank marks of the two real ranks: count the traces read
                assert len(document["meta"]["traces"]) == args.ranks, len(document["meta"]["traces"])
                launches.add(document["summary"]["gemm_launches"])
                samples[w].append((wall, cpu))
                print(f"  round {round_ + 1}, {w} worker(s): {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        assert len(launches) == 1, f"runs disagree on the GEMM count: {launches}"
        base = statistics.median(s[0] for s in samples[workers[0]])
        print(f"\n| workers | wall s median [min–max] | CPU s median | speedup over {workers[0]} |")
        print("|---|---|---|---|")
        for w in workers:
            walls = [s[0] for s in samples[w]]
            print(f"| {w} | {statistics.median(walls):.2f} [{min(walls):.2f}–{max(walls):.2f}] | "
                  f"{statistics.median(s[1] for s in samples[w]):.2f} | {base / statistics.median(walls):.2f}× |")
        print(f"\nevery run: {args.ranks} traces read, {launches.pop()} GEMM launches")


if __name__ == "__main__":
    main()
