"""A torch.profiler (Kineto) trace file as JSON: told by its content (is_kineto), its head and its
events streamed (ijson: a 1 GB trace is never held whole) with its nesting bounded as it is read,
and a redacted copy written event by event. What the events mean is traces.kineto's."""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterator
from pathlib import Path

import ijson
import numpy as np

from gemmscope.errors import InputError
from gemmscope.traces.model import DamagedTrace

GZIP_MAGIC = b"\x1f\x8b"
_HEAD_BYTES = 1 << 16  # how much of a file is looked at to tell a Kineto trace by its content
# How deep a torch.profiler trace nests its JSON: the document, traceEvents, an event, its args, an
# operator's input shapes (a list of lists) make six levels. Deeper is no trace, and the JSON
# parser's memory grows with the square of the depth (it keeps the path to every value): a 200 KB
# file of brackets would take tens of GB. It is refused as it is read, before it is parsed.
MAX_DEPTH = 64
_READ_SIZE = 1 << 20  # what the parser asks of the file at a time (the depth is checked per read)
# The longest JSON string kept whole, in bytes: the parser holds a string whole, so one event name
# of 1 GiB took more than 4 GB. Kernel and range names are at most a few thousand characters; a
# longer string keeps its first bytes (about this many) and the trace says how many were cut.
MAX_STRING = 1 << 16
# A gzip-compressed trace is refused once it has given more than this, or more than MAX_RATIO times
# the compressed bytes read (after RATIO_FROM bytes: a small file may compress as it likes):
# torch.profiler's JSON compresses about 15 times, and gzip can reach 1000 (a 1 MB file of 1 GB).
MAX_DECOMPRESSED = 16 << 30
MAX_RATIO = 200
RATIO_FROM = 64 << 20


def is_kineto(path: Path) -> bool:
    """Whether `path` holds a Kineto trace, by its content: JSON (plain or gzip) whose first
    object has a `traceEvents` key near its head."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        opener = gzip.open if magic == GZIP_MAGIC else open
        with opener(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    return head.lstrip()[:1] == b"{" and (b'"traceEvents"' in head or b'"schemaVersion"' in head)


# Per byte: 1 a quote, 2 an opening bracket, 3 a closing one, 4 a backslash; 0 the rest.
_BYTE_KIND = np.zeros(256, dtype=np.int8)
_BYTE_KIND[[ord('"'), ord("["), ord("{"), ord("]"), ord("}"), ord("\\")]] = [1, 2, 2, 3, 3, 4]


class TooLarge(DamagedTrace):
    """A compressed trace that decompresses to more than gemmscope reads."""

    def message(self, given: Path | str) -> str:
        return f"{given} {self.what}"


class _DepthBounded:
    """A binary file whose JSON is refused (DamagedTrace) once it nests deeper than MAX_DEPTH, as it
    is read: each chunk is scanned in numpy, brackets inside strings (told by their unescaped
    quotes) left out, the depth, the string state and a trailing run of backslashes carried over.
    Strings longer than MAX_STRING bytes are cut as they pass (`cut` counts them), and a gzip file
    (`compressed`: the file under it) is refused past MAX_DECOMPRESSED or MAX_RATIO."""

    def __init__(self, raw, compressed=None):
        self.raw = raw
        self.compressed = compressed
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # the run of backslashes the last chunk ended with
        self.offset = 0
        self.string_length = 0  # bytes of the string the last chunk ended in, so far
        self.string_cut = False  # whether that string was cut
        self.cut = 0

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def close(self) -> None:
        self.raw.close()
        if self.compressed is not None:
            self.compressed.close()

    def read(self, size: int = -1) -> bytes:
        while data := self.raw.read(size):
            self.offset += len(data)
            self._check_ratio()
            kept = self._scan(data)
            if kept:  # a chunk all inside a cut string gives nothing: the next one is read (b"" is the end)
                return kept
        return data

    def _check_ratio(self) -> None:
        if self.compressed is None:
            return
        read = self.compressed.tell()
        if self.offset > MAX_DECOMPRESSED or (self.offset > RATIO_FROM and self.offset > MAX_RATIO * read):
            raise TooLarge(f"decompresses to more than {min(self.offset, MAX_DECOMPRESSED) >> 20} MiB from "
                           f"{read >> 20} MiB (gemmscope reads up to {MAX_DECOMPRESSED >> 30} GiB, at most "
                           f"{MAX_RATIO} times the compressed size; torch.profiler's JSON compresses about 15 times)")

    def _scan(self, data: bytes) -> bytes:
        """Check `data`'s depth; `data` with its strings past MAX_STRING cut."""
        kind = _BYTE_KIND[np.frombuffer(data, dtype=np.uint8)]
        at = np.flatnonzero(kind)
        carried_backslashes = self.backslashes
        if not len(at):
            self.backslashes = 0
            return self._cut_strings(data, np.empty(0, dtype=np.int64), carried_backslashes)
        k = kind[at]
        quote = k == 1
        if self.backslashes or (k == 4).any():
            quote &= ~self._escaped(at, k, len(data))
        else:
            self.backslashes = 0
        quotes_before = np.cumsum(quote) - quote
        inside = (quotes_before + self.in_string) % 2 == 1
        depth = self.depth + np.cumsum(np.where(inside, 0, (k == 2).astype(np.int64) - (k == 3)))
        if depth.max() > MAX_DEPTH:
            where = self.offset - len(data) + int(at[np.argmax(depth > MAX_DEPTH)])  # offset counts `data` already
            raise DamagedTrace(f"its JSON nests deeper than {MAX_DEPTH} levels (at byte {where}), which no "
                               "torch.profiler trace does")
        self.depth = int(depth[-1])
        kept = self._cut_strings(data, at[quote], carried_backslashes)
        self.in_string = bool((self.in_string + int(quote.sum())) % 2)
        return kept

    def _cut_strings(self, data: bytes, quotes: np.ndarray, carried_backslashes: int) -> bytes:
        """`data` with what strings hold past MAX_STRING bytes left out (`quotes`: where its
        unescaped quotes are; the string state is the one it began in)."""
        marks = np.r_[-1, quotes] if self.in_string else quotes
        if len(marks) % 2:
            marks = np.r_[marks, len(data)]
        starts, ends = marks[0::2] + 1, marks[1::2]
        carried = self.in_string and len(starts) > 0
        lengths = ends - starts
        if carried:
            lengths[0] += self.string_length
        open_at_end = bool(len(ends)) and ends[-1] == len(data)
        self.string_length = int(lengths[-1]) if open_at_end else 0
        if not len(lengths) or lengths.max() <= MAX_STRING:
            self.string_cut = False
            return data
        pieces, kept_from, last_cut = [], 0, False
        for index in np.flatnonzero(lengths > MAX_STRING):
            start, end = int(starts[index]), int(ends[index])
            continued = carried and index == 0
            if continued and self.string_cut:
                at = start  # cut in a chunk before: nothing more of it
            else:
                before = self.string_length if continued else 0
                place = self._cut_place(data, start, end,
                                        start + max(MAX_STRING - before, _AFTER_CHUNK_START if continued else 0),
                                        carried_backslashes if continued else 0)
                if place is None:  # no place to cut it in this chunk: in the next
                    continue
                at = place
                self.cut += 1
            last_cut = index == len(lengths) - 1
            pieces.append(data[kept_from:at])
            kept_from = end
        pieces.append(data[kept_from:])
        self.string_cut = open_at_end and last_cut
        return b"".join(pieces)

    def _escaped(self, at: np.ndarray, k: np.ndarray, size: int) -> np.ndarray:
        """Per special byte of the chunk, whether a quote is escaped: an odd run of backslashes
        right before it (the run may begin in the chunk before)."""
        backslash = k == 4
        index = np.arange(len(k))
        follows = np.r_[False, at[1:] == at[:-1] + 1]  # right after the special byte before it
        starts = backslash & ~(np.r_[False, backslash[:-1]] & follows)
        first = np.maximum.accumulate(np.where(starts, index, 0))
        run = index - first + 1  # at a backslash: how long its run is so far
        run = np.where(backslash & (at[first] == 0), run + self.backslashes, run)  # continued from the last chunk
        before = np.zeros(len(k), dtype=np.int64)
        before[1:] = np.where(backslash[:-1] & follows[1:], run[:-1], 0)
        if at[0] == 0:
            before[0] = self.backslashes
        self.backslashes = int(run[-1]) if backslash[-1] and at[-1] == size - 1 else 0
        return (k == 1) & (before % 2 == 1)

    @staticmethod
    def _cut_place(data: bytes, start: int, end: int, at: int, backslashes_before: int) -> int | None:
        """Where a string whose bytes run from `start` to `end` of `data` can end, at `at` or
        near: not inside a UTF-8 character nor an escape (\\n, \\u00e9); None if not before `end`.
        `backslashes_before`: those it held just before `start` (in the chunk before)."""
        while at < end and data[at] & 0xC0 == 0x80:
            at += 1
        if at >= end:
            return None
        last = data.rfind(b"\\", max(start, at - 6), at)
        if last >= 0 and _opens_escape(data, start, last, backslashes_before):
            if last + (6 if data[last + 1] == 0x75 else 2) > at:  # an escape begun and not ended
                at = last
        # the first half of a surrogate pair (\\ud834\\udd1e) is not kept alone
        high = at - 6
        if (high >= start and data[high:high + 2] == b"\\u" and data[high + 2:high + 4].lower() in _HIGH_SURROGATES
                and _opens_escape(data, start, high, backslashes_before)):
            at = high
        return at


_HIGH_SURROGATES = (b"d8", b"d9", b"da", b"db")
# Where a string begun in the chunk before may be cut, at the earliest: past the end of an escape
# begun there (six bytes at most) and of the second half of a surrogate pair after it.
_AFTER_CHUNK_START = 12


def _opens_escape(data: bytes, start: int, at: int, backslashes_before: int) -> bool:
    """Whether the backslash at `at` of a string (from `start`; `backslashes_before` just before
    it) begins an escape: it ends an odd run of backslashes."""
    first = at
    while first > start and data[first - 1] == 0x5C:
        first -= 1
    return (at - first + 1 + (backslashes_before if first == start else 0)) % 2 == 1


def damaged(given: Path, exc: BaseException) -> InputError:
    return InputError(f"{given} is a truncated or damaged torch.profiler trace ({one_line(exc)})")


READ_ERRORS = (OSError, EOFError, zlib.error, ValueError, ijson.JSONError)


def recorded_names(path: Path) -> list[str]:
    """The machine's names the trace's head records (Kineto's `host_name`), for redaction."""
    try:
        head, _ = head_and_events(path)
    except DamagedTrace as exc:
        raise InputError(exc.message(path)) from None
    except READ_ERRORS as exc:
        raise damaged(path, exc) from None
    return [str(head["host_name"])] if head.get("host_name") else []


def write_redacted(path: Path, out: Path, redact) -> None:
    """A copy of the trace `path` with `redact` (a JSON-able value -> the same, redacted)
    applied to its head and to each event as it streams past: gzip-compressed when `out` ends
    in .gz. `out` is written as given: the caller makes it appear whole."""
    import json

    try:
        head, events = head_and_events(path)
        opener = gzip.open if out.name.endswith(".gz") else open
        with opener(out, "wt", encoding="utf-8") as f:
            f.write(json.dumps(redact(head))[:-1] + (", " if head else "") + '"traceEvents": [\n')
            for at, event in enumerate(events):
                f.write((",\n" if at else "") + json.dumps(redact(event)))
            f.write("\n]}\n")
    except DamagedTrace as exc:
        raise InputError(exc.message(path)) from None
    except READ_ERRORS as exc:
        if isinstance(exc, OSError) and exc.filename == str(out):
            raise
        raise damaged(path, exc) from None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _open(path: Path) -> _DepthBounded:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != GZIP_MAGIC:
        return _DepthBounded(open(path, "rb"))
    compressed = open(path, "rb")
    return _DepthBounded(gzip.GzipFile(fileobj=compressed, mode="rb"), compressed)


def head_and_events(path: Path) -> tuple[dict, Events]:
    """The top-level keys before `traceEvents` (Kineto writes its metadata there), and an
    iterator over the events, streamed."""
    head: dict = {}
    with _open(path) as f:
        parser = ijson.parse(f, buf_size=_READ_SIZE, use_float=True)
        key = None
        for prefix, event, value in parser:
            if prefix == "" and event == "map_key":
                key = value
                if key == "traceEvents":
                    break
            elif prefix == key and event in ("string", "number", "boolean", "null"):
                head[key] = value
            elif prefix == key and event in ("start_map", "start_array"):
                head[key] = _built(parser, event)
        else:
            raise InputError(f"{path} is JSON but not a torch.profiler trace (no traceEvents)")
    return head, Events(path)


def _built(parser, first_event: str):
    """The whole value whose first parse event was `first_event`, from ijson's parse events."""
    builder = ijson.ObjectBuilder()
    builder.event(first_event, None)
    depth = 1
    for _, event, value in parser:
        builder.event(event, value)
        depth += event in ("start_map", "start_array")
        depth -= event in ("end_map", "end_array")
        if depth == 0:
            return builder.value
    raise ValueError("the file ends inside its metadata")


class Events:
    """A trace's events, streamed; `cut`: how many of their strings were cut (MAX_STRING) so far."""

    def __init__(self, path: Path):
        self.path = path
        self.cut = 0

    def __iter__(self) -> Iterator[dict]:
        with _open(self.path) as f:
            try:
                yield from ijson.items(f, "traceEvents.item", buf_size=_READ_SIZE, use_float=True)
            finally:
                self.cut = f.cut


def shown(value) -> str:
    return repr(value)[:40]


def bad_event(at: int, event) -> DamagedTrace | None:
    """What is wrong with the event at position `at` of traceEvents, which the reader could not
    take: the first of its fields the reader uses that is not what Kineto writes; None if no rule
    here names it."""
    where = f"event {at + 1} of traceEvents"
    if not isinstance(event, dict):
        return DamagedTrace(f"{where} is {shown(event)}, not an object")
    where += f" ({shown(event.get('name'))}, cat {shown(event.get('cat'))})"
    if "ts" not in event:
        return DamagedTrace(f"{where} has no ts (its start time)")
    for key, what in (("ts", "time"), ("dur", "duration")):
        value = event.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return DamagedTrace(f"{where}: {key} is {shown(value)}, not a {what} in µs")
        if not math.isfinite(value) or abs(value) * 1000 >= 2**63:
            return DamagedTrace(f"{where}: {key} is {shown(value)} µs, beyond any {what}")
    args = event.get("args")
    if args and not isinstance(args, dict):
        return DamagedTrace(f"{where}: args is {shown(args)}, not an object")
    args = args or {}
    if not isinstance(event.get("name", ""), str):
        return DamagedTrace(f"{where}: name is {shown(event.get('name'))}, not text")
    if "correlation" in args and type(args["correlation"]) is not int:
        return DamagedTrace(f"{where}: args.correlation is {shown(args['correlation'])}, not an integer id")
    ids = {f"args.{key}": args.get(key) for key in ("correlation", "device", "stream", "bytes")}
    for key, value in (ids | {"pid": event.get("pid"), "tid": event.get("tid")}).items():
        if isinstance(value, int | float) and not -(2**63) <= value < 2**63:
            return DamagedTrace(f"{where}: {key} is {shown(value)}, beyond any id")
    return None
