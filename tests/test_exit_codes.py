"""One exit code per state, for every command: each command run in each state on committed real
GPU traces, against errors.EXIT_CODES, the table README and `gemmscope --help` are made from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import gemmscope as gs
from gemmscope.cli import main
from gemmscope.errors import EXIT_CODES, ExitCode, State, exit_codes_help, exit_codes_markdown

from fixture_paths import GPU

ROOT = Path(__file__).resolve().parent.parent

# A trace in each state a check can end in (its verdict word, README: Exit codes).
TRACES = {
    State.PASS: GPU / "train_clean.sqlite.xz",  # every GEMM ran as it asked
    State.FAIL: GPU / "train_mixed.sqlite.xz",  # a block outside autocast: FALLBACKs
    State.NOT_CHECKED: GPU / "te_linear_bf16.sqlite.xz",  # made without the hook: no request, no recipe
    # TE's GEMM benchmark under the hook: 111 torch GEMMs it did not record, several recipes
    State.NOT_FULLY_CHECKED: GPU / "corpus" / "gemm_bench_4096_hook.sqlite.xz",
}
# MXFP8 on Hopper: TE raised before the first GEMM, the process launched no GPU kernel.
NO_KERNEL = GPU / "corpus" / "grouped_linear_mxfp8_hopper.sqlite.xz"
NO_KERNEL_STATE = "no GPU kernel ran"
MISSING = "missing"  # a trace that does not exist: bad input

CHECKING = ("analyze", "verify", "diagnose")
WRITING = ("report", "bundle", "scrub")

# What each command exits with in each state: the checking commands the state's code, the
# writing ones 0 once written (the verdict is in the file), compare 0 once printed.
EXPECTED: dict[str, dict[object, ExitCode]] = {
    **{command: {state: state.exit_code for state in State} for command in CHECKING},
    **{command: dict.fromkeys(State, ExitCode.OK) for command in (*WRITING, "compare", "whatif")},
}
for command in (*CHECKING, "report", "compare", "whatif"):
    EXPECTED[command][NO_KERNEL_STATE] = ExitCode.MISMATCH  # nothing ran: said in one line, nothing written
for command in ("bundle", "scrub"):
    EXPECTED[command][NO_KERNEL_STATE] = ExitCode.OK  # bundled, scrubbed: report.md says why
for command in EXPECTED:
    EXPECTED[command][MISSING] = ExitCode.BAD_INPUT


def _args(command: str, trace: Path | str, out: Path) -> list[str]:
    return {
        "analyze": ["analyze", str(trace), "--quiet"],
        "verify": ["verify", "--trace", str(trace), "--quiet"],
        "diagnose": ["diagnose", str(trace)],
        "report": ["report", str(trace), "-o", str(out / "report.html")],
        "bundle": ["bundle", str(trace), "-o", str(out / "issue.zip")],
        "scrub": ["scrub", str(trace), "-o", str(out / "scrubbed.sqlite")],
        "compare": ["compare", str(TRACES[State.PASS]), str(trace)],
        "whatif": ["whatif", str(trace), "--no-measure"],
    }[command]


def _run(args: list[str]):
    return CliRunner().invoke(main, args, catch_exceptions=False)


CASES = [(command, state) for command, states in EXPECTED.items() for state in states
         # scrub and compare judge nothing: one GEMM-bearing state each is enough, beside the others
         if command not in ("scrub", "compare", "whatif") or state in (State.FAIL, NO_KERNEL_STATE, MISSING)]


@pytest.mark.parametrize(("command", "state"), CASES, ids=[f"{c}-{getattr(s, 'value', s)}" for c, s in CASES])
def test_each_command_exits_with_its_states_code(command, state, tmp_path):
    trace = NO_KERNEL if state == NO_KERNEL_STATE else tmp_path / "no-such.sqlite" if state == MISSING \
        else TRACES[state]
    done = _run(_args(command, trace, tmp_path))
    assert done.exit_code == EXPECTED[command][state], done.output
    if isinstance(state, State) and command in CHECKING and command != "diagnose":
        assert done.stdout.startswith(state.word + "\n")  # the word leads, the code follows it
    if command in WRITING:
        written = list(tmp_path.iterdir())
        # written whole, or not at all; a run that launched no GPU kernel gets its page, saying so
        assert bool(written) is (done.exit_code == ExitCode.OK or state == NO_KERNEL_STATE), written
    if state in (MISSING, NO_KERNEL_STATE) and done.exit_code != ExitCode.OK:
        said = [line for line in done.stderr.splitlines()
                if not line.startswith(("gemmscope: wrote ", "gemmscope: redacted: "))]
        assert len(said) == 1, done.stderr  # said in one line, beside what was written


def test_strict_counts_the_gemms_of_unknown_precision():
    """torch.compile's run checked against bf16: its 12 cuBLAS GEMMs ran at bf16, its 32 Triton
    GEMMs (precision unknown) are listed: a pass, unless --strict, which counts the Triton ones;
    --allow naming them passes again. Without --expect nothing asked anything of its GEMMs (the
    hook does not see into the compiled graph; the GEMMs it recorded were the autotuner's)."""
    trace = str(GPU / "corpus" / "compiled_autotune_1gpu.sqlite.xz")
    plain = _run(["analyze", trace, "--quiet"])
    assert plain.exit_code == ExitCode.NOT_CHECKED and plain.stdout.startswith("NOT CHECKED\n")
    checked = _run(["analyze", trace, "--quiet", "--expect", "bf16"])
    assert checked.exit_code == ExitCode.OK, checked.output
    strict = _run(["analyze", trace, "--quiet", "--expect", "bf16", "--strict"])
    assert strict.exit_code == ExitCode.NOT_FULLY_CHECKED, strict.output
    assert "32 GEMM launches UNKNOWN" in " ".join(strict.stdout.split())
    allowed = _run(["analyze", trace, "--quiet", "--expect", "bf16", "--strict", "--allow", "triton_tem_*"])
    assert allowed.exit_code == ExitCode.OK, allowed.output
    result = gs.check(trace, expect="bf16", strict=True)
    assert result.state is State.NOT_FULLY_CHECKED and len(result.unjudged) == 32
    assert set(result.unjudged["precision"]) == {"unknown"}


def test_a_failure_is_not_hidden_by_a_run_without_a_recipe(tmp_path):
    """A trace that cannot be read beside one with nothing to check against: the failure (1)."""
    broken = tmp_path / "rank1.sqlite"
    broken.write_bytes(b"not a trace")
    done = _run(["verify", "--trace", str(TRACES[State.NOT_CHECKED]), str(broken), "--quiet"])
    assert done.exit_code == ExitCode.MISMATCH, done.output


@pytest.mark.parametrize("profiler", ["nsys", "torch"])
def test_a_missing_command_is_bad_input_under_either_profiler(profiler):
    done = _run(["verify", "--expect", "bf16", "--profiler", profiler, "--", "no-such-command-gemmscope"])
    assert done.exit_code == ExitCode.BAD_INPUT
    assert done.stderr == ("gemmscope: error: no-such-command-gemmscope: command not found (not on PATH, or not an "
                           "executable file)\n")


def test_an_unexpected_exception_is_one_line_naming_the_trace(monkeypatch):
    """A bug (here one planted in the diagnosis) is not 'mismatches' (1): one line naming the trace
    and asking for a report, exit 70."""
    def broken(*_args, **_kwargs):
        raise KeyError("window_ns")

    monkeypatch.setattr("gemmscope.diagnosing.diagnosis.diagnose", broken)
    trace = str(TRACES[State.PASS])
    done = _run(["analyze", trace])
    assert done.exit_code == ExitCode.INTERNAL_ERROR == 70
    assert done.stderr.splitlines() == [
        f"gemmscope: internal error in `gemmscope analyze` on {trace} (KeyError: 'window_ns'): a bug in gemmscope; "
        "please report it with this line and `gemmscope --version` (GEMMSCOPE_DEBUG=1 shows the traceback)"]


def test_bare_gemmscope_prints_its_help():
    done = _run([])
    assert done.exit_code == ExitCode.BAD_INPUT
    assert done.stdout == _run(["--help"]).stdout and done.stdout.startswith("Usage: ")
    assert "Exit codes (the same for every command):" in done.stdout


def test_every_exit_code_is_in_the_table_and_exercised_here():
    """Every code the CLI gives has a row; each row's code is run above (130: Ctrl-C, in
    tests/test_sharing.py)."""
    assert [row.code for row in EXIT_CODES] == sorted(ExitCode)
    exercised = {code for states in EXPECTED.values() for code in states.values()}
    exercised |= {ExitCode.COMMAND_FAILED}  # tests/test_cli.py: a failed command under nsys
    # 129 and 143: SIGHUP and SIGTERM during verify -- COMMAND, in tests/test_signals.py
    assert exercised | {ExitCode.INTERNAL_ERROR, ExitCode.INTERRUPTED, ExitCode.HANGUP,
                        ExitCode.TERMINATED} == set(ExitCode)


def test_readme_and_help_show_the_one_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- exit-codes:[^\n]*-->\n(.*?)<!-- /exit-codes -->", readme, re.S)
    assert found and found.group(1) == exit_codes_markdown(), \
        "README's exit-code table differs from gemmscope.errors.EXIT_CODES: paste exit_codes_markdown()"
    assert exit_codes_help().split("\n\n")[0] in _run(["--help"]).stdout
    for row in EXIT_CODES:
        assert f"| {row.code.value} | {row.state} |" in found.group(1)


def test_the_api_gives_the_clis_states():
    """gs.check's state is the CLI's, its exit code the same; nothing raises on any of them."""
    for state, trace in TRACES.items():
        result = gs.check(trace)
        assert result.state is state and result.passed is (state is State.PASS)
        assert result.to_dict()["state"] == state.value
        assert len(result.mismatches) == (45 if state is State.FAIL else 0)
    nothing_ran = gs.check(NO_KERNEL)
    assert nothing_ran.state is State.FAIL and "ran no GPU kernel" in (nothing_ran.note or "")
    assert nothing_ran.to_dict()["mismatches"] == [] and len(nothing_ran.gemms) == 0
