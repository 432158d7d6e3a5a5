"""Outputs that appear whole or not at all: written under a temporary name beside the target, then
renamed over it (a rename within one folder is atomic), and the temporary file removed on any
failure (an error, a full disk, Ctrl-C)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def written_whole(out: Path, suffix: str = "") -> Iterator[Path]:
    """The temporary path to write `out` through (its name ends in `suffix`, for a writer that
    goes by the name, e.g. `.gz`); `out` is that file once the block ends without an error."""
    partial = out.with_name(f"{out.name}.{os.getpid()}.partial{suffix}")
    try:
        yield partial
        partial.replace(out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
