"""Remove what an nsys export records about the machine and the user before a trace is shared.

nsys stores the profiled process's whole environment (tokens, paths, user names) in the export:
`TARGET_INFO_SYSTEM_ENV` row `DeviceEnvironment`, `META_DATA_CAPTURE` rows
`PROCESS_n:ENVIRONMENT_VARIABLE`, and stray `NAME=value` strings in `StringIds`; plus the
command line, working directory, user and host names. `scrub` writes a copy without them.

What they held can turn up anywhere else too: the profiled program's stdout and stderr (nsys
keeps them in `StringIds`), NVTX text, module paths in OS-runtime call chains. So a
`redaction.Redactor` built from them (`recorded_redactor`: the values of secret-named environment
variables and options, every path the removed values name, the user's and the machine's names),
on top of every rule of the redaction policy (`redaction.RULES`), is applied to every text column
of every table. The same Redactor cleans everything gemmscope prints or writes from these traces
(`bundle`, `report`, and `analyze`, `verify`, `diagnose` and `compare` through
`redacted_traces`). Everything gemmscope reads (kernels, API calls, NVTX, GPUs, memory) is left
untouched unless it holds one of those.
"""

from __future__ import annotations

import dataclasses
import getpass
import re
import shutil
import socket
import sqlite3
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope.assembly.attribution import EnclosingRanges, LoadedTrace
from gemmscope.common import interruptible, scratch
from gemmscope.common.atomic import written_whole
from gemmscope.errors import InputError
from gemmscope.redaction.policy import Redactor
from gemmscope.redaction.secret_rules import PATH_CHAR, REDACTED, SECRET_NAME, path_user_names
from gemmscope.traces import kineto_json, nsys_tables
from gemmscope.traces.model import Trace
from gemmscope.traces.nsys_tables import command_lines
from gemmscope.traces.read import redactable_source, trace_source

# (table, key column, value column, SQL LIKE patterns of keys whose values are redacted)
_REDACT = (
    ("TARGET_INFO_SYSTEM_ENV", "name", "value", ("DeviceEnvironment", "Hostname")),
    ("META_DATA_CAPTURE", "name", "value",
     ("PROCESS_%:COMMAND", "PROCESS_%:ARGUMENT_%", "PROCESS_%:WORKING_DIR", "PROCESS_%:USER_NAME",
      "DEVICE_DISPLAY_NAME")),
    ("META_DATA_EXPORT", "name", "value", ("EXPORT_PARAM_%PATH%", "EXPORT_HOST", "EXPORT_USER")),
)
# (table, key column, value column, SQL LIKE pattern of keys whose rows are deleted)
_DELETE = (("META_DATA_CAPTURE", "name", "value", "PROCESS_%:ENVIRONMENT_VARIABLE"),)
# Keys of _REDACT whose values are the user's or the machine's name.
_NAME_KEYS = {"Hostname", "PROCESS_%:USER_NAME", "DEVICE_DISPLAY_NAME", "EXPORT_HOST", "EXPORT_USER"}
# Environment variables whose values are the user's or the machine's name.
_NAME_VARIABLES = {"USER", "LOGNAME", "USERNAME", "SUDO_USER", "HOSTNAME"}

# An environment assignment as nsys stores it among other strings: NAME=value.
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Every assignment inside a removed value: "A=x;B=y" (DeviceEnvironment), 'A="x"'
# (PROCESS_n:ENVIRONMENT_VARIABLE), "A=x" and "A=x\0B=y" (StringIds: an exec's environment block).
_ASSIGNMENTS = re.compile(r'(?:^|[;\x00])([A-Za-z_][A-Za-z0-9_]*)=(?:"([^"]*)"|([^;\x00]*))')
# An absolute path inside a removed value ("PATH=/a:/b", "PWD=/x;HOME=/y", 'NAME="/z"',
# "--out=/w", "A=/x\0B=/y"; not the "/b" of "a/b"): from its slash up to the next separator.
_PATH_IN_VALUE = re.compile(rf"(?<!{PATH_CHAR})/[^\s;:=\"',\x00]*")

_SECRET_VARIABLE = re.compile(SECRET_NAME)
_SECRET_OPTION = re.compile(rf"--?{SECRET_NAME}")
_SECRET_OPTION_ASSIGNED = re.compile(rf"--?{SECRET_NAME}=(?P<value>.*)")
# What scrub removes from nsys's own records whole (environment, command line, names): its kind;
# and of the values no rule can read, replaced whole wherever they stand: BLOBs (an NVTX payload,
# binary data in a text column) and text that is no UTF-8.
NSYS_RECORD, BLOB, UNDECODABLE = "nsys-record", "blob", "undecodable-text"
# Names shorter than this ("vm") are common words and parts of names, not a user's or a machine's own.
_MIN_NAME_LENGTH = 3


def recorded_redactor(exports: Iterable[str | Path], keep: Iterable[str] = ()) -> Redactor:
    """One Redactor for several nsys exports (the ranks of one run; SQLite, or Parquet or Arrow
    folders) and torch.profiler traces (whose host name is all they record of the machine): what any of them
    recorded is redacted in all of them; so are this machine's user and host names (those
    of the machine that writes what is shared)."""
    secret_values: list[str] = []
    paths: list[str] = []
    names: list[str] = []
    for export in exports:
        if kineto_json.is_kineto(Path(export)):
            names += kineto_json.recorded_names(Path(export))
            continue
        with closing(_records(Path(export))) as conn:
            removed, recorded_names = _recorded(conn)
            argvs = command_lines(conn)
        for text in removed:
            _learn(text, secret_values, paths, names)
        for argv in argvs:  # "--token VALUE", "--token=VALUE": VALUE, wherever else it turns up
            for previous, argument in zip(["", *argv], argv):
                if assigned := _SECRET_OPTION_ASSIGNED.fullmatch(argument):
                    secret_values.append(assigned["value"])
                elif _SECRET_OPTION.fullmatch(previous):
                    secret_values.append(argument)
        names += recorded_names
    return Redactor(secret_values, paths, names, keep, machine_names=_local_names())


def environment_redactor(environment: Mapping[str, str], keep: Iterable[str] = ()) -> Redactor:
    """A Redactor for what a command given `environment` prints, learning from the environment
    what recorded_redactor learns from the one a trace recorded."""
    secret_values: list[str] = []
    paths: list[str] = []
    names: list[str] = []
    _learn("\x00".join(f"{name}={value}" for name, value in environment.items()), secret_values, paths, names)
    return Redactor(secret_values, paths, names, keep, machine_names=_local_names())


def _learn(text: str, secret_values: list[str], paths: list[str], names: list[str]) -> None:
    """What a removed value (environment assignments, a command line, a path) tells to redact
    elsewhere: secret-named variables' values, user and host names, the paths it names."""
    for name, quoted, plain in _ASSIGNMENTS.findall(text):
        value = quoted or plain
        if _SECRET_VARIABLE.fullmatch(name):
            secret_values.append(value)
        if name in _NAME_VARIABLES:
            names.append(value)
    paths += _PATH_IN_VALUE.findall(text)
    # whose home or scratch folder a path is (HOME, PWD, the working directory): that user's name,
    # also where it is glued into another (alice_run3); shorter names are common words
    names += [name for name in path_user_names(text) if len(name) >= _MIN_NAME_LENGTH]


def redacted_traces(items: Sequence[LoadedTrace], keep: Iterable[str] = ()) -> tuple[list[LoadedTrace], Redactor]:
    """Traces read (and attributed), with every text of them redacted as `scrub` redacts the
    trace itself (with one Redactor: what any of them recorded is redacted in all): names,
    NVTX text, threads, GPUs, what a trace says about itself, the path given and why one could not
    be read. What analyze, verify, diagnose and compare print is made from these, so that each
    format says the same as `report` of the traces, and the terminal's shortened names are cut
    from redacted ones. Each distinct text is redacted once: a trace's million launches hold a
    few thousand. Attribution ran on the traces as read; --allow and --expect-map patterns match
    the names as printed."""
    redactor = recorded_redactor([item.trace.records for item in items if item.trace is not None], keep)
    return [_redacted_loaded(item, redactor) for item in items], redactor



def _redacted_loaded(item: LoadedTrace, redactor: Redactor) -> LoadedTrace:
    path = Path(redactor(str(item.path)))
    trace, ranges = item.trace, item.ranges
    if trace is not None:
        # A trace's distinct range names (attribution found them) are redacted once, for its NVTX
        # frame, its launches' ranges (the same names: attribution coded them) and its range_names.
        names = trace.range_names
        frames = {f.name: redactor.frame(getattr(trace, f.name), {"name": names} if f.name == "nvtx" else None)
                  for f in dataclasses.fields(trace) if isinstance(getattr(trace, f.name), pd.DataFrame)}
        changed = redactor.changes(names)  # the same texts, remembered (no search): counted for the ranges, as before
        if changed:
            names = pd.unique(pd.Series(names, dtype=object).replace(changed).to_numpy(dtype=object))
            if ranges is not None:
                ranges = EnclosingRanges(ranges.launch, ranges.name, _replaced(ranges.names, changed))
        trace = trace.replaced(names, path=path, meta=redactor.document(trace.meta), **frames)
    return dataclasses.replace(item, path=path, trace=trace, ranges=ranges,
                               launches=None if item.launches is None else redactor.frame(item.launches),
                               error=None if item.error is None else redactor(item.error))


def _replaced(names: np.ndarray, changed: dict[str, str]) -> np.ndarray:
    """`names` (distinct) with those `changed` names replaced."""
    at = pd.Index(names, dtype=object).get_indexer(list(changed))
    found = at >= 0
    out = names.copy()
    out[at[found]] = np.array(list(changed.values()), dtype=object)[found]
    return out


def _records(export: Path) -> sqlite3.Connection:
    """The export's records, to be read with SQL: the SQLite export itself, or the tables
    `_recorded` reads of a columnar one (Parquet or Arrow)."""
    if export.is_dir():
        tables = {table: [key, value] for table, key, value, _ in (*_REDACT, *_DELETE)}
        return nsys_tables.columnar_as_sqlite(export, tables | {"StringIds": ["id", "value"]})
    return nsys_tables.read_only(export)


def _local_names() -> list[str]:
    """This machine's user name and host name (whole and its first label)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = ""
    host = socket.gethostname()
    return [name for name in (user, host, host.split(".")[0]) if len(name) >= _MIN_NAME_LENGTH]


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")}


def _recorded(conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """Every value scrub removes (environment, command line, paths, names), and the user's and
    machine's names among them."""
    tables = _tables(conn)
    removed, names = [], []
    for table, key, value, patterns in _REDACT:
        if table in tables:
            for pattern in patterns:
                values = _texts(conn, value, f"{table} WHERE {key} LIKE ?", (pattern,))
                removed += values
                names += values if pattern in _NAME_KEYS else []
    for table, key, column, pattern in _DELETE:
        if table in tables:
            removed += _texts(conn, column, f"{table} WHERE {key} LIKE ?", (pattern,))
    if "StringIds" in tables:
        removed += [value for value in _texts(conn, "value", "StringIds") if _ENV_ASSIGNMENT.match(value)]
    return removed, names


def _texts(conn: sqlite3.Connection, column: str, rows: str, parameters: tuple = ()) -> list[str]:
    """The non-empty values of `column` of `rows` (a table and its WHERE clause) as text, whatever
    SQLite holds: read as bytes (Python fails on text that is no UTF-8), a BLOB's or an
    undecodable text's decoded with replacement characters (what they tell is learned; the
    values themselves are replaced whole)."""
    return [raw.decode("utf-8", "replace")
            for (raw,) in conn.execute(f"SELECT CAST({column} AS BLOB) FROM {rows}", parameters) if raw]


def _redact_table(conn: sqlite3.Connection, table: str, redactor: Redactor) -> None:
    """Redact every value of `table` no rule may leave: each distinct text once (NVTX text repeats
    a few names millions of times), updating the rows that hold a changed value in one join;
    text that is no UTF-8 and BLOBs (which no rule can read) replaced whole."""
    columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]
    if not columns:
        return
    held = conn.execute("SELECT " + ", ".join(f"max(typeof(\"{c}\") = 'text'), max(typeof(\"{c}\") = 'blob')"
                                              for c in columns) + f' FROM "{table}"').fetchone()
    for at, column in enumerate(columns):
        has_text, has_blob = held[2 * at], held[2 * at + 1]
        if has_blob:
            redactor.counts[BLOB] += conn.execute(
                f'UPDATE "{table}" SET "{column}" = ? WHERE typeof("{column}") = \'blob\'', (REDACTED,)).rowcount
        if not has_text:
            continue
        # as bytes: SQLite's text need not be UTF-8, and Python fails on a value that is not
        changed = [(raw, redacted) for (raw,) in conn.execute(
            f'SELECT DISTINCT CAST("{column}" AS BLOB) FROM "{table}" WHERE typeof("{column}") = \'text\'')
            if (redacted := _redacted_text(raw, redactor)) is not None]
        if not changed:
            continue
        conn.execute("CREATE TEMP TABLE redacted_values (value BLOB PRIMARY KEY, redacted TEXT)")
        conn.executemany("INSERT INTO redacted_values VALUES (?, ?)", changed)
        conn.execute(f'UPDATE "{table}" SET "{column}" = r.redacted FROM redacted_values AS r '
                     f'WHERE typeof("{table}"."{column}") = \'text\' AND CAST("{table}"."{column}" AS BLOB) = r.value')
        conn.execute("DROP TABLE redacted_values")


def _redacted_text(raw: bytes, redactor: Redactor) -> str | None:
    """A text value's bytes redacted, or None where the redaction leaves it as it is; one that is
    no UTF-8 (no rule can read it) replaced whole."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        redactor.counts[UNDECODABLE] += 1
        return REDACTED
    redacted = redactor(text)
    return None if redacted == text else redacted


def check_output(out: Path, inputs: Iterable[Path], command: str) -> None:
    """`out` must be a new file in an existing folder, none of `inputs` (however spelled)."""
    if out.resolve() in {Path(p).resolve() for p in inputs}:
        raise InputError(f"{command} writes a new file: give an output path other than the input")
    if out.is_dir():
        raise InputError(f"{out} is a folder: give the output file's path")
    if not out.parent.is_dir():
        raise InputError(f"no such folder: {out.parent}")


def scrub(trace: str | Path | Trace, out: str | Path, redactor: Redactor | None = None) -> Path:
    """Write a scrubbed copy of `trace` (an nsys SQLite export, .sqlite.xz or .nsys-rep, or one
    already read) to `out`: SQLite, xz-compressed when `out` ends in .xz; a torch.profiler
    trace as its JSON, every string in it redacted (gzip-compressed when `out` ends in .gz). `redactor`: one built
    from several traces (`recorded_redactor`), so that what one recorded is redacted in all;
    by default, the one this trace's own records give. The work copy is made and redacted in
    the private scratch folder; `out` appears whole, or not at all."""
    out = Path(out)
    given = trace.path if isinstance(trace, Trace) else Path(trace)
    source = redactable_source(trace) if isinstance(trace, Trace) else trace_source(trace)  # validates; decompresses or exports
    check_output(out, (source, given), "scrub")
    if redactor is None:
        redactor = recorded_redactor([source])
    if kineto_json.is_kineto(source):
        return _scrub_kineto(source, out, redactor)
    work = Path(tempfile.mkdtemp(dir=scratch.folder())) / "scrubbing.sqlite"
    try:
        shutil.copyfile(source, work)
        with closing(sqlite3.connect(work)) as conn, interruptible.sqlite_statements(conn):
            _scrub_export(conn, redactor, given)
        with written_whole(out) as partial:
            if out.suffix == ".xz":
                interruptible.xz_compress(work, partial)
            else:
                shutil.copyfile(work, partial)
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)
    return out


def _scrub_kineto(source: Path, out: Path, redactor: Redactor) -> Path:
    """A torch.profiler trace with every string of it (keys too) redacted, through a temporary
    name: `out` appears whole, or not at all."""
    with written_whole(out, ".gz" if out.name.endswith(".gz") else "") as partial:
        kineto_json.write_redacted(source, partial, redactor.document)
    return out


def _scrub_export(conn: sqlite3.Connection, redactor: Redactor, given: Path) -> None:
    """Remove what nsys records about the machine and the user, and redact every value; refuse
    (InputError) where what is left could not be made safe."""
    # A trigger would run as values are redacted (copying the old ones elsewhere): nsys writes none.
    for (trigger,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f'DROP TRIGGER "{trigger}"')
    tables = _tables(conn)
    for table, key, value, patterns in _REDACT:
        if table in tables:
            for pattern in patterns:
                redactor.counts[NSYS_RECORD] += conn.execute(
                    f"UPDATE {table} SET {value} = ? WHERE {key} LIKE ? AND {value} IS NOT ?",
                    (REDACTED, pattern, REDACTED)).rowcount
    for table, key, _value, pattern in _DELETE:
        if table in tables:
            redactor.counts[NSYS_RECORD] += conn.execute(f"DELETE FROM {table} WHERE {key} LIKE ?", (pattern,)).rowcount
    env_strings = [string_id for string_id, raw in conn.execute("SELECT id, CAST(value AS BLOB) FROM StringIds")
                   if raw and _ENV_ASSIGNMENT.match(raw.decode("utf-8", "replace"))]
    conn.executemany("UPDATE StringIds SET value = ? WHERE id = ?", [(REDACTED, i) for i in env_strings])
    redactor.counts[NSYS_RECORD] += len(env_strings)
    try:
        for table in sorted(tables):
            _redact_table(conn, table, redactor)
    except sqlite3.IntegrityError as exc:  # a value its table's constraints do not let be replaced
        raise InputError(f"scrub cannot make {given} safe to share: a value it must redact cannot be replaced "
                         f"({exc}); nothing written") from None
    if unsafe := _unsafe_schema(conn):
        raise InputError(f"scrub cannot make {given} safe to share: the definition of its {', '.join(unsafe)} holds "
                         "what the redaction takes out, or text that is no UTF-8, and scrub rewrites values, not "
                         "definitions; nothing written")
    conn.commit()
    conn.execute("VACUUM")  # freed pages would still hold the old values


def _unsafe_schema(conn: sqlite3.Connection) -> list[str]:
    """The schema's entries (tables, with their columns, views, indexes) whose name or definition
    holds what a rule of the redaction policy takes out or text that is no UTF-8: "table X",
    "view Y". By the rules' shapes alone: nsys's own definitions say "root rank" (this machine's
    user may be root)."""
    redactor, unsafe = Redactor(), []
    for kind, name, definition in conn.execute(
            "SELECT type, CAST(name AS BLOB), CAST(sql AS BLOB) FROM sqlite_master").fetchall():
        texts = [raw.decode("utf-8", "replace") for raw in (name, definition) if raw is not None]
        if any("\ufffd" in text or redactor.finds(text) for text in texts):
            unsafe.append(f"{kind} {redactor(texts[0])}")
    return unsafe
