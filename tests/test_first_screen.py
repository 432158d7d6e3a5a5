"""Every sentence on the first screen true: what `analyze`, `verify`, `diagnose` and `report` say
first about a committed trace, checked against what the trace holds. A finding never says "as
requested" of GEMMs with a precision that ran less than all of them, names no empty precision,
and a count that differs from the verdict's on the same screen says why (the findings cover the
steps after the first); what a command wrote is said one way; a run that launched no GPU kernel
gets its document in every format; the verdict says what its shares are of; every table header
is words; FLOPs have units."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gemmscope.judging.recipes import RECIPE_PRECISIONS

from cli_runner import invoke
from fixture_paths import CORPUS, GPU, GPU_KINETO, KINETO, STEPS
from schema_check import assert_valid

MEGATRON_FIRST_LAST_BF16 = CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"
TORCHAO_README = GPU_KINETO / "torchao_tensorwise.json.gz"  # README's analyze example
# Every committed trace of a GPU run, each read on its own (a rank's trace is a trace too); HTA's
# V100 trace is the one GPU run among the torch.profiler traces made on a CPU.
COMMITTED = sorted([*(p for folder in (GPU, CORPUS, GPU_KINETO, STEPS, GPU_KINETO / "verify_torch_train_small_mixed")
                      for p in folder.iterdir() if p.name.endswith((".sqlite.xz", ".json.gz"))),
                    KINETO / "hta_v100_train_rank0.json.gz"])
# A precision or recipe as a sentence names it: bf16, fp8, fp8-current, fp8-rowwise, mxfp8, nvfp4, ...
_PRECISION = r"(?:mx|nv)?(?:bf|fp|tf)\d+(?:-[a-z]+)?"
# "bf16 73.2 %": a precision with its share of the time of the GEMMs the sentence speaks of
_SHARE = re.compile(rf"\b({_PRECISION}) (\d+(?:\.\d+)?) %")


def _words(text: str) -> str:
    """A table's text with its wrapped cells joined again: every run of spaces and line breaks one space."""
    return " ".join(text.split())


# --- "wrote FILE": one rule ---------------------------------------------------------------------------


def test_every_writer_says_what_it_wrote_one_way(tmp_path):
    """report, report --tables, scrub, bundle and --plots: `gemmscope: wrote …` on stderr, as every
    other note; stdout keeps only what a command prints."""
    trace = GPU / "te_linear_bf16.sqlite.xz"
    runs = {
        tmp_path / "report.html": invoke("report", trace, "-o", tmp_path / "report.html"),
        tmp_path / "scrubbed.sqlite.xz": invoke("scrub", trace, "-o", tmp_path / "scrubbed.sqlite.xz"),
        tmp_path / "issue.zip": invoke("bundle", trace, "-o", tmp_path / "issue.zip"),
    }
    for path, done in runs.items():
        assert done.exit_code == 0, done.stderr
        assert done.stdout == ""
        assert f"gemmscope: wrote {path}" in done.stderr.splitlines(), done.stderr
    tables = invoke("report", trace, "-o", "-", "--tables", tmp_path / "tables")
    assert tables.stdout.startswith("<!DOCTYPE html>")
    written = len(list((tmp_path / "tables").iterdir()))
    assert f"gemmscope: wrote {written} tables (CSV) into {tmp_path / 'tables'}" in tables.stderr.splitlines()
    plotted = invoke("analyze", trace, "--expect", "bf16", "--quiet", "--plots", tmp_path / "plots")
    assert any(line.startswith(f"gemmscope: wrote plots into {tmp_path / 'plots'}: ")
               for line in plotted.stderr.splitlines()), plotted.stderr
    assert "wrote" not in plotted.stdout


# --- a run that launched no GPU kernel: every format prints its document ----------------------------

# MXFP8 on Hopper: TE raised before the first GEMM, the process launched no GPU kernel (nsys); and a
# torch.profiler trace of a process that only asked CUDA for its devices.
NO_KERNEL = (CORPUS / "grouped_linear_mxfp8_hopper.sqlite.xz", GPU_KINETO / "verify_torch_train_small_mixed" /
             "trace.538.json.gz")
NOTHING_RAN = "ran no GPU kernel: its CUDA calls were captured, and none launched one: no GEMM ran"


@pytest.mark.parametrize("trace", NO_KERNEL, ids=[p.name for p in NO_KERNEL])
@pytest.mark.parametrize("command", ["analyze", "verify"])
def test_a_run_that_launched_no_kernel_prints_its_document_in_every_format(command, trace):
    """analyze and verify of a run that launched nothing: exit 1 and the one line saying so, as
    before, and on stdout the document of each format, JSON with summary.state "fail" (a CI job
    parsing it learns what happened), CSV its header, the table and Markdown their verdict block;
    JSON Lines, one line per GEMM launch, has none to print."""
    given = ["analyze", trace] if command == "analyze" else ["verify", "--trace", trace, "--expect", "mxfp8"]
    said = f"gemmscope: {trace} {NOTHING_RAN}" + (" at mxfp8" if command == "verify" else "")
    for fmt in ("table", "json", "markdown", "csv", "jsonl"):
        done = invoke(*given, "--format", fmt, "--no-redact")
        assert done.exit_code == 1, (fmt, done.stderr)
        assert done.stderr.splitlines() == [said], fmt
        if fmt == "json":
            document = json.loads(done.stdout)
            assert_valid(document, "analyze" if command == "analyze" else "verify")
            summary = document["summary"]
            assert (summary["state"], summary["gemm_launches"], summary["note"]) == ("fail", 0, said.removeprefix(
                "gemmscope: "))
            assert summary["traces_without_kernels"] == [{"trace": trace.name, "rank": None}]
            assert document["findings"] == [] and document["breakdown"]["per_rank"] == []
        elif fmt == "csv":
            assert done.stdout.startswith("kernel,role,precision,") and done.stdout.count("\n") == 1
        elif fmt == "jsonl":
            assert done.stdout == ""  # a line per GEMM launch: none launched
        else:
            first = done.stdout.lstrip("# \n").splitlines()
            assert "MISMATCHES" in done.stdout and NOTHING_RAN in _words(done.stdout), fmt
            assert first, fmt


def test_diagnose_and_report_of_a_run_that_launched_no_kernel_say_so(tmp_path):
    """diagnose prints its verdict block, report writes its page, saying nothing ran; both exit 1,
    as analyze."""
    trace = NO_KERNEL[0]
    done = invoke("diagnose", trace, "--no-redact")
    assert done.exit_code == 1 and done.stdout.startswith("MISMATCHES\n"), done.output
    assert NOTHING_RAN in _words(done.stdout)
    for page in ("report.html", "report.md"):
        done = invoke("report", trace, "-o", tmp_path / page)
        assert done.exit_code == 1, done.stderr
        assert f"gemmscope: {trace.name} {NOTHING_RAN}" in done.stderr.splitlines()
        assert NOTHING_RAN in _words((tmp_path / page).read_text(encoding="utf-8"))


# --- what ran, "as requested" ---------------------------------------------------------------------


def _accepts(named: str, precision: str) -> bool:
    """Whether GEMMs said to run `named` (a precision, or a recipe) ran `precision`."""
    return precision == named or precision in RECIPE_PRECISIONS.get(named, ())


def _check_as_requested(statement: str, ran_as_asked: set[str]) -> None:
    """A sentence that says GEMMs ran "as requested" names what ran: one precision only where all the
    GEMMs that ran as asked ran it, else each with its share of their time, the shares adding up."""
    if "as requested" not in statement:
        return
    named = re.findall(rf"\b{_PRECISION}\b", statement)
    assert named, f"names no precision: {statement!r}"
    shares = {label: float(share) for label, share in _SHARE.findall(statement)}
    alone = [label for label in named if label not in shares]
    for label in alone:  # said without a share: every GEMM it speaks of ran it
        assert all(_accepts(label, p) for p in ran_as_asked), \
            f"names {label} alone while {sorted(ran_as_asked)} ran as asked: {statement!r}"
    if shares:
        assert abs(sum(shares.values()) - 100) < 0.3, statement
        assert all(any(_accepts(label, p) for label in shares) for p in ran_as_asked), statement
        assert all(any(_accepts(label, p) for p in ran_as_asked) for label in shares), statement


def _ran_as_asked(document: dict) -> set[str]:
    """The precisions of the GEMMs whose verdict is OK, from the JSON document's GEMM groups."""
    return {g["precision"] for g in document["summary"]["groups"] if g.get("verdict") == "OK"}


@pytest.mark.parametrize("trace", COMMITTED, ids=[p.name for p in COMMITTED])
def test_no_as_requested_sentence_names_a_precision_that_ran_less_than_all(trace: Path):
    """analyze of every committed trace: each "as requested" finding names what ran, by share
    where several did (a trace whose run launched nothing has none to make)."""
    done = invoke("analyze", trace, "--format", "json")
    assert done.exit_code in (0, 1, 4, 5), done.stderr[-2000:]
    document = json.loads(done.stdout)
    for finding in document["findings"]:
        _check_as_requested(finding["statement"], _ran_as_asked(document))


def test_diagnose_of_the_first_last_bf16_run_says_what_ran_by_share():
    """Megatron's GPT with its first and last layers and output layer in BF16 on purpose: 73 % of
    GEMM time ran BF16 as those layers asked. diagnose says so, never "at fp8-current as requested"."""
    done = invoke("diagnose", MEGATRON_FIRST_LAST_BF16)
    assert done.exit_code == 0, done.stderr
    said = _words(done.stdout)
    assert "fp8-current as requested" not in said
    assert ("gemms-healthy GEMMs ran as requested (1.599 ms after the first step): each at what it asked, "
            "bf16 73.2 %, fp8-current 26.8 % of their time") in said


def test_analyze_of_readmes_torchao_trace_names_the_precisions():
    """README's torchao trace (no te.autocast recipe: each GEMM's own request): the finding names
    what the GEMMs asked, where it said "GEMMs ran at  as requested"."""
    done = invoke("analyze", TORCHAO_README)
    assert done.exit_code == 0, done.stderr
    said = _words(done.stdout)
    assert "at  as requested" not in said
    assert "GEMMs ran as requested (15.645 ms): each at what it asked, fp8 94.8 %, bf16 5.2 % of their time" in said


def test_verify_counts_on_one_screen_agree_or_say_why():
    """verify --expect fp8-current of the same run: the verdict counts every step (81 mismatches),
    the findings the steps after the first (54 launches), and say so where they count."""
    done = invoke("verify", "--trace", MEGATRON_FIRST_LAST_BF16, "--expect", "fp8-current", "--format", "json")
    assert done.exit_code == 1, done.stderr
    document = json.loads(done.stdout)
    assert document["summary"]["mismatches"] == 81
    fallback = next(f for f in document["findings"] if f["code"] == "fallback")
    assert fallback["figures"]["launches"] == 54
    assert fallback["statement"].startswith("73.2 % of GEMM time after the first step (1.170 ms, 54 launches) "
                                            "ran at another precision than fp8-current")
    table = _words(invoke("verify", "--trace", MEGATRON_FIRST_LAST_BF16, "--expect", "fp8-current").stdout)
    assert "81 mismatches, 0 allowed" in table
    assert "(1.170 ms, 54 launches)" in table and "after the first step (1.170 ms, 54 launches)" in table
    # each finding that counts launches or times kernels of the window says it covers the steps after the first
    for finding in document["findings"]:
        if finding["code"] in ("gpu-idle", "launch-bound", "gemm-share", "fallback", "quantize-overhead",
                               "small-gemm", "tails", "gemms-healthy"):
            assert "after the first step" in finding["statement"], finding


def test_a_trace_without_steps_says_no_window_of_its_own():
    """A trace in which no steps are found is covered whole: its findings and its verdict count the
    same launches, and no finding says "after the first step"."""
    document = json.loads(invoke("analyze", TORCHAO_README, "--format", "json").stdout)
    assert document["breakdown"]["step_range"] is None
    assert not any("after the first step" in f["statement"] for f in document["findings"])


# --- the verdict's lines ------------------------------------------------------------------------------


def test_the_verdict_says_what_its_shares_are_of():
    """TE's GEMM benchmark under the hook: 111 torch GEMMs it did not record had nothing to be judged
    against. The share at the precision asked is of the GEMM time checked, and coverage speaks of
    the GEMMs whose request was recorded, not of every GEMM."""
    said = _words(invoke("analyze", CORPUS / "gemm_bench_4096_hook.sqlite.xz", "--quiet").stdout)
    assert "100.0 % of checked GEMM time at the precision each asked" in said
    assert "coverage: every GEMM whose request was recorded (333 of 444 launches) asked for low precision" in said
    assert "111 GEMM launches not checked" in said


def test_a_run_that_recorded_no_request_is_checked_against_its_recipe_and_says_so():
    """The small training run made with the hook's first release (its autocast regions recorded, no
    GEMM's request): each GEMM was checked against the run's one recipe, which the verdict names,
    and coverage is not known."""
    said = _words(invoke("verify", "--trace", GPU / "train_mixed.sqlite.xz", "--quiet").stdout)
    assert "Asked: fp8-current (the recipe the run's te.autocast recorded)" in said
    assert "At the requested precision: 42.4 % of GEMM time at fp8-current; 45 mismatches" in said
    assert "coverage: not known (no GEMM's request recorded)" in said
    assert "what each GEMM asked" not in said and "every GEMM asked for low precision" not in said


# --- table headers in words ---------------------------------------------------------------------------


def test_every_table_header_of_every_page_is_words():
    """The HTML page and Markdown of the first/last-BF16 run, and the terminal's tables: no header
    is a column's snake_case name (window_ms, gemm_time_ms, a_dtype); the same words everywhere."""
    html = invoke("report", MEGATRON_FIRST_LAST_BF16, "-o", "-", "--format", "html").stdout
    markdown = invoke("analyze", MEGATRON_FIRST_LAST_BF16, "--format", "markdown").stdout
    headers = set(re.findall(r"<th>([^<]*)</th>", html))
    lines = markdown.splitlines()
    headers |= {cell.strip() for line, under in zip(lines, lines[1:]) if under.startswith("|---")
                for cell in line.strip("|").split(" | ")}
    assert {"window ms", "time ms", "launches", "A dtype", "kernel launches", "time as asked"} <= headers, headers
    snake = sorted(h for h in headers if "_" in h)
    assert not snake, snake
    table = invoke("analyze", MEGATRON_FIRST_LAST_BF16).stdout
    assert "window ms" in table and "window_ms" not in table


def test_shapes_says_flops_in_units():
    """shapes for a person: 103 GFLOP and 3.30 TFLOP, not 103079215104 and 3298534883328 (CSV and
    JSON keep the counts)."""
    table = invoke("shapes", "--model", "llama-3-8b").stdout
    qkv = next(line for line in table.splitlines() if line.startswith("qkv") and "fprop" in line).split()
    assert qkv[5:] == ["103", "GFLOP", "32", "3.30", "TFLOP"], qkv
    assert not re.search(r"\d{10,}", table)
    markdown = invoke("shapes", "--model", "llama-3-8b", "--format", "markdown").stdout
    assert "| FLOPs |" in markdown and "| 103 GFLOP | 32 | 3.30 TFLOP |" in markdown
    csv = invoke("shapes", "--model", "llama-3-8b", "--format", "csv").stdout
    assert "flops,count,total_flops" in csv and ",103079215104,32,3298534883328" in csv
