"""Long work that Ctrl-C stops within a moment: xz in chunks, SQLite statements that check for it.

Python runs a signal's handler only between its own instructions: a single C call (compressing a
whole trace, an UPDATE or VACUUM over a million rows) holds Ctrl-C back until it returns, which
on a long trace was 10 to 20 s. Here the work is cut into pieces of a fraction of a second each
(xz a chunk at a time), or SQLite calls back into Python every few thousand steps of a statement
(a progress handler), where the handler runs.
"""

from __future__ import annotations

import lzma
import signal
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Bytes handed to xz at once: some tens of milliseconds of work.
_CHUNK = 1 << 20
# SQLite virtual-machine steps between two calls of the progress handler (about a millisecond).
_STEPS = 10_000
# xz's preset for what gemmscope writes (scrubbed traces, a bundle's traces): preset 0 takes a
# twentieth of preset 9's time (0.9 s against 18 s on the 25 MB export of 63 k kernels,
# tests/fixtures/gpu/corpus/fsdp_8x100_fp8_1gpu) for a file 16 % larger (4.4 MB against 3.8 MB;
# presets 1 to 3 are slower and no smaller); preset 9 was most of scrub's and bundle's time.
XZ_PRESET = 0


def xz_compress(source: Path, out: Path, preset: int = XZ_PRESET) -> None:
    """`source` xz-compressed into `out`, a chunk at a time."""
    compressor = lzma.LZMACompressor(preset=preset)
    with source.open("rb") as read, out.open("wb") as write:
        while chunk := read.read(_CHUNK):
            write.write(compressor.compress(chunk))
        write.write(compressor.flush())


def xz_decompress(source: Path, out: Path) -> None:
    """The xz file `source` decompressed into `out`, a chunk at a time; streams one after another
    are read as one, as lzma.decompress reads them (lzma.LZMAError where the first is not whole xz)."""
    decompressor, streams = lzma.LZMADecompressor(), 1
    with source.open("rb") as read, out.open("wb") as write:
        while True:
            if decompressor.eof:  # another stream may follow
                chunk = decompressor.unused_data or read.read(_CHUNK)
                if not chunk:
                    return
                decompressor, streams = lzma.LZMADecompressor(), streams + 1
            elif decompressor.needs_input:
                chunk = read.read(_CHUNK)
                if not chunk and streams == 1:
                    raise lzma.LZMAError("Compressed data ended before the end-of-stream marker was reached")
                if not chunk:
                    return  # a further stream's start and no more (stream padding): as lzma.decompress
            else:  # output held back by max_length
                chunk = b""
            try:
                write.write(decompressor.decompress(chunk, max_length=4 * _CHUNK))
            except lzma.LZMAError:
                if streams == 1:
                    raise
                return  # what follows a whole stream is not xz: left, as lzma.decompress leaves it


class _Interrupted:
    """Whether Ctrl-C came while a statement ran: the sqlite3 module turns an exception raised in
    its progress handler (the KeyboardInterrupt) into OperationalError("interrupted")."""

    came = False

    @classmethod
    def handler(cls, _signum: int, _frame: object) -> None:
        cls.came = True
        raise KeyboardInterrupt


def _progress() -> int:
    """SQLite's progress handler: a call into Python, where a pending Ctrl-C's handler runs (0: go on)."""
    return 0


@contextmanager
def sqlite_statements(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """`conn` whose statements Ctrl-C stops at once: a KeyboardInterrupt, not an SQLite error.
    In a thread other than the main one (where Python runs no signal handler), as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield conn
        return
    previous = signal.getsignal(signal.SIGINT)
    ours = previous is signal.default_int_handler  # ignored (SIG_IGN) or handled otherwise: left as it is
    if ours:
        _Interrupted.came = False
        signal.signal(signal.SIGINT, _Interrupted.handler)
    conn.set_progress_handler(_progress, _STEPS)
    try:
        yield conn
    except sqlite3.OperationalError:
        if ours and _Interrupted.came:
            raise KeyboardInterrupt from None
        raise
    finally:
        conn.set_progress_handler(None, 0)
        if ours:
            signal.signal(signal.SIGINT, previous)
