"""The one error type user-facing code raises for bad input (the CLI prints it as one line, exit
2), what a check of traces concludes (State), and the exit code the `gemmscope` command gives
for each: EXIT_CODES, the one table that README's exit-code section and `gemmscope --help` are
made from (tests/test_exit_codes.py runs every command in every state against it)."""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import NamedTuple


class ExitCode(IntEnum):
    """What the `gemmscope` command's exit status says (EXIT_CODES says when each is given)."""

    OK = 0
    MISMATCH = 1  # a check failed: a mismatch, no GEMM where one was asked for, a trace not read
    BAD_INPUT = 2  # bad input or usage, or what the system refused: one line on stderr
    COMMAND_FAILED = 3  # the command `verify` profiled exited non-zero
    NOT_CHECKED = 4  # no GEMM could be checked: no recipe, no request recorded, no --expect-map
    NOT_FULLY_CHECKED = 5  # some GEMMs had nothing to be judged against
    INTERNAL_ERROR = 70  # a bug in gemmscope (70: EX_SOFTWARE of sysexits.h)
    HANGUP = 129  # SIGHUP (the terminal closed), as shells report it: 128 + 1
    INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report it: 128 + 2
    TERMINATED = 143  # SIGTERM (a scheduler's, a container's stop), as shells report it: 128 + 15


class State(str, Enum):
    """What a check of traces concludes, the same in the CLI (its exit code), the JSON
    (`summary.state`), the reports' verdict word and the Python API (`CheckResult.state`)."""

    PASS = "pass"  # every GEMM was judged (or --allow names it), and none failed
    FAIL = "fail"  # a non-allowed FALLBACK, no GEMM where one was asked for, a mapped range failed, a trace not read
    NOT_CHECKED = "not-checked"  # nothing to check any GEMM against
    NOT_FULLY_CHECKED = "not-fully-checked"  # some GEMMs had nothing to be judged against

    def __repr__(self) -> str:  # as it is written: gs.State.PASS
        return f"State.{self.name}"

    @property
    def word(self) -> str:
        """The verdict block's first line."""
        return _WORDS[self]

    @property
    def exit_code(self) -> ExitCode:
        return _EXIT_CODE_OF_STATE[self]


_WORDS = {State.PASS: "PASS", State.FAIL: "MISMATCHES", State.NOT_CHECKED: "NOT CHECKED",
          State.NOT_FULLY_CHECKED: "NOT FULLY CHECKED"}
_EXIT_CODE_OF_STATE = {State.PASS: ExitCode.OK, State.FAIL: ExitCode.MISMATCH, State.NOT_CHECKED: ExitCode.NOT_CHECKED,
                       State.NOT_FULLY_CHECKED: ExitCode.NOT_FULLY_CHECKED}


class ExitRow(NamedTuple):
    code: ExitCode
    state: str  # the word the output leads with, or what happened
    when: str


# Every exit code, once, for every command: the checking commands (analyze, verify, diagnose)
# exit with their state's code; the commands that write a file exit 0 once it is written.
EXIT_CODES = (
    ExitRow(ExitCode.OK, "PASS / done",
            "analyze, verify, diagnose: every GEMM was judged against what was asked (or --allow names it) and "
            "none failed. report, bundle, scrub, profile: the file is written, whatever its verdict says (the "
            "verdict is in it). compare, shapes, kernel, doctor, whatif (measured, or NOT MEASURED without a GPU: the "
            "command that measures), --help: printed."),
    ExitRow(ExitCode.MISMATCH, "MISMATCHES",
            "a GEMM ran another precision than asked (not named by --allow); a recipe was asked for and no GEMM "
            "ran; a run launched no GPU kernel at all (a command that exited 0 having skipped its work, a trace "
            "whose CUDA calls were captured and that holds no kernel: said in one line; every format prints its "
            "document, JSON's summary.state \"fail\" with summary.note, and report writes its page saying "
            "so); an --expect-map range failed; a trace could not be read (the others are checked); "
            "doctor --canary: the planted fallback went unflagged; verify --every, timeline: any window's fallback "
            "(each exits with its worst window's state)."),
    ExitRow(ExitCode.BAD_INPUT, "error",
            "bad input or usage (a missing file or command, not a trace, an unknown option, `gemmscope` without "
            "a command: its help), or what the system refused (a folder not writable, a name too long, a full "
            "disk, out of memory, a trace captured without CUDA tracing or off a GPU): one line on stderr, "
            "nothing half-written."),
    ExitRow(ExitCode.COMMAND_FAILED, "command failed",
            "verify -- COMMAND: the command exited non-zero (a crashed run is never a pass): its exit status "
            "and last stderr lines first, then what it ran; JSON's meta.command.exit_code says how it ended."),
    ExitRow(ExitCode.NOT_CHECKED, "NOT CHECKED",
            "nothing to check any GEMM against: no --expect or --expect-map, and the run recorded no request "
            "(gemmscope's hook) and no one te.autocast recipe."),
    ExitRow(ExitCode.NOT_FULLY_CHECKED, "NOT FULLY CHECKED",
            "some GEMMs were judged and passed, others had nothing to be judged against (no request recorded, "
            "no --expect, outside every --expect-map range) and no --allow names them; with --strict, also "
            "GEMMs whose kernel name does not tell their precision (UNKNOWN: Triton's, ...), listed otherwise."),
    ExitRow(ExitCode.INTERNAL_ERROR, "internal error",
            "a bug in gemmscope: one line naming the input and asking for a bug report."),
    ExitRow(ExitCode.HANGUP, "hung up", "SIGHUP (the terminal closed): as SIGTERM."),
    ExitRow(ExitCode.INTERRUPTED, "interrupted",
            "Ctrl-C: `gemmscope: interrupted`, nothing half-written. verify -- COMMAND passes it on to the "
            "command and nsys (started in a session of their own) and waits for them to end; what nsys wrote "
            "is removed, or kept readable by you alone (--out)."),
    ExitRow(ExitCode.TERMINATED, "terminated",
            "SIGTERM (a scheduler's or a container's stop): nothing half-written; verify -- COMMAND passes it "
            "on as it does Ctrl-C."),
)

# Where several hold, the exit code is the first of these: a failure is never hidden by a pass.
PRECEDENCE = "3 (the command failed), then 1, 4, 5"


def exit_codes_markdown() -> str:
    """README's exit-code table (between its `exit-codes` markers)."""
    rows = [f"| {row.code.value} | {row.state} | {row.when} |" for row in EXIT_CODES]
    return "\n".join(["| exit | state | when |", "|---|---|---|", *rows,
                      "", f"Where several hold, the first of {PRECEDENCE}.", ""])


def exit_codes_help() -> str:
    """The same table as `gemmscope --help` shows it (click rewraps each paragraph)."""
    rows = [f"{row.code.value} {row.state}: {row.when}" for row in EXIT_CODES]
    return "\n\n".join(["Exit codes (the same for every command):", *rows,
                        f"Where several hold, the first of {PRECEDENCE}."])


class InputError(Exception):
    """Bad input or usage: a missing or unreadable file, a trace that is not an nsys export, an
    unknown preset. The message is one line that says what is wrong and, where it helps, what to do."""


class NoGpuKernels(InputError):
    """A trace that holds no GPU kernel. `cuda_traced`: its CUDA API calls were captured (the
    program ran and launched nothing), not a capture made without --trace=cuda or off a GPU."""

    def __init__(self, message: str, cuda_traced: bool):
        super().__init__(message)
        self.cuda_traced = cuda_traced
