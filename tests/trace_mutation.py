"""Real committed traces, altered: an nsys export copied out of its .xz and changed with SQL, a
torch.profiler trace's JSON changed as a document. The damage a test plants is the only thing
that differs from a real capture (the fuzz test and the hostile-input tests build on these)."""

from __future__ import annotations

import functools
import gzip
import json
import lzma
import sqlite3
from contextlib import closing
from pathlib import Path

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


@functools.cache
def sqlite_bytes(xz: Path) -> bytes:
    return lzma.decompress(Path(xz).read_bytes())


def altered_sqlite(xz: Path, out: Path, *statements: str) -> Path:
    """The export in `xz` written to `out` with `statements` (SQL) applied."""
    out.write_bytes(sqlite_bytes(xz))
    with closing(sqlite3.connect(out)) as conn:
        for statement in statements:
            conn.executescript(statement)
        conn.commit()
    return out


def without_constraints(table: str) -> str:
    """SQL that rebuilds `table` without NOT NULL (types kept), as a hand-made export may have it."""
    return f"ALTER TABLE {table} RENAME TO _old; CREATE TABLE {table} AS SELECT * FROM _old; DROP TABLE _old;"


def same_session_as(xz: Path) -> str:
    """SQL that gives an export the session start of the capture in `xz`: a copy that reads as
    captured beside it (a rank of the same job), its own identity (its analysed span) kept."""
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.deserialize(sqlite_bytes(xz))
        (utc,) = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = {utc}"


@functools.cache
def _kineto_text(path: Path) -> str:
    return gzip.decompress(Path(path).read_bytes()).decode()


def kineto_document(path: Path) -> dict:
    """A torch.profiler trace (.json.gz) as a fresh document to alter."""
    return json.loads(_kineto_text(path))


def write_kineto(document: dict, out: Path) -> Path:
    out.write_text(json.dumps(document), encoding="utf-8")
    return out


def first_event(document: dict, category: str) -> dict:
    return next(e for e in document["traceEvents"] if isinstance(e, dict) and e.get("cat") == category)


def parquet_export(xz: Path, out: Path) -> Path:
    """The export in `xz` as `nsys export --type parquetdir` lays it out: a folder `out` of one
    Parquet file per table, each column typed by Arrow from its values."""
    import pandas as pd
    import pyarrow
    import pyarrow.parquet

    out.mkdir()
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.deserialize(sqlite_bytes(xz))
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            frame = pd.read_sql_query(f'SELECT * FROM "{table}"', conn)
            pyarrow.parquet.write_table(pyarrow.Table.from_pandas(frame, preserve_index=False),
                                        out / f"{table}.parquet")
    return out
