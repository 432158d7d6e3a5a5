"""nsys's columnar exports (`nsys export --type parquetdir` / `arrowdir`: a folder of one file per
table) read into the same frames as its SQLite export of the same capture. The exports are made
here with real nsys from the CPU capture of every NVTX case (conftest's cpu_traces)."""

import shutil
import subprocess

import pandas as pd
import pytest

from gemmscope.profilers import nsys_runner
from gemmscope.traces.read import read_trace, trace_paths

from cli_runner import assert_one_line_error, gemmscope

pytest.importorskip("pyarrow")


@pytest.fixture(scope="module", params=["parquetdir", "arrowdir"])
def export(request, cpu_traces, nsys_bin, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param) / "nvtx_edge_cases"
    subprocess.run([nsys_bin, "export", "--type", request.param, "-o", str(folder),
                    str(cpu_traces / "nvtx_edge_cases.nsys-rep")], check=True, capture_output=True)
    return folder


@pytest.mark.parametrize("frame", ["kernels", "nvtx", "api_calls", "threads", "memops", "memory", "gpus"])
def test_the_same_frames_as_the_sqlite_export(export, cpu_traces, frame):
    sqlite, columnar = read_trace(cpu_traces / "nvtx_edge_cases.sqlite"), read_trace(export)
    assert len(getattr(sqlite, frame)) == len(getattr(columnar, frame))
    pd.testing.assert_frame_equal(getattr(sqlite, frame), getattr(columnar, frame), check_dtype=False)
    assert _meta(sqlite) == _meta(columnar)


def _meta(trace) -> dict:
    """What a trace's meta says but the command it recorded: nsys's columnar exports hold no META_DATA_CAPTURE."""
    meta = {k: v for k, v in trace.meta.items() if k != "lacks"}
    return meta | {"capture": meta["capture"] | {"command": None}}


def test_the_nvtx_cases_are_there(export, cpu_traces_expected):
    """Not two empty frames compared: the capture's ranges are read from the folder."""
    nvtx = read_trace(export).nvtx
    assert len(nvtx) > 10 and nvtx["name"].notna().all()
    assert set(nvtx["kind"]) == {"mark", "push-pop", "start-end"}


def test_a_folder_export_is_one_trace(export, tmp_path):
    assert trace_paths([export]) == [export]
    done = gemmscope("verify", "--trace", export, "--expect", "bf16")
    assert done.returncode == 2 and "holds no GPU kernels" in done.stderr, done.stderr


@pytest.mark.parametrize("command", [("report", "-o", "x.md"), ("bundle", "-o", "x.zip"), ("scrub", "-o", "x.sqlite")])
def test_what_redacts_refuses_the_folder_in_one_line(export, tmp_path, command):
    """The redactor rewrites SQLite tables: a columnar export is refused, nothing written."""
    name, flag, output = command
    done = gemmscope(name, export, flag, tmp_path / output)
    assert_one_line_error(done)
    assert "is an nsys Parquet/Arrow export" in done.stderr and not list(tmp_path.iterdir())


def test_with_its_report_beside_the_folder_is_redacted_through_it(cpu_traces, nsys_bin, tmp_path, monkeypatch):
    """As verify keeps its capture (trace.nsys-rep, trace.parquetdir): the folder is the one trace
    of its folder, and what redacts exports the report beside it to SQLite instead of refusing."""
    monkeypatch.setenv("NSYS", nsys_bin)
    report = shutil.copy(cpu_traces / "nvtx_edge_cases.nsys-rep", tmp_path / "trace.nsys-rep")
    folder = nsys_runner.export_parquet(report)
    assert folder == tmp_path / "trace.parquetdir" and trace_paths([tmp_path]) == [folder]
    done = gemmscope("scrub", folder, "-o", tmp_path / "scrubbed.sqlite")
    assert done.returncode == 0, done.stderr
    assert len(read_trace(tmp_path / "scrubbed.sqlite").nvtx) == len(read_trace(folder).nvtx) > 10
