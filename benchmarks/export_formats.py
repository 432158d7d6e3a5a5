"""Benchmark: from an nsys report to a verdict through each export format nsys writes: SQLite
as verify exports it (`--lazy=false`: every table), SQLite as nsys exports it by default (only
tables with rows), a Parquet folder and an Arrow folder. Per round and format, in run
order rotated every round: `nsys export --type FORMAT` of the report (wall seconds), then reading
and checking the export in a fresh process (`read_trace` + `judgement.judge`, wall seconds and peak
RSS); medians [IQR] per format, and the kernels each read (they must agree).

    python benchmarks/export_formats.py --report trace.nsys-rep [--nsys PATH] [--rounds 5]
    python benchmarks/export_formats.py --exports a.sqlite a_parquetdir a_arrowdir   # reading only

nsys must be able to open the report (a report from a newer nsys than the one given cannot be
exported: measure on the machine that captured it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# format: (nsys export's --type and flags, the export's name)
FORMATS = {
    "sqlite": (["--type", "sqlite", "--lazy=false"], "trace.sqlite"),
    "sqlite-lazy": (["--type", "sqlite"], "trace_lazy.sqlite"),
    "parquetdir": (["--type", "parquetdir"], "trace_parquetdir"),
    "arrowdir": (["--type", "arrowdir"], "trace_arrowdir"),
}
CHECK = """
import json, resource, sys, time
t = time.perf_counter()
from gemmscope.traces.read import read_trace
from gemmscope.judging.judgement import judge
trace = read_trace(sys.argv[1])
kernels = len(trace.kernels)
result = judge(trace)
print(json.dumps({"seconds": time.perf_counter() - t, "kernels": kernels, "gemms": len(result.gemms),
                  "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def checked(export: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHECK, str(export)], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"reading {export} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def exported(nsys: str, report: Path, kind: str, out: Path) -> float:
    flags, name = FORMATS[kind]
    target = out / name
    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    started = time.perf_counter()
    subprocess.run([nsys, "export", *flags, "--force-overwrite", "true", "-o", str(target), str(report)],
                   check=True, capture_output=True)
    return time.perf_counter() - started


def size_mb(export: Path) -> float:
    files = export.rglob("*") if export.is_dir() else [export]
    return sum(f.stat().st_size for f in files if f.is_file()) / 1e6


def summary(values: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return f"{median:7.2f} [{q1:.2f}–{q3:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--report", type=Path, help="an .nsys-rep: exported and checked per format")
    source.add_argument("--exports", type=Path, nargs="+", help="exports already made: only read and checked")
    parser.add_argument("--nsys", default=shutil.which("nsys") or "nsys")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    runs: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        kinds = list(FORMATS) if options.report else [str(p) for p in options.exports]
        for round_ in range(options.rounds):
            for kind in kinds[round_ % len(kinds):] + kinds[:round_ % len(kinds)]:
                run = runs.setdefault(kind, {"export": [], "check": []})
                export = Path(scratch) / FORMATS[kind][1] if options.report else Path(kind)
                if options.report:
                    run["export"].append(exported(options.nsys, options.report, kind, Path(scratch)))
                run["check"].append(checked(export))
                run["mb"] = size_mb(export)
    print(f"{options.rounds} rounds; median [IQR], wall seconds; peak RSS of the check")
    print(f"{'format':28} {'export s':>20} {'read + check s':>20} {'sum s':>9} {'RSS MiB':>8} {'MB':>7} {'kernels':>8} {'GEMMs':>6}")
    for kind, run in runs.items():
        checks = run["check"]
        total = statistics.median([e + c["seconds"] for e, c in zip(run["export"], checks)]) if run["export"] else None
        print(f"{Path(kind).name:28} {summary(run['export']) if run['export'] else '-':>20} "
              f"{summary([c['seconds'] for c in checks]):>20} {'-' if total is None else f'{total:.2f}':>9} "
              f"{statistics.median(c['max_rss_mib'] for c in checks):8.0f} {run['mb']:7.1f} {checks[0]['kernels']:8} "
              f"{checks[0]['gemms']:6}")


if __name__ == "__main__":
    main()
