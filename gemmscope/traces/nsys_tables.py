"""An Nsight Systems export's tables as DataFrames: an SQLite export through SQL, or a folder nsys
exported as Parquet or Arrow through pyarrow, both answering the same questions (which tables and
columns there are, a table's columns as a frame, the CUDA API calls that launch kernels), so that
traces.nsys reads either without knowing which. Every table and column is looked up before use.
What an SQLite export records of its machine and of the commands nsys launched (bundle and scrub
read them) is read here too."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from gemmscope.errors import InputError
from gemmscope.traces.model import DamagedTrace, shown_value

# Stands for SQL NULL in an integer column fetched as text (no nsys id or time takes it).
NULL = -(1 << 63)


def integer_column(values: pd.Series, column: str, rows: pd.Series) -> np.ndarray:
    """A column SQLite declares integer, read value by value (some value is not an integer):
    int64, or float64 with NaN where NULL, as SqliteExport._integers gives it; DamagedTrace naming the
    first row (its rowid) whose value is text, a blob or a fraction, which no nsys time or id is."""
    numbers = pd.to_numeric(values, errors="coerce")
    as_float = numbers.astype("float64")
    whole = np.isfinite(as_float) & (as_float % 1 == 0) & (as_float.abs() < 2.0**63)
    bad = values.notna().to_numpy() & ~whole.to_numpy()
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        value = values.iloc[first]
        value = value.item() if isinstance(value, np.generic) else value
        shown = value if not isinstance(value, str | bytes) else value[:40]
        raise DamagedTrace(f"{column} is {shown!r} in row {rows.iloc[first]}, not an integer"
                           + (f" ({int(bad.sum())} such rows)" if bad.sum() > 1 else ""))
    if numbers.isna().any():
        return as_float.to_numpy()
    return numbers.astype("int64").to_numpy()


def refuse_non_text(values: pd.Series, required: np.ndarray, column: str, rows: pd.Series | None = None) -> None:
    """DamagedTrace where a value of `values` is not text (a blob, a number), or is missing where
    `required`; `rows`: the rowids that name the first (else its place among the records read)."""
    bad = ~values.notna().to_numpy() & required
    if pd.api.types.infer_dtype(values, skipna=True) not in ("string", "empty"):  # vectorised: the common case
        bad |= values.map(lambda value: value is not None and not isinstance(value, str)).to_numpy(dtype=bool)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        where = f"row {rows.iloc[first]}" if rows is not None else f"record {first + 1}"
        raise DamagedTrace(f"{column} is {shown_value(values.iloc[first])} in {where}, not text")


def read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at `path`, whatever its name holds: SQLite's URI
    names the file in its path part, so a `#`, `?` or `%` in a name written raw would cut the name
    there (opening, or making, another file) or be decoded; Path.as_uri percent-encodes them."""
    return sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)


class SqliteExport:
    """A read-only connection to an export, with table and column feature detection."""

    def __init__(self, path: Path):
        self.path = path
        self.conn = read_only(path)
        self.tables = {name for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def columns(self, table: str) -> set[str]:
        return set(self.types(table))

    def types(self, table: str) -> dict[str, type]:
        """Column → int for the columns SQLite gives integer affinity (a declared type holding
        "INT"), object for the rest."""
        return {row[1]: int if "INT" in (row[2] or "").upper() else object for row in self._declared(table)}

    def _declared(self, table: str) -> list[tuple]:
        if table not in self.tables:
            return []
        return self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()

    def frame(self, table: str, columns: dict[str, str], where: str = "") -> pd.DataFrame:
        """`columns` maps output name → column (or SQL expression over present columns); columns
        this export lacks come back as NA, a missing table as an empty frame. Integer columns
        come as pandas reads them (int64; float64 with NaN where some are NULL; None where all
        are), the rest through pandas."""
        types = self.types(table)
        if not types:
            return pd.DataFrame({name: pd.Series(dtype="object") for name in columns})
        missing = [name for name, expr in columns.items() if expr.isidentifier() and expr not in types]
        integers = {name: expr for name, expr in columns.items() if types.get(expr) is int}
        others = {name: expr for name, expr in columns.items() if name not in integers and name not in missing}
        fetched = self._integers(table, integers, where)
        if others or fetched is None:
            checked = integers if fetched is None else {}
            rest = others if fetched is not None else {n: e for n, e in columns.items() if n not in missing}
            select = ", ".join([f"{expr} AS {name}" for name, expr in rest.items()] + ["rowid AS _row"] * bool(checked))
            read = pd.read_sql_query(f"SELECT {select} FROM {table} {where}", self.conn)
            for name, column in checked.items():  # some value is not an integer: which, and where
                read[name] = integer_column(read[name], f"{table}.{column}", read["_row"])
            fetched = (fetched or {}) | {name: read[name] for name in rest}
        count = len(next(iter(fetched.values()))) if fetched else 0
        return pd.DataFrame({name: fetched[name] if name in fetched else np.full(count, None, dtype=object)
                             for name in columns})

    def _integers(self, table: str, columns: dict[str, str], where: str) -> dict[str, np.ndarray] | None:
        """Integer columns as one comma-separated text each, which SQLite writes and numpy parses
        several times faster than Python builds a tuple per row (a long job's trace has millions
        of rows); None if a value is not an integer after all (SQLite's types are per value).
        A column the schema lets be NULL stands NULL in as NULL; one that is NULL throughout (a
        feature the trace did not use) is not read at all: a scan stopping at its first value
        says so, cheaper than writing and parsing a million stand-ins."""
        if not columns:
            return {}
        nullable = {row[1] for row in self._declared(table) if not row[3]}
        filtered = f"{where} AND" if where else "WHERE"
        unused = {name for name, expr in columns.items() if expr in nullable and self.conn.execute(
            f'SELECT 1 FROM "{table}" {filtered} "{expr}" IS NOT NULL LIMIT 1').fetchone() is None}
        read = {name: expr for name, expr in columns.items() if name not in unused}
        texts = "".join(f', group_concat(COALESCE("{expr}", {NULL}))' if expr in nullable else f', group_concat("{expr}")'
                        for expr in read.values())
        count, *texts = self.conn.execute(f'SELECT COUNT(*){texts} FROM "{table}" {where}').fetchone()
        out = {name: np.full(count, None, dtype=object) for name in unused}
        for at, name in enumerate(read):
            text, texts[at] = texts[at], None  # each text freed once parsed: a long trace's are large
            try:
                values = np.fromstring(text, dtype="int64", sep=",") if count else np.empty(0, dtype="int64")
            except ValueError:  # a value that is text or a fraction (numpy stops at it)
                return None
            if len(values) != count:
                return None
            null = values == NULL
            if not count:
                out[name] = np.empty(0, dtype=object)
            elif null.all():
                out[name] = np.full(count, None, dtype=object)
            elif null.any():
                out[name] = np.where(null, np.nan, values.astype("float64"))
            else:
                out[name] = values
        return {name: out[name] for name in columns}

    def text(self, table: str, column: str) -> np.ndarray | None:
        """One column, its rows in the order `frame` reads them, as Python objects (None where
        NULL): without pandas, which checks every value of a long trace's hundreds of thousands
        of range names to give them its string type, given back as objects. None where the
        table or the column is missing."""
        if column not in self.columns(table):
            return None
        return np.array([value for (value,) in self.conn.execute(f'SELECT "{column}" FROM "{table}"')], dtype=object)

    def meta(self) -> dict[str, str]:
        """META_DATA_EXPORT's name → value."""
        return dict(self.conn.execute("SELECT name, value FROM META_DATA_EXPORT"))

    def has_rows(self, table: str) -> bool:
        return table in self.tables and bool(self.conn.execute(f'SELECT EXISTS (SELECT 1 FROM "{table}")').fetchone()[0])

    def max_of(self, table: str, column: str) -> float | None:
        """The largest value of `column` (None when the table or column is missing or empty)."""
        if column not in self.columns(table):
            return None
        (largest,) = self.conn.execute(f'SELECT MAX("{column}") FROM "{table}"').fetchone()
        return None if largest is None else float(largest)

    def api_calls(self, columns: dict[str, str], names: str) -> pd.DataFrame:
        """CUPTI_ACTIVITY_KIND_RUNTIME's calls `names` (LAUNCH_CALLS or OTHER_CALLS) selects;
        of the others only those that launched a kernel."""
        where = f"WHERE nameId {names} ({LAUNCHING_NAMES})"
        if names == OTHER_CALLS and "CUPTI_ACTIVITY_KIND_KERNEL" in self.tables:
            where += " AND correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"
        return self.frame("CUPTI_ACTIVITY_KIND_RUNTIME", columns, where)

    def strings(self) -> pd.Series:
        """StringIds as a Series indexed by id (for vectorised lookups)."""
        if "StringIds" not in self.tables:
            return pd.Series(dtype="object")
        frame = pd.read_sql_query("SELECT id, value, rowid AS _row FROM StringIds", self.conn)
        ids = frame["id"] if frame["id"].dtype.kind == "i" else integer_column(frame["id"], "StringIds.id", frame["_row"])
        # nsys writes every string it names
        refuse_non_text(frame["value"], frame["value"].notna().to_numpy(), "StringIds.value", frame["_row"])
        return pd.Series(frame["value"].to_numpy(dtype=object), index=np.asarray(ids))


# nsys export --type parquetdir / arrowdir: a folder of one file per table, the SQLite export's
# tables and columns, typed by Arrow (ids unsigned).
COLUMNAR_SUFFIXES = (".parquet", ".arrow")
# The columns nsys writes as text (its SQLite schema's TEXT) among those read: a columnar export
# says its own types, so every other column read must be an integer (a time, an id, a count),
# whatever type a damaged or hand-made file gives it.
TEXT_COLUMNS = {"text", "value", "name", "uuid", "busLocation", "chipName", "utcTime", "localTime"}


def columnar_export(path: Path) -> str | None:
    """The file suffix of the folder `path` if it is an nsys columnar export, else None."""
    return next((suffix for suffix in COLUMNAR_SUFFIXES if (path / f"META_DATA_EXPORT{suffix}").is_file()), None)


class ColumnarExport:
    """A columnar export read with pyarrow, answering as SqliteExport does (no SQL: filters in pandas)."""

    def __init__(self, path: Path):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError(f"{path} is an nsys Parquet/Arrow export: reading it needs pyarrow "
                             "(pip install 'gemmscope[columnar]')") from None
        self.path = path
        self.suffix = columnar_export(path)
        assert self.suffix is not None  # read() makes one only of a folder columnar_export names
        self.tables = {f.name.removesuffix(self.suffix) for f in path.iterdir() if f.name.endswith(self.suffix)}
        self._schemas: dict[str, object] = {}
        self._strings: pd.Series | None = None

    def _schema(self, table: str):
        if table not in self._schemas:
            import pyarrow.ipc
            import pyarrow.parquet

            file = self.path / f"{table}{self.suffix}"
            with _unreadable_said(file):
                if self.suffix == ".parquet":
                    self._schemas[table] = pyarrow.parquet.read_schema(file)
                else:
                    with pyarrow.ipc.open_stream(file) as stream:
                        self._schemas[table] = stream.schema
        return self._schemas[table]

    def _read(self, table: str, columns: list[str]):
        import pyarrow.ipc
        import pyarrow.parquet

        file = self.path / f"{table}{self.suffix}"
        with _unreadable_said(file):
            if self.suffix == ".parquet":
                return pyarrow.parquet.read_table(file, columns=columns)
            with pyarrow.ipc.open_stream(file) as stream:
                return stream.read_all().select(columns)

    def columns(self, table: str) -> set[str]:
        return set(self.types(table))

    def types(self, table: str) -> dict[str, type]:
        import pyarrow

        if table not in self.tables:
            return {}
        return {f.name: int if pyarrow.types.is_integer(f.type) else object for f in self._schema(table)}

    def frame(self, table: str, columns: dict[str, str], rows=None) -> pd.DataFrame:
        """As SqliteExport.frame (integers as int64, float64 with NaN where some are missing, None
        where all are); `rows`, a function of the frame read, keeps the rows it is true for."""
        types = self.types(table)
        if not types:
            return pd.DataFrame({name: pd.Series(dtype="object") for name in columns})
        read = self._read(table, list(dict.fromkeys(c for c in columns.values() if c in types)))
        out = {}
        for name, column in columns.items():
            if column not in types:
                out[name] = np.full(read.num_rows, None, dtype=object)
                continue
            values = read.column(column)
            if types[column] is not int:
                out[name] = _checked(values, f"{table}.{column}", column in TEXT_COLUMNS)
            elif values.null_count == 0:
                out[name] = values.to_numpy().astype("int64")
            elif values.null_count == len(values):
                out[name] = np.full(len(values), None, dtype=object)
            else:
                out[name] = values.cast("float64").to_numpy(zero_copy_only=False)
        frame = pd.DataFrame(out)
        return frame[rows(frame)].reset_index(drop=True) if rows is not None else frame

    def text(self, table: str, column: str) -> np.ndarray | None:
        """As SqliteExport.text."""
        if column not in self.columns(table):
            return None
        return self.frame(table, {column: column})[column].to_numpy(dtype=object)

    def meta(self) -> dict[str, str]:
        rows = self.frame("META_DATA_EXPORT", {"name": "name", "value": "value"})
        return dict(zip(rows["name"], rows["value"]))

    def has_rows(self, table: str) -> bool:
        return table in self.tables and self._read(table, []).num_rows > 0

    def max_of(self, table: str, column: str) -> float | None:
        if column not in self.columns(table):
            return None
        import pyarrow.compute

        largest = pyarrow.compute.max(self._read(table, [column]).column(column)).as_py()
        return None if largest is None else float(largest)

    def api_calls(self, columns: dict[str, str], names: str) -> pd.DataFrame:
        """As SqliteExport.api_calls: a call launches by its name (SQLite's LIKE '%Launch%', which
        ignores case); of the others only those that launched a kernel."""
        strings = self.strings()
        launching = strings.index[strings.str.contains("launch", case=False, na=False).to_numpy()]
        kernels = self.frame("CUPTI_ACTIVITY_KIND_KERNEL", {"c": "correlationId"})["c"]

        def rows(calls: pd.DataFrame) -> pd.Series:
            named = calls["_name_id"].isin(launching)
            return named if names == LAUNCH_CALLS else ~named & calls["_correlation"].isin(kernels)

        frame = self.frame("CUPTI_ACTIVITY_KIND_RUNTIME",
                           columns | {"_name_id": "nameId", "_correlation": "correlationId"}, rows)
        return frame.drop(columns=["_name_id", "_correlation"])

    def strings(self) -> pd.Series:
        """As SqliteExport.strings, read once (api_calls looks launch names up in them too)."""
        if self._strings is None:
            frame = self.frame("StringIds", {"id": "id", "value": "value"})
            self._strings = pd.Series(frame["value"].to_numpy(dtype=object), index=frame["id"].to_numpy())
        return self._strings


@contextmanager
def _unreadable_said(file: Path) -> Iterator[None]:
    """DamagedTrace naming `file` where pyarrow cannot read it (truncated, empty, not Parquet)."""
    import pyarrow

    try:
        yield
    except (pyarrow.ArrowException, OSError) as exc:
        said = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise DamagedTrace(f"{file.name} could not be read ({said})") from None


def _checked(values, column: str, text: bool) -> np.ndarray:
    """A column Arrow does not type as integer, as objects: text where nsys writes text, else
    integers (integer_column), DamagedTrace naming the first record (from 1) that is neither."""
    import pyarrow

    series = values.to_pandas()
    if pyarrow.types.is_null(values.type):
        return series.to_numpy(dtype=object)
    rows = pd.Series(np.arange(1, len(series) + 1))
    if text:
        if not (pyarrow.types.is_string(values.type) or pyarrow.types.is_large_string(values.type)):
            refuse_non_text(series, np.zeros(len(series), dtype=bool), column, rows)
        return series.to_numpy(dtype=object)
    return np.asarray(integer_column(series, column, rows), dtype=object)


# Either kind of export: what traces.nsys reads its records from.
Export = SqliteExport | ColumnarExport


# Which CUDA API calls `_api_calls` reads, by their name: those named as launching (cudaLaunchKernel,
# cuLaunchKernelEx, cudaGraphLaunch, ...), all of them, or those of the others that launched a
# kernel. A trace holds several calls per kernel (events, queries, synchronisation); finding the
# ones that launched a kernel among them means looking each one's correlation id up among every
# kernel's, most of the time this table takes, while a name is tested at once: `_read` reads the
# launching ones, and the others only for a kernel none of those launched. Either way calls are
# joined to kernels on correlation id and process, never on their name.
LAUNCH_CALLS = "IN"
OTHER_CALLS = "NOT IN"
LAUNCHING_NAMES = "SELECT id FROM StringIds WHERE value LIKE '%Launch%'"


def columnar_as_sqlite(path: Path, tables: dict[str, list[str]]) -> sqlite3.Connection:
    """`tables` (name -> columns) of the columnar export `path` in an SQLite database in memory,
    for what reads an export's records with SQL (the redactor); a table the export lacks is left out."""
    export = ColumnarExport(path)
    conn = sqlite3.connect(":memory:")
    for table, columns in tables.items():
        if table in export.tables:
            export.frame(table, {c: c for c in columns}).to_sql(table, conn, index=False)
    return conn


# The parts of a process's command line in META_DATA_CAPTURE: PROCESS_<n>:COMMAND, PROCESS_<n>:ARGUMENT_<i>.
_COMMAND_PART = re.compile(r"PROCESS_(\d+):(?:COMMAND|ARGUMENT_(\d+))")


def command_lines(conn: sqlite3.Connection) -> list[list[str]]:
    """The command line of each process nsys launched, as recorded (argv: COMMAND, then
    ARGUMENT_0, ARGUMENT_1, …), in process order."""
    if "META_DATA_CAPTURE" not in _tables(conn):
        return []
    parts: dict[int, dict[int, str]] = {}
    for name, value in conn.execute(
            "SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:COMMAND' "
            "OR name LIKE 'PROCESS_%:ARGUMENT_%'"):
        if match := _COMMAND_PART.fullmatch(name):
            process, argument = match.groups()
            parts.setdefault(int(process), {})[-1 if argument is None else int(argument)] = value or ""
    return [[argv[i] for i in sorted(argv)] for _, argv in sorted(parts.items())]


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def recorded_environment(export: Path) -> tuple[dict[str, str], list[list[str]]]:
    """What an SQLite export records of the machine it ran on (TARGET_INFO_SYSTEM_ENV's name ->
    value: driver, CUDA, OS; empty where it lacks the table) and the command line of each process
    nsys launched (command_lines)."""
    with closing(read_only(export)) as conn:
        system = dict(conn.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV")) \
            if "TARGET_INFO_SYSTEM_ENV" in _tables(conn) else {}
        return system, command_lines(conn)
