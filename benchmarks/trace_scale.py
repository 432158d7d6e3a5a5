"""Benchmark: how `gemmscope analyze` and `gemmscope verify --trace` scale with the size of a trace, next to
`nsys stats -r nvtx_kern_sum` (NVIDIA's own kernel-per-NVTX-range summary) on the same file.
CPU only: needs nsys for `nsys stats`, no GPU.

Large real captures are not committed, so a real export (the seed) is grown into N replicas in
one SQLite file: its GPU activity, CUDA API calls and NVTX ranges are repeated N times, one copy
after the other on the timeline; its strings, threads, GPUs and metadata stay once. A replica is
labelled in its metadata (META_DATA_EXPORT row GEMMSCOPE_REPLICAS) so that nobody takes it for a
capture. For each factor the script builds the replica once, checks that both tools see exactly
N times what they see on the seed, then times each tool `--rounds` times as a separate process,
the two alternating, and prints each process's wall and CPU seconds and peak RSS.

    python benchmarks/trace_scale.py [--seed PATH|NAME] [--factors 1,10,100] [--rounds 3] [--quick] [--keep DIR]

Named seeds (SEEDS): `te-stack` (the default) and `grouped-linear`, TE's GroupedLinear benchmark
under its documented `--profile` (torch's emit_nvtx: a range per operator call, each named with
its own op id), its first step alone; grown with `--renumber` (the default for that seed), each
replica's operator ranges carry op ids of their own and its step range the next step's number, as
a longer run of the same program names them: a trace full of distinct range names.
`grouped-linear-full`: the same benchmark's whole run as captured (72,100 kernels, 209,166 NVTX
events), to time at `--factors 1`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import lzma
import math
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "gpu" / "corpus"
DEFAULT_SEED = CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz"
# Seeds by name: the export, and whether its replicas are renumbered by default.
SEEDS = {"te-stack": (DEFAULT_SEED, False),
         "grouped-linear": (CORPUS / "grouped_linear_fp8-block.sqlite.xz", True),
         "grouped-linear-full": (CORPUS / "grouped_linear_fp8-block_full.sqlite.xz", False)}
NSYS_FALLBACK = Path("/opt/nsys-cpu/target-linux-x64/nsys")

# Tables whose rows are events on the timeline and are repeated once per replica. The rest
# (StringIds, ThreadNames, TARGET_INFO_*, META_DATA_*, ENUM_*) describes the capture and stays
# once; so do the other event tables (CUDA synchronization and event records, profiler overhead,
# diagnostics), which neither tool reads.
REPLICATED_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "NVTX_EVENTS",
    "CUDA_GPU_MEMORY_USAGE_EVENTS",
)
TIME_COLUMNS = ("start", "end")
# Kernels join their launching API call on correlationId (within a process); nvtxRangeStart's
# id pairs a start/end range. Each replica gets ids of its own so that joins stay one to one.
ID_COLUMNS = ("correlationId", "rangeId")
# nsys's ENUM_NSYS_EVENT_TYPE NvtxDomainCreate (the same in 2023.4 and 2025.3): a domain is
# created once per process, and both tools name a domain's ranges from that row.
NVTX_DOMAIN_CREATE = 75
# Between one replica's last event and the next one's first, so that no range or kernel of one
# replica touches the next.
REPLICA_GAP_NS = 1_000_000_000
REPLICA_LABEL = "GEMMSCOPE_REPLICAS"
# What a longer run numbers anew in its range names (--renumber): PyTorch's emit_nvtx gives every
# operator call an op id of its own, and a program numbers its steps. Only names stored in the
# row itself (NVTX_EVENTS.text) are renumbered; names registered once (textId) stay.
OPERATOR_ID = re.compile(r"(?<=op_id = )\d+")
STEP_NUMBER = re.compile(r"(?<=step|iter)([ _.:#-]*)(\d+)$", re.IGNORECASE)

# Default factors: the seed grown to about these many kernels.
DEFAULT_KERNEL_TARGETS = (10_000, 30_000, 100_000, 300_000, 1_000_000)
# A check's states (mismatches, nothing recorded to judge against, some GEMMs not judged): each a
# complete analysis; TE's own benchmark under plain nsys records no recipe (NOT CHECKED).
GEMMSCOPE_CHECKED_EXITS = (0, 1, 4, 5)


# --- replicas ---------------------------------------------------------------------------------

def columns(db: sqlite3.Connection, table: str) -> list[str]:
    """The table's columns, [] when this export has no such table (schemas differ between nsys
    releases)."""
    return [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]


def build_replica(seed: Path, target: Path, replicas: int, renumber: bool = False) -> None:
    """Write to `target` the export `seed` with its timeline events repeated `replicas` times.

    Replica r (0 is the seed's own rows) has its start/end times shifted by r × (the seed's time
    span + REPLICA_GAP_NS) and its ids shifted by r × (the largest id + 1). NVTX domain-create
    rows stay once. The session's end (ANALYSIS_DETAILS) moves to the last replica's end, so a
    range closed in the seed is closed in every replica; a range the seed left open at the end
    of its session ends with the session in the last replica, and at its own replica's end in
    the others. With `renumber`, replica r's NVTX names have their op ids shifted by r × (the
    largest op id + 1) and their step numbers by r × (the largest step number + 1)."""
    shutil.copyfile(seed, target)
    with closing(sqlite3.connect(target)) as db:
        # The file is scratch: a crash leaves a replica to delete, not one to recover.
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        tables = {table: columns(db, table) for table in REPLICATED_TABLES}
        tables = {table: cols for table, cols in tables.items() if "start" in cols}
        session = columns(db, "ANALYSIS_DETAILS")

        first, last = _time_bounds(db, tables, session)
        period = last - first + REPLICA_GAP_NS
        id_strides = {}
        for column in ID_COLUMNS:
            largest = [db.execute(f'SELECT MAX("{column}") FROM "{table}"').fetchone()[0]
                       for table, cols in tables.items() if column in cols]
            id_strides[column] = max((v for v in largest if v is not None), default=0) + 1

        if renumber:
            _register_renumbered(db)
        with db:
            for table, cols in tables.items():
                (seed_rows,) = db.execute(f'SELECT MAX(rowid) FROM "{table}"').fetchone()
                if seed_rows is None:
                    continue
                select = ", ".join(
                    f'"{c}" + :time_shift' if c in TIME_COLUMNS
                    else f'"{c}" + :{c}_shift' if c in ID_COLUMNS
                    else 'renumbered("text", :replica)' if renumber and table == "NVTX_EVENTS" and c == "text"
                    else f'"{c}"'
                    for c in cols)
                where = "rowid <= :seed_rows"
                if table == "NVTX_EVENTS" and "eventType" in cols:
                    where += f" AND eventType != {NVTX_DOMAIN_CREATE}"
                names = ", ".join(f'"{c}"' for c in cols)
                insert = f'INSERT INTO "{table}" ({names}) SELECT {select} FROM "{table}" WHERE {where}'
                for replica in range(1, replicas):
                    shifts = {"time_shift": replica * period, "seed_rows": seed_rows, "replica": replica}
                    shifts |= {f"{c}_shift": replica * stride for c, stride in id_strides.items()}
                    db.execute(insert, shifts)

            added = (replicas - 1) * period
            for column in ("duration", "stopTime"):
                if column in session:
                    db.execute(f'UPDATE ANALYSIS_DETAILS SET "{column}" = "{column}" + ?', (added,))
            db.execute("INSERT INTO META_DATA_EXPORT (name, value) VALUES (?, ?)", (REPLICA_LABEL, str(replicas)))


def _register_renumbered(db: sqlite3.Connection) -> None:
    """renumbered(text, replica) in SQL: the seed's NVTX name as replica `replica` names it."""
    texts = [t for (t,) in db.execute("SELECT DISTINCT text FROM NVTX_EVENTS WHERE text IS NOT NULL")]
    op_stride = max((int(n) for t in texts for n in OPERATOR_ID.findall(t)), default=0) + 1
    step_stride = max((int(m[2]) for t in texts if (m := STEP_NUMBER.search(t))), default=0) + 1

    def renumbered(text: str | None, replica: int) -> str | None:
        if text is None:
            return None
        text = OPERATOR_ID.sub(lambda m: str(int(m[0]) + replica * op_stride), text)
        return STEP_NUMBER.sub(lambda m: m[1] + str(int(m[2]) + replica * step_stride), text)

    db.create_function("renumbered", 2, renumbered, deterministic=True)


def _time_bounds(db: sqlite3.Connection, tables: dict[str, list[str]], session: list[str]) -> tuple[int, int]:
    """Earliest and latest timestamp of the seed's events and session."""
    firsts, lasts = [], []
    for table, cols in tables.items():
        latest = 'COALESCE("end", start)' if "end" in cols else "start"
        low, high = db.execute(f'SELECT MIN(start), MAX({latest}) FROM "{table}"').fetchone()
        if low is not None:
            firsts.append(low)
            lasts.append(high)
    if "startTime" in session and "stopTime" in session:
        low, high = db.execute("SELECT MIN(startTime), MAX(stopTime) FROM ANALYSIS_DETAILS").fetchone()
        if low is not None:
            firsts.append(low)
            lasts.append(high)
    return min(firsts), max(lasts)


@dataclass
class Size:
    kernels: int
    nvtx_rows: int
    api_rows: int


def size_of(export: Path) -> Size:
    with closing(sqlite3.connect(f"file:{export}?mode=ro", uri=True)) as db:
        def rows(table: str) -> int:
            return db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0] if columns(db, table) else 0

        return Size(rows("CUPTI_ACTIVITY_KIND_KERNEL"), rows("NVTX_EVENTS"), rows("CUPTI_ACTIVITY_KIND_RUNTIME"))


def sqlite_of(seed: Path, folder: Path) -> Path:
    """The seed as a plain SQLite file (fixtures are committed xz-compressed)."""
    if seed.suffix != ".xz":
        return seed
    target = folder / seed.name.removesuffix(".xz")
    target.write_bytes(lzma.decompress(seed.read_bytes()))
    return target


# --- running the two tools --------------------------------------------------------------------

# As the `gemmscope` command runs (its entry point, gemmscope.__main__.run), from the checkout.
def gemmscope_command(export: Path) -> list[str]:
    return [sys.executable, "-m", "gemmscope", "analyze", str(export), "--format", "json"]


def verify_command(export: Path) -> list[str]:
    return [sys.executable, "-m", "gemmscope", "verify", "--trace", str(export), "--format", "json"]


def nsys_command(nsys: str, export: Path) -> list[str]:
    # CSV, as gemmscope's JSON: the report itself, without the column layout meant for a
    # terminal. An .sqlite input is read as it is, never re-exported.
    return [nsys, "stats", "--quiet", "--report", "nvtx_kern_sum", "--format", "csv", "--output", "-", str(export)]


# The checkout's gemmscope, whatever else is installed (an editable install may point elsewhere).
CHILD_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # user + system: what the process itself used, whatever else shares the machine
    peak_rss_mib: float


def run(command: Sequence[str], stdout: Path | str, stderr: Path, ok_exits: tuple[int, ...] = (0,)) -> Run:
    """Run `command` as a child process; its wall time, CPU time and peak resident memory. wait4
    gives the rusage of that one child (and what it waited for), which RUSAGE_CHILDREN deltas do
    not once several children have ended."""
    actions = [(os.POSIX_SPAWN_OPEN, 1, str(stdout), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
               (os.POSIX_SPAWN_OPEN, 2, str(stderr), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
    started = time.perf_counter()
    pid = os.posix_spawn(command[0], list(command), CHILD_ENV, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in ok_exits:
        tail = stderr.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(command)} exited {code}:\n{tail}")
    return Run(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)  # ru_maxrss is in KiB on Linux


def gemm_verdicts(export: Path, scratch: Path, command=gemmscope_command) -> Counter:
    """How many GEMMs gemmscope (analyze, or verify) reports per (layer, pass, precision, verdict)."""
    out = scratch / "gemmscope.json"
    run(command(export), out, scratch / "gemmscope.err", GEMMSCOPE_CHECKED_EXITS)
    counts: Counter = Counter()
    for group in json.loads(out.read_text())["summary"]["groups"]:
        counts[(group["layer"], group["pass"], group["precision"], group.get("verdict"))] += group["launches"]
    return counts


def nsys_kernel_instances(nsys: str, export: Path, scratch: Path) -> Counter:
    """Kernel instances nvtx_kern_sum reports per (range, style, kernel)."""
    out = scratch / "nsys.csv"
    run(nsys_command(nsys, export), out, scratch / "nsys.err")
    rows = csv.DictReader(io.StringIO(out.read_text()))
    instances: Counter = Counter()
    for row in rows:
        # numbers out of range names: a renumbered replica's are its own (op ids, steps)
        instances[(re.sub(r"\d+", "N", row["NVTX Range"]), row["Style"], row["Kernel Name"])] += int(row["Kern Inst"])
    return instances


def scaled(counts: Counter, factor: int) -> Counter:
    return Counter({key: n * factor for key, n in counts.items()})


# --- measurement ------------------------------------------------------------------------------

@dataclass
class Measurement:
    factor: int
    size: Size
    gemms: int
    counts_scale: bool  # both tools saw exactly factor × what they saw on the seed
    gemmscope: list[Run]  # analyze
    verify: list[Run]
    nsys: list[Run]


def measure(seed: Path, factor: int, rounds: int, nsys: str, folder: Path,
            seed_verdicts: Counter, seed_instances: Counter, renumber: bool = False,
            keep: Path | None = None) -> Measurement:
    export = (keep or folder) / f"replica-{factor}x.sqlite"
    started = time.perf_counter()
    build_replica(seed, export, factor, renumber)
    build_s = time.perf_counter() - started
    size = size_of(export)
    print(f"  {factor}x: built in {build_s:.1f} s, {size.kernels} kernels; checking", file=sys.stderr)
    # Untimed: the counts to compare, and the file in the page cache before the first timed run.
    verdicts = gemm_verdicts(export, folder)
    checked = gemm_verdicts(export, folder, verify_command)
    instances = nsys_kernel_instances(nsys, export, folder)
    counts_scale = (verdicts == checked == scaled(seed_verdicts, factor)
                    and instances == scaled(seed_instances, factor))

    tools = {"gemmscope": gemmscope_command(export), "verify": verify_command(export),
             "nsys": nsys_command(nsys, export)}
    ok_exits = {"gemmscope": GEMMSCOPE_CHECKED_EXITS, "verify": GEMMSCOPE_CHECKED_EXITS, "nsys": (0,)}
    runs: dict[str, list[Run]] = {name: [] for name in tools}
    for round_ in range(rounds):
        # Reversed every round, so that no tool always runs last (on a warmer machine).
        order = list(tools) if round_ % 2 == 0 else list(reversed(tools))
        for name in order:
            runs[name].append(run(tools[name], os.devnull, folder / f"{name}.err", ok_exits[name]))
            done = runs[name][-1]
            print(f"  {factor}x round {round_ + 1}: {name} {done.wall_s:.2f} s wall, {done.cpu_s:.2f} s CPU",
                  file=sys.stderr)
    # The largest replicas take hundreds of MB: one at a time on disk (unless kept, to profile).
    if keep is None:
        export.unlink()
    return Measurement(factor, size, sum(verdicts.values()), counts_scale, runs["gemmscope"], runs["verify"],
                       runs["nsys"])


def wall(runs: list[Run]) -> float:
    return statistics.median(r.wall_s for r in runs)


def cpu(runs: list[Run]) -> float:
    return statistics.median(r.cpu_s for r in runs)


def seconds(runs: list[Run]) -> str:
    walls = [r.wall_s for r in runs]
    return f"{wall(runs):.2f} [{min(walls):.2f}–{max(walls):.2f}]"


def peak_mib(runs: list[Run]) -> str:
    return f"{max(r.peak_rss_mib for r in runs):.0f}"


def growth_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) against log(kernels): 1 is linear, 2 quadratic."""
    slope, _ = statistics.linear_regression([math.log(k) for k, _ in points], [math.log(t) for _, t in points])
    return slope


def report(measurements: list[Measurement]) -> None:
    print("| factor | kernels | NVTX rows | API rows | GEMMs "
          "| analyze wall s median [min–max] | CPU s | peak RSS MiB "
          "| verify wall s median [min–max] | CPU s | peak RSS MiB "
          "| nsys stats wall s median [min–max] | CPU s | peak RSS MiB "
          "| nsys / analyze (wall) | nsys / verify (wall) | counts × factor |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in measurements:
        print(f"| {m.factor} | {m.size.kernels:,} | {m.size.nvtx_rows:,} | {m.size.api_rows:,} | {m.gemms:,} "
              f"| {seconds(m.gemmscope)} | {cpu(m.gemmscope):.2f} | {peak_mib(m.gemmscope)} "
              f"| {seconds(m.verify)} | {cpu(m.verify):.2f} | {peak_mib(m.verify)} "
              f"| {seconds(m.nsys)} | {cpu(m.nsys):.2f} | {peak_mib(m.nsys)} "
              f"| {wall(m.nsys) / wall(m.gemmscope):.2f} | {wall(m.nsys) / wall(m.verify):.2f} "
              f"| {'yes' if m.counts_scale else 'NO'} |")
    if len({m.size.kernels for m in measurements}) < 2:
        return
    print()
    span = f"{measurements[0].factor}x to {measurements[-1].factor}x"
    for tool, label in (("gemmscope", "analyze"), ("verify", "verify"), ("nsys", "nsys stats")):
        for clock, median in (("wall", wall), ("CPU", cpu)):
            points = [(m.size.kernels, median(getattr(m, tool))) for m in measurements]
            line = f"{label} {clock} time ∝ kernels^{growth_exponent(points):.2f} (least squares, {span})"
            if len(points) > 2:
                # Start-up (Python and pandas, nsys's own) weighs on the small sizes; the two
                # largest show where the time goes as traces grow.
                line += f"; ^{growth_exponent(points[-2:]):.2f} between the two largest"
            print(line)
    if not all(m.counts_scale for m in measurements):
        print("\nWARNING: at some factor a tool did not report exactly factor × the seed's counts")


# --- command line -----------------------------------------------------------------------------

def find_nsys() -> str:
    for candidate in (os.environ.get("NSYS"), shutil.which("nsys"), str(NSYS_FALLBACK)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("nsys not found: set NSYS or put nsys on PATH")


def default_factors(seed_kernels: int) -> list[int]:
    return sorted({max(1, round(target / seed_kernels)) for target in DEFAULT_KERNEL_TARGETS})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", default="te-stack",
                        help=f"export to replicate (.sqlite or .sqlite.xz), or a name: {', '.join(SEEDS)}")
    parser.add_argument("--renumber", action=argparse.BooleanOptionalAction, default=None,
                        help="each replica's op ids and step numbers its own (default: on for grouped-linear)")
    parser.add_argument("--factors", help="comma-separated replica counts (default: ~10k to ~1M kernels)")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each tool per factor")
    parser.add_argument("--quick", action="store_true", help="only the two smallest factors")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="build the replicas in DIR and leave them there (replica-<factor>x.sqlite), to profile")
    args = parser.parse_args()
    nsys = find_nsys()
    seed_path, renumber = SEEDS.get(args.seed, (Path(args.seed), False))
    renumber = renumber if args.renumber is None else args.renumber
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="gemmscope-trace-scale-") as tmp:
        folder = Path(tmp)
        seed = sqlite_of(seed_path, folder)
        seed_size = size_of(seed)
        factors = (sorted({int(f) for f in args.factors.split(",")}) if args.factors
                   else default_factors(seed_size.kernels))
        if factors[0] < 1:
            parser.error("--factors: replica counts are 1 or more")
        if args.quick:
            factors = factors[:2]
        version = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"seed {seed_path.name}: {seed_size.kernels:,} kernels; factors {factors}; {args.rounds} rounds; "
              f"{'renumbered' if renumber else 'repeated'} names; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; Python {platform.python_version()}; "
              f"{version}", file=sys.stderr)
        seed_verdicts = gemm_verdicts(seed, folder)
        seed_instances = nsys_kernel_instances(nsys, seed, folder)
        measurements = [measure(seed, factor, args.rounds, nsys, folder, seed_verdicts, seed_instances, renumber,
                                args.keep) for factor in factors]
    report(measurements)


if __name__ == "__main__":
    main()
