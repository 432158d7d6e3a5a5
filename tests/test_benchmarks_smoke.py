"""The replicas benchmarks/trace_scale.py times gemmscope on: a real export grown 3× is still an
export gemmscope reads, labelled as a replica, with every GEMM of the seed exactly 3 times and the
same verdicts; benchmarks/rank_traces.py's grown rank traces likewise; and
benchmarks/window_overhead.py's runs of a command, on a CPU with real nsys."""

import importlib.util
import os
import sqlite3
import sys
from collections import Counter
from contextlib import closing
from pathlib import Path

from gemmscope.judging.judgement import judge
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS

ROOT = Path(__file__).resolve().parent.parent
SEED = CORPUS / "fsdp_fp8_1gpu.sqlite.xz"
FACTOR = 3


def load_benchmark(name: str = "trace_scale"):
    sys.path.insert(0, str(ROOT / "benchmarks"))  # rank_traces imports trace_scale to grow traces
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rows(export: Path, sql: str) -> int:
    with closing(sqlite3.connect(export)) as db:
        return db.execute(sql).fetchone()[0]


def verdicts(export: Path) -> Counter:
    gemms = judge(read_trace(export)).gemms
    return Counter(zip(gemms["layer"], gemms["te_pass"], gemms["precision"], gemms["verdict"]))


def test_replica_holds_factor_times_the_seeds_gemms(tmp_path):
    trace_scale = load_benchmark()
    seed = trace_scale.sqlite_of(SEED, tmp_path)
    replica = tmp_path / "replica.sqlite"
    trace_scale.build_replica(seed, replica, FACTOR)

    assert rows(replica, "SELECT value FROM META_DATA_EXPORT WHERE name = 'GEMMSCOPE_REPLICAS'") == str(FACTOR)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        assert rows(replica, f"SELECT COUNT(*) FROM {table}") == FACTOR * rows(seed, f"SELECT COUNT(*) FROM {table}")
    domains = "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 75"
    assert rows(replica, domains) == rows(seed, domains) > 0
    # Each kernel still meets the one API call that launched it, and no other replica's.
    joined = ("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
              "ON k.correlationId = r.correlationId AND k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000)")
    assert rows(replica, joined) == FACTOR * rows(seed, joined) > 0

    seed_verdicts = verdicts(seed)
    assert sum(seed_verdicts.values()) > 0
    assert verdicts(replica) == Counter({key: n * FACTOR for key, n in seed_verdicts.items()})
    # The session ends after the last replica: no replicated range reads as left open.
    assert not read_trace(replica).nvtx["unclosed"].any()


def test_a_renumbered_replica_names_each_operator_call_and_step_anew(tmp_path):
    """TE's GroupedLinear benchmark under emit_nvtx, grown 3× with --renumber: every operator
    range and step range of a replica has a name of its own, as in a longer run (op ids and step
    numbers shifted), and gemmscope finds 3× the seed's GEMMs with the same verdicts."""
    trace_scale = load_benchmark()
    seed_xz, renumber = trace_scale.SEEDS["grouped-linear"]
    assert renumber
    seed = trace_scale.sqlite_of(seed_xz, tmp_path)
    replica = tmp_path / "replica.sqlite"
    trace_scale.build_replica(seed, replica, FACTOR, renumber=True)
    names = "SELECT COUNT(DISTINCT text) FROM NVTX_EVENTS WHERE text GLOB '*op_id = *' OR text GLOB 'step_*'"
    assert rows(replica, names) == FACTOR * rows(seed, names) > 0
    steps = "SELECT COUNT(*) FROM NVTX_EVENTS WHERE text IN ('step_0', 'step_1', 'step_2')"
    assert rows(replica, steps) == FACTOR == 3 * rows(seed, steps)
    seed_verdicts = verdicts(seed)
    assert sum(seed_verdicts.values()) > 0
    assert verdicts(replica) == Counter({key: n * FACTOR for key, n in seed_verdicts.items()})


def test_grown_rank_traces_hold_factor_times_each_real_rank(tmp_path):
    rank_traces, trace_scale = load_benchmark("rank_traces"), load_benchmark()
    ranks, seeds = tmp_path / "ranks", tmp_path / "seeds"
    ranks.mkdir()
    seeds.mkdir()
    rank_traces.build(ranks, ranks=3, grow=2)
    assert sorted(p.name for p in ranks.iterdir()) == ["rank0.sqlite", "rank1.sqlite", "rank2.sqlite"]
    kernels = "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"
    real = [rows(trace_scale.sqlite_of(seed, seeds), kernels) for seed in rank_traces.SEEDS]
    assert [rows(ranks / f"rank{rank}.sqlite", kernels) for rank in range(3)] == [2 * real[0], 2 * real[1], 2 * real[0]]


def test_window_overhead_runs_each_part_to_the_program_s_own_end(nsys_bin):
    """benchmarks/window_overhead.py --parts on a CPU program with real nsys: bare, under nsys
    alone (as verify times the window), with memory events, with TE's ranges on, armed with no
    window, and under verify; those that do not check end with the program's own status (verify:
    no GPU kernel ran, exit 1)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "window_overhead.py"), "--delay", "0.5", "--duration", "0.5",
         "--rounds", "1", "--warmup", "0", "--parts",
         "nsys,nsys+memory,nsys+TE,nsys-armed", "--", sys.executable, "-c", "import time; time.sleep(2)"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    medians = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("median ")}
    parts = {"bare", "nsys", "nsys+memory", "nsys+TE", "nsys-armed"}
    assert set(medians) == parts | {"verify"}
    assert all(medians[kind].endswith("exit statuses [0]") for kind in parts)
    assert medians["verify"].endswith("exit statuses [1]")


_CPU_TRAINING = """
import json, time
import torch
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.cuda.nvtx.mark = lambda label: None  # a CPU build of torch has no NVTX to mark into
step_ms = []
for _ in range(6):
    started = time.perf_counter()
    model(torch.randn(16, 64)).sum().backward()
    optimizer.step()
    step_ms.append((time.perf_counter() - started) * 1e3)
print("step_ms " + json.dumps(step_ms))
"""


def test_steps_overhead_runs_bare_the_hook_and_a_torch_profiler_window(tmp_path):
    """benchmarks/steps_overhead.py on a CPU training loop: bare, with the hook alone, and under
    verify --profiler torch --steps 2-3, whose window the hook opens and saves in the program (the
    trace holds no GPU kernel here: verify's exit 1); when verify checked after the program ended."""
    import subprocess

    program = tmp_path / "train.py"
    program.write_text(_CPU_TRAINING)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "steps_overhead.py"), "--steps", "2-3", "--kinds", "hook,torch-steps",
         "--rounds", "1", "--warmup", "0", "--out", str(tmp_path / "out"), "--step-time", r"step_ms (\[.*\])",
         "--", sys.executable, str(program)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    medians = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("median ")}
    assert set(medians) == {"bare", "hook", "torch-steps", "bare:", "hook:", "torch-steps:"}
    # the program's own step time, found in what it printed bare (stdout) and under verify (relayed to stderr)
    assert "the program's own step time" in medians["hook:"] and "x bare (target <= 1.02x for the hook)" in medians["hook:"]
    # each against its own round's bare run, beside the medians' ratio (not for bare itself)
    assert "(paired by round: " in medians["hook"] and "(paired by round: " in medians["hook:"]
    assert "paired" not in medians["bare"] and "paired" not in medians["bare:"]
    assert any(line.startswith("median torch-steps: the program's own step time") for line in done.stdout.splitlines())
    assert medians["bare"].endswith("exit statuses [0]") and medians["hook"].endswith("exit statuses [0]")
    assert medians["torch-steps"].endswith("exit statuses [1]")
    assert list((tmp_path / "out" / "torch").glob("trace.*.json.gz"))  # the window's trace, written


def test_step_clock_times_each_step_and_the_windows_calls_in_the_program(tmp_path):
    """benchmarks/step_clock.py runs a CPU training loop bare and under verify --profiler torch
    --steps 50-52: each run's steps are clocked, and in the window's run (alone) the hook's
    profiler start, its last step() (Kineto's stop and the trace's export) and the export itself."""
    import subprocess

    program = tmp_path / "train.py"
    program.write_text(_CPU_TRAINING.replace("range(6)", "range(70)"))
    clocks = tmp_path / "clocks"
    clocks.mkdir()
    clocked = [sys.executable, str(ROOT / "benchmarks" / "step_clock.py"), str(program)]
    env = {**os.environ, "STEP_CLOCK_DIR": str(clocks)}
    for argv in (clocked, [sys.executable, "-m", "gemmscope", "verify", "--profiler", "torch", "--steps", "50-52",
                           "--expect", "bf16", "--", *clocked]):
        subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    done = subprocess.run([*clocked[:2], "--summary", str(clocks), "--steps", "50-52"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    header, bare, window = done.stdout.splitlines()
    assert bare.startswith("bare ") and "|" not in bare  # no window: no calls timed
    assert window.startswith("torch-steps ")
    start, last_step, export, json_ms = (float(v) for v in window.split("|")[1].split())
    # torch.profiler's JSON is written inside the hook's export, which the last step() holds
    assert 0 < json_ms <= export <= last_step and start > 0


def test_hook_call_cost_times_each_call_bare_outside_a_window_and_recording(torch_cpu):
    """benchmarks/hook_call_cost.py's children: each call kind timed in each run; the hook is
    really on in the hooked children (recording a GEMM call costs several times the call itself),
    and outside a window it records none (far less than recording)."""
    benchmark = load_benchmark("hook_call_cost")
    hook_path = str(benchmark.HOOK)
    bare = benchmark.run_child({}, 2000, 3, False)
    outside = benchmark.run_child({"PYTHONPATH": hook_path, "GEMMSCOPE_STEPS": benchmark._NEVER}, 2000, 3, False)
    recording = benchmark.run_child({"PYTHONPATH": hook_path}, 2000, 3, True)
    for figures in (bare, outside, recording):
        assert set(figures) == {"F.linear", "Function.apply", "optimizer.step"}
        assert all(len(samples) == 3 and min(samples) > 0 for samples in figures.values())

    def linear(figures):
        return min(figures["F.linear"])

    assert linear(recording) > 2 * linear(bare) and linear(recording) > 2 * linear(outside)


def test_window_close_times_the_hooks_own_stop_and_export(torch_cpu, tmp_path):
    """benchmarks/window_close.py runs the hook's own profiler start, Kineto's stop and the hook's
    export: a trace of the window's calls is written (and removed), each part timed."""
    benchmark = load_benchmark("window_close")
    figures = benchmark.one_window(torch_cpu, 50, 2, str(tmp_path))
    assert figures["events"] > 100 and figures["gzipped_mb"] > 0  # the 100 linear calls and their operators
    assert figures["stop_s"] > 0 and figures["export_s"] > 0
    assert not list(tmp_path.iterdir())
