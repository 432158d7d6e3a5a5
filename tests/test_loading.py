"""Many rank traces at once: a local process pool and a Dask cluster give what reading them one
by one gives, the same capture given twice is read once, and an unreadable rank trace is reported
without dropping the others."""

import shutil
from collections import Counter
from pathlib import Path

import pytest

from gemmscope.assembly import loading
from gemmscope.diagnosing.diagnosis import diagnose
from gemmscope.judging.judgement import judge

from fixture_paths import CORPUS


@pytest.fixture(scope="module")
def rank_traces(tmp_path_factory) -> list[Path]:
    """Four per-rank traces: the two real ranks of TE's FSDP example, each twice, renamed (copies
    of one capture: read once)."""
    folder = tmp_path_factory.mktemp("ranks")
    paths = []
    for rank in range(4):
        path = folder / f"fsdp_rank{rank}.sqlite.xz"
        shutil.copy(CORPUS / f"fsdp_fp8_2gpu_rank{rank % 2}.sqlite.xz", path)
        paths.append(path)
    return paths


def verdicts(result) -> Counter:
    return Counter(zip(result.gemms["trace"], result.gemms["te_module"], result.gemms["te_pass"], result.gemms["verdict"]))


def test_process_pool_gives_what_one_by_one_gives(rank_traces):
    one_by_one = judge(loading.load(rank_traces, workers=1))
    pooled = judge(loading.load(rank_traces, workers=2))
    assert verdicts(pooled) == verdicts(one_by_one)
    assert len(pooled.gemms) == 2 * 72
    assert [t.path.name for t in pooled.job.traces] == [p.name for p in rank_traces[:2]]
    assert [(Path(r["trace"]).name, Path(r["same_as"]).name) for r in pooled.job.repeated] == [
        ("fsdp_rank2.sqlite.xz", "fsdp_rank0.sqlite.xz"), ("fsdp_rank3.sqlite.xz", "fsdp_rank1.sqlite.xz")]


def test_dask_local_cluster_gives_the_same(rank_traces):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        on_cluster = judge(loading.load(rank_traces, scheduler=cluster.scheduler_address))
    assert verdicts(on_cluster) == verdicts(judge(loading.load(rank_traces, workers=1)))


def test_an_unreadable_rank_is_reported_and_the_others_checked(rank_traces, tmp_path):
    broken = tmp_path / "fsdp_rank7.sqlite"
    broken.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    result = judge(loading.load([*rank_traces[:2], broken], workers=2))
    assert len(result.gemms) == 2 * 72
    (bad,) = result.job.unreadable
    assert bad["trace"] == "fsdp_rank7.sqlite" and bad["rank"] == 7 and "damaged" in bad["error"]
    assert result.failed


def test_unreachable_scheduler_is_one_clear_error(rank_traces):
    pytest.importorskip("distributed")
    from gemmscope.errors import InputError

    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        loading.load(rank_traces, scheduler="tcp://127.0.0.1:9")


def test_ranks_of_a_job_are_one_row_each(rank_traces):
    # the four traces are ranks 0 and 1, each marked with its rank by the hook, and a copy of
    # each: the breakdown has one row per rank, each copy's kernels counted once
    result = judge(loading.load(rank_traces, workers=2))
    times = diagnose(result).breakdown
    assert list(times["rank"]) == ["0", "1"]
    per_rank = result.job.kernels.groupby(result.job.kernels["rank"].astype(str)).size()
    assert list(times["kernel_launches"]) == [per_rank["0"], per_rank["1"]]
