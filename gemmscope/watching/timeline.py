"""A job's timeline: one record per window judged (JSON Lines, `timeline.jsonl` in the job's
folder; gemmscope/schemas/timeline.schema.json), each with the alerts its comparison with the
job's baseline raised (alerts.compare). A window is one or more traces of the same steps (every
rank's), judged as one job with gemmscope.Analysis; its record is made from the analysis's JSON
document alone, so that the timeline says what `analyze --format json` of that window says."""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemmscope.common.sinks import terminal_lines
from gemmscope.errors import InputError, NoGpuKernels, State
from gemmscope.options import Options
from gemmscope.watching import alerts

if TYPE_CHECKING:
    import pandas as pd

    from gemmscope.report.model import Report
    from gemmscope.report.plots import Plot

TIMELINE_FILE = "timeline.jsonl"
# The categories of a rank's GPU time the record splits a window into (diagnosis' breakdown).
_SPLIT = ("gemm", "gemm-fallback", "gemm-tail", "quantize", "attention", "communication", "memcpy", "memset", "other")


def _place(group: dict[str, Any]) -> str:
    """A mismatch's place as alerts name it: layer, module and pass."""
    return " ".join(str(part) for part in (group.get("layer"), group.get("module"), group.get("pass")) if part)


def window_record(document: dict[str, Any], window: dict[str, Any]) -> dict[str, Any]:
    """The timeline record of one window from its analysis document (`analyze --format json`):
    `window` holds its index, steps (None: all the trace holds) and traces."""
    summary, breakdown = document["summary"], document["breakdown"]
    groups = summary["groups"]
    mismatches: dict[str, int] = {}
    time_by_precision: dict[str, int] = {}
    for group in groups:
        time_by_precision[group["precision"]] = time_by_precision.get(group["precision"], 0) + group["time_ns"]
        if group.get("verdict") == "FALLBACK" and not group.get("allowed"):
            mismatches[_place(group)] = mismatches.get(_place(group), 0) + group["launches"]
    gemm_ns = sum(time_by_precision.values())
    per_rank = breakdown["per_rank"]
    busy = sum(rank["busy_ns"] for rank in per_rank)
    wall = [step["wall_ns"] for step in breakdown["steps"]]
    top = document["findings"][0] if document["findings"] else None
    return {
        "window": window["index"], "steps": window["steps"], "traces": window["traces"],
        "judged_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ranks": summary["ranks"], "state": summary["state"],
        "gemm_launches": summary["gemm_launches"], "gemm_time_ns": summary["gemm_time_ns"],
        "mismatches": summary.get("mismatches", 0), "mismatches_by_place": mismatches,
        "coverage_time_share": (summary.get("coverage") or {}).get("time_share"),
        "gemm_time_share_by_precision": {p: t / gemm_ns for p, t in time_by_precision.items()} if gemm_ns else {},
        "quantization_share": sum(rank["quantize_ns"] for rank in per_rank) / busy if busy else None,
        "busy_split": {c: sum(rank[f"{c}_ns"] for rank in per_rank) / busy for c in _SPLIT} if busy else {},
        "step_time_ns": {"median": statistics.median(wall) if wall else None, "min": min(wall, default=None),
                         "max": max(wall, default=None), "steps": len(wall)},
        "top_finding": f"{top['code']}: {top['statement']}" if top else None,
        "unpatched": summary.get("unpatched", []),
    }


def _failed_record(window: dict[str, Any], why: str) -> dict[str, Any]:
    """A window that could not be judged (no trace read, no GPU kernel in it): a failed record."""
    from gemmscope.assembly.job import rank_in_name

    ranks = sorted({rank for name in window["traces"] if (rank := rank_in_name(Path(name))) is not None})
    return {"window": window["index"], "steps": window["steps"], "traces": window["traces"],
            "judged_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ranks": ranks, "state": State.FAIL.value,
            "gemm_launches": 0, "gemm_time_ns": 0, "mismatches": 0, "mismatches_by_place": {},
            "coverage_time_share": None, "gemm_time_share_by_precision": {}, "quantization_share": None,
            "busy_split": {}, "step_time_ns": {"median": None, "min": None, "max": None, "steps": 0},
            "top_finding": None, "unpatched": [], "error": why}


class Timeline:
    """A job's timeline being written into `folder` (TIMELINE_FILE, one line per window, appended
    whole): each window judged against `options`, compared with `baseline` (a record; default: the
    job's first window that was judged), its alerts said through `say`."""

    def __init__(self, folder: str | Path, options: Options | None = None, baseline: dict[str, Any] | None = None,
                 say: Callable[[str], None] = lambda line: None, keep_windows: int | None = None) -> None:
        self.folder = Path(folder)
        self.options = options or Options()
        self.baseline = baseline
        self.records: list[dict[str, Any]] = []
        self._say = say
        # the traces of windows with nothing new beyond the newest `keep_windows` are removed: a
        # days-long audit's disk use stays bounded, and every window that raised an alert keeps its evidence
        self._keep_windows = keep_windows
        self._quiet: list[list[Path]] = []

    def _prune(self, traces: list[Path]) -> None:
        """A window with nothing new: its traces join those kept, the oldest past keep_windows removed."""
        if self._keep_windows is None:
            return
        self._quiet.append(traces)
        while len(self._quiet) > self._keep_windows:
            for trace in self._quiet.pop(0):
                trace.unlink(missing_ok=True)

    @property
    def path(self) -> Path:
        return self.folder / TIMELINE_FILE

    @property
    def state(self) -> State | None:
        """The job's state so far: the worst of its windows' (None before the first)."""
        return alerts.worst([State(record["state"]) for record in self.records])

    def _index(self, steps: tuple[int, int] | None) -> int:
        """A window's index: that of the job's window of the same steps (another rank's), else the next."""
        indices = {tuple(r["steps"]): r["window"] for r in self.records if r["steps"] is not None}
        if steps is not None and tuple(steps) in indices:
            return indices[tuple(steps)]
        return max((r["window"] for r in self.records), default=-1) + 1

    def judge(self, traces: Sequence[Path], steps: tuple[int, int] | None = None) -> dict[str, Any]:
        """Judges one window of one process or more (its traces, the steps they were captured for),
        appends its record with its alerts, and says a line of it."""
        from gemmscope.analysis import Analysis

        window = {"index": self._index(steps), "steps": list(steps) if steps else None,
                  "traces": [Path(t).name for t in traces]}
        options = Options.of(self.options, steps=steps, redact=True)
        try:
            analysis = Analysis(list(traces), options)
            checked = analysis.check
            if checked.judgement is None:  # no GPU kernel in the window: nothing to judge
                raise NoGpuKernels(checked.note or "no GPU kernel ran", cuda_traced=True)
            document = analysis.report("analysis").document
            assert document is not None  # an analysis report carries its JSON document
            record = window_record(document, window)
        except (InputError, NoGpuKernels) as exc:
            record = _failed_record(window, str(exc))
        if self.baseline is None and "error" not in record:
            self.baseline = record
        record["alerts"] = alerts.compare(record, self.baseline) if self.baseline and "error" not in record else []
        self.records.append(record)
        if record is not self.baseline and not record["alerts"] and "error" not in record:
            self._prune(list(traces))
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as timeline:
            timeline.write(json.dumps(record) + "\n")  # one write of one line: a reader sees it whole or not
        self._say(status_line(record))
        return record


def status_line(record: dict[str, Any]) -> str:
    """One line of a window, as the live status says it."""
    steps = f"steps {record['steps'][0]}-{record['steps'][1]}" if record["steps"] else ", ".join(record["traces"])
    said = f"gemmscope: window {record['window']} ({steps}): {State(record['state']).word}"
    if record.get("error"):
        return f"{said}: {record['error']}"
    said += f", {record['gemm_launches']} GEMM launches, {record['mismatches']} mismatches"
    return said + "".join(f"; ALERT {a['code']}: {a['statement']}" for a in record["alerts"])


def read_timeline(folder: str | Path) -> list[dict[str, Any]]:
    """The records of a job's timeline, in order: a folder's TIMELINE_FILE, then those of the
    folders in it (one per verify process of a job: audit.node_folder), or a file; InputError where
    there is none or a line is not a record (a line still being written is not read: each is
    written whole)."""
    path = Path(folder)
    files = ([f for f in (path / TIMELINE_FILE, *sorted(path.glob(f"*/{TIMELINE_FILE}"))) if f.is_file()]
             if path.is_dir() else [path] if path.is_file() else [])
    if not files:
        raise InputError(f"{folder}: no timeline ({TIMELINE_FILE}) there")
    return [record for file in files for record in _records(file)]


def _records(path: Path) -> list[dict[str, Any]]:
    records = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.endswith("\n"):
                break  # being written
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not a timeline record ({exc.msg})") from None
            if not isinstance(record, dict) or "window" not in record or "state" not in record:
                raise InputError(f"{path}:{number}: not a timeline record")
            records.append(record)
    return records


# The table's columns: (header, what of a record it shows).
_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("Window", lambda r: str(r["window"])),
    ("Steps", lambda r: f"{r['steps'][0]}-{r['steps'][1]}" if r["steps"] else "all"),
    ("Ranks", lambda r: ",".join(map(str, r["ranks"])) or "-"),
    ("State", lambda r: State(r["state"]).word),
    ("GEMMs", lambda r: str(r["gemm_launches"])),
    ("Mismatches", lambda r: str(r["mismatches"])),
    ("GEMM time", lambda r: ", ".join(f"{p} {100 * s:.0f} %" for p, s in
                                      sorted(r["gemm_time_share_by_precision"].items(), key=lambda i: -i[1])) or "-"),
    ("Quantize", lambda r: "-" if r["quantization_share"] is None else f"{100 * r['quantization_share']:.1f} %"),
    ("Step ms", lambda r: "-" if r["step_time_ns"]["median"] is None else f"{r['step_time_ns']['median'] / 1e6:.2f}"),
    ("Alerts", lambda r: "not judged" if r.get("error") else str(len(r.get("alerts", [])))),
)


def _by_window(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records of each window of the whole job, in the job's order: by steps where known (each
    verify process of a job counts its windows itself), else by the window's index."""
    by_window: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        key = (0, *record["steps"]) if record["steps"] else (1, record["window"])
        by_window.setdefault(key, []).append(record)
    return [by_window[key] for key in sorted(by_window)]


def job_windows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per window of the whole job, from its ranks' (each process's trace is judged on
    its own): the window's steps, the ranks that reported it, the worst state, the mismatches and
    GEMM launches summed, every rank's alerts, and a rank whose step time lags the others'
    (alerts.rank_lag)."""
    job = []
    for window, ranks in enumerate(_by_window(records)):
        state = alerts.worst([State(r["state"]) for r in ranks])
        assert state is not None  # a window has at least one record
        job.append({"window": window, "steps": ranks[0]["steps"], "ranks": sorted({x for r in ranks for x in r["ranks"]}),
                    "records": len(ranks), "state": state.value, "gemm_launches": sum(r["gemm_launches"] for r in ranks),
                    "mismatches": sum(r["mismatches"] for r in ranks),
                    "alerts": [a for r in ranks for a in r.get("alerts", [])] + alerts.rank_lag(ranks)})
    return job


def timeline_document(records: list[dict[str, Any]]) -> dict[str, Any]:
    """`gemmscope timeline --format json`: the job's state (the worst window's), every record (a
    window of one process each), and each window of the whole job (job_windows)."""
    from gemmscope.report.documents import SCHEMA_VERSION

    state = alerts.worst([State(r["state"]) for r in records])
    return {"schema_version": SCHEMA_VERSION, "state": state.value if state else None, "windows": records,
            "job_windows": job_windows(records),
            "alerts": [a for r in records for a in r.get("alerts", [])]}


WINDOWS_TITLE = "Windows (each process's; the alerts below)"


def timeline_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """The timeline's table: a row per record (a window of one process), its columns _COLUMNS."""
    import pandas as pd

    return pd.DataFrame([[show(record) for _, show in _COLUMNS] for record in records],
                        columns=[header for header, _ in _COLUMNS])


def timeline_table(records: list[dict[str, Any]]) -> str:
    """The timeline as the terminal shows it: the job's state, a row per window, then each alert."""
    from gemmscope.report.terminal import table_text

    state = alerts.worst([State(r["state"]) for r in records])
    said = [f"{state.word if state else 'NO WINDOW'}: {len(records)} window{'s' * (len(records) != 1)} judged",
            table_text(WINDOWS_TITLE, timeline_frame(records)).rstrip("\n")]
    for record in records:
        if record.get("error"):
            said.append(f"window {record['window']}: NOT JUDGED: {record['error']}")
        said += [f"window {record['window']}: ALERT {a['code']}: {a['statement']}" for a in record.get("alerts", [])]
    return terminal_lines("\n".join(said) + "\n")


def window_series(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per window of the whole job, as the timeline's plots draw it: its label (steps, or
    its traces' names), when it was judged, whether any of its records was, each precision's share
    of GEMM time (`share <precision>`) and the coverage, over its ranks' GEMM time; quantization's
    share of GPU busy time (mean over its ranks), its mismatches (summed) and its step time in ms
    (the median of its ranks' medians, the fastest and slowest step of any rank)."""
    import pandas as pd

    rows = []
    for window, ranks in enumerate(_by_window(records)):
        judged = [r for r in ranks if not r.get("error")]
        gemm_ns = sum(r["gemm_time_ns"] for r in judged)
        shares: dict[str, float] = {}
        for r in judged:
            for precision, share in r["gemm_time_share_by_precision"].items():
                shares[precision] = shares.get(precision, 0.0) + share * r["gemm_time_ns"] / gemm_ns
        covered = [r for r in judged if r["coverage_time_share"] is not None]
        quantized = [r["quantization_share"] for r in judged if r["quantization_share"] is not None]
        timed = [r["step_time_ns"] for r in judged if r["step_time_ns"]["median"] is not None]
        steps = ranks[0]["steps"]
        rows.append({
            "window": window, "label": f"steps {steps[0]}-{steps[1]}" if steps else ", ".join(ranks[0]["traces"]),
            "judged_at": max(r["judged_at"] for r in ranks), "judged": bool(judged),
            **{f"share {p}": s for p, s in shares.items()},
            "coverage": (sum(r["coverage_time_share"] * r["gemm_time_ns"] for r in covered) / gemm_ns
                         if covered and gemm_ns else None),
            "quantization": statistics.mean(quantized) if quantized else None,
            "mismatches": sum(r["mismatches"] for r in judged),
            "step_median_ms": statistics.median(t["median"] for t in timed) / 1e6 if timed else None,
            "step_min_ms": min(t["min"] for t in timed) / 1e6 if timed else None,
            "step_max_ms": max(t["max"] for t in timed) / 1e6 if timed else None})
    return pd.DataFrame(rows)


def _alert_rows(records: list[dict[str, Any]]) -> pd.DataFrame:
    """A row per alert of each window of the whole job (a new mismatch: a row per place), with
    where it was: its window, steps, ranks and place (layer, module, pass) or precision."""
    import pandas as pd

    rows = []
    for window in job_windows(records):
        steps = f"{window['steps'][0]}-{window['steps'][1]}" if window["steps"] else "all"
        for alert in window["alerts"]:
            at = [window["window"], steps, ",".join(map(str, alert["ranks"] or [])) or "-", alert["code"]]
            places = alert.get("places") or {alert.get("precision", ""): None}
            # the statement once, on the alert's first row: it names its places already
            rows += [[*at, place, launches, alert["statement"] if n == 0 else ""]
                     for n, (place, launches) in enumerate(places.items())]
    return pd.DataFrame(rows, columns=["Window", "Steps", "Ranks", "Alert", "Where (layer module pass, or precision)",
                                       "Launches", "Statement"])


def _drawn(plot: Plot) -> Plot:
    """A plot drawn already, as a Figure gives it."""
    return plot


def timeline_report(records: list[dict[str, Any]], title: str) -> Report:
    """The timeline as a page (`gemmscope timeline --format html`): the job's state, its windows
    over its steps as plots (report.timeline_plots), each alert with its window, ranks and place,
    and the window table the terminal shows."""
    from gemmscope.report.model import Figure, Report, Section, Table, count
    from gemmscope.report.timeline_plots import timeline_plots

    state = alerts.worst([State(r["state"]) for r in records])
    job = job_windows(records)
    judged = [r for r in records if not r.get("error")]
    baseline = judged[0] if judged else None  # Timeline's default: the job's first window judged
    spread = baseline and baseline["step_time_ns"]
    spread_ms = (spread["min"] / 1e6, spread["max"] / 1e6) if spread and spread["median"] is not None else None
    plots = timeline_plots(window_series(records), spread_ms, alerts.STEP_SPREAD_FACTOR)
    alerted = [w for w in job if w["alerts"]]
    verdict = [("Windows", f"{count(len(job), 'window')} of the job, {count(len(records), 'record')} (a window of one "
                           f"process each), {len(records) - len(judged)} not judged"),
               ("Alerts", f"{count(sum(len(w['alerts']) for w in job), 'alert')} in {count(len(alerted), 'window')}"),
               ("Baseline", f"window {baseline['window']} ({', '.join(baseline['traces'])}), the first judged"
                if baseline else "none: no window was judged")]
    not_judged = [f"window {r['window']}: NOT JUDGED: {r['error']}" for r in records if r.get("error")]
    return Report(
        title=title, status=state.value if state else None, verdict=verdict,
        sections=[Section("Over the windows", intro=["Each window of the whole job, in the order of its steps, "
                                                     "its ranks together; under each, the time it was judged."],
                          blocks=[Figure(functools.partial(_drawn, plot)) for plot in plots]),
                  Section("Alerts", intro=["What changed against the baseline, each where it was."],
                          blocks=[Table("Alerts", _alert_rows(records))]),
                  Section("Windows", blocks=[Table("Windows", timeline_frame(records))], notes=not_judged)],
        document=timeline_document(records))
