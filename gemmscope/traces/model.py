"""The trace model every reader fills: one DataFrame per kind of record, on nsys's clock and ids.

A reader (traces.nsys for Nsight Systems' SQLite exports, traces.kineto for torch.profiler's
JSON) returns a `Trace`; attribution (gemmscope.assembly.attribution) joins its frames into launches.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# nsys packs process and thread ids into one 64-bit "global thread id": the process id above
# the low 24 bits, the thread id in them. A Kineto trace's ids are packed the same way.
ID_BITS = 24
TID_MASK = (1 << ID_BITS) - 1


def process_id(global_tid: pd.Series) -> pd.Series:
    """The process id packed into nsys's global thread (or process) id."""
    return (global_tid // (1 << ID_BITS)) & TID_MASK


def thread_id(global_tid: pd.Series) -> pd.Series:
    """The thread id packed into nsys's global thread id."""
    return global_tid & TID_MASK


def launch_key(frame: pd.DataFrame) -> pd.Index:
    """(process, correlation id) as one integer per row: CUPTI's correlation ids are 32-bit."""
    pid = (frame["global_pid"].fillna(0).astype("int64").to_numpy() >> ID_BITS) & TID_MASK
    return pd.Index((pid << 32) | frame["correlation_id"].fillna(0).astype("int64").to_numpy())


def object_column(values: np.ndarray, index: pd.Index) -> pd.Series:
    """`values` as a column of Python objects: pandas would check each of a long trace's million
    strings to make them its own string type."""
    return pd.Series(np.array(values, dtype=object), index=index, dtype=object, copy=False)


def text_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`values` (Python objects: texts, missing values) coded as pd.factorize(values,
    use_na_sentinel=False) codes them: a code per row, in order of first appearance, and the
    distinct values (every missing value one, None). By Python's hashing, in passes in C: a str
    keeps its hash, where pandas hashes each cell's text again (a million kernel names of up to
    1,400 characters: 0.21 s, against 0.07)."""
    missing = pd.isna(values)
    if missing.any():
        values = np.where(missing, None, values)  # type: ignore[call-overload]
    code_of = {value: code for code, value in enumerate(dict.fromkeys(values))}
    codes = np.fromiter(map(code_of.__getitem__, values), dtype=np.intp, count=len(values))
    return codes, np.fromiter(code_of, dtype=object, count=len(code_of))


# No GPU activity, CUDA call or NVTX range lasts longer, and no capture spans more: a month is
# generous for a trace; a value beyond it (an end at INT64 max, a duration of 1e300) is damage.
MAX_SPAN_NS = 31 * 24 * 3600 * 10**9


class DamagedTrace(Exception):
    """A record whose field a reader uses holds what no profiler writes (a time that is text, an
    end before its start, an event that is not an object). `what` says which record and field;
    the reader names the trace (`message`)."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what

    def message(self, given: Path | str) -> str:
        return f"{given} is a damaged trace: {self.what}"


def shown_value(value: object) -> str:
    """A value a damaged record holds where text belongs, as its error line says it: bytes by their
    length alone (a BLOB may hold a secret no redaction rule can read, and the line is shared as
    a report is), anything else as Python writes it, cut short."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"a BLOB of {len(value)} bytes"
    return f"{value!r:.40}"


def check_records(kernels: pd.DataFrame, memops: pd.DataFrame, api_calls: pd.DataFrame, ranges: pd.DataFrame) -> None:
    """Refuse a trace (its frames, times in ns) whose records lie outside physics (DamagedTrace): a GPU activity, CUDA call or
    NVTX range without a start (or, but for a range left open, an end), one that ends before it
    starts or lasts longer than any capture, records spread over more than a capture spans, or
    GPU kernels or CUDA calls recorded twice. Vectorised: a long trace holds millions of records."""
    frames = {"GPU kernel": kernels, "memory operation": memops, "CUDA API call": api_calls, "NVTX range": ranges}
    starts, ends = [], []
    for kind, frame in frames.items():
        if frame.empty:
            continue
        start = frame["start"].to_numpy(dtype="float64")
        end = frame["end"].to_numpy(dtype="float64")
        open_ended = np.zeros(len(frame), dtype=bool) if kind != "NVTX range" else np.isnan(end)
        refuse_where(frame, np.isnan(start), kind, "have no start time")
        refuse_where(frame, np.isnan(end) & ~open_ended, kind, "have no end time")
        duration = end - start
        refuse_where(frame, duration < 0, kind, "end before they start")
        refuse_where(frame, duration > MAX_SPAN_NS, kind, "last longer than any capture")
        starts.append(np.nanmin(start))
        ends.append(np.nanmax(np.where(open_ended, start, end)))
    if starts and max(ends) - min(starts) > MAX_SPAN_NS:
        raise DamagedTrace(f"its records spread over {(max(ends) - min(starts)) / 86400e9:.3g} days, more than "
                           "any capture spans (a time far off the others)")
    _refuse_repeated(kernels, "GPU kernel", ["device_id", "stream_id", "start", "end", "correlation_id"])
    _refuse_repeated(api_calls, "CUDA API call", ["global_tid", "start", "end", "correlation_id"])


def refuse_missing(frame: pd.DataFrame, kind: str, fields: dict[str, str]) -> None:
    """DamagedTrace where a record of `frame` lacks one of `fields` (column -> what it is, in
    words): what places a record (its process, thread, device, stream, name) is no option."""
    for column, what in fields.items():
        refuse_where(frame, frame[column].isna().to_numpy(), kind, f"have no {what}")


def _described(frame: pd.DataFrame, row: int) -> str:
    """One record of `frame` in words: its correlation id where it has one, and its times."""
    record = frame.iloc[row]
    said = [f"correlation id {record['correlation_id']}"] if "correlation_id" in frame and pd.notna(
        record["correlation_id"]) else []
    said += [f"{key} {record[key]}" for key in ("start", "end") if key in frame]
    return ", ".join(said)


def refuse_where(frame: pd.DataFrame, bad: np.ndarray, kind: str, why: str) -> None:
    """DamagedTrace naming how many records of `frame` are `bad` and the first of them."""
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DamagedTrace(f"{kind} records that {why}: {int(bad.sum())} (the first: {_described(frame, first)})")


def _refuse_repeated(frame: pd.DataFrame, kind: str, keys: list[str]) -> None:
    """Records equal in every key: no two kernels start on one stream at one instant, no two calls on
    one thread. Only rows whose start repeats are compared (a cheap test first: most traces have none)."""
    if len(frame) < 2 or not all(key in frame for key in keys):
        return
    start = frame["start"].to_numpy()
    repeats = pd.Series(start).duplicated(keep=False).to_numpy()
    if not repeats.any():
        return
    candidates = frame.loc[repeats, keys]
    repeated = candidates.duplicated()
    if repeated.any():
        first = frame.index.get_loc(repeated.index[np.argmax(repeated.to_numpy())])
        raise DamagedTrace(f"{int(repeated.sum())} of its {len(frame)} {kind} records repeat another exactly "
                           f"(the first: {_described(frame, int(first))}): recorded twice")


# Between names joined into one text to search them all at once (starting_with): no NVTX name
# holds it (a C string ends at it).
_NAME_SEPARATOR = "\x00"


def starting_with(names: np.ndarray, prefixes: str | tuple[str, ...]) -> np.ndarray:
    """Positions (ascending) of the texts among `names` that start with `prefixes` (one, or any
    of several; NameText.starting_with). What is not text matches nothing."""
    names = np.asarray(names, dtype=object)
    texts = np.flatnonzero(pd.notna(names))  # a range without a name (None) is left out
    try:
        return texts[NameText(names[texts]).starting_with(prefixes)]
    except TypeError:  # something else than text among them (none of a reader's names): that too
        texts = np.flatnonzero(np.fromiter((isinstance(n, str) for n in names), dtype=bool, count=len(names)))
        return texts[NameText(names[texts]).starting_with(prefixes)]


class NameText:
    """Names (texts) joined into one text, each after a separator, to be searched all at once
    rather than by a test per name: a trace of torch's emit_nvtx holds hundreds of thousands of
    distinct range names, and its readers look among them for the few that are theirs."""

    def __init__(self, names: np.ndarray):
        self.text = _NAME_SEPARATOR.join(("", *names))  # TypeError where one is no text
        self.lengths = np.fromiter(map(len, names), dtype="int64", count=len(names))
        self.starts = np.cumsum(self.lengths + 1) - self.lengths  # where each name starts, after its separator
        self._names = names

    def starting_with(self, prefixes: str | tuple[str, ...]) -> np.ndarray:
        """Positions (ascending) of the names that start with `prefixes` (one, or any of several)."""
        alternatives = "|".join(map(re.escape, (prefixes,) if isinstance(prefixes, str) else prefixes))
        found = np.array([m.start() + 1 for m in re.finditer(f"{_NAME_SEPARATOR}(?:{alternatives})", self.text)],
                         dtype="int64")
        # a match right after a separator starts a name: its position is one of `starts` (a name
        # holding the separator itself would make others, which are not)
        at = np.searchsorted(self.starts, found)
        return at[(at < len(self.starts)) & (self.starts[np.minimum(at, len(self.starts) - 1)] == found)]

    def ending_in_digit(self) -> np.ndarray:
        """Whether each name's last character is a digit (str.isdigit), as one array: read off
        the text's bytes where it is ASCII (0-9 its only digits), else name by name."""
        if not self.text.isascii():
            return np.fromiter((name[-1:].isdigit() for name in self._names), dtype=bool, count=len(self._names))
        last = np.frombuffer(self.text.encode("ascii"), dtype=np.uint8)[self.starts + self.lengths - 1]
        return (self.lengths > 0) & (last >= ord("0")) & (last <= ord("9"))


@dataclass
class Trace:
    """Everything gemmscope reads from one export, as DataFrames; times are ns on nsys's clock."""

    path: Path  # as given (.sqlite, .sqlite.xz, .nsys-rep, or a torch.profiler trace: .json, .json.gz)
    sqlite: Path | None  # the nsys export read (SQLite file, or Parquet/Arrow folder); None for a torch.profiler trace
    meta: dict
    kernels: pd.DataFrame  # in start order (ties as the trace holds them), indexed 0..n-1
    memops: pd.DataFrame
    api_calls: pd.DataFrame
    nvtx: pd.DataFrame
    threads: pd.DataFrame
    gpus: pd.DataFrame
    memory: pd.DataFrame

    @functools.cached_property
    def range_names(self) -> np.ndarray:
        """The distinct names of `nvtx` (None left out), in the order met, found once: a trace of
        torch's emit_nvtx holds hundreds of thousands, and several readers look among them for
        the few that are theirs (the hook's records, TE's autocast ranges, step marks). A trace's
        frames are not changed in place (a trace cut or redacted is a new one)."""
        names = pd.unique(self.nvtx["name"].to_numpy(dtype=object))
        return names[pd.notna(names)]  # dropped from the few distinct, not the many rows

    def range_names_starting(self, prefixes: str | tuple[str, ...]) -> list[str]:
        """range_names that start with `prefixes` (one, or any of several), in the order met:
        looked for once per `prefixes`, however many readers ask."""
        found = self._names_starting.get(prefixes)
        if found is None:
            at = self._range_name_text.starting_with(prefixes)
            found = self._names_starting[prefixes] = list(self.range_names[at])
        return found

    @functools.cached_property
    def _names_starting(self) -> dict[str | tuple[str, ...], list[str]]:
        return {}

    def range_names_ending_in_digit(self) -> np.ndarray:
        """range_names whose last character is a digit (a step's, an iteration's), in the order met."""
        return self.range_names[self._range_name_text.ending_in_digit()]

    @functools.cached_property
    def _range_name_text(self) -> NameText:
        return NameText(self.range_names)

    def replaced(self, range_names: np.ndarray, **changes: Any) -> Trace:
        """dataclasses.replace(self, **changes), its range_names given: those of its `nvtx`,
        found already by whoever makes it (attribution coding the names, the redaction of them),
        not looked for again among a long trace's rows."""
        trace = dataclasses.replace(self, **changes)
        trace.__dict__["range_names"] = range_names  # what functools.cached_property would store
        return trace

    @property
    def made_by_nsys(self) -> bool:
        """nsys made the trace (its records come from an nsys export), not torch.profiler."""
        return self.sqlite is not None

    @property
    def records(self) -> Path:
        """The file or folder its records were read from: its nsys export, or the torch.profiler
        trace itself."""
        return self.sqlite if self.sqlite is not None else self.path


def gpu_sm(traces: Sequence[Trace]) -> int | None:
    """The compute capability (90 for sm90) of the first GPU the traces name one for (each
    reader fills `meta["gpus"]`' cc_major and cc_minor), None where none does."""
    capabilities = [(g["cc_major"], g["cc_minor"]) for t in traces for g in t.meta["gpus"]
                    if pd.notna(g.get("cc_major"))]
    return int(capabilities[0][0]) * 10 + int(capabilities[0][1]) if capabilities else None
