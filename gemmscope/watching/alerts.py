"""What changed between a window and the job's baseline (its first window, or one the user gives):
each rule in one place, each alert a dict (code, statement, where), made from two timeline records
(timeline.window_record) alone."""

from __future__ import annotations

from typing import Any

from gemmscope.errors import State

# A share of GEMM time (a precision's, the coverage's, the quantization's) that moved by this much
# or more, in absolute terms, is a change; less is within what identical windows of one run show.
SHARE_MOVED = 0.05
# A window's step time outside the baseline's own steps' spread by more than this factor.
STEP_SPREAD_FACTOR = 1.10
# New mismatch places named in an alert's statement (all are in its `places`).
_PLACES_SAID = 4
# How bad a state is, the worst first: the order README's exit codes give (1, then 4, then 5).
_WORST_FIRST = (State.FAIL, State.NOT_CHECKED, State.NOT_FULLY_CHECKED, State.PASS)


def worst(states: list[State]) -> State | None:
    """The state of a job from its windows': the worst of them (None without a window)."""
    return min(states, key=_WORST_FIRST.index) if states else None


def _alert(code: str, statement: str, **where: Any) -> dict[str, Any]:
    return {"code": code, "statement": statement, **where}


def _share_moved(name: str, before: float | None, after: float | None) -> str | None:
    if before is None or after is None or abs(after - before) < SHARE_MOVED:
        return None
    return f"{name} {100 * before:.1f} % -> {100 * after:.1f} % of GEMM time"


def compare(record: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """The alerts of `record` against `baseline`: a mismatch place (layer, module, pass) the
    baseline did not have, the state worse, a precision's share of GEMM time, the coverage or the
    quantization share moved by SHARE_MOVED or more, the step time outside the baseline's spread."""
    at = {"steps": record["steps"], "ranks": record["ranks"]}
    alerts = []
    new = {place: n for place, n in record["mismatches_by_place"].items() if place not in baseline["mismatches_by_place"]}
    if new:
        listed = ", ".join(f"{place} ({n})" for place, n in list(new.items())[:_PLACES_SAID])
        more = f" and {len(new) - _PLACES_SAID} more" if len(new) > _PLACES_SAID else ""
        alerts.append(_alert("new-mismatch", f"{sum(new.values())} GEMM launches ran another precision than asked "
                                             f"where the baseline's did not: {listed}{more}", places=new, **at))
    if _WORST_FIRST.index(State(record["state"])) < _WORST_FIRST.index(State(baseline["state"])):
        alerts.append(_alert("state", f"{State(baseline['state']).word} -> {State(record['state']).word}", **at))
    before, after = baseline["gemm_time_share_by_precision"], record["gemm_time_share_by_precision"]
    for precision in dict.fromkeys([*before, *after]):
        moved = _share_moved(precision, before.get(precision, 0.0), after.get(precision, 0.0))
        if moved:
            alerts.append(_alert("precision-mix", moved, precision=precision, **at))
    for code, key, name in (("coverage", "coverage_time_share", "asked for high precision"),
                            ("quantization", "quantization_share", "quantization")):
        moved = _share_moved(name, baseline[key], record[key])
        if moved:
            alerts.append(_alert(code, moved.replace("of GEMM time", "of GPU busy time") if code == "quantization"
                                 else moved, **at))
    spread = baseline["step_time_ns"]
    step = record["step_time_ns"]
    if spread["median"] is not None and step["median"] is not None and not (
            spread["min"] / STEP_SPREAD_FACTOR <= step["median"] <= spread["max"] * STEP_SPREAD_FACTOR):
        alerts.append(_alert("step-time", f"step time {step['median'] / 1e6:.2f} ms, outside the baseline's steps "
                                          f"({spread['min'] / 1e6:.2f}-{spread['max'] / 1e6:.2f} ms) by more than "
                                          f"{STEP_SPREAD_FACTOR:.2f}x", **at))
    return alerts


def rank_lag(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A rank whose median step time in a window is above the fastest rank's slowest step by more
    than STEP_SPREAD_FACTOR: the window's records of one rank each."""
    timed = [r for r in ranks if r["step_time_ns"]["median"] is not None]
    if len(timed) < 2:
        return []
    fastest = min(timed, key=lambda r: r["step_time_ns"]["median"])
    bound = fastest["step_time_ns"]["max"] * STEP_SPREAD_FACTOR
    return [_alert("rank-lag", f"rank {', '.join(map(str, r['ranks'])) or '?'}: step time "
                               f"{r['step_time_ns']['median'] / 1e6:.2f} ms, beyond the fastest rank's steps "
                               f"(at most {fastest['step_time_ns']['max'] / 1e6:.2f} ms) by more than "
                               f"{STEP_SPREAD_FACTOR:.2f}x", steps=r["steps"], ranks=r["ranks"])
            for r in timed if r["step_time_ns"]["median"] > bound]
