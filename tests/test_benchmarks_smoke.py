"""The replicas benchmarks/trace_scale.py times gemmscope on: a real export grown 3× is still an
export gemmscope reads, labelled as a replica, with every GEMM of the seed exactly 3 times and the
same verdicts."""

import importlib.util
import sqlite3
import sys
from collections import Counter
from contextlib import closing
from pathlib import Path

from gemmscope.trace_parser import read_trace
from gemmscope.verify import check

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "tests" / "fixtures" / "gpu" / "corpus" / "fsdp_fp8_1gpu.sqlite.xz"
FACTOR = 3


def load_benchmark():
    spec = importlib.util.spec_from_file_location("trace_scale", ROOT / "benchmarks" / "trace_scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rows(export: Path, sql: str) -> int:
    with closing(sqlite3.connect(export)) as db:
        return db.execute(sql).fetchone()[0]


def verdicts(export: Path) -> Counter:
    gemms = check(read_trace(export)).gemms
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
