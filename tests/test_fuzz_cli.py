"""Property test over the CLI and both readers, on real traces altered: bad paths, truncated
files, fields of the wrong type or beyond physics, records twice, tables dropped, JSON nested deep.
Whatever comes in: no traceback; either the right answer (the trace's own verdict, exit 0) or one
line on stderr and exit 2 — never exit 1, the code that says a precision fallback was found; memory
bounded; no output left half-written (nor at all after a failure); no planted secret in what scrub
writes. GEMMSCOPE_FUZZ_EXAMPLES sets how many cases each property tries (CI: a few dozen)."""

import copy
import functools
import gzip
import lzma
import os
import resource
import sqlite3
import string
from contextlib import closing
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemmscope.cli import main

from fixture_paths import GPU
from planted_secrets import add_string
from sqlite_text import all_text
from trace_mutation import KERNELS, RUNTIME, kineto_document, sqlite_bytes, without_constraints, write_kineto

SOURCE = GPU / "te_linear_bf16.sqlite.xz"  # checked with --expect bf16: PASS, exit 0
KINETO = GPU / "kineto" / "te_ops_sequential_fp8-current.json.gz"  # PASS, exit 0
EXAMPLES = int(os.environ.get("GEMMSCOPE_FUZZ_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@functools.cache
def raw_trace() -> bytes:
    return sqlite_bytes(SOURCE)


def _check_outcome(done, out: Path | None = None) -> None:
    """No traceback; exit 0 (the trace's own answer) or 2 with one line; nothing half-written."""
    assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)
    assert "Traceback" not in done.output
    assert done.exit_code in (0, 2), done.output
    if done.exit_code == 2:
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("gemmscope: error: "), done.stderr
        assert "gemmscope-" not in done.stderr and ".partial" not in done.stderr, done.stderr
        assert out is None or not out.exists()
    if out is not None:
        assert not list(out.parent.glob("*.partial"))


def _checked_as_before(done) -> None:
    """A mutation the readers took: the answer is the real trace's (PASS), or one line, exit 2."""
    _check_outcome(done)
    if done.exit_code == 0:
        assert done.stdout.startswith("PASS"), done.stdout[:300]


names = st.one_of(st.just("missing.sqlite"), st.just("folder"), st.just("x" * 300 + ".sqlite"),
                  st.text(string.ascii_letters + " -_.é", min_size=1, max_size=40).map(lambda s: s + ".sqlite"),
                  st.just("a.nsys-rep"), st.just("notes.sqlite.xz"))


@SETTINGS
@given(command=st.sampled_from(["analyze", "scrub", "report", "bundle"]), name=names,
       cut=st.one_of(st.none(), st.integers(min_value=0, max_value=200_000)), compress=st.booleans())
def test_bad_inputs_are_one_line(tmp_path_factory, command, name, cut, compress):
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "folder").mkdir()
    target = folder / name
    if name not in ("missing.sqlite", "folder") and len(name) < 255:
        data = raw_trace() if cut is None else raw_trace()[:cut]
        target.write_bytes(lzma.compress(data) if compress and name.endswith(".xz") else data)
    out = folder / "out" / ("shared.sqlite" if command == "scrub" else "issue.zip" if command == "bundle" else "r.md")
    out.parent.mkdir()
    args = [command, str(target)] + (["--expect", "bf16"] if command == "analyze" else ["-o", str(out)])
    _check_outcome(CliRunner().invoke(main, args), out)


SECRETS = st.sampled_from([
    lambda r: "hf_" + r * 3, lambda r: "ghp_" + r * 3, lambda r: "AKIA" + (r + r)[:16].upper(), lambda r: "sk-ant-" + r * 2,
    lambda r: f"{r[:8]}@example-corp.com", lambda r: f"node-{r[:8]}.corp.example.com", lambda r: f"--password={r}",
    lambda r: f"/home/{r[:8]}/ckpt", lambda r: f"WANDB_API_KEY={r}", lambda r: "xoxb-" + r * 2,
])


# "zq" and six distinct characters: a random part no real trace holds by chance (not "00000000")
RANDOM_PARTS = st.text(string.ascii_lowercase + string.digits, min_size=10, max_size=10).filter(
    lambda s: len(set(s)) >= 6).map(lambda s: "zq" + s)


@SETTINGS
@given(make=SECRETS, random_part=RANDOM_PARTS,
       where=st.sampled_from(["StringIds", "NVTX_EVENTS"]))
def test_planted_secret_never_survives_scrub(tmp_path_factory, make, random_part, where):
    folder = tmp_path_factory.mktemp("plant")
    trace = folder / "t.sqlite"
    trace.write_bytes(raw_trace())
    secret = make(random_part)
    with closing(sqlite3.connect(trace)) as conn:
        if where == "StringIds":
            add_string(conn, f"out {secret}\n")
        else:
            conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                         "VALUES (1, NULL, 34, ?, 0, 0)", (f"step {secret}",))
        conn.commit()
    out = folder / "shared.sqlite"
    done = CliRunner().invoke(main, ["scrub", str(trace), "-o", str(out)])
    _check_outcome(done, out)
    assert done.exit_code == 0
    text = "\n".join(all_text(out))
    # every secret carries at least the first 8 random characters, as written or upper-cased
    assert random_part[:8] not in text and random_part[:8].upper() not in text, secret
    assert "gemmscope: redacted: " in done.stderr and random_part[:8] not in done.output


# --- the nsys reader: fields it reads, given values no nsys writes, or structure altered ---------

NSYS_FIELDS = [(KERNELS, c) for c in ("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                      "demangledName", "shortName")] + \
              [(RUNTIME, c) for c in ("start", "end", "globalTid", "correlationId", "nameId")] + \
              [("NVTX_EVENTS", c) for c in ("start", "end", "eventType", "globalTid", "textId", "text")] + \
              [("CUPTI_ACTIVITY_KIND_MEMCPY", c) for c in ("start", "end", "bytes")] + \
              [("TARGET_INFO_GPU", c) for c in ("id", "computeMajor", "smCount")] + [("StringIds", "value")]
SQL_VALUES = ["'text'", "0.5", "1e3", "NULL", "9223372036854775807", "-9223372036854775808", "-1", "0",
              "4611686018427387904", "x'00ff'", "start + 1", "start - 1000000"]
# Names are data: another valid id or text is another name (a GEMM renamed is no GEMM: a right
# "no GEMM ran", exit 1). They get only values no nsys writes, or ids no string has.
NAMES = {"demangledName", "shortName", "nameId", "textId", "value"}
NAME_VALUES = ["'text'", "0.5", "NULL", "x'00ff'", "9223372036854775807", "-1"]
STRUCTURE = [f"INSERT INTO {KERNELS} SELECT * FROM {KERNELS}", f"INSERT INTO {RUNTIME} SELECT * FROM {RUNTIME}",
             f"DROP TABLE {RUNTIME}", f"DELETE FROM {RUNTIME}", f"DROP TABLE {KERNELS}", "DROP TABLE StringIds",
             "DROP TABLE NVTX_EVENTS", "DROP TABLE META_DATA_EXPORT", "DELETE FROM StringIds",
             "DROP TABLE TARGET_INFO_GPU", "DROP TABLE ANALYSIS_DETAILS",
             "INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS"]


def _update(conn, table: str, column: str, value: str, row: int | None) -> None:
    where = "" if row is None else f" WHERE rowid = {row}"
    try:
        conn.execute(f'UPDATE {table} SET "{column}" = {value}{where}')
    except sqlite3.IntegrityError:  # NOT NULL: as a hand-made export without the constraint would hold it
        conn.executescript(without_constraints(table))
        conn.execute(f'UPDATE {table} SET "{column}" = {value}{where}')
    except sqlite3.OperationalError:  # `start ± …` in a table without start
        pass


@SETTINGS
@given(changes=st.lists(st.tuples(st.sampled_from(NSYS_FIELDS), st.sampled_from(SQL_VALUES),
                                  st.one_of(st.none(), st.integers(1, 6))), min_size=1, max_size=3),
       structure=st.one_of(st.none(), st.sampled_from(STRUCTURE)))
def test_nsys_fields_of_any_type_or_size(tmp_path_factory, changes, structure):
    trace = tmp_path_factory.mktemp("nsys") / "t.sqlite"
    trace.write_bytes(raw_trace())
    with closing(sqlite3.connect(trace)) as conn:
        for (table, column), value, row in changes:
            if column in NAMES and value not in NAME_VALUES:
                value = NAME_VALUES[SQL_VALUES.index(value) % len(NAME_VALUES)]
            if table == "StringIds" and value not in ("NULL", "x'00ff'"):
                value = "x'00ff'"
            _update(conn, table, column, value, row)
        if structure:
            conn.executescript(structure)
        conn.commit()
    checked_as_before_or_nothing_launched(trace, _without_kernels)


def checked_as_before_or_nothing_launched(trace: Path, without_kernels) -> None:
    """`analyze --expect bf16` of an altered trace: as _checked_as_before, or, where no kernel is
    left (`without_kernels` of the trace), that answer."""
    done = CliRunner().invoke(main, ["analyze", "--expect", "bf16", str(trace)])
    if done.exit_code == 1 and without_kernels(trace):
        # CUDA calls and no kernel: a program that launched none (or whose launches failed), the
        # answer for such a trace (exit 1), whatever made it so
        assert done.stderr.strip().endswith("its CUDA calls were captured, and none launched one: no GEMM ran at bf16")
        return
    _checked_as_before(done)


def _without_kernels(trace: Path) -> bool:
    with closing(sqlite3.connect(trace)) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return KERNELS not in tables or not conn.execute(f"SELECT COUNT(*) FROM {KERNELS}").fetchone()[0]


# --- the torch.profiler reader: the same, on a real Kineto trace ---------------------------------

JSON_VALUES = st.sampled_from([None, "x", "12", 1e300, -1e300, -5.0, 0, [], {}, [1], True, 2**70, -(2**70),
                               9223372036854775.807, {"a": [[1]]}])
EVENT_FIELDS = ["ts", "dur", "name", "cat", "args", "pid", "tid", "ph", "args.correlation", "args.device",
                "args.stream", "args.bytes", "event"]


def _set(events: list, at: int, field: str, value) -> None:
    value = copy.deepcopy(value)  # the strategy's lists and dicts are shared between changes
    event = events[at]
    if field == "event":
        events[at] = value
    elif not isinstance(event, dict):
        return
    elif field.startswith("args."):
        if isinstance(event.get("args"), dict):
            event["args"][field[5:]] = value
    elif value is None and field in ("ts", "dur"):
        event.pop(field, None)
    else:
        event[field] = value


@SETTINGS
@given(changes=st.lists(st.tuples(st.integers(0, 2514), st.sampled_from(EVENT_FIELDS), JSON_VALUES),
                        min_size=1, max_size=3),
       structure=st.sampled_from([None, "all twice", "one twice", "reversed", "truncated"]),
       category=st.sampled_from([None, "kernel", "cuda_runtime", "cpu_op", "user_annotation"]))
def test_torch_profiler_fields_of_any_type_or_size(tmp_path_factory, changes, structure, category):
    document = kineto_document(KINETO)
    events = document["traceEvents"]
    chosen = [i for i, e in enumerate(events) if category is None or e.get("cat") == category]
    for at, field, value in changes:
        _set(events, chosen[at % len(chosen)], field, value)
    if structure == "all twice":
        events.extend(list(events))
    elif structure == "one twice":
        events.append(events[chosen[changes[0][0] % len(chosen)]])
    elif structure == "reversed":
        events.reverse()
    elif structure == "truncated":
        del events[len(events) // 2:]
    trace = write_kineto(document, tmp_path_factory.mktemp("kineto") / "t.json")
    _checked_as_before(CliRunner().invoke(main, ["analyze", str(trace)]))


@SETTINGS
@given(depth=st.integers(1, 3000), where=st.sampled_from(["event", "args", "head", "bare"]),
       opener=st.sampled_from(["[", '{"k": ']))
def test_json_nested_deep_is_bounded(tmp_path_factory, depth, where, opener):
    """Nesting anywhere, to any depth, closed or not: one line or the answer, in bounded memory."""
    closer = "]" if opener == "[" else "}"
    nested = opener * depth + "1" + closer * depth
    text = kineto_text()
    if where == "event":
        text = text.replace('"traceEvents": [', f'"traceEvents": [{nested}, ', 1)
    elif where == "args":
        text = text.replace('"args": {', f'"args": {{"deep": {nested}, ', 1)
    elif where == "head":
        text = text.replace('"traceEvents": [', f'"deep": {nested}, "traceEvents": [', 1)
    else:
        text = '{"traceEvents": ' + opener * depth
    trace = tmp_path_factory.mktemp("nest") / "t.json"
    trace.write_text(text)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _checked_as_before(CliRunner().invoke(main, ["analyze", str(trace)]))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1 << 20  # KB: under 1 GB more


@functools.cache
def kineto_text() -> str:
    return gzip.decompress(KINETO.read_bytes()).decode()
