"""A job's timeline: windows judged as they land, each compared with the first (alerts), read back
by `gemmscope timeline`; `--follow` on a folder that receives committed GPU traces one by one, as
another tool's would arrive (an FP8 run, then the same program with BF16 fallbacks)."""

import gzip
import html
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gemmscope as gs
from gemmscope.autocast_hook.gemmscope_protocol import trace_steps
from gemmscope.errors import State
from gemmscope.watching import alerts
from gemmscope.watching.timeline import TIMELINE_FILE, Timeline, read_timeline

from cli_runner import REPO, assert_one_line_error, gemmscope
from fixture_paths import GPU
from schema_check import assert_valid

FP8_RUN, FALLBACK_RUN = GPU / "train_clean.sqlite.xz", GPU / "train_mixed.sqlite.xz"


@pytest.fixture(scope="module")
def two_windows(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("timeline")
    timeline = Timeline(folder)
    timeline.judge([FP8_RUN])
    timeline.judge([FALLBACK_RUN])
    return read_timeline(folder)


def test_each_window_is_a_record_of_what_analyze_says_of_it(two_windows):
    first, second = two_windows
    for record, trace in ((first, FP8_RUN), (second, FALLBACK_RUN)):
        summary = json.loads(gemmscope("analyze", trace, "--format", "json").stdout)["summary"]
        assert (record["state"], record["gemm_launches"], record["mismatches"]) == (
            summary["state"], summary["gemm_launches"], summary.get("mismatches", 0))
        assert record["traces"] == [trace.name] and record["steps"] is None
    assert first["gemm_time_share_by_precision"] == {"fp8": 1.0} and first["alerts"] == []


def test_the_window_that_falls_back_is_flagged_where(two_windows):
    first, second = two_windows
    codes = [a["code"] for a in second["alerts"]]
    assert codes[:2] == ["new-mismatch", "state"] and "precision-mix" in codes
    new = second["alerts"][0]["places"]
    assert sum(new.values()) == second["mismatches"] and "_Linear fprop" in new
    assert gs.State(second["state"]) is State.FAIL


@pytest.mark.parametrize("moved, alerted", [(0.04, False), (0.06, True), (-0.2, True)])
def test_a_share_alerts_from_its_threshold(two_windows, moved, alerted):
    baseline = dict(two_windows[0], quantization_share=0.2)
    record = dict(baseline, quantization_share=0.2 + moved)
    assert [a["code"] for a in alerts.compare(record, baseline)] == (["quantization"] if alerted else [])


def test_a_step_time_outside_the_baselines_spread_alerts(two_windows):
    baseline = dict(two_windows[0], step_time_ns={"median": 100e6, "min": 95e6, "max": 105e6, "steps": 3})
    within = dict(baseline, step_time_ns={"median": 115e6, "min": 115e6, "max": 115e6, "steps": 3})
    slower = dict(baseline, step_time_ns={"median": 116e6, "min": 116e6, "max": 116e6, "steps": 3})
    assert alerts.compare(within, baseline) == []
    (alert,) = alerts.compare(slower, baseline)
    assert alert["code"] == "step-time" and "95.00-105.00 ms" in alert["statement"]


def test_the_worst_window_decides(two_windows):
    assert alerts.worst([State.PASS, State.NOT_FULLY_CHECKED, State.FAIL, State.NOT_CHECKED]) is State.FAIL
    assert alerts.worst([State.PASS, State.NOT_FULLY_CHECKED]) is State.NOT_FULLY_CHECKED
    assert alerts.worst([]) is None


def test_timeline_command_reads_what_was_written(two_windows, tmp_path):
    (tmp_path / TIMELINE_FILE).write_text("".join(json.dumps(r) + "\n" for r in two_windows) + '{"window": 2, "sta')
    done = gemmscope("timeline", tmp_path)  # the last line, still being written, is not read
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("MISMATCHES: 2 windows judged")
    assert "window 1: ALERT new-mismatch: " in done.stdout
    document = json.loads(gemmscope("timeline", tmp_path, "--format", "json").stdout)
    assert document["state"] == "fail" and [w["window"] for w in document["windows"]] == [0, 1]
    assert_valid(document, "timeline")


def test_a_timeline_that_is_not_one_is_one_line(tmp_path):
    assert_one_line_error(gemmscope("timeline", tmp_path))
    (tmp_path / TIMELINE_FILE).write_text("not json\n")
    assert_one_line_error(gemmscope("timeline", tmp_path))


# --- the timeline as a page ---------------------------------------------------------------------

# A trace's name as a hostile tool could write it: the page must show it as text, never as markup.
HOSTILE_NAME = 'rank0 <b onclick="x()">&.sqlite.xz'


@pytest.fixture(scope="module")
def audit_folder(tmp_path_factory) -> Path:
    """A job's folder whose timeline holds the committed FP8 run (its trace under HOSTILE_NAME),
    the fallback run and the FP8 run again, each as a window of an audit's steps."""
    folder = tmp_path_factory.mktemp("audit")
    (folder / HOSTILE_NAME).write_bytes(FP8_RUN.read_bytes())
    timeline = Timeline(folder)
    for trace in (folder / HOSTILE_NAME, FALLBACK_RUN, FP8_RUN):
        timeline.judge([trace])
    audited = [dict(record, steps=[10 + 2000 * n, 12 + 2000 * n]) for n, record in enumerate(timeline.records)]
    (folder / TIMELINE_FILE).write_text("".join(json.dumps(r) + "\n" for r in audited))
    return folder


@pytest.fixture(scope="module")
def timeline_page(audit_folder, tmp_path_factory) -> Path:
    page = tmp_path_factory.mktemp("page") / "timeline.html"
    done = gemmscope("timeline", audit_folder, "--format", "html", "-o", page)
    assert done.returncode == 1 and done.stdout == "", done.stderr  # the worst window's state, as the table's
    return page


def test_the_timeline_page_shows_the_windows_plots_and_alerts(audit_folder, timeline_page):
    from test_html_report import EXTERNAL_LOAD

    text = timeline_page.read_text()
    # GEMM time per precision, mismatches and quantization (no step time: these traces mark no step)
    assert text.count('<img alt="') == 2 and text.count('src="data:image/png;base64,') == 2
    assert not EXTERNAL_LOAD.search(text.replace('src="data:', ""))
    for steps in ("10-12", "2010-2012", "4010-4012"):
        assert f">{steps}</td>" in text
    fallback = read_timeline(audit_folder)[1]
    assert fallback["alerts"] and [r["alerts"] for r in read_timeline(audit_folder)[::2]] == [[], []]
    for place in fallback["alerts"][0]["places"]:  # each place of the new mismatches: layer, module, pass
        assert f">{html.escape(place)}</td>" in text
    assert "precision-mix" in text and "MISMATCHES" in text


def test_the_timeline_page_escapes_what_traces_name(timeline_page):
    text = timeline_page.read_text()
    assert "<b onclick" not in text
    assert html.escape(HOSTILE_NAME) in text


def test_the_timeline_page_plots_each_window(audit_folder):
    from gemmscope.report.timeline_plots import timeline_plots
    from gemmscope.watching.timeline import window_series

    records = read_timeline(audit_folder)
    windows = window_series(records)
    assert list(windows["label"]) == ["steps 10-12", "steps 2010-2012", "steps 4010-4012"]
    precision, mismatches = timeline_plots(windows, None, alerts.STEP_SPREAD_FACTOR)
    assert list(precision.data["share fp8"].round(3)) == [1.0, 0.424, 1.0]
    assert list(mismatches.data["mismatches"]) == [0, 45, 0]
    # two ranks of the last window, one slower: its median of medians, its fastest and slowest step
    timed = [dict(r, step_time_ns={"median": m * 1e6, "min": (m - 1) * 1e6, "max": (m + 1) * 1e6, "steps": 3})
             for r, m in zip([*records, records[-1]], (100, 101, 102, 130))]
    steps = timeline_plots(window_series(timed), (99.0, 101.0), alerts.STEP_SPREAD_FACTOR)[1]
    assert steps.data[["step_median_ms", "step_min_ms", "step_max_ms"]].values.tolist() == [
        [100, 99, 101], [101, 100, 102], [116, 101, 131]]


def test_the_timeline_page_in_a_real_browser(chromium_bin, timeline_page, tmp_path):
    from test_html_report import chromium, console_lines, page_requests

    done = chromium(chromium_bin, timeline_page, tmp_path / "dom", "--dump-dom")
    assert done.stdout.index('id="verdict"') < done.stdout.index("<img") < done.stdout.index("<table")
    assert console_lines(done) == [] and page_requests(tmp_path / "dom") == []


def test_a_page_is_written_where_asked_only(audit_folder):
    assert_one_line_error(gemmscope("timeline", audit_folder, "--format", "html"))
    assert_one_line_error(gemmscope("timeline", audit_folder, "-o", "page.html"))


def _wait_for(predicate, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_follow_flags_the_fallback_at_the_trace_that_brings_it(tmp_path):
    """Traces land one by one, as another tool writes them: the FP8 run, then the same program
    with BF16 fallbacks, written in two halves seconds apart; the half is never read, the alert
    comes from the second trace, within seconds of its completion."""
    follow = subprocess.Popen([sys.executable, "-m", "gemmscope", "timeline", "--follow", str(tmp_path), "--count", "2",
                               "--expect", "fp8-current", "--format", "json"], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        timeline = tmp_path / TIMELINE_FILE
        (tmp_path / "rank0.window0.sqlite.xz").write_bytes(FP8_RUN.read_bytes())
        _wait_for(lambda: timeline.exists() and len(read_timeline(tmp_path)) == 1)
        data = FALLBACK_RUN.read_bytes()
        second = tmp_path / "rank0.window1.sqlite.xz"
        with second.open("wb") as half:
            half.write(data[:len(data) // 2])
        time.sleep(5)  # longer than a trace takes to settle: a half stays unread
        assert len(read_timeline(tmp_path)) == 1
        with second.open("ab") as rest:
            rest.write(data[len(data) // 2:])
        completed = time.monotonic()
        stdout, stderr = follow.communicate(timeout=120)
    finally:
        follow.kill()
    assert follow.returncode == 1, stderr
    first, fallback = json.loads(stdout)["windows"]
    assert (first["state"], first["alerts"]) == ("pass", [])
    assert fallback["alerts"][0]["code"] == "new-mismatch" and fallback["traces"] == [second.name]
    assert time.monotonic() - completed < 60
    said = [line for line in stderr.splitlines() if line.startswith("gemmscope: window ")]
    assert said[0].startswith("gemmscope: window 0 (rank0.window0.sqlite.xz): PASS")
    assert said[1].startswith("gemmscope: window 1 (rank0.window1.sqlite.xz): MISMATCHES") and "ALERT new-mismatch" in said[1]


# --- verify --every: windows captured one by one (real torch.profiler on a CPU) ------------------

# A training loop on the CPU that stands for one on a GPU (its processes write their traces as one
# that used CUDA does), STEPS optimizer steps.
_TRAINING = """\
import sys, torch
sys.modules["gemmscope_torch_profiler"].used_cuda = lambda torch: True
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def _step_marks(trace: Path) -> set[int]:
    with gzip.open(trace, "rt") as text:
        names = {e.get("name", "") for e in json.load(text)["traceEvents"]}
    return {int(n.rpartition("=")[2]) for n in names if n.startswith("gemmscope.step|n=")}


def assert_windows_captured(out: Path, steps: list[tuple[int, int]]) -> None:
    """OUT holds one trace per window, named by its steps and holding them (the hook's step marks:
    its own steps whole, and no more than a step either side)."""
    traces = sorted(out.glob("trace.*.json.gz"), key=lambda t: trace_steps(t.name))
    assert [trace_steps(t.name) for t in traces] == steps
    for trace, (first, last) in zip(traces, steps):
        marks = _step_marks(trace)
        assert set(range(first, last + 1)) <= marks <= set(range(first - 2, last + 2)), (trace.name, marks)


def test_verify_every_captures_each_window_on_its_own(torch_cpu, tmp_path):
    """--every 6 --window 2 over 30 steps: windows 10-11, 16-17, 22-23, 28-29, each its own trace
    named by its steps and holding them (a CPU trace holds no kernel: each is said not judged, and
    the run is no pass)."""
    program = tmp_path / "train.py"
    program.write_text(_TRAINING)
    out = tmp_path / "out"
    done = gemmscope("verify", "--every", "6", "--window", "2", "--format", "json", "--out", out, "--",
                     sys.executable, program, "30", timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert_valid(document, "timeline")  # records of windows not judged too
    windows = document["windows"]
    steps = [(10, 11), (16, 17), (22, 23), (28, 29)]
    assert [tuple(w["steps"]) for w in windows] == steps and [w["window"] for w in windows] == [0, 1, 2, 3]
    assert all("CPU-only torch.profiler trace" in w["error"] for w in windows)
    [node] = out.iterdir()  # this verify process's own folder (audit.node_folder)
    assert_windows_captured(node, steps)
    assert read_timeline(out) == read_timeline(node) == windows
    said = [line for line in done.stderr.splitlines() if line.startswith("gemmscope: window ")]
    assert [line.split(":")[1] for line in said] == [f" window {i} (steps {a}-{b})" for i, (a, b) in enumerate(steps)]


# The training loop with a sleep per step, and the time each step's optimizer step returned (the
# hook reads its clock inside that call, at the step's first mark), one line each into argv[2].
_TIMED_TRAINING = _TRAINING.replace("    optimizer.zero_grad()\n", """\
    optimizer.zero_grad()
    times.append(time.monotonic())
    time.sleep(0.1)
open(sys.argv[2], "w").write("\\n".join(map(repr, times)))
""").replace("import sys, torch\n", "import sys, time, torch\ntimes = []\n")


def test_verify_every_period_opens_a_window_once_the_period_has_passed(torch_cpu, tmp_path):
    """--every 1s --window 2 over 50 steps of >= 0.1 s each: the first window at step 10, after
    warm-up, then one at the first step once 1 s has passed since the previous opened (a window's
    capture opens at the first mark of its first step - 2), never while one is open; by the
    program's own clock, no window opened before its second and none waited past it."""
    program = tmp_path / "train.py"
    program.write_text(_TIMED_TRAINING)
    out, times = tmp_path / "out", tmp_path / "times"
    done = gemmscope("verify", "--every", "1s", "--window", "2", "--format", "json", "--out", out, "--",
                     sys.executable, program, "50", times, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    windows = [tuple(w["steps"]) for w in json.loads(done.stdout)["windows"]]
    returned = [float(line) for line in times.read_text().splitlines()]  # step n's optimizer step returned
    assert windows[0] == (10, 11) and 2 <= len(windows) <= returned[-1] - returned[8] + 1
    assert all(last == first + 1 for first, last in windows)
    opened = [first - 2 for first, _ in windows]  # the step at whose first mark each capture opened
    for (before, _), now, (_, previous_last) in zip(windows, opened[1:], windows):
        was = before - 2
        assert now > previous_last + 1  # after the previous closed
        assert returned[now] - returned[was - 1] >= 1  # the period had passed at its mark
        if now - 1 > previous_last + 1:  # the mark before could have opened it: the period had not passed
            assert returned[now - 2] - returned[was] < 1
    [node] = out.iterdir()
    traces = sorted(node.glob("trace.*.json.gz"), key=lambda t: trace_steps(t.name))
    assert [trace_steps(t.name) for t in traces] == windows
    for trace, (first, last) in zip(traces, windows):
        if last < 49:  # not cut by the program's end: its steps whole, no more than a step either side
            assert set(range(first, last + 1)) <= _step_marks(trace) <= set(range(first - 2, last + 2))


@pytest.mark.parametrize("every, said", [
    ("30d", "--every 30d --window 3: '30d' is neither a number of steps nor a period of wall time with its unit "
            "(s, m or h: 30s, 30m, 2h)"),
    ("0m", "--every 0m --window 3: '0m': give a period of wall time above 0"),
    ("0", "--every 0 --window 3: give a window of 1 step or more"),
])
def test_verify_every_period_is_refused_in_one_line(tmp_path, every, said):
    done = gemmscope("verify", "--every", every, "--out", tmp_path, "--", sys.executable, "-c", "pass")
    assert_one_line_error(done)
    assert said in done.stderr


@pytest.mark.parametrize("arguments, said", [
    (("--every", "6"), "--every keeps the job's timeline and its windows' traces: give --out DIR"),
    (("--every", "6", "--out", "OUT", "--profiler", "nsys"), "--every captures with torch.profiler"),
    (("--every", "4", "--window", "2", "--out", "OUT"), "--every 4 --window 2: give a window of 1 step or more"),
    (("--every", "6", "--out", "OUT", "--steps", "3-4"), "--every captures windows of its own: not with --steps"),
])
def test_verify_every_is_refused_where_it_cannot_audit(tmp_path, arguments, said):
    done = gemmscope("verify", *[str(tmp_path / a) if a == "OUT" else a for a in arguments], "--", sys.executable,
                     "-c", "pass")
    assert_one_line_error(done)
    assert said in done.stderr


def test_windows_with_nothing_new_are_pruned_past_those_kept(tmp_path):
    """keep_windows=1: the baseline's trace stays, of the quiet windows only the newest, and a
    window that raised an alert keeps its trace as evidence."""
    names = ["w0.sqlite.xz", "w1.sqlite.xz", "w2.sqlite.xz", "w3.sqlite.xz"]
    for name, source in zip(names, (FP8_RUN, FP8_RUN, FP8_RUN, FALLBACK_RUN)):
        (tmp_path / name).write_bytes(source.read_bytes())
    timeline = Timeline(tmp_path, keep_windows=1)
    for name in names:
        timeline.judge([tmp_path / name])
    assert [bool(r["alerts"]) for r in timeline.records] == [False, False, False, True]
    assert sorted(p.name for p in tmp_path.glob("w*")) == ["w0.sqlite.xz", "w2.sqlite.xz", "w3.sqlite.xz"]


def test_a_window_trace_is_its_users_alone(torch_cpu, tmp_path):
    program = tmp_path / "train.py"
    program.write_text(_TRAINING)
    out = tmp_path / "out"
    gemmscope("verify", "--every", "6", "--window", "2", "--out", out, "--", sys.executable, program, "20",
              timeout=300)
    traces = list(out.glob("*/trace.*.json.gz"))
    assert traces and all(t.stat().st_mode & 0o777 == 0o600 for t in traces)


def test_a_process_kinetos_daemon_profiles_is_left_to_it(torch_cpu, tmp_path):
    """One CUPTI client per process: under KINETO_USE_DAEMON the hook starts no profiler and says
    where to look instead; the program runs as ever."""
    program = tmp_path / "train.py"
    program.write_text(_TRAINING)
    done = gemmscope("verify", "--every", "6", "--window", "2", "--out", tmp_path / "out", "--", sys.executable,
                     program, "20", timeout=300, env={"KINETO_USE_DAEMON": "1"})
    assert "Kineto's daemon holds this process's profiling (KINETO_USE_DAEMON is set)" in done.stderr
    assert not list((tmp_path / "out").glob("*/trace.*")) and done.returncode == 4, done.stderr[-2000:]
