"""`gemmscope report`: the self-contained HTML page and its Markdown twin, read as files and
opened in a real headless Chromium (tests/conftest.py's chromium_bin: skipped without one,
failed under CI)."""

import html
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmscope.cli import EXAMPLE_RUN, main

from cli_runner import assert_one_line_error, gemmscope
from fixture_paths import CORPUS

FSDP_SMALL = CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz"
# What a page loads: any src/href/srcset/poster/action attribute that is not a data: URI or an
# anchor, and CSS's url() and @import. A URL as plain text is fine.
EXTERNAL_LOAD = re.compile(r"""\b(?:src|href|srcset|poster|action)\s*=\s*(?!["']?(?:data:|#))|url\(|@import""",
                           re.IGNORECASE)


def report(*args):
    result = CliRunner().invoke(main, ["report", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def run_page(tmp_path_factory) -> Path:
    page = tmp_path_factory.mktemp("report") / "run.html"
    report(EXAMPLE_RUN, "-o", page)
    return page


@pytest.fixture(scope="module")
def trace_page(tmp_path_factory) -> Path:
    page = tmp_path_factory.mktemp("report") / "fsdp.html"
    report(FSDP_SMALL, "-o", page)
    return page


# --- the files -------------------------------------------------------------------------------------

def test_run_page_opens_with_the_verdict(run_page):
    text = run_page.read_text()
    verdict = text[text.index('<section id="verdict"'):text.index("</section>")]
    assert text.index('id="verdict"') < text.index("<table")
    assert "PASS" in verdict
    assert "NVIDIA H200 (sm90) = H200 SXM" in verdict and "nsys: 2025.3.2.0" in verdict
    assert "fp8-delayed 1.66×" in verdict  # autocast's per-layer speedup, as report.md has it
    assert "100.0 % of GEMM kernel time ran at the precision each entry asked for" in verdict
    assert "96 of 144 entries ran; mxfp8, nvfp4 did not" in verdict
    assert text.count("<details>") == 24  # 12 GEMMs × 2 modes
    assert text.count('src="data:image/png;base64,') == 3
    for title in ("Per-layer GEMM time", "Speedup over BF16 per GEMM",
                  "GEMM kernel TFLOP/s against the GPU's dense peak"):
        assert f'<figure><img alt="{html.escape(title)}"' in text
    assert "Device compute capability 10.0 or higher required for MXFP8 execution." in text


def test_trace_page_says_what_analyze_says(trace_page):
    text = trace_page.read_text()
    verdict = text[text.index('<section id="verdict"'):text.index("</section>")]
    assert "fp8-delayed" in verdict and "240 GEMM launches" in verdict
    # each GEMM against what TE was handed (the run's delayed-scaling autocast): the check's two answers
    assert "100.0 % of GEMM time at the precision each asked; 0 mismatches" in verdict
    assert "coverage: every GEMM asked for low precision" in verdict
    assert "gpu-idle: the GPU is idle 99.5 %" in verdict
    assert "NVIDIA H100 80GB HBM3 (sm90)" in verdict
    for code in ("gpu-idle", "gemm-share", "quantize-overhead", "small-gemm", "tails"):
        assert f"<td class=\"short\">{code}</td>" in text
    assert text.count('src="data:image/png;base64,') == 2  # the per-rank breakdown and GEMM TFLOP/s (no steps)
    for title in ("Where the GPU time went, per rank", "GEMM TFLOP/s against the GPU's dense peak"):
        assert f'<figure><img alt="{html.escape(title)}"' in text
    assert '<table class="sortable">' in text and "<details>" in text


@pytest.mark.parametrize("page", ["run_page", "trace_page"])
def test_page_loads_nothing_from_anywhere(request, page):
    text = request.getfixturevalue(page).read_text()
    assert EXTERNAL_LOAD.findall(text) == []
    assert "<script>" in text and "<style>" in text  # inline, not fetched


def test_markdown_twin(tmp_path):
    out = tmp_path / "report.md"
    report(FSDP_SMALL, "-o", out)
    text = out.read_text()
    assert text.startswith("# gemmscope report: fsdp_small_fp8_1gpu.sqlite.xz\n")
    assert "- **Ran**: 240 GEMM launches" in text
    assert "| gpu-idle |" in text and "<details><summary>" in text
    assert "<html" not in text and "base64" not in text
    assert report(FSDP_SMALL, "-o", "-", "--format", "markdown").stdout == text


def test_text_from_the_trace_is_escaped(tmp_path):
    trace = tmp_path / 'rank0 <b onclick="x()">&.sqlite.xz'
    shutil.copy(FSDP_SMALL, trace)
    page = tmp_path / "page.html"
    report(trace, "-o", page)
    text = page.read_text()
    assert "<b onclick" not in text
    assert "rank0 &lt;b onclick=&quot;x()&quot;&gt;&amp;.sqlite.xz" in text


def test_bad_input_is_one_line_exit_2(tmp_path):
    page = tmp_path / "page.html"
    assert_one_line_error(gemmscope("report", tmp_path / "missing.sqlite", "-o", page))
    assert_one_line_error(gemmscope("report", EXAMPLE_RUN, FSDP_SMALL, "-o", page))
    assert_one_line_error(gemmscope("report", EXAMPLE_RUN, "--expect", "bf16", "-o", page))
    assert_one_line_error(gemmscope("report", FSDP_SMALL, "-o", tmp_path / "no-such-folder" / "page.html"))
    assert not page.exists()


# --- in a real browser -----------------------------------------------------------------------------

def chromium(binary: str, page: Path, work: Path, *flags: str) -> subprocess.CompletedProcess:
    """Open `page` in headless Chromium with its console on stderr, every host name unresolvable
    and the network log in work/net.json."""
    work.mkdir(parents=True, exist_ok=True)
    command = [binary, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
               "--disable-background-networking", f"--user-data-dir={work / 'profile'}",
               "--host-resolver-rules=MAP * ~NOTFOUND", f"--log-net-log={work / 'net.json'}",
               "--enable-logging=stderr", "--v=0", *flags, page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def console_lines(done: subprocess.CompletedProcess) -> list[str]:
    """The page's console messages (Chromium logs them all as CONSOLE; the report logs none)."""
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def page_requests(work: Path) -> list[str]:
    """URLs the page itself asked the network for (Chromium's own background requests are keyed
    to other sites than file://)."""
    log = json.loads((work / "net.json").read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [event["params"].get("url") for event in log["events"]
            if event["type"] == start_job
            and str(event.get("params", {}).get("network_isolation_key", "")).startswith("file://")]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("page, figures", [
    ("run_page", ["NVIDIA H200", "fp8-delayed 1.66×", "codonfm-5b", "Per GEMM (mode · pass · op)"]),
    ("trace_page", ["240 GEMM launches", "gpu-idle", "NVIDIA H100 80GB HBM3", "Where the GPU time went"]),
])
def test_page_in_a_real_browser(request, chromium_bin, tmp_path, page, figures):
    page = request.getfixturevalue(page)
    done = chromium(chromium_bin, page, tmp_path / "dom", "--dump-dom")
    dom = done.stdout
    assert dom.index('id="verdict"') < dom.index("<table")
    for figure in figures:
        assert figure in dom
    assert console_lines(done) == []
    assert page_requests(tmp_path / "dom") == []
    shot = tmp_path / "page.png"
    chromium(chromium_bin, page, tmp_path / "shot", f"--screenshot={shot}", "--window-size=1400,2000",
             "--hide-scrollbars")
    assert png_size(shot) == (1400, 2000)


def test_browser_checks_catch_errors_and_network_loads(chromium_bin, tmp_path):
    """The two checks above are not vacuous: a page that fetches an image and throws is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<html><body><img src="http://example.invalid/x.png">'
                    "<script>undefinedFunction();</script></body></html>")
    done = chromium(chromium_bin, page, tmp_path / "bad", "--dump-dom")
    assert any("Uncaught ReferenceError" in line for line in console_lines(done))
    assert page_requests(tmp_path / "bad") == ["http://example.invalid/x.png"]


def test_header_click_sorts_in_a_real_browser(chromium_bin, trace_page, tmp_path):
    """Click the GEMM time header of "GEMMs per module and pass" twice, then its module header:
    numbers sort by value both ways, text alphabetically."""
    clicks = """<script>
    var table = Array.prototype.find.call(document.querySelectorAll("table.sortable"),
        function (t) { return t.tHead.rows[0].cells[0].textContent === "module"; });
    function header(name) {
      return Array.prototype.find.call(table.tHead.rows[0].cells, function (c) { return c.textContent === name; });
    }
    function column(name) {
      var i = header(name).cellIndex;
      return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.cells[i].textContent; });
    }
    var seen = {};
    header("time ms").click(); seen.ascending = column("time ms");
    header("time ms").click(); seen.descending = column("time ms");
    header("module").click(); seen.modules = column("module");
    document.body.setAttribute("data-seen", JSON.stringify(seen));
    </script></body>"""
    page = tmp_path / "clicked.html"
    page.write_text(trace_page.read_text().replace("</body>", clicks))
    done = chromium(chromium_bin, page, tmp_path / "click", "--dump-dom")
    assert console_lines(done) == []
    seen = json.loads(html.unescape(re.search(r'data-seen="([^"]*)"', done.stdout)[1]))
    times = [float(t) for t in seen["ascending"]]
    assert len(times) == 9 and times == sorted(times)
    assert [float(t) for t in seen["descending"]] == sorted(times, reverse=True)
    assert seen["modules"] == sorted(seen["modules"])
