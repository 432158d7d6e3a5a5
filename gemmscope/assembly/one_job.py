"""Which traces make one job, told by what each capture records about itself (a reader's
`meta["capture"]`: nsys's session start, the span it analysed and the command it launched;
torch.profiler's trace_id and the span of its activity), never by hashing the files:

- the same capture given twice (X.sqlite beside the X.sqlite.xz `xz -dk` leaves, a file matched
  by two globs, a scrubbed copy beside its original) is read once, and said so;
- captures that cannot be ranks of one job are refused in one line: they recorded different
  commands (digits aside: the ranks of a job differ in --node_rank, ports and host numbers), the
  same rank (gemmscope's hook's process mark, torch.profiler's distributedInfo), spans more
  than CLOCK_SKEW_NS apart (the ranks of a job run together, on clocks that agree far better), or
  one GPU (nsys's UUID of it) one after the other.
  Merged, one run's GEMMs would be judged against the other's recipe, and its failure hidden.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gemmscope.assembly.attribution import LoadedTrace
from gemmscope.errors import InputError

# How far apart the clocks of a job's nodes may be, and its ranks' captures start or stop.
CLOCK_SKEW_NS = 60 * 10**9


def one_job(loaded: Sequence[LoadedTrace]) -> tuple[list[LoadedTrace], list[dict]]:
    """`loaded` with each capture once, and the traces left out as repeats (trace, same_as);
    InputError where two captures cannot be ranks of one job."""
    kept: list[LoadedTrace] = []
    repeated: list[dict] = []
    first_of: dict[str, LoadedTrace] = {}
    for item in loaded:
        identity = _capture(item).get("id")
        if identity is not None and identity in first_of:
            repeated.append({"trace": str(item.path), "same_as": str(first_of[identity].path)})
            continue
        if identity is not None:
            first_of[identity] = item
        kept.append(item)
    read = [item for item in kept if item.error is None]  # attributed: launches to compare
    _refuse_other_commands(read)
    _refuse_repeated_ranks(read)
    _refuse_far_apart(read)
    _refuse_one_gpu_in_turn(read)
    return kept, repeated


def _capture(item: LoadedTrace) -> dict:
    return (item.trace.meta.get("capture") if item.trace is not None else None) or {}


def _refuse(a: LoadedTrace, b: LoadedTrace, why: str) -> None:
    raise InputError(f"{a.path} and {b.path} are not ranks of one job ({why}): check each run on its own "
                     "(gemmscope compare BASE NEW sets two runs side by side)")


def _refuse_other_commands(read: list[LoadedTrace]) -> None:
    first: tuple[str, LoadedTrace] | None = None
    for item in read:
        command = _capture(item).get("command")
        if command is None:
            continue
        shape = re.sub(r"\d+", "#", command)
        if first is None:
            first = (shape, item)
        elif shape != first[0]:
            _refuse(first[1], item, "they recorded different commands")


def _refuse_repeated_ranks(read: list[LoadedTrace]) -> None:
    """Two captures recording one rank (a capture holding several processes records several)."""
    owner: dict[int, LoadedTrace] = {}
    for item in read:
        assert item.launches is not None  # read: attributed
        for rank in item.launches["rank"].dropna().unique().tolist():
            if rank in owner:
                _refuse(owner[rank], item, f"both record rank {rank}")
            owner[rank] = item


def _refuse_far_apart(read: list[LoadedTrace]) -> None:
    """The capture that starts last against the one that stops first: any two spans farther apart
    than the clocks' skew include that pair."""
    spans = [(item, _capture(item)["window"]) for item in read if _capture(item).get("window")]
    if len(spans) < 2:
        return
    last_start, (late, _) = max(((w[0], (i, w)) for i, w in spans), key=lambda pair: pair[0])
    first_stop, (early, _) = min(((w[1], (i, w)) for i, w in spans), key=lambda pair: pair[0])
    gap = last_start - first_stop
    if gap > CLOCK_SKEW_NS:
        _refuse(early, late, f"captured {_duration(gap)} apart, more than any clock skew between nodes")


def _refuse_one_gpu_in_turn(read: list[LoadedTrace]) -> None:
    """Two captures whose kernels ran on one GPU (by its UUID), one after the other: the ranks of
    a job run at the same time, and two spans of one machine's clock need no skew."""
    by_gpu: dict[str, list[tuple[int, int, LoadedTrace]]] = {}
    for item in read:
        capture = _capture(item)
        if capture.get("window"):
            for gpu in capture.get("gpus") or ():
                by_gpu.setdefault(gpu, []).append((*capture["window"], item))
    for gpu, spans in by_gpu.items():
        spans.sort(key=lambda span: span[0])
        latest_stop, latest = spans[0][1], spans[0][2]
        for start, stop, item in spans[1:]:
            if start > latest_stop:
                _refuse(latest, item, f"both ran on GPU {gpu[:8]}…, one after the other")
            if stop > latest_stop:
                latest_stop, latest = stop, item


def _duration(ns: int) -> str:
    seconds = ns / 1e9
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
