"""Odd and damaged traces, each made from a real committed one: every case ends in one line on
stderr and exit 2 (bad input), naming the trace, the field and the first bad record; never a
traceback, never exit 1 (a precision fallback found), never a pass. NVTX ranges without a name,
which real programs push, are checked as any other and listed as unnamed. And traces given together
that are one capture twice are read once; traces that cannot be ranks of one job are refused,
while the ranks of a real job still read as one."""

import gzip
import json
import lzma
import resource
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gemmscope.cli import main

from fixture_paths import GPU
from schema_check import assert_valid
from trace_mutation import (
    KERNELS,
    RUNTIME,
    altered_sqlite,
    first_event,
    kineto_document,
    same_session_as,
    without_constraints,
    write_kineto,
)

SMALL = GPU / "te_linear_bf16.sqlite.xz"
FAILING = GPU / "train_mixed.sqlite.xz"  # a run whose check fails alone (45 mismatches)
KINETO = GPU / "kineto" / "te_ops_sequential_fp8-current.json.gz"
RANK0, RANK1 = (GPU / "corpus" / f"fsdp_fp8_2gpu_rank{rank}.sqlite.xz" for rank in (0, 1))


def refused(args: list[str], *said: str) -> str:
    """Run the CLI: exit 2, one line on stderr that says each of `said`; that line."""
    done = CliRunner().invoke(main, args)
    assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)
    assert "Traceback" not in done.output
    assert done.exit_code == 2, done.output
    (line,) = done.stderr.splitlines()
    assert line.startswith("gemmscope: error: ")
    for words in said:
        assert words in line, line
    assert "gemmscope-" not in line and ".partial" not in line  # no internal scratch path
    return line


NSYS_DAMAGE = {
    "start is REAL": ([f"UPDATE {KERNELS} SET start = start + 0.5 WHERE rowid = 3"],
                      f"{KERNELS}.start is", "in row 3, not an integer"),
    "start is TEXT": ([f"UPDATE {KERNELS} SET start = 'soon' WHERE rowid = 3"], "start is 'soon' in row 3"),
    "correlation id is TEXT": ([f"UPDATE {KERNELS} SET correlationId = 'x' WHERE rowid = 2"],
                               "correlationId is 'x' in row 2"),
    "end is NULL": ([without_constraints(KERNELS), f"UPDATE {KERNELS} SET end = NULL WHERE rowid = 3"],
                    "GPU kernel records that have no end time: 1"),
    "negative durations": ([f"UPDATE {KERNELS} SET end = start - 90000"], "GPU kernel records that end before"),
    "end at INT64 max": ([f"UPDATE {KERNELS} SET end = 9223372036854775807 WHERE rowid = 3"],
                         "last longer than any capture"),
    "a time far off": ([f"UPDATE {KERNELS} SET start = 9223372036854775000, end = 9223372036854775807 "
                        "WHERE rowid = 3"], "spread over", "days"),
    "every kernel twice": ([f"INSERT INTO {KERNELS} SELECT * FROM {KERNELS}"], "repeat another exactly"),
    "CUDA runtime table dropped": ([f"DROP TABLE {RUNTIME}"], "no CUDA API call table", "is missing"),
    "StringIds table dropped": (["DROP TABLE StringIds"], "not an Nsight Systems export (no StringIds table)"),
    "NVTX start is TEXT": (["UPDATE NVTX_EVENTS SET start = 'zz' WHERE rowid = 5"], "NVTX_EVENTS.start is 'zz'"),
    "GPU compute capability is TEXT": (["UPDATE TARGET_INFO_GPU SET computeMajor = 'x'"],
                                       "TARGET_INFO_GPU.computeMajor is 'x'"),
}


@pytest.mark.parametrize("case", NSYS_DAMAGE)
def test_a_damaged_nsys_export_is_one_line(tmp_path, case):
    statements, *said = NSYS_DAMAGE[case]
    trace = altered_sqlite(SMALL, tmp_path / "damaged.sqlite", *statements)
    for command in (["analyze"], ["verify", "--trace"], ["diagnose"]):
        refused([*command, str(trace)], "damaged.sqlite", *said)


def test_ranges_without_a_name_are_listed_as_unnamed_in_every_format(tmp_path):
    """NVTX ranges that carry no name (no text and no registered string, as nvtxRangePushEx with
    a colour alone pushes them) around every GEMM: the check stands, and every format lists them
    as "(unnamed range)" where it lists a launch's ranges (the Markdown page's per-GEMM details,
    every launch of CSV, JSON lines and --per-launch JSON, valid against its schema)."""
    trace = altered_sqlite(SMALL, tmp_path / "unnamed.sqlite", without_constraints("NVTX_EVENTS"),
                           'UPDATE NVTX_EVENTS SET "text" = NULL, textId = NULL')
    for fmt in ("table", "json", "csv", "jsonl", "markdown"):
        done = CliRunner().invoke(main, ["analyze", "--expect", "bf16", "--verbose", "--format", fmt, str(trace)])
        assert done.exit_code == 0 and "Traceback" not in done.output, done.output[-2000:]
        assert ("(unnamed range)" in done.stdout) == (fmt in ("csv", "jsonl", "markdown")), fmt
    done = CliRunner().invoke(main, ["analyze", "--expect", "bf16", "--per-launch", "--format", "json", str(trace)])
    document = json.loads(done.stdout)
    assert_valid(document, "analyze")
    assert document["gemms"] and all(launch["ranges"] and set(launch["ranges"]) == {"(unnamed range)"}
                                     for launch in document["gemms"])


def test_negative_durations_never_pass(tmp_path):
    # a run that passes as captured: with its kernels ending before they start, it is refused
    trace = altered_sqlite(SMALL, tmp_path / "t.sqlite", f"UPDATE {KERNELS} SET end = start - 90000")
    assert CliRunner().invoke(main, ["analyze", "--expect", "bf16", str(SMALL)]).exit_code == 0
    refused(["analyze", "--expect", "bf16", str(trace)], "end before they start")


def _kernel(document: dict) -> dict:
    return first_event(document, "kernel")


def _in_head(document: dict, **fields) -> None:
    """Kineto's head: the keys it writes before traceEvents."""
    events = document.pop("traceEvents")
    document.update(fields, traceEvents=events)


KINETO_DAMAGE = {
    "event without ts": (lambda d: _kernel(d).pop("ts"), "has no ts"),
    "null dur": (lambda d: _kernel(d).update(dur=None), "dur is None, not a duration"),
    "string dur": (lambda d: _kernel(d).update(dur="12"), "dur is '12'"),
    "dur of 1e300": (lambda d: _kernel(d).update(dur=1e300), "beyond any duration"),
    "negative dur": (lambda d: [e.update(dur=-5) for e in d["traceEvents"] if e.get("cat") == "kernel"],
                     "GPU kernel records that end before they start"),
    "ts at INT64 max": (lambda d: _kernel(d).update(ts=9223372036854775.807), "beyond any time"),
    "an event that is a number": (lambda d: d["traceEvents"].insert(3, 5), "event 4 of traceEvents is 5"),
    "an event that is a list": (lambda d: d["traceEvents"].insert(3, [1, 2]), "is [1, 2], not an object"),
    "args that are a list": (lambda d: _kernel(d).update(args=[1]), "args is [1], not an object"),
    "a name that is a list": (lambda d: _kernel(d).update(name=["a"]), "name is ['a'], not text"),
    "a correlation id that is text": (lambda d: _kernel(d)["args"].update(correlation="abc"),
                                      "args.correlation is 'abc'"),
    "every event twice": (lambda d: d["traceEvents"].extend(list(d["traceEvents"])), "repeat another exactly"),
    "distributedInfo not an object": (lambda d: _in_head(d, distributedInfo=[0]), "distributedInfo is [0]"),
    "distributedInfo's rank is text": (lambda d: _in_head(d, distributedInfo={"rank": "0"}), "rank is '0'"),
    "deviceProperties not a list": (lambda d: _in_head(d, deviceProperties=7), "deviceProperties is 7"),
}


@pytest.mark.parametrize("case", KINETO_DAMAGE)
def test_a_damaged_torch_profiler_trace_is_one_line(tmp_path, case):
    damage, said = KINETO_DAMAGE[case]
    document = kineto_document(KINETO)
    damage(document)
    trace = write_kineto(document, tmp_path / "damaged.json")
    for command in (["analyze"], ["verify", "--trace"], ["report", "-o", str(tmp_path / "r.md")]):
        refused([*command, str(trace)], "damaged.json", said)
    assert not (tmp_path / "r.md").exists()


def test_a_nan_duration_is_one_line(tmp_path):
    plain = gzip.decompress(KINETO.read_bytes()).decode()
    at = plain.index('"dur": ', plain.index('"cat": "kernel"'))
    end = plain.index(",", at)
    (tmp_path / "nan.json").write_text(plain[:at] + '"dur": NaN' + plain[end:])
    refused(["analyze", str(tmp_path / "nan.json")], "nan.json is a truncated or damaged torch.profiler trace")


def _limited(megabytes: int):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))
    return limit


@pytest.mark.parametrize("command", [["verify", "--trace"], ["report", "-o", "r.md"], ["analyze"]])
def test_a_nesting_bomb_ends_in_one_line_in_bounded_time_and_memory(tmp_path, command):
    """200 KB of brackets inside traceEvents took tens of GB to parse; it is refused as it is read."""
    bomb = tmp_path / "bomb.json"
    bomb.write_text('{"traceEvents": ' + "[" * 200_000)
    # named as given, from its folder: a path under the user's home would read redacted
    done = subprocess.run([sys.executable, "-m", "gemmscope", *command, bomb.name], cwd=tmp_path, timeout=10,
                          capture_output=True, text=True, preexec_fn=_limited(1024))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line == (f"gemmscope: error: {bomb.name} is a damaged trace: its JSON nests deeper than 64 levels (at byte "
                    "79), which no torch.profiler trace does")
    assert not (tmp_path / "r.md").exists()


@pytest.mark.parametrize("depth", [10, 62, 63, 1000, 20_000])
def test_shallower_nesting_is_no_traceback(tmp_path, depth):
    # an event that is a list nested `depth` deep: two levels hold it (the document, traceEvents)
    text = gzip.decompress(KINETO.read_bytes()).decode()
    trace = tmp_path / "nested.json"
    trace.write_text(text.replace('"traceEvents": [', '"traceEvents": [' + "[" * depth + "1" + "]" * depth + ", ", 1))
    refused(["analyze", str(trace)], "nested.json is a damaged trace",
            "is [[" if depth + 2 <= 64 else "nests deeper than 64 levels")


def test_json_that_is_no_trace_says_what_it_is(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 1024}')
    refused(["analyze", str(tmp_path / "config.json")], "config.json is JSON but not a torch.profiler trace")
    (tmp_path / "t.json.xz").write_bytes(lzma.compress(gzip.decompress(KINETO.read_bytes())))
    refused(["analyze", str(tmp_path / "t.json.xz")], "t.json.xz is xz-compressed JSON", "xz -d")


def test_an_empty_trace_name_is_refused_not_the_current_folder():
    for args in (["analyze", ""], ["verify", "--trace", ""], ["verify", "--trace", str(SMALL), ""], ["diagnose", ""]):
        refused(args, "an empty trace name was given")


def test_report_names_the_input_not_its_scrubbed_copy(tmp_path):
    trace = altered_sqlite(SMALL, tmp_path / "input.sqlite", f"UPDATE {KERNELS} SET end = start - 90000")
    line = refused(["report", str(trace), "-o", str(tmp_path / "r.md")], f"{trace} is a damaged trace")
    assert "/0.sqlite" not in line


# --- identity of traces -------------------------------------------------------------------------


def _gemm_launches(args: list[str]) -> tuple[int, str, int]:
    done = CliRunner().invoke(main, [*args, "--quiet"])
    ran = next(line for line in done.stdout.splitlines() if line.startswith("Ran:"))
    return int(ran.split()[1]), done.stderr, done.exit_code


def test_the_same_capture_twice_is_read_once(tmp_path):
    """X.sqlite beside X.sqlite.xz (what `xz -dk` leaves), and a copy matched by a second glob."""
    (tmp_path / FAILING.name).write_bytes(FAILING.read_bytes())
    altered_sqlite(FAILING, tmp_path / "train_mixed.sqlite")
    alone, _, code = _gemm_launches(["analyze", str(FAILING)])
    twice, stderr, code_twice = _gemm_launches(["analyze", str(tmp_path)])
    assert (twice, code_twice) == (alone, code) == (81, 1)
    assert "train_mixed.sqlite.xz is the capture" in stderr and "read once" in stderr
    (tmp_path / "copy.sqlite.xz").write_bytes(FAILING.read_bytes())
    by_globs, stderr, _ = _gemm_launches(["analyze", str(tmp_path / "*.xz"), str(tmp_path / "train_*")])
    assert by_globs == alone and stderr.count("read once") == 2


def test_a_failing_run_never_passes_beside_another():
    """Alone, train_mixed fails (exit 1); given with an unrelated run it used to PASS (its GEMMs
    left "outside every mapped range, not checked"). Two runs are now refused, never merged."""
    assert CliRunner().invoke(main, ["verify", "--trace", str(FAILING)]).exit_code == 1
    for other, why in ((GPU / "corpus" / "megatron_gpt_fp8-delayed.sqlite.xz", "days apart"),
                       (GPU / "torch_gemms.sqlite.xz", "min apart"),
                       (GPU / "train_clean.sqlite.xz", "one after the other")):
        for command in (["verify", "--trace"], ["analyze"]):
            refused([*command, str(FAILING), str(other)], "are not ranks of one job", why)


def test_the_ranks_of_a_real_job_read_as_one(tmp_path):
    done = CliRunner().invoke(main, ["verify", "--quiet", "--trace", str(RANK0), str(RANK1)])
    assert done.exit_code == 0 and "on 2 ranks" in done.stdout and "ranks 0, 1" in done.stdout


def test_the_same_rank_twice_is_refused(tmp_path):
    # rank 0's capture, as if captured again beside the first (its own session): two rank 0s
    again = altered_sqlite(RANK0, tmp_path / "again.sqlite",
                           "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + 1")
    refused(["analyze", str(RANK0), str(again)], "are not ranks of one job", "both record rank 0")


def test_different_commands_are_refused_and_rank_arguments_are_not(tmp_path):
    # the committed captures' commands are redacted (which tells nothing): written back in
    def command(script: str, rank: int) -> str:
        return (f"UPDATE META_DATA_CAPTURE SET value = 'python' WHERE name = 'PROCESS_0:COMMAND'; "
                f"UPDATE META_DATA_CAPTURE SET value = '{script}' WHERE name = 'PROCESS_0:ARGUMENT_0'; "
                f"UPDATE META_DATA_CAPTURE SET value = '--node_rank={rank}' WHERE name LIKE 'PROCESS_0:ARGUMENT_%' "
                "AND name != 'PROCESS_0:ARGUMENT_0'")

    rank0 = altered_sqlite(RANK0, tmp_path / "rank0.sqlite", command("train.py", 0))
    rank1 = altered_sqlite(RANK1, tmp_path / "rank1.sqlite", command("train.py", 1))
    other = altered_sqlite(RANK1, tmp_path / "other.sqlite", command("evaluate.py", 1))
    done = CliRunner().invoke(main, ["analyze", str(rank0), str(rank1)])
    assert done.exit_code == 0, done.output
    refused(["analyze", str(rank0), str(other)], "are not ranks of one job", "different commands")


def test_a_trace_made_a_rank_of_the_job_keeps_its_own_recipe(tmp_path):
    """A trace without a hook record of its own is never judged against another trace's recipe."""
    plain = altered_sqlite(GPU / "torch_gemms.sqlite.xz", tmp_path / "plain.sqlite", same_session_as(FAILING))
    done = CliRunner().invoke(main, ["analyze", str(FAILING), str(plain), "--format", "json"])
    assert done.exit_code == 1, done.output
    together = json.loads(done.stdout)["summary"]
    alone = json.loads(CliRunner().invoke(main, ["analyze", str(FAILING), "--format", "json"]).stdout)["summary"]
    assert together["mismatches"] == alone["mismatches"] == 45
    assert together["gemm_launches"] == alone["gemm_launches"] + 21
