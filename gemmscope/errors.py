"""The one error type user-facing code raises for bad input (the CLI prints it as one line, exit
2), and the exit codes the `gemmscope` command gives."""

from enum import IntEnum


class ExitCode(IntEnum):
    """What the `gemmscope` command's exit status says (README: Exit codes)."""

    OK = 0
    MISMATCH = 1  # a check found mismatches, or a recipe was asked for and no GEMM ran
    BAD_INPUT = 2  # bad input or usage, or what the system refused: one line on stderr
    COMMAND_FAILED = 3  # the command `verify` profiled exited non-zero
    RECIPE_UNKNOWN = 4  # `verify` could not tell which recipe to check against
    INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report it: 128 + 2


class InputError(Exception):
    """Bad input or usage: a missing or unreadable file, a trace that is not an nsys export, an
    unknown preset. The message is one line that says what is wrong and, where it helps, what to do."""


class NoGpuKernels(InputError):
    """A trace that holds no GPU kernel. `cuda_traced`: its CUDA API calls were captured (the
    program ran and launched nothing), not a capture made without --trace=cuda or off a GPU."""

    def __init__(self, message: str, cuda_traced: bool):
        super().__init__(message)
        self.cuda_traced = cuda_traced
