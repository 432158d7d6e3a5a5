"""Remove what an nsys export records about the machine and the user before a trace is shared.

nsys stores the profiled process's whole environment (tokens, paths, user names) in the export:
`TARGET_INFO_SYSTEM_ENV` row `DeviceEnvironment`, `META_DATA_CAPTURE` rows
`PROCESS_n:ENVIRONMENT_VARIABLE`, and stray `NAME=value` strings in `StringIds`; plus the
command line, working directory, user and host names. `scrub` writes a copy without them.

What they held can turn up anywhere else too: the profiled program's stdout and stderr (nsys
keeps them in `StringIds`), NVTX text, module paths in OS-runtime call chains. So a `Redactor`
built from them (and from the shapes of well-known credentials) is applied to every text column
of every table: the values of secret-named environment variables, every path the removed values
name, home directories, the user's and the machine's names, `NAME=value` and `--name value`
where the name says secret, and every rule of the redaction policy (`RULES`: tokens and keys
recognisable by their shape, e-mail addresses, host names, IP addresses, home directories). The
same `Redactor` cleans everything `gemmscope bundle` and `gemmscope report` write. Everything
gemmscope reads (kernels, API calls, NVTX, GPUs, memory) is left untouched unless it holds one
of those.
"""

from __future__ import annotations

import fnmatch
import getpass
import lzma
import re
import shutil
import socket
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from gemmscope import scratch
from gemmscope.atomic import written_whole
from gemmscope.errors import InputError
from gemmscope.traces import kineto, nsys
from gemmscope.traces.model import Trace
from gemmscope.traces.read import trace_source

REDACTED = "[redacted]"

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
# Characters that continue a path name: a path matches only where none of them is just before
# it or just after it ("/bin" is not redacted inside "/usr/bin" or "/binaries").
_PATH_CHAR = r"[A-Za-z0-9_.~+-]"
# An absolute path inside a removed value ("PATH=/a:/b", "PWD=/x;HOME=/y", 'NAME="/z"',
# "--out=/w", "A=/x\0B=/y"; not the "/b" of "a/b"): from its slash up to the next separator.
_PATH_IN_VALUE = re.compile(rf"(?<!{_PATH_CHAR})/[^\s;:=\"',\x00]*")

# Names of environment variables and command-line options whose values are secrets
# (HF_TOKEN, MY_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, --api-key, --token).
SECRET_NAME = r"(?i:[A-Za-z0-9_-]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD)[A-Za-z0-9_-]*|AWS_[A-Za-z0-9_]+)"
# A secret-named variable's or option's value shorter than this is a setting, not a credential
# (TOKENIZERS_PARALLELISM=false, HF_HUB_DISABLE_TOKEN=1): redacting it wherever it appears would
# take "1" out of every number. Where it is assigned (NAME=value) it is redacted all the same.
_MIN_SECRET_LENGTH = 6
# The value after a secret name: quoted, or up to the next separator.
_VALUE = r"(?:\"[^\"]*\"|'[^']*'|[^\s\"',;&|]+)"
_SECRET_VARIABLE = re.compile(SECRET_NAME)
_SECRET_OPTION = re.compile(rf"--?{SECRET_NAME}")
_SECRET_OPTION_ASSIGNED = re.compile(rf"--?{SECRET_NAME}=(?P<value>.*)")
_IPV4_PART = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEX4 = r"[0-9A-Fa-f]{1,4}"
# Top-level domains a host name is recognised by: the generic ones, the private ones clusters
# use, and a few countries' (not those that are also file suffixes: .py, .sh, .so, .md, .cu).
_TLDS = ("com|net|org|edu|gov|mil|io|ai|dev|app|cloud|local|localdomain|internal|intranet|lan|corp|cluster"
         "|uk|de|fr|jp|cn|kr|au|eu|nl|ru|br")

# The redaction policy: every rule, by kind, applied to every text gemmscope writes for sharing
# (README: Redaction). Where two rules match at one place the first listed wins (an e-mail
# address before the user name it starts with). `(?P<lead>…)`: a part that stays (the name of
# a secret option, so that a reader still sees that one was given).
RULES: tuple[tuple[str, str], ...] = (
    ("private-key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|[\s\S]*)"),
    # NAME=value, --name value and --name=value, where the name says secret: the value goes.
    ("secret-assignment", rf"(?P<lead>(?<![A-Za-z0-9_-])(?:--?{SECRET_NAME}(?:=|[ \t]+)|{SECRET_NAME}=)){_VALUE}"),
    ("bearer-token", r"(?P<lead>(?<![A-Za-z0-9])(?i:bearer)[ \t]+)[A-Za-z0-9._~+/-]{16,}=*"),
    ("wandb-key", r"(?P<lead>wandb login[ \t]+(?:--relogin[ \t]+)?)[0-9a-f]{40}(?![0-9a-f])"
                  r"|(?<![A-Za-z0-9])local-[0-9a-f]{40}(?![0-9a-f])"),
    ("jwt", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("hugging-face-token", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
    # personal (ghp_), OAuth, user-to-server, server, refresh; fine-grained personal access tokens
    ("github-token", r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("api-key", r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}"),  # OpenAI (sk-…, sk-proj-…), Anthropic (sk-ant-…)
    ("google-api-key", r"(?<![A-Za-z0-9])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
    ("slack-token", r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("aws-key-id", r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),  # long-term, temporary
    ("email", r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
              r"(?![A-Za-z0-9-])"),
    ("ip-address", rf"(?<![A-Za-z0-9_.]){_IPV4_PART}(?:\.{_IPV4_PART}){{3}}(?![A-Za-z0-9_]|\.[0-9])"
                   rf"|(?<![A-Za-z0-9_:])(?:(?:{_HEX4}:){{7}}{_HEX4}"
                   rf"|(?=(?:[0-9A-Fa-f]*:){{3}})(?:{_HEX4}:){{1,6}}(?::{_HEX4}){{1,6}})(?![A-Za-z0-9_:])"),
    ("host-name", rf"(?<![A-Za-z0-9_.@-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+(?i:{_TLDS})"
                  r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9])"),
    # Home directories: the user's name and what they keep there. The path's tail stays, so a
    # warning's "/home/alice/.venv/…/torch/x.py:12" still says which file.
    ("home-path", rf"/(?:home|Users)/[^/\s\"'`:;,=|]+|/root(?!{_PATH_CHAR})"),
)
# Public sites gemmscope's own output cites (devices.py's sources, the JSON schemas' $schema):
# not private, kept although the host-name rule matches them. `--keep` adds to these.
PUBLIC_HOSTS = ("nvidia.com", "*.nvidia.com", "json-schema.org", "github.com", "pytorch.org", "*.pytorch.org")
# Rules made from what a trace recorded (Redactor.of_exports): their kinds, for the counts.
RECORDED_SECRET, RECORDED_PATH, USER_OR_HOST_NAME = "recorded-secret", "recorded-path", "user-or-host-name"
# What scrub removes from nsys's own records whole (environment, command line, names): its kind.
NSYS_RECORD = "nsys-record"


def _alternation(literals: Iterable[str]) -> str:
    """Literal strings as one regex alternation, longest first, so that each is taken whole
    rather than by a shorter one it starts with."""
    return "|".join(re.escape(s) for s in sorted(set(literals), key=len, reverse=True))


class Redactor:
    """Takes secrets, private paths and the user's and machine's names out of text: one policy
    for everything gemmscope writes to be shared (scrub, bundle, report).

    Always: every rule of RULES. And what a trace recorded: `secret_values` (the values of
    secret-named environment variables and command-line options) wherever they appear; `paths`
    (absolute paths named in what scrub removes) wherever they appear as a whole path; `names`
    (user and host names) as whole words. `keep`: shell patterns (`*.example.org`, `10.0.*`) of
    what stays although a rule matches it, besides PUBLIC_HOSTS. `counts`: what was redacted so far, per kind.
    """

    def __init__(self, secret_values: Iterable[str] = (), paths: Iterable[str] = (), names: Iterable[str] = (),
                 keep: Iterable[str] = ()):
        values = {v for v in secret_values if len(v) >= _MIN_SECRET_LENGTH and v != REDACTED}
        paths = {p.rstrip("/") for p in paths} - {""}
        names = {n for n in names if n and n != REDACTED}
        rules = list(RULES)
        if values:
            rules.insert(2, (RECORDED_SECRET, _alternation(values)))
        if paths:
            rules.append((RECORDED_PATH, rf"(?<!{_PATH_CHAR})(?<!/)(?:{_alternation(paths)})(?!{_PATH_CHAR})"))
        if names:
            rules.append((USER_OR_HOST_NAME, rf"(?<![A-Za-z0-9_])(?:{_alternation(names)})(?![A-Za-z0-9_])"))
        # Each rule one named group (rule0, rule1, …), its kept part lead0, lead1, …
        self._kinds = {f"rule{i}": kind for i, (kind, _) in enumerate(rules)}
        self._pattern = re.compile("|".join(
            f"(?P<rule{i}>{pattern.replace('(?P<lead>', f'(?P<lead{i}>')})" for i, (_, pattern) in enumerate(rules)))
        self._keep = (*PUBLIC_HOSTS, *keep)
        self.counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        return self._pattern.sub(self._replace, text)

    def _replace(self, match: re.Match) -> str:
        group = match.lastgroup  # the rule's group: it closes after any group inside it
        assert group is not None  # every alternative of the pattern is a rule's group
        lead_group = "lead" + group.removeprefix("rule")
        lead = (match.group(lead_group) if lead_group in self._pattern.groupindex else None) or ""
        value = match.group()[len(lead):]
        if any(fnmatch.fnmatchcase(value, pattern) for pattern in self._keep):
            return match.group()
        self.counts[self._kinds[group]] += 1
        return lead + REDACTED

    def summary(self) -> str:
        """What was redacted, per kind (never the values): "3 email, 1 hugging-face-token"."""
        counted = sorted((kc for kc in self.counts.items() if kc[1]), key=lambda kc: (-kc[1], kc[0]))
        return ", ".join(f"{count} {kind}" for kind, count in counted) or "nothing"

    def document(self, value: Any) -> Any:
        """A JSON-able document with every string in it (keys too) redacted. Redact before
        serialising: JSON's escapes (\\", \\\\) would hide a value from the text pass."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self.document(k): self.document(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.document(v) for v in value]
        return value

    def frame(self, table: pd.DataFrame) -> pd.DataFrame:
        """`table` with its column names and text cells redacted, each distinct text once.
        Redact before writing CSV or HTML: their quoting ("" for ", &amp; for &) would hide a
        value from a text pass."""
        out = table.rename(columns=lambda c: self(c) if isinstance(c, str) else c)
        for column in out.select_dtypes(include=["object", "string", "category"]).columns:
            texts = [t for t in pd.unique(out[column].dropna()) if isinstance(t, str)]
            changed = {t: redacted for t in texts if (redacted := self(t)) != t}
            if changed:
                out[column] = out[column].astype(object).replace(changed)
        return out

    @classmethod
    def of_exports(cls, exports: Iterable[str | Path], keep: Iterable[str] = ()) -> Redactor:
        """One Redactor for several SQLite exports (the ranks of one run; torch.profiler traces
        too, whose host name is all they record of the machine): what any of them
        recorded is redacted in all of them; so are this machine's user and host names (those
        of the machine that writes what is shared)."""
        secret_values, paths, names = [], [], _local_names()
        for export in exports:
            if kineto.is_kineto(Path(export)):
                names += kineto.recorded_names(Path(export))
                continue
            with closing(sqlite3.connect(f"file:{export}?mode=ro", uri=True)) as conn:
                removed, recorded_names = _recorded(conn)
                argvs = command_lines(conn)
            for text in removed:
                for name, quoted, plain in _ASSIGNMENTS.findall(text):
                    value = quoted or plain
                    if _SECRET_VARIABLE.fullmatch(name):
                        secret_values.append(value)
                    if name in _NAME_VARIABLES:
                        names.append(value)
                paths += _PATH_IN_VALUE.findall(text)
            for argv in argvs:  # "--token VALUE", "--token=VALUE": VALUE, wherever else it turns up
                for previous, argument in zip(["", *argv], argv):
                    if assigned := _SECRET_OPTION_ASSIGNED.fullmatch(argument):
                        secret_values.append(assigned["value"])
                    elif _SECRET_OPTION.fullmatch(previous):
                        secret_values.append(argument)
            names += recorded_names
        return cls(secret_values, paths, names, keep)


def _local_names() -> list[str]:
    """This machine's user name and host name (whole and its first label)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = ""
    host = socket.gethostname()
    # Shorter names ("vm") are common words and parts of names, not the user's or the machine's own.
    return [name for name in (user, host, host.split(".")[0]) if len(name) >= 3]


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
                values = [v for (v,) in conn.execute(f"SELECT {value} FROM {table} WHERE {key} LIKE ?", (pattern,))
                          if v]
                removed += values
                names += values if pattern in _NAME_KEYS else []
    for table, key, column, pattern in _DELETE:
        if table in tables:
            removed += [v for (v,) in conn.execute(f"SELECT {column} FROM {table} WHERE {key} LIKE ?", (pattern,)) if v]
    if "StringIds" in tables:
        removed += [value for (value,) in conn.execute("SELECT value FROM StringIds")
                    if value and _ENV_ASSIGNMENT.match(value)]
    return removed, names


def _redact_table(conn: sqlite3.Connection, table: str, redactor: Redactor) -> None:
    """Redact every text value of `table`, each distinct value once (NVTX text repeats a few
    names millions of times), updating the rows that hold a changed value in one join."""
    columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]
    if not columns:
        return
    holds_text = conn.execute("SELECT " + ", ".join(
        f"max(typeof(\"{c}\") = 'text')" for c in columns) + f' FROM "{table}"').fetchone()
    for column, has_text in zip(columns, holds_text):
        if not has_text:
            continue
        changed = [(value, redacted) for (value,) in conn.execute(
            f'SELECT DISTINCT "{column}" FROM "{table}" WHERE typeof("{column}") = \'text\'')
            if (redacted := redactor(value)) != value]
        if not changed:
            continue
        conn.execute("CREATE TEMP TABLE redacted_values (value TEXT PRIMARY KEY, redacted TEXT)")
        conn.executemany("INSERT INTO redacted_values VALUES (?, ?)", changed)
        conn.execute(f'UPDATE "{table}" SET "{column}" = r.redacted FROM redacted_values AS r '
                     f'WHERE "{table}"."{column}" = r.value')
        conn.execute("DROP TABLE redacted_values")


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
    from several traces (`Redactor.of_exports`), so that what one recorded is redacted in all;
    by default, the one this trace's own records give. The work copy is made and redacted in
    the private scratch folder; `out` appears whole, or not at all."""
    out = Path(out)
    given = trace.path if isinstance(trace, Trace) else Path(trace)
    source = (nsys.redactable(trace.sqlite) if trace.sqlite else trace.path) if isinstance(trace, Trace) \
        else trace_source(trace)  # validates; decompresses or exports
    check_output(out, (source, given), "scrub")
    if redactor is None:
        redactor = Redactor.of_exports([source])
    if kineto.is_kineto(source):
        return _scrub_kineto(source, out, redactor)
    work = Path(tempfile.mkdtemp(dir=scratch.folder())) / "scrubbing.sqlite"
    try:
        shutil.copyfile(source, work)
        with closing(sqlite3.connect(work)) as conn:
            _scrub_export(conn, redactor)
        with written_whole(out) as partial:
            if out.suffix == ".xz":
                partial.write_bytes(lzma.compress(work.read_bytes(), preset=9))
            else:
                shutil.copyfile(work, partial)
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)
    return out


def _scrub_kineto(source: Path, out: Path, redactor: Redactor) -> Path:
    """A torch.profiler trace with every string of it (keys too) redacted, through a temporary
    name: `out` appears whole, or not at all."""
    with written_whole(out, ".gz" if out.name.endswith(".gz") else "") as partial:
        kineto.write_redacted(source, partial, redactor.document)
    return out


def _scrub_export(conn: sqlite3.Connection, redactor: Redactor) -> None:
    """Remove what nsys records about the machine and the user, and redact every text column."""
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
    env_strings = [string_id for string_id, value in conn.execute("SELECT id, value FROM StringIds")
                   if value and _ENV_ASSIGNMENT.match(value)]
    conn.executemany("UPDATE StringIds SET value = ? WHERE id = ?", [(REDACTED, i) for i in env_strings])
    redactor.counts[NSYS_RECORD] += len(env_strings)
    for table in sorted(tables):
        _redact_table(conn, table, redactor)
    conn.commit()
    conn.execute("VACUUM")  # freed pages would still hold the old values
