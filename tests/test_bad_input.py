"""No internal error (exit 70) on what a trace may hold: kernels a profiler recorded with no
duration are valid data and analysed; a StringIds value that is a blob, a Parquet export with text
in a time column, or one of its files cut short, is bad input: one line on stderr, exit 2, nothing
written. Each trace is a real committed one altered (tests/trace_mutation.py); the hypothesis
property over Parquet exports is tests/test_fuzz_parquet.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_hostile_traces import refused

from gemmscope.cli import main

from fixture_paths import GPU, GPU_KINETO
from trace_mutation import KERNELS, altered_sqlite, kineto_document, parquet_export, write_kineto

SMALL = GPU / "te_linear_bf16.sqlite.xz"  # PASS with --expect bf16
FAILING = GPU / "train_mixed.sqlite.xz"  # 45 mismatches
KINETO = GPU_KINETO / "te_ops_sequential_fp8-current.json.gz"  # PASS


def _zero_kineto(out: Path) -> Path:
    document = kineto_document(KINETO)
    for event in document["traceEvents"]:
        if isinstance(event, dict) and event.get("cat") == "kernel":
            event["dur"] = 0
    return write_kineto(document, out)


ZERO = {
    "nsys, passing": (lambda d: altered_sqlite(SMALL, d / "z.sqlite", f"UPDATE {KERNELS} SET end = start"),
                      ["--expect", "bf16"], 0),
    "nsys, failing": (lambda d: altered_sqlite(FAILING, d / "z.sqlite", f"UPDATE {KERNELS} SET end = start"), [], 1),
    "torch.profiler": (lambda d: _zero_kineto(d / "z.json"), [], 0),
}


@pytest.mark.parametrize("case", ZERO)
def test_kernels_without_duration_are_analysed(tmp_path, case):
    """Every kernel at zero duration: the check's answer is the trace's own (its mismatches
    counted as before), and the verdict says the kernels recorded no duration."""
    make, expect, code = ZERO[case]
    trace = make(tmp_path)
    for command in (["analyze"], ["verify", "--trace"], ["diagnose"]):
        done = CliRunner().invoke(main, [*command[:1], *expect, *command[1:], str(trace)])
        assert done.exit_code == code, (command, done.exit_code, done.output[-1500:])
        assert "their kernels recorded no duration" in done.stdout, done.stdout[:600]
    document = json.loads(CliRunner().invoke(main, ["analyze", *expect, "--format", "json", str(trace)]).stdout)
    assert document["summary"]["state"] == ("pass" if code == 0 else "fail")
    for fmt in ("csv", "markdown", "jsonl"):
        assert CliRunner().invoke(main, ["analyze", *expect, "--format", fmt, str(trace)]).exit_code == code, fmt
    done = CliRunner().invoke(main, ["report", *expect, str(trace), "-o", str(tmp_path / "r.html")])
    assert done.exit_code == 0 and (tmp_path / "r.html").is_file(), done.output[-1500:]


@pytest.mark.parametrize("blob", ["x'00ff'", "CAST('sm90_xmma_gemm_bf16bf16' AS BLOB)"])
def test_a_blob_among_the_strings_is_refused_by_every_command(tmp_path, blob):
    """nsys writes every StringIds value as text: a blob is damage, refused by what reads the trace
    and by what redacts it (scrub, report, bundle read StringIds with SQL), never a traceback."""
    trace = altered_sqlite(SMALL, tmp_path / "blob.sqlite", f"UPDATE StringIds SET value = {blob} WHERE rowid = 3")
    out = tmp_path / "out"
    out.mkdir()
    for command in (["analyze"], ["diagnose"], ["scrub", "-o", str(out / "s.sqlite")],
                    ["report", "-o", str(out / "r.md")], ["bundle", "-o", str(out / "b.zip")]):
        refused([*command, str(trace)], "blob.sqlite is a damaged trace", "StringIds.value is a BLOB of ",
                "in row 3, not text")
    assert not list(out.iterdir())


@pytest.fixture(scope="module")
def parquet(tmp_path_factory) -> Path:
    pytest.importorskip("pyarrow")
    return parquet_export(SMALL, tmp_path_factory.mktemp("parquet") / "te_linear_bf16")


def _copy(export: Path, to: Path) -> Path:
    return Path(shutil.copytree(export, to / export.name))


def test_the_parquet_export_reads_as_its_sqlite_export(parquet):
    """The export the damage below is planted in: as made, the same answer as the SQLite export."""
    done = CliRunner().invoke(main, ["analyze", "--expect", "bf16", str(parquet)])
    assert done.exit_code == 0 and done.stdout.startswith("PASS"), done.output[-1500:]


@pytest.mark.parametrize("table,column", [(KERNELS, "start"), (KERNELS, "end"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "start"),
                                          ("NVTX_EVENTS", "end"), ("StringIds", "id")])
def test_text_in_a_parquet_time_or_id_column_is_one_line(parquet, tmp_path, table, column):
    import pyarrow
    import pyarrow.parquet

    export = _copy(parquet, tmp_path)
    file = export / f"{table}.parquet"
    data = pyarrow.parquet.read_table(file)
    values = [None if v is None else str(v) for v in data.column(column).to_pylist()]
    values[2] = "soon"
    data = data.set_column(data.schema.get_field_index(column), column, pyarrow.array(values, pyarrow.string()))
    pyarrow.parquet.write_table(data, file)
    for command in (["analyze"], ["verify", "--trace"], ["diagnose"]):
        refused([*command, str(export)], f"{export.name} is a damaged trace", f"{table}.{column} is 'soon' in row 3",
                "not an integer")


def test_binary_strings_in_a_parquet_export_are_one_line(parquet, tmp_path):
    import pyarrow
    import pyarrow.parquet

    export = _copy(parquet, tmp_path)
    file = export / "StringIds.parquet"
    data = pyarrow.parquet.read_table(file)
    values = pyarrow.array([v.encode() for v in data.column("value").to_pylist()], pyarrow.binary())
    pyarrow.parquet.write_table(data.set_column(1, "value", values), file)
    refused(["analyze", str(export)], "StringIds.value is a BLOB of ", "in row 1, not text")


@pytest.mark.parametrize("table", [KERNELS, "StringIds", "META_DATA_EXPORT", "NVTX_EVENTS"])
@pytest.mark.parametrize("cut", ["empty", "its magic only", "half", "its footer lost"])
def test_a_truncated_parquet_file_is_one_line(parquet, tmp_path, table, cut):
    export = _copy(parquet, tmp_path)
    file = export / f"{table}.parquet"
    data = file.read_bytes()
    kept = {"empty": 0, "its magic only": 4, "half": len(data) // 2, "its footer lost": len(data) - 8}[cut]
    file.write_bytes(data[:kept])
    for command in (["analyze"], ["verify", "--trace"], ["diagnose"]):
        refused([*command, str(export)], f"{export.name} is a damaged trace", f"{table}.parquet could not be read")
