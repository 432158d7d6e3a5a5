"""Every text value of an SQLite file, for tests that prove something is gone from it."""

import sqlite3
from contextlib import closing


def all_text(path) -> list[str]:
    """Every TEXT value of every column of every table."""
    values = []
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for column in [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]:
                values += [v for (v,) in conn.execute(
                    f'SELECT "{column}" FROM "{table}" WHERE typeof("{column}") = \'text\'')]
    return values
