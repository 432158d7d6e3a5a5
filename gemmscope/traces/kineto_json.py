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


class _DepthBounded:
    """A binary file whose JSON is refused (DamagedTrace) once it nests deeper than MAX_DEPTH, as it
    is read: each chunk is scanned in numpy, brackets inside strings (told by their unescaped
    quotes) left out, the depth, the string state and a trailing run of backslashes carried over."""

    def __init__(self, raw):
        self.raw = raw
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # the run of backslashes the last chunk ended with
        self.offset = 0

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.raw.close()

    def close(self) -> None:
        self.raw.close()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        if data:
            self._scan(data)
            self.offset += len(data)
        return data

    def _scan(self, data: bytes) -> None:
        kind = _BYTE_KIND[np.frombuffer(data, dtype=np.uint8)]
        at = np.flatnonzero(kind)
        if not len(at):
            self.backslashes = 0
            return
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
            where = self.offset + int(at[np.argmax(depth > MAX_DEPTH)])
            raise DamagedTrace(f"its JSON nests deeper than {MAX_DEPTH} levels (at byte {where}), which no "
                               "torch.profiler trace does")
        self.depth = int(depth[-1])
        self.in_string = bool((self.in_string + int(quote.sum())) % 2)

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
    return _DepthBounded(gzip.open(path, "rb") if magic == GZIP_MAGIC else open(path, "rb"))


def head_and_events(path: Path) -> tuple[dict, Iterator[dict]]:
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
    return head, _events(path)


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


def _events(path: Path) -> Iterator[dict]:
    with _open(path) as f:
        yield from ijson.items(f, "traceEvents.item", buf_size=_READ_SIZE, use_float=True)


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
