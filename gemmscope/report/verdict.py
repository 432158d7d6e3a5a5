"""The answer first: the verdict block of checked traces, a status and labelled lines."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from gemmscope.assembly import te_ranges
from gemmscope.diagnosing.diagnosis import Diagnosis
from gemmscope.diagnosing.findings import Finding
from gemmscope.judging.figures import Coverage, verdict_figures
from gemmscope.judging.judgement import Judgement, recorded_recipes
from gemmscope.report.model import count
from gemmscope.traces.model import Trace


def shares_by_precision(time_by_precision: dict[str, int]) -> str:
    """"fp8 92.1 %, bf16 7.9 %": each precision's share of GEMM kernel time, largest first."""
    total = sum(time_by_precision.values())
    return ", ".join(f"{p} {100 * t / total:.1f} %" for p, t in time_by_precision.items())


def top_findings(findings: list[Finding]) -> str:
    if not findings:
        return "none"
    first, rest = findings[0], [f["code"] for f in findings[1:4]]
    return f"{first['code']}: {first['statement']}" + (f"; then {', '.join(rest)}" if rest else "")


def trace_environment(result: Judgement) -> list[tuple[str, str]]:
    return traces_environment(result.job.traces, verdict_figures(result).ranks)


def traces_environment(read: Sequence[Trace], ranks: list[int]) -> list[tuple[str, str]]:
    """What the traces `read` say of the machine and software, and the `ranks` their GEMMs ran on."""
    if not read:
        return [("traces", "none: the command left no trace")]
    gpus = dict.fromkeys(f"{gpu['name']} ({gpu['sm']})" for t in read for gpu in t.meta["gpus"])
    nsys = dict.fromkeys(str(t.meta["nsys_version"]) for t in read)
    profilers = dict.fromkeys(t.meta["profiler"] for t in read)
    traces = count(len(read), "file") + (f", ranks {', '.join(map(str, ranks))}" if ranks else "")
    software = next((v for t in read
                     if (v := te_ranges.recorded_software(t.range_names_starting(te_ranges.SOFTWARE_PREFIX)))), None)
    if software is None:
        versions = "not recorded (nsys records none; gemmscope verify's hook does)"
    else:
        versions = ", ".join(f"{label} {software.get(key) or 'unknown'}" for key, label in
                             (("torch", "torch"), ("cuda", "CUDA"), ("transformer_engine", "TE"), ("cublaslt", "cuBLASLt")))
    made_by = ("nsys", ", ".join(nsys)) if all(t.made_by_nsys for t in read) else ("profiler", ", ".join(profilers))
    return [("GPU", ", ".join(gpus) or "unknown"), made_by, ("traces", traces),
            ("software", versions)]


def environment_line(environment: list[tuple[str, str]]) -> str:
    return "; ".join(f"{label}: {value}" for label, value in environment)


def verdict_block(result: Judgement, diagnosis: Diagnosis) -> tuple[str, list[tuple[str, str]]]:
    """The answer first: a status (errors.State's value) and five labelled lines (what was asked,
    what ran, the GEMM time at the requested precision, the top findings, the environment)."""
    figures = verdict_figures(result)
    ran = (f"{count(figures.gemm_launches, 'GEMM launch', 'GEMM launches')}, {figures.gemm_time_ns / 1e6:.3f} ms "
           f"of GEMM kernels, on {count(len(figures.ranks) or 1, 'rank')}")
    if figures.gemm_time_ns:
        ran += f": {shares_by_precision(figures.time_by_precision)} of GEMM time"
    elif figures.gemm_launches:  # valid data a profiler may record: kernels too short for its clock
        ran += "; their kernels recorded no duration"
    if figures.note is not None:
        ran += f"; {figures.note}"
    status = result.state.value
    if result.checked or result.expect_map:
        asked = _asked_recipes(result)
        share = figures.expected_time_share
        at = ("the recipe asked of each" if result.expect_map
              else result.expected if result.expect_given or not result.requests_recorded else "the precision each asked")
        # the share is of the GEMM time checked: where some GEMMs had nothing to be judged against, said so
        checked = "checked GEMM time" if figures.unchecked_gemm_launches else "GEMM time"
        at_precision = ((f"{share * 100:.1f} % of {checked}" if share is not None else "no GEMM time")
                        + f" at {at}; "
                          f"{count(figures.mismatches, 'mismatch', 'mismatches')}, {figures.allowed} allowed")
        if figures.coverage is not None:
            at_precision += "; " + coverage_line(figures.coverage, result)
        if result.expect_map:
            at_precision += "; ranges: " + _ranges_verdicts(result.ranges_checked)
        if unchecked := unchecked_line(result):
            at_precision += "; " + unchecked
    else:
        asked = "no recipe: no --expect, and the run recorded no enabled te.autocast"
        at_precision = "not checked (no recipe to check against); precisions are listed as they ran"
    if result.job.unreadable:
        at_precision += f"; {count(len(result.job.unreadable), 'trace')} could not be read"
    environment = environment_line(trace_environment(result))
    unrecorded = [("Not recorded", unpatched_line(result.unpatched))] if result.unpatched else []
    return status, [("Asked", asked), ("Ran", ran), ("At the requested precision", at_precision), *unrecorded,
                    ("Top findings", top_findings(diagnosis.findings)), ("Environment", environment)]


def nothing_ran_block(read: Sequence[Trace], expected: str | None, expect_given: bool,
                      expect_map: Sequence[tuple[str, str]], note: str,
                      unpatched: list[dict[str, str | None]], command: dict | None = None) -> list[tuple[str, str]]:
    """The verdict block's lines of a run that launched no GPU kernel (its state: fail): what was
    asked, that nothing ran and why (`note`; a `command` gemmscope ran that failed: its exit
    status first), and the environment the traces `read` record."""
    recorded = recorded_recipes(read)
    if expect_given:
        asked = f"{expected} (--expect)"
    elif recorded:
        asked = f"{', '.join(recorded)} (the recipe{'s' * (len(recorded) > 1)} the run's te.autocast recorded)"
    else:
        asked = "no recipe: no --expect, and the run recorded no enabled te.autocast"
    if expect_map:
        asked = f"by NVTX range (--expect-map): {', '.join(f'{p}={r}' for p, r in expect_map)}; elsewhere {asked}"
    unrecorded = [("Not recorded", unpatched_line(unpatched))] if unpatched else []
    code = (command or {}).get("exit_code")
    ran = f"the command failed (exit {code}); {note}" if code else note
    return [("Asked", asked), ("Ran", ran),
            ("At the requested precision", "no GEMM ran, so none at any precision"), *unrecorded,
            ("Top findings", "none (nothing ran)"),
            ("Environment", environment_line(traces_environment(read, [])))]


def unpatched_line(unpatched: list[dict[str, str | None]]) -> str:
    """What the hook could not patch, in one line: each entry point, the release and error, and the
    records the run therefore lacks."""
    return "; ".join(f"{u['misses'] or 'its records'} (gemmscope's hook could not patch {u['what']} in "
                     f"{u['version'] or 'this release'}: {u['why'] or 'no reason recorded'})" for u in unpatched)


def unchecked_line(result: Judgement) -> str:
    """The GEMMs not checked, in one line ("" where none): how many had nothing to be judged
    against (and why, in this run), how many of those --allow names, and how many are of unknown
    precision (with --strict, those judged UNKNOWN too)."""
    g = result.gemms
    if "verdict" not in g:
        return ""
    unchecked = g[g["verdict"].isna()]
    told = unchecked["precision"].notna() & (unchecked["precision"] != "unknown")
    why = ["no request recorded", "no --expect" if not result.expect_given else None,
           "outside every mapped range" if result.expect_map else None]
    parts = []
    if told.any():
        allowed = int(told.sum()) - int(unchecked.loc[told, "unjudged"].sum())
        parts.append(f"{count(int(told.sum()), 'GEMM launch', 'GEMM launches')} not checked: nothing to judge them "
                     f"against ({', '.join(w for w in why if w)})"
                     + (f", {allowed} of them allowed by --allow" if allowed else ""))
    if (~told).any():
        parts.append(f"{count(int((~told).sum()), 'GEMM launch', 'GEMM launches')} of unknown precision not checked"
                     + ("" if result.strict_unknown else " (listed; --strict counts them)"))
    if result.strict_unknown and (unknown := int((g["verdict"] == "UNKNOWN").sum())):
        parts.append(f"{count(unknown, 'GEMM launch', 'GEMM launches')} UNKNOWN (the kernel does not name its "
                     "precision): not judged, under --strict")
    return "; ".join(parts)


def coverage_line(coverage: Coverage, result: Judgement) -> str:
    """Coverage in one line: the share of GEMM time asked for high precision and where most of it is;
    where none did, of the GEMMs whose request the hook recorded (the others asked nothing it saw)."""
    if not coverage.gemm_launches:
        g = result.gemms
        recorded = int(g["requested"].notna().sum())
        if recorded == len(g):
            return "coverage: every GEMM asked for low precision"
        if not recorded:
            return "coverage: not known (no GEMM's request recorded)"
        return (f"coverage: every GEMM whose request was recorded ({recorded} of {count(len(g), 'launch', 'launches')})"
                " asked for low precision")
    groups = coverage.groups
    numbers = groups["layer_number"].dropna().astype(int).unique().tolist()
    other = groups.loc[groups["layer_number"].isna(), "layer"].dropna().unique().tolist()
    where = ([f"{'layer' if len(numbers) == 1 else 'layers'} {', '.join(map(str, numbers))}"] if numbers else []) + other
    assert coverage.time_share is not None  # GEMMs asked for high precision ran: there is GEMM time
    return (f"coverage: {coverage.time_share * 100:.1f} % of GEMM time asked for high precision"
            + (f" ({'; '.join(where)})" if where else "")
            + f", at most {coverage.saved_at_most_ns / 1e6:.3f} ms to gain in low precision")


def _asked_recipes(result: Judgement) -> str:
    """What each GEMM was checked against: "fp8-current (--expect)", each GEMM's own request, or
    the map and what holds outside it."""
    default = None
    if not result.expect_given and result.checked and result.requests_recorded:
        recorded = recorded_recipes(result.job.traces)
        default = "what each GEMM asked (gemmscope's hook records)" + (
            f"; te.autocast recipes recorded: {', '.join(recorded)}" if recorded else "")
    elif result.expected:
        recorded = recorded_recipes(result.job.traces)
        source = ("the recipe the run's te.autocast recorded" if recorded == [result.expected] and not result.expect_given
                  else "--expect" + (f"; the run's te.autocast recorded {', '.join(recorded)}"
                                     if recorded and recorded != [result.expected] else ""))
        default = f"{result.expected} ({source})"
    if not result.expect_map:
        return default or "nothing"
    mapped = ", ".join(f"{p}={r}" for p, r in result.expect_map)
    return f"by NVTX range (--expect-map): {mapped}; elsewhere {default or 'nothing (not checked)'}"


def _ranges_verdicts(ranges: pd.DataFrame) -> str:
    """"4 OK, 1 NO GEMM (MXFP8_4096x4096x4096)": the mapped ranges' verdicts, the failing ones named."""
    parts = []
    for verdict, rows in ranges.groupby("verdict", sort=False):
        named = "" if verdict == "OK" else " (" + ", ".join(rows["range"].fillna(rows["pattern"]).astype(str)) + ")"
        parts.append(f"{len(rows)} {verdict}{named}")
    return ", ".join(parts)
