"""Secrets planted where nsys records them in an export, for the tests that check none leaves."""

import secrets
import sqlite3
import string


def random_text(length: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


class Planted:
    """Random secrets, each with its random part: neither may appear in any output."""

    def __init__(self):
        self.values: dict[str, tuple[str, str]] = {}  # label -> (secret as written, its random part)

    def add(self, label: str, prefix: str, random_part: str, suffix: str = "") -> str:
        self.values[label] = (prefix + random_part + suffix, random_part)
        return prefix + random_part + suffix

    def __getitem__(self, label: str) -> str:
        return self.values[label][0]

    def strings(self) -> list[str]:
        return [s for pair in self.values.values() for s in pair]

    def found(self, text: str) -> list[str]:
        """The labels of the secrets `text` holds whole or in part (their random part)."""
        return [label for label, (value, part) in self.values.items() if value in text or part in text]


def add_string(conn: sqlite3.Connection, value: str) -> None:
    """`value` among the export's strings, as nsys keeps a line the program printed."""
    conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, ? FROM StringIds", (value,))


def plant(conn: sqlite3.Connection, text: str, *, arguments: list[str], environment: str, user: str,
          host: str) -> None:
    """`text` in an NVTX range around every CUDA runtime call of each thread (so that it reaches
    every GEMM launch's ranges) and printed by the program; `arguments` after process 0's
    command line (its ARGUMENT_7 on), `environment` (NAME="value") and `user` where nsys records
    process 0's, `host` as the target's host name. Committed."""
    conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                 "SELECT min(start) - 1000, max(end) + 1000, 59, ?, globalTid, 0 "
                 "FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid", (text,))
    add_string(conn, f"stdout: {text}")
    conn.executemany("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", [
        *((f"PROCESS_0:ARGUMENT_{7 + i}", argument) for i, argument in enumerate(arguments)),
        ("PROCESS_0:ENVIRONMENT_VARIABLE", environment), ("PROCESS_0:USER_NAME", user)])
    conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'Hostname'", (host,))
    conn.commit()
